"""The GPU frame path wired into the run (issue 37): videos routed to the model actors' decoder are only planned by
the CPU decode task, decoded once in the actor for DenseNet and MTCNN, and stored exactly as the CPU path stores
them. No GPU here: `frames_decoder = "gpu"` on a CPU-only machine runs the same code with torchcodec's CPU
decoder, whose pictures are bit-exact with the CPU path's (tests/media/test_nvdec.py), so the stores must be equal
bit for bit; NVDEC itself is checked by tests/media/test_nvdec.py's gpu tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from media import decode, nvdec
from pipeline import actors
from pipeline.config import RunConfig
from pipeline.schedule import CUDA, Pool, Scheduler, Unit, Worker
from testing.synth_display import Case, make_case


def test_a_plan_is_decoded_once_for_every_feature_that_reads_it(tmp_path: Path) -> None:
    path = make_case(Case("mp4", "h264"), tmp_path)
    plan, segments, reason = nvdec.plan_for_device(path, None, "cpu", "a", ("faces", "frames"))
    assert reason is None and segments == 1 and isinstance(plan, nvdec.FramesPlan)
    assert actors.nbytes(plan) == decode.decode_frames(path).pixels.nbytes  # the books count the pixels to be
    cache = actors.DeviceFramesCache(1 << 30)
    first, why = cache.take(plan, "frames")
    assert why is None and cache.decoded == 1 and plan.key in cache.entries
    second, _ = cache.take(plan, "faces")
    assert second is first and cache.decoded == 1 and not cache.entries  # the last reader: dropped
    np.testing.assert_array_equal(first.pixels.cpu().numpy(), decode.decode_frames(path).pixels)


def test_a_file_that_needs_the_cpu_path_is_decoded_by_the_task_with_its_reason(tmp_path: Path) -> None:
    path = make_case(Case("mp4", "h264", sar=(4, 3)), tmp_path)
    frames, _, reason = nvdec.plan_for_device(path, None, "cpu", "a", ("frames",))
    assert reason.startswith("non-square pixels")
    np.testing.assert_array_equal(frames.pixels, decode.decode_frames(path).pixels)


def _pool(feature: str, decodes: bool) -> Pool:
    p = Pool(feature, "frames", CUDA, per_call=60, depth=2, decodes_frames=decodes)
    p.workers = [Worker(handle="host", node="n", ready=True)]
    return p


def _decoded(s: Scheduler, item: str, device: bool) -> None:
    units = {f: Unit(item, f"ref-{item}", 60, 1000, kind="frames", device=device) for f in ("faces", "frames")}
    s.decoded(item, 0, units, {"frames": 1000})


def test_routing_sends_videos_to_the_actors_decoder_while_its_queue_is_short() -> None:
    """The policy the simulator models: a video goes to the actors' decoder while fewer than `device_queue`
    routed videos are not yet decoded there (their first call not back), else to a CPU decode task; later segments
    follow the first."""
    s = Scheduler({f: _pool(f, True) for f in ("faces", "frames")}, {"n": 16}, max_bytes=10**12,
                  batch_bytes=10**9, device_queue=2)
    for k in range(3):  # (3: what the pools' feed lets decode ahead)
        s.add(f"c{k}", ["faces", "frames"])
    jobs = s.next_decodes()
    assert [j.on_device for j in jobs] == [True, True, False]
    _decoded(s, "c0", True)
    _decoded(s, "c2", False)
    assert s.device_queue == {("c0", 0), ("c1", 0)}
    calls = s.next_calls()  # c0 goes to a call: still in the queue until the actor has decoded it
    assert s.device_queue == {("c0", 0), ("c1", 0)}
    for call in calls:
        s.call_done(call)
    assert s.device_queue == {("c1", 0)}
    s.add("c3", ["faces", "frames"])
    assert [j.on_device for j in s.next_decodes()] == [True]
    assert s._on_device("c0", 1, ("frames",)) and not s._on_device("c2", 1, ("frames",))  # as their first
    # a pool whose actors do not decode (a frames feature elsewhere): every video to the CPU
    cpu = Scheduler({"frames": _pool("frames", True), "faces": _pool("faces", False)}, {"n": 16},
                    max_bytes=10**12, batch_bytes=10**9, device_queue=float("inf"))
    cpu.add("c0", ["faces", "frames"])
    assert [j.on_device for j in cpu.next_decodes()] == [False]


def test_a_plan_s_other_readers_go_to_the_actor_that_decoded_it() -> None:
    """DenseNet and MTCNN share actors; the first call to take a plan decodes the file there and keeps the frames
    for the other feature, so that feature's call for the same clip must go to the same actor (elsewhere it would
    decode the file again), even when another actor is idler; units decoded on the CPU go anywhere."""
    handles = ["actor-0", "actor-1"]
    pools = {}
    for f in ("faces", "frames"):
        pools[f] = Pool(f, "frames", CUDA, per_call=60, depth=2, decodes_frames=True)
        order = handles if f == "faces" else handles[::-1]  # left alone, the pools would pair them crosswise
        pools[f].workers = [Worker(handle=h, node="n", ready=True) for h in order]
    s = Scheduler(pools, {"n": 16}, max_bytes=10**12, batch_bytes=10**9, device_queue=8)
    for k in range(4):
        s.add(f"c{k}", ["faces", "frames"])
    s.next_decodes()
    for k in range(4):
        _decoded(s, f"c{k}", device=k < 3)
    first = {}
    for call in s.next_calls():
        for u in call.take:
            first.setdefault(u.item, set()).add((call.pool.feature, call.worker.handle))
    for _ in range(4):  # the calls come back one by one; later calls take what waited
        for pool in pools.values():
            for w in pool.workers:
                w.busy = 0
        for call in s.next_calls():
            for u in call.take:
                first.setdefault(u.item, set()).add((call.pool.feature, call.worker.handle))
    for k in range(3):  # every plan: both features, one actor
        got = first[f"c{k}"]
        assert {f for f, _ in got} == {"faces", "frames"} and len({h for _, h in got}) == 1, (k, got)
    assert {f for f, _ in first["c3"]} == {"faces", "frames"}
    assert not s.decoded_at  # every reader took its plan: nothing kept


def _sar_copy(src: Path) -> None:
    """`src` re-encoded with 4:3 pixels in place (same name): a file the device path leaves to the CPU."""
    tmp = src.with_name("sar-" + src.name)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(src), "-vf", "setsar=4/3", "-c:v", "libx264",
                    "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "copy", str(tmp)], check=True)
    tmp.replace(src)


def _config(decoder: str) -> RunConfig:
    return RunConfig.model_validate({
        "layout": "siq2", "frames_per_batch": 8, "frames_decoder": decoder,
        # one frame a forward: features that do not depend on which frames share a call, so bit for bit
        "features": {"frames": {"extractor": "densenet161", "weights": "random", "batch_size": 1},
                     "faces": {"extractor": "mtcnn", "batch_size": 1}},
    })


@pytest.mark.slow
def test_the_run_with_frames_decoded_in_the_actors_stores_what_the_cpu_path_stores(tiny_root: Path,
                                                                                     tmp_path: Path) -> None:
    from pipeline.run import run_extract
    from store.reader import open_store

    _sar_copy(tiny_root / "siq2/video/tiny-c.mp4")
    on_cpu, on_device = tmp_path / "cpu.zarr", tmp_path / "device.zarr"
    cpu = run_extract("tiny", tiny_root, on_cpu, _config("cpu"))
    dev = run_extract("tiny", tiny_root, on_device, _config("gpu"))
    for report in (cpu, dev):
        assert report.exit_code == 0, report.summary()
        assert all(c["done"] == 3 for c in report.counts.values()), report.counts
    assert not cpu.cpu_decoded and cpu.frames_decoders == {f: {"cpu": 3} for f in ("faces", "frames")}
    assert [(c["item"], c["reason"].split(" (")[0]) for c in dev.cpu_decoded] == [("tiny-c", "non-square pixels")]
    assert "CPU-DECODED tiny-c" in dev.summary()
    assert dev.frames_decoders == {f: {"cpu": 1, "torchcodec-cpu": 2} for f in ("faces", "frames")}
    decoded = dev.stages["decode:frames@device"]
    assert (decoded["items"], decoded["units"]) == (2, 5)  # tiny-a's 3 frames and tiny-b's 2, once for both features

    a, b = open_store(on_cpu), open_store(on_device)
    for feat in ("frames", "faces"):
        for item in ("tiny-a", "tiny-b", "tiny-c"):
            ra, rb = a.read(feat, item), b.read(feat, item)
            np.testing.assert_array_equal(ra.features[:], rb.features[:])
            np.testing.assert_array_equal(ra.intervals[:], rb.intervals[:])
            for name in ra.extras:
                np.testing.assert_array_equal(ra.extras[name][:], rb.extras[name][:])
            attrs_a, attrs_b = a.item_attrs(feat, item), b.item_attrs(feat, item)
            same = {k for k in attrs_a if k not in ("fingerprint", "source", "extract_seconds", "decode_seconds")}
            assert {k: attrs_a[k] for k in same} == {k: attrs_b.get(k) for k in same}
            if item == "tiny-c":  # decoded by the CPU path in both: the same identity
                assert attrs_b["fingerprint"] == attrs_a["fingerprint"] and "decoder" not in attrs_b
            else:  # told apart: a device decoder made these pictures
                assert attrs_b["fingerprint"] != attrs_a["fingerprint"]
                assert attrs_b["decoder"] == attrs_b["source"]["decoder"] == "torchcodec-cpu"

    # planning: a store the device decoder made is current for a run that may decode so; under "cpu" the items
    # it decoded are not (their fingerprints differ from the CPU path's, asserted above), the CPU-decoded one is
    again = run_extract("tiny", tiny_root, on_device, _config("gpu"), only=["frames"])
    assert again.counts["frames"]["skipped"] == 3
    assert _planned(on_device, tiny_root, _config("cpu")) == ["tiny-a", "tiny-b"]


def _planned(store: Path, raw: Path, config: RunConfig) -> list[str]:
    """The frames items a run with `config` would compute on `store` (its plan, without running it)."""
    from pipeline import run
    from store.plan import Wanted, make_plan
    from store.writer import StoreWriter

    items, _, _ = run.load_items("tiny", raw, config)
    spec = config.specs(["frames"])[0]
    with StoreWriter(store, "tiny") as writer:
        wanted = [Wanted("frames", item.id,
                         run.planned_fingerprint(writer, spec, item, run.kinds.of("frames", item), [], config)[1])
                  for item in items]
        return sorted(w.item for w in make_plan(store, wanted, indexes=writer.index).todo)
