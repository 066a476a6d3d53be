"""The runner's books of (feature, item) pairs (without Ray), how actors are laid out, and a long video extracted in
segments through Ray: the same rows as one piece, and a segment that fails fails its (feature, item) pairs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from extractors.densenet import DenseNet161, DenseNetConfig
from extractors.faces import FacesConfig, MTCNNFaces
from manifests.records import MediaItem
from media.decode import decode_frames
from media.kinds import Decoded
from pipeline.config import RunConfig
from pipeline.progress import Progress
from pipeline.report import RunReport
from pipeline.run import run_extract
from pipeline.runner import Identity, Runner, _Pair, actor_plan
from rows import FeatureRows
from store.reader import open_store


def runner(**limits: Any) -> Runner:
    config = RunConfig.model_validate({"features": {"frames": {"extractor": "densenet161", "weights": "random"}},
                                       **limits})
    return Runner(config, config.specs(), writer=None, report=None)  # type: ignore[arg-type]


def test_a_video_whose_every_segment_lost_its_frames_fails() -> None:
    """In one piece such a video fails with "no frame could be decoded"; in segments, each segment is merely
    empty (its seconds missing), so the joined pair must fail the same way instead of committing no rows."""
    r = runner()
    r.report = RunReport("run", "tiny", "out", {"frames": dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)})
    r.items = {"v": MediaItem(id="v", dataset="tiny", video=Path("/raw/v.mp4"))}
    r.todo, r.progress = {"v": ["frames"]}, Progress(1, bar=False, emit=lambda line: None)
    empty = FeatureRows(np.zeros((0, 2208), np.float32), np.zeros((0, 2), np.float64))
    r.pairs = {("frames", "v"): _Pair(segments=3, rows=dict.fromkeys(range(3), empty))}
    r.finish("frames", "v")
    assert r.report.counts["frames"]["failed"] == 1 and r.report.counts["frames"]["done"] == 0
    (failure,) = r.report.failures
    assert failure["stage"] == "decode:frames" and failure["file"] == "/raw/v.mp4"
    assert "no frame could be decoded in any of its 3 segments" in failure["error"]


def seg_config(**extra: Any) -> RunConfig:
    # 352x288 and 320x240 frames: one frame (~300 KB) a segment, so every tiny video is cut in 2 or 3
    return RunConfig.model_validate({
        "layout": "siq2", "batch_bytes": 320_000, "frames_per_batch": 8, "max_inflight_items": 3,
        "features": {"frames": {"extractor": "densenet161", "weights": "random"},
                     "faces": {"extractor": "mtcnn", "min_face_ratio": 0.5}}, **extra})


@pytest.mark.slow
def test_a_video_in_segments_gives_the_rows_of_one_piece(tiny_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "seg.zarr"
    report = run_extract("tiny", tiny_root, out, seg_config(), only=["frames", "faces"])
    assert report.counts["frames"]["done"] == 3 and report.counts["faces"]["done"] == 3
    store = open_store(out)
    densenet, mtcnn = DenseNet161(DenseNetConfig(weights="random")), MTCNNFaces(FacesConfig(min_face_ratio=0.5))
    for item in ("tiny-a", "tiny-b"):  # 3 and 2 segments
        frames = decode_frames(tiny_root / f"siq2/video/{item}.mp4")
        ref = densenet.extract(frames)
        got = store.read("frames", item)
        np.testing.assert_allclose(got.features[:], ref.features, rtol=1e-4, atol=2e-5)
        np.testing.assert_array_equal(got.intervals[:], frames.intervals)
        assert got.attrs["frame_pts_s"] == pytest.approx(frames.pts_s.tolist())
        faces_ref = mtcnn.extract(frames)
        faces = store.read("faces", item)
        np.testing.assert_allclose(faces.features[:], faces_ref.features, rtol=1e-5, atol=1e-4)
        assert faces.attrs["face_ratio"] == faces_ref.attrs["face_ratio"]


@pytest.mark.slow
def test_a_segment_that_fails_fails_its_pairs(tiny_root: Path, tmp_path: Path, crash_on) -> None:
    import ray

    ray.shutdown()  # workers read SIQ_* at Ray start-up
    crash_on("decode:tiny-a#2")  # the last of tiny-a's three segments
    out = tmp_path / "seg.zarr"
    try:
        report = run_extract("tiny", tiny_root, out, seg_config(decode_retries=0), only=["frames"])
    finally:
        ray.shutdown()
    assert report.counts["frames"] == {"done": 2, "skipped": 0, "failed": 1, "n/a": 0}
    assert [(f["item"], f["stage"]) for f in report.failures] == [("tiny-a", "decode:frames")]
    assert open_store(out).items("frames") == ["tiny-b", "tiny-c"]  # nothing of tiny-a committed


def test_actor_plan_shares_gpus_and_cores() -> None:
    config = RunConfig.model_validate({"features": {
        "frames": {"extractor": "densenet161", "weights": "random"}, "faces": {"extractor": "mtcnn"},
        "acoustic": {"extractor": "covarep"}}, "actors_per_gpu": {"faces": 3}, "frames_decoder": "cpu"})
    specs = {s.name: s for s in config.specs()}
    gpu = actor_plan(specs, set(specs), config, cpus=16, gpus=2)
    assert (gpu["faces"].actors, gpu["faces"].device) == (6, "cuda")  # per GPU: 3 faces, 1 frames
    assert (gpu["frames"].actors, gpu["frames"].device) == (2, "cuda")
    assert gpu["faces"].options["num_gpus"] == gpu["frames"].options["num_gpus"] == 1 / 4  # 4 actors share each GPU
    # the policy, not Ray, gives their calls a core: a GPU actor's host thread while it has calls in flight
    assert gpu["faces"].options["num_cpus"] == 0 and gpu["faces"].holds_cores and gpu["faces"].depth == 2
    # a CPU feature: one actor per core, spread, holding no Ray CPU while idle; one item a call, never queued
    ac = gpu["acoustic"]
    assert (ac.actors, ac.options, ac.per_call, ac.depth) == (16, {"num_cpus": 0, "scheduling_strategy": "SPREAD"}, 1, 1)
    fixed = actor_plan(specs, set(specs), config.model_copy(update={"scheduler": "fixed", "actors_per_gpu": {}}),
                       cpus=16, gpus=2)
    assert (fixed["acoustic"].actors, fixed["acoustic"].options) == (8, {"num_cpus": 1})  # as before 2026-12
    # ... where they fit beside a decode task: 8 GPU actors (faces 3 a GPU) and 8 acoustic held all 16 Ray CPUs,
    # and no decode task could start; their holds shrink to leave one (issue 52)
    crowded = actor_plan(specs, set(specs), config.model_copy(update={"scheduler": "fixed", "frames_decoder": "cpu"}),
                         cpus=16, gpus=2)
    assert crowded["acoustic"].options["num_cpus"] == crowded["faces"].options["num_cpus"] == 15 / 16
    cpu = actor_plan(specs, set(specs), config, cpus=2, gpus=0)
    for feat in ("faces", "frames"):  # 2 cores for 2 model features, their threads beside the policy's slots
        assert (cpu[feat].options, cpu[feat].actors, cpu[feat].device, cpu[feat].threads) == ({"num_cpus": 0}, 1, "cpu", 1)
        assert not cpu[feat].holds_cores
    assert actor_plan(specs, {"faces"}, config, cpus=16, gpus=0)["faces"].threads == 16
    pinned = config.model_copy(update={"model_threads": 3})
    assert actor_plan(specs, set(specs), pinned, cpus=2, gpus=0)["faces"].threads == 3
    # frames decoded by the actors (media/nvdec.py): the frames features share them, one GPU's worth as before
    hosted = actor_plan(specs, set(specs), config.model_copy(update={"frames_decoder": "gpu"}), cpus=16, gpus=2)
    for feat in ("faces", "frames"):
        assert (hosted[feat].host, hosted[feat].decode_device, hosted[feat].actors) == ("faces", "cuda", 6)
        assert hosted[feat].options["num_gpus"] == pytest.approx(1 / 3)  # 3 actors a GPU, each with both models
    on_cpu = actor_plan(specs, set(specs), config.model_copy(update={"frames_decoder": "gpu"}), cpus=2, gpus=0)
    assert on_cpu["frames"].decode_device == "cpu" and on_cpu["frames"].threads == 1  # torchcodec's CPU decoder
    auto = config.model_copy(update={"frames_decoder": "auto"})
    assert actor_plan(specs, set(specs), auto, cpus=16, gpus=2)["frames"].decode_device == "cuda"
    assert actor_plan(specs, set(specs), auto, cpus=2, gpus=0)["frames"].decode_device is None  # no GPU: the tasks
    with pytest.raises(ValueError, match="actors_per_gpu: nope = 2"):
        RunConfig.model_validate({"features": {"faces": {"extractor": "mtcnn"}}, "actors_per_gpu": {"nope": 2}})


def test_the_runner_tells_progress_of_each_pair_closed() -> None:
    """The runner's part (pipeline/progress.py has the rest): a failed pair counts as failed, a committed one as
    handed over, then as stored once its batch is in; the line adds up at each step."""
    lines: list[str] = []
    r = runner()
    r.report = RunReport("run", "tiny", "out", {"frames": dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)})
    r.items = {v: MediaItem(id=v, dataset="tiny", video=Path(f"/raw/{v}.mp4")) for v in ("v", "w")}
    r.todo, r.inputs = {"v": ["frames"], "w": ["frames"]}, {"w": {"frames": Decoded("frames", 1, 0, 0.1)}}
    r.progress = Progress(2, bar=False, emit=lines.append)
    r.identities = {("frames", "w"): Identity("x", {}, "fp")}
    r.committer = SimpleNamespace(put=lambda *a: None, store_error=None)
    empty = FeatureRows(np.zeros((0, 2208), np.float32), np.zeros((0, 2), np.float64))
    one = FeatureRows(np.zeros((1, 2208), np.float32), np.array([[0.0, 1.0]]))
    r.pairs = {("frames", "v"): _Pair(segments=2, rows=dict.fromkeys(range(2), empty)),
               ("frames", "w"): _Pair(segments=1, rows={0: one})}
    r.finish("frames", "v")  # every segment empty: fails
    r.finish("frames", "w")  # handed to the committer
    assert r.progress.line().startswith("progress: 2/2 pairs finished (0 stored, 1 being committed, 1 failed), 0 to go")
    r.committed([SimpleNamespace(feature="frames", item="w", record={}, error=None)])
    assert r.progress.line().startswith("progress: 2/2 pairs finished (1 stored, 0 being committed, 1 failed), 0 to go")
    assert lines == ["progress: 0/2 pairs finished (0 stored, 0 being committed, 0 failed), 2 to go; time left: after "
                     "the first pairs"]


def test_the_retries_of_an_actors_uploads_are_added_to_the_run_reports() -> None:
    """(`Runner.results`) a call's record carries the requests its actor's uploads retried (counted in the actor's
    process only): they are added to the run report's, beside what is there, and not kept as a stage's field."""
    from pipeline.actors import Extracted

    r = runner()
    r.report = RunReport("run", "tiny", "out", {"frames": dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)})
    r.report.storage_retries = {"throttled": 1}  # e.g. an earlier call's
    record = {"stage": "model:frames", "start_s": 0.0, "end_s": 1.0, "cpu_s": 0.5, "units": 1.0, "items": 1,
              "unit": "frames", "storage_retries": {"throttled": 2, "dropped": 1}}
    got = ([Extracted("v", None, None, 0.1)], record)
    r.ray = SimpleNamespace(get=lambda ref: got)
    call = SimpleNamespace(pool=SimpleNamespace(feature="frames"), take=["unit"], worker=SimpleNamespace(gpu=None))
    assert r.results("ref", call) == [("unit", got[0][0])]  # type: ignore[arg-type]
    assert r.report.storage_retries == {"throttled": 3, "dropped": 1}
    assert all("storage_retries" not in c for calls in r.stages.calls.values() for c in calls)


def test_every_runner_attribute_is_declared_in_its_init() -> None:
    """The runner's state is made in one place: no method may be the first to set an attribute (a method that
    reads it would then depend on a call order nothing states)."""
    import ast
    import inspect

    import pipeline.runner

    cls = next(n for n in ast.parse(inspect.getsource(pipeline.runner)).body
               if isinstance(n, ast.ClassDef) and n.name == "Runner")
    assigned: dict[str, set[str]] = {}
    for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id == "self":
                assigned.setdefault(fn.name, set()).add(node.attr)
    declared = assigned.pop("__init__")
    late = {f"{fn}: self.{a}" for fn, attrs in assigned.items() for a in attrs - declared}
    assert len(declared) > 20 and not late, sorted(late)
