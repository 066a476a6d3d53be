"""End to end through Ray on the tiny dataset: cache, staleness, failures, a killed run."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from extractors.densenet import DenseNet161, DenseNetConfig
from media.decode import decode_frames
from pipeline.config import RunConfig
from pipeline.run import run_extract
from store.reader import open_store

pytestmark = pytest.mark.slow


def config(seed2: int = 1, commit_batch_items: int = 512) -> RunConfig:
    return RunConfig.model_validate({
        "layout": "siq2", "frames_per_batch": 8, "max_inflight_items": 3, "commit_batch_items": commit_batch_items,
        "features": {"frames": {"extractor": "densenet161", "weights": "random"},
                     "frames2": {"extractor": "densenet161", "weights": "random", "random_seed": seed2}},
    })


def loudness_config(commit_batch_items: int = 512) -> RunConfig:
    """One cheap feature (RMS loudness: numpy in its actor) for the tests about the store and the run around it
    (kills, dead workers, damage, fingerprints, Ray's address), which need a decode, an actor call and a commit
    per item, not a model: a DenseNet actor costs ~11 CPU-s to start and run on the tiny clips (issue 35)."""
    return RunConfig.model_validate({"layout": "siq2", "commit_batch_items": commit_batch_items,
                                     "features": {"loudness": {"extractor": "rms_loudness"}}})


def add_bad_items(raw: Path) -> None:
    """A corrupt video, and a question about a video that is not there."""
    (raw / "siq2/video/tiny-bad.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom" + b"\x13" * 4000)
    row = {"qid": "orphan-q", "q": "Who?", "vid_name": "tiny-missing", "ts": "0-5", "a0": "x", "a1": "y",
           "a2": "z", "a3": "w", "answer_idx": 0}
    with (raw / "siq2/qa/qa_train.json").open("a") as f:
        f.write(json.dumps(row) + "\n")


def test_extract_cache_staleness_and_failures(tiny_root: Path, tmp_path: Path) -> None:
    add_bad_items(tiny_root)
    out = tmp_path / "tiny.zarr"
    first = run_extract("tiny", tiny_root, out, config())
    assert first.counts["frames"] == {"done": 3, "skipped": 0, "failed": 2, "n/a": 0}
    errors = {f["item"]: f for f in first.failures if f["feature"] == "frames"}
    assert "tiny-bad.mp4" in errors["tiny-bad"]["error"] and errors["tiny-bad"]["stage"] == "decode:frames"
    assert "tiny-missing.mp4: video file does not exist" in errors["tiny-missing"]["error"]
    assert "FAILED frames/tiny-bad [decode:frames]" in first.summary()  # one line per feature: frames2 too
    assert "FAILED frames2/tiny-bad [decode:frames]" in first.summary()
    assert first.exit_code == 3  # completed with failures

    store = open_store(out)
    assert store.items("frames") == ["tiny-a", "tiny-b", "tiny-c"]
    assert store.feature_attrs("frames")["weights"] == "random"
    item = store.read("frames", "tiny-b")
    frames = decode_frames(tiny_root / "siq2/video/tiny-b.mp4")
    direct = DenseNet161(DenseNetConfig(weights="random")).extract(frames)
    np.testing.assert_allclose(item.features[:], direct.features, rtol=1e-4, atol=2e-5)
    np.testing.assert_array_equal(item.intervals, frames.intervals)
    assert item.attrs["duration_s"] == pytest.approx(59 / 29.97, abs=1e-3)  # 2 s at 29.97 fps = 59 frames
    fingerprints = {i: store.read("frames", i).attrs["fingerprint"] for i in store.items("frames")}

    second = run_extract("tiny", tiny_root, out, config())
    assert second.counts["frames"] == {"done": 0, "skipped": 3, "failed": 2, "n/a": 0}
    assert second.counts["frames2"]["done"] == 0 and second.counts["frames2"]["skipped"] == 3

    third = run_extract("tiny", tiny_root, out, config(seed2=7))
    assert third.counts["frames"]["done"] == 0 and third.counts["frames"]["skipped"] == 3
    assert third.counts["frames2"]["done"] == 3
    store = open_store(out)
    assert {i: store.read("frames", i).attrs["fingerprint"] for i in store.items("frames")} == fingerprints
    assert store.feature_attrs("frames2")["weights"] == "random"
    assert store.feature_attrs("frames2")["config"]["random_seed"] == 7
    assert store.last_run()["counts"]["frames2"]["done"] == 3

    forced = run_extract("tiny", tiny_root, out, config(seed2=7), only=["frames"], force=True)
    assert forced.counts == {"frames": {"done": 3, "skipped": 0, "failed": 2, "n/a": 0}}


def _killed_run(tiny_root: Path, out: Path, batch_items: int, die_at_write: int) -> subprocess.CompletedProcess:
    """A run that dies (os._exit, like SIGKILL: no cleanup, no atexit) while writing the features array of
    its `die_at_write`-th part, with `batch_items` pairs per commit."""
    script = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import store.parts as parts
        from test_pipeline import loudness_config
        from pipeline.run import run_extract
        real, commits = parts.write_array, []
        def dying(group, name, data, *rest):
            real(group, name, data, *rest)
            if name == "features":
                commits.append(1)
                if len(commits) == {die_at_write}:
                    os._exit(9)
        parts.write_array = dying
        run_extract("tiny", Path({str(tiny_root)!r}), Path({str(out)!r}),
                    loudness_config(commit_batch_items={batch_items}))
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def test_a_run_killed_mid_write_is_finished_by_the_next(tiny_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "tiny.zarr"
    proc = _killed_run(tiny_root, out, batch_items=1, die_at_write=2)
    assert proc.returncode == 9, proc.stderr[-2000:]
    store = open_store(out)
    done = store.items("loudness", include_filtered=True, include_stale=True)
    assert len(done) == 1  # the first commit; the second is half-written in staging and invisible
    for item in done:
        assert store.read("loudness", item).features.shape[1] == 2  # rms, rms_dbfs: whole rows

    report = run_extract("tiny", tiny_root, out, loudness_config())
    assert report.counts["loudness"] == {"done": 2, "skipped": 1, "failed": 0, "n/a": 0}
    assert open_store(out).items("loudness") == ["tiny-a", "tiny-b", "tiny-c"]


def test_a_kill_during_a_batch_loses_only_that_batch_and_the_rerun_equals_a_clean_store(
        tiny_root: Path, tmp_path: Path) -> None:
    """Two pairs per batch: the first batch (2 items) is committed, the run dies writing the second (the last
    item); the rerun computes only that item, and every array and attribute equals a store made in one go."""
    out, clean = tmp_path / "tiny.zarr", tmp_path / "clean.zarr"
    proc = _killed_run(tiny_root, out, batch_items=2, die_at_write=2)
    assert proc.returncode == 9, proc.stderr[-2000:]
    assert len(open_store(out).items("loudness")) == 2
    again = run_extract("tiny", tiny_root, out, loudness_config(commit_batch_items=2))
    assert again.counts["loudness"] == {"done": 1, "skipped": 2, "failed": 0, "n/a": 0}
    assert run_extract("tiny", tiny_root, clean, loudness_config()).counts["loudness"]["done"] == 3
    a, b = open_store(out), open_store(clean)
    assert a.items("loudness") == b.items("loudness") == ["tiny-a", "tiny-b", "tiny-c"]
    volatile = {"extract_seconds", "decode_seconds"}
    for item in a.items("loudness"):
        ra, rb = a.read("loudness", item), b.read("loudness", item)
        np.testing.assert_allclose(ra.features[:], rb.features[:], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(ra.intervals, rb.intervals)
        assert {k: v for k, v in ra.attrs.items() if k not in volatile} == \
               {k: v for k, v in rb.attrs.items() if k not in volatile}


def test_a_worker_process_that_dies_fails_only_its_item(tiny_root: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, crash_on) -> None:
    """A decode worker and a model worker that die outright (segfault, OOM killer) on one item each:
    those two items fail with their files named, every other item completes, and the run reports."""
    import ray

    ray.shutdown()  # workers read SIQ_* at Ray start-up
    crash_on("decode:tiny-a,extract:tiny-b")
    out = tmp_path / "tiny.zarr"
    try:
        report = run_extract("tiny", tiny_root, out, loudness_config())
    finally:
        ray.shutdown()
    assert report.counts["loudness"] == {"done": 1, "skipped": 0, "failed": 2, "n/a": 0}
    errors = {f["item"]: f for f in report.failures}
    assert errors["tiny-a"]["stage"] == "decode:audio" and errors["tiny-a"]["file"].endswith("tiny-a.wav")
    assert errors["tiny-b"]["stage"] == "extract:loudness" and errors["tiny-b"]["file"].endswith("tiny-b.wav")
    assert all(e["error"].startswith("WorkerLost: ") for e in errors.values())
    assert open_store(out).items("loudness") == ["tiny-c"]
    assert open_store(out).last_run()["counts"]["loudness"]["failed"] == 2

    monkeypatch.delenv("SIQ_CRASH_ON")
    again = run_extract("tiny", tiny_root, out, loudness_config())
    assert again.counts["loudness"] == {"done": 2, "skipped": 1, "failed": 0, "n/a": 0}


def test_fingerprints_do_not_depend_on_how_the_raw_root_is_spelled(tiny_root: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "tiny.zarr"
    assert run_extract("tiny", tiny_root, out, loudness_config()).counts["loudness"]["done"] == 3
    monkeypatch.chdir(tiny_root.parent)
    moved = Path(tiny_root.name) / ".." / tiny_root.name  # relative, with a detour
    assert run_extract("tiny", moved, out, loudness_config()).counts["loudness"]["skipped"] == 3
    (tiny_root / "siq2/audio/wav/tiny-c.wav").touch()  # a changed file (new mtime) is recomputed
    assert run_extract("tiny", moved, out, loudness_config()).counts["loudness"]["done"] == 1


def test_damaged_items_are_recomputed_and_the_others_kept(tiny_root: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """One part per item (batches of one, kept so: the end-of-run compaction would merge them): truncated
    part metadata and a deleted shard (found by every plan), flipped shard bytes (found with --verify):
    each damaged item is named with its part and recomputed; the intact one is skipped."""
    out = tmp_path / "tiny.zarr"
    with monkeypatch.context() as m:
        m.setattr("pipeline.run._compact_if_worthwhile", lambda *a, **k: None)
        assert run_extract("tiny", tiny_root, out, loudness_config(commit_batch_items=1)).exit_code == 0
    reference = open_store(out).read("loudness", "tiny-a").features[:]
    parts = {i: out / "loudness/parts" / e.part for i, e in open_store(out).index("loudness").entries.items()}
    meta = parts["tiny-a"] / "zarr.json"
    meta.write_bytes(meta.read_bytes()[:100])
    (parts["tiny-b"] / "features/c/0/0").unlink()
    chunk = parts["tiny-c"] / "features/c/0/0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    assert open_store(out).items("loudness") == ["tiny-c"]  # the store still reads; damaged items left out

    report = run_extract("tiny", tiny_root, out, loudness_config())
    assert report.counts["loudness"] == {"done": 2, "skipped": 1, "failed": 0, "n/a": 0}
    assert {(d["item"], d["path"], d["recomputed"]) for d in report.damaged} == {
        ("tiny-a", str(parts["tiny-a"]), True), ("tiny-b", str(parts["tiny-b"]), True)}
    assert f"DAMAGED loudness/tiny-a ({parts['tiny-a']})" in report.summary() and report.exit_code == 0
    np.testing.assert_array_equal(open_store(out).read("loudness", "tiny-a").features[:], reference)

    verified = run_extract("tiny", tiny_root, out, loudness_config(), verify=True)
    assert [d["item"] for d in verified.damaged] == ["tiny-c"] and "SHA-256" in verified.damaged[0]["problem"]
    assert verified.counts["loudness"] == {"done": 1, "skipped": 2, "failed": 0, "n/a": 0}
    assert open_store(out).items("loudness") == ["tiny-a", "tiny-b", "tiny-c"]


@pytest.mark.slow
def test_local_run_ignores_a_cluster_recorded_by_ray_start(tiny_root: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RAY_ADDRESS a run starts its own Ray, even where `ray start` once recorded a cluster in
    /tmp/ray/ray_current_cluster (Ray's default would try to join it and refuse our num_cpus)."""
    import ray
    from ray._private import services

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "get_ray_address_from_environment", lambda addr, temp_dir: "192.0.2.1:6379")
    try:
        report = run_extract("sample", tiny_root, tmp_path / "s.zarr", loudness_config(), limit=1)
    finally:
        ray.shutdown()
    assert report.counts["loudness"]["done"] == 1 and report.cluster["address"] == "local"
