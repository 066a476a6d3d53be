"""The runner's batching in counts and bytes (without Ray), and a long video extracted in segments through
Ray: the same rows as one piece, and a segment that fails fails its (feature, item) pairs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from extractors.base import FeatureRows
from extractors.densenet import DenseNet161, DenseNetConfig
from extractors.faces import FacesConfig, MTCNNFaces
from manifests.records import MediaItem
from pipeline.config import RunConfig
from pipeline.decode import decode_frames
from pipeline.progress import Progress
from pipeline.run import RunReport, _Pair, _Runner, _Unit, actor_plan, run_extract
from store.reader import open_store


class FakeActor:
    """Records the batches it is sent, as `actor.__call__.remote(item_ids, *refs)`."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.__call__ = SimpleNamespace(remote=self._remote)

    def _remote(self, item_ids: list[str], *refs: Any) -> object:
        self.calls.append(list(item_ids))
        return object()


def runner(**limits: Any) -> tuple[_Runner, FakeActor]:
    config = RunConfig.model_validate({"features": {"frames": {"extractor": "densenet161", "weights": "random"}},
                                       **limits})
    r = _Runner(config, config.specs(), writer=None, report=None)  # type: ignore[arg-type]
    actor = FakeActor()
    r.actors, r.running, r.busy = {"frames": [actor]}, {}, {actor: -10**6}  # never too busy: every batch goes
    r.waiting = {"frames": []}
    return r, actor


def test_batches_are_bounded_in_bytes_and_in_frames() -> None:
    r, actor = runner(frames_per_batch=100, batch_bytes=1000)
    # 60 frames of 100 bytes each: the byte limit (10 frames a batch) binds before the count
    r.waiting["frames"] = [_Unit(f"v{i}", None, 6, 600) for i in range(10)]
    r.dispatch(flush=True)
    assert actor.calls == [[f"v{i}"] for i in range(10)]  # 600 + 600 > 1000: one video a call

    r, actor = runner(frames_per_batch=10, batch_bytes=10**9)
    r.waiting["frames"] = [_Unit(f"v{i}", None, 4, 40) for i in range(5)]
    r.dispatch(flush=True)
    assert actor.calls == [["v0", "v1"], ["v2", "v3"], ["v4"]]  # the frame count binds

    r, actor = runner(frames_per_batch=100, batch_bytes=1000)
    r.waiting["frames"] = [_Unit("a", None, 1, 300), _Unit("huge", None, 1, 5000), _Unit("b", None, 1, 300),
                           _Unit("c", None, 1, 300), _Unit("d", None, 1, 300)]
    r.dispatch(flush=False)  # full batches go without a flush; the partial rest waits for more
    assert actor.calls == [["a"], ["huge"]]  # one input over the limit runs alone
    assert [u.item for u in r.waiting["frames"]] == ["b", "c", "d"]  # 900 bytes: waits for more


def test_no_batch_waits_while_under_both_limits() -> None:
    r, actor = runner(frames_per_batch=100, batch_bytes=1000)
    r.waiting["frames"] = [_Unit("a", None, 3, 300)]
    r.dispatch(flush=False)
    assert actor.calls == [] and len(r.waiting["frames"]) == 1
    r.waiting["frames"].append(_Unit("b", None, 3, 800))  # together over the byte limit: "a" goes alone
    r.dispatch(flush=False)
    assert actor.calls == [["a"]]


def test_a_video_whose_every_segment_lost_its_frames_fails() -> None:
    """In one piece such a video fails with "no frame could be decoded"; in segments, each segment is merely
    empty (its seconds missing), so the joined pair must fail the same way instead of committing no rows."""
    r, _ = runner()
    r.report = RunReport("run", "tiny", "out", {"frames": dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)})
    r.items = {"v": MediaItem(id="v", dataset="tiny", video=Path("/raw/v.mp4"))}
    r.todo, r.meta, r.progress = {"v": ["frames"]}, {"v": {}}, Progress(1, bar=False, emit=lambda line: None)
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
    for item in ("tiny-a", "tiny-b"):  # 3 and 2 segments
        frames = decode_frames(tiny_root / f"siq2/video/{item}.mp4")
        ref = DenseNet161(DenseNetConfig(weights="random")).extract(frames)
        got = store.read("frames", item)
        np.testing.assert_allclose(got.features[:], ref.features, rtol=1e-4, atol=2e-5)
        np.testing.assert_array_equal(got.intervals[:], frames.intervals)
        assert got.attrs["frame_pts_s"] == pytest.approx(frames.pts_s.tolist())
        faces_ref = MTCNNFaces(FacesConfig(min_face_ratio=0.5)).extract(frames)
        faces = store.read("faces", item)
        np.testing.assert_allclose(faces.features[:], faces_ref.features, rtol=1e-5, atol=1e-4)
        assert faces.attrs["face_ratio"] == faces_ref.attrs["face_ratio"]


@pytest.mark.slow
def test_a_segment_that_fails_fails_its_pairs(tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    ray.shutdown()  # workers read SIQ_* at Ray start-up
    monkeypatch.setenv("SIQ_CRASH_ON", "decode:tiny-a#2")  # the last of tiny-a's three segments
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
        "acoustic": {"extractor": "covarep"}}, "actors_per_gpu": {"faces": 3}})
    specs = {s.name: s for s in config.specs()}
    gpu = actor_plan(specs, set(specs), config, cpus=16, gpus=2)
    assert gpu["faces"][1:3] == (6, "cuda") and gpu["frames"][1:3] == (2, "cuda")  # per GPU: 3 faces, 1 frames
    assert gpu["faces"][0]["num_gpus"] == gpu["frames"][0]["num_gpus"] == 1 / 4  # 4 actors share each GPU
    assert gpu["acoustic"] == ({"num_cpus": 1}, 8, "cpu", 1)
    cpu = actor_plan(specs, set(specs), config, cpus=2, gpus=0)
    assert cpu["faces"] == cpu["frames"] == ({"num_cpus": 0}, 1, "cpu", 1)  # 2 cores for 2 model features
    assert actor_plan(specs, {"faces"}, config, cpus=16, gpus=0)["faces"][3] == 16
    pinned = config.model_copy(update={"model_threads": 3})
    assert actor_plan(specs, set(specs), pinned, cpus=2, gpus=0)["faces"][3] == 3
    with pytest.raises(ValueError, match="actors_per_gpu: nope = 2"):
        RunConfig.model_validate({"features": {"faces": {"extractor": "mtcnn"}}, "actors_per_gpu": {"nope": 2}})


def test_the_runner_tells_progress_of_each_pair_closed() -> None:
    """The runner's part (pipeline/progress.py has the rest): a failed pair counts as failed, a committed one as
    handed over, then as stored once its batch is in; the line adds up at each step."""
    lines: list[str] = []
    r, _ = runner()
    r.report = RunReport("run", "tiny", "out", {"frames": dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)})
    r.items = {v: MediaItem(id=v, dataset="tiny", video=Path(f"/raw/{v}.mp4")) for v in ("v", "w")}
    r.todo, r.meta = {"v": ["frames"], "w": ["frames"]}, {"v": {}, "w": {"seconds": {"frames": 0.1}}}
    r.progress = Progress(2, bar=False, emit=lines.append)
    r.fingerprints, r.sources = {("frames", "w"): "fp"}, {("frames", "w"): {}}
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
