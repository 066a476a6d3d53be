"""The command line ends every expected problem with one line naming the path and the problem, and an exit
code that says what happened (pipeline/exitcodes.py, README "Exit codes"); never a traceback."""

import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline import exitcodes
from pipeline.cli import main
from pipeline.report import RunReport
from rows import FeatureRows
from store.reader import open_store
from store.writer import StoreWriter


def extract(raw: Path, out: Path, *extra: str) -> int:
    return main(["extract", "--dataset", "sample", "--raw", str(raw), "--out", str(out), *extra])


def error_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_locked_store_is_one_line(tiny_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "s.zarr"
    with StoreWriter(out, "sample"):
        assert extract(tiny_root, out) == exitcodes.LOCKED
    [line] = error_lines(caplog)
    assert line.startswith(f"{out}: another run is writing to this store (pid {os.getpid()}")


def test_out_pointing_at_a_file_is_one_line(tiny_root: Path, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "s.zarr"
    out.write_text("not a store")
    assert extract(tiny_root, out) == exitcodes.STORE
    assert error_lines(caplog) == [f"{out}: is a file, not a store folder; give --out a folder (new or a store)"]
    assert out.read_text() == "not a store"


def test_a_read_only_store_is_one_line(tiny_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount (EROFS) cannot be made without privileges here, so the kernel's answer is played:
    the first write into the store (its lock file) fails as it would there."""
    out = tmp_path / "s.zarr"
    StoreWriter(out, "sample").close()
    real_open = os.open

    def read_only(path, flags, *a, **k):
        if str(path).startswith(str(out)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", read_only)
    assert extract(tiny_root, out) == exitcodes.STORE
    assert error_lines(caplog) == [f"cannot write the store: {out / '.lock'}: Read-only file system"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to produce a real ENOSPC")
def test_disk_full_before_the_first_commit_is_one_line(tiny_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ENOSPC from the kernel: the manifest file the run writes first is /dev/full."""
    from store.backends import local

    real_temp = local._temp
    out = tmp_path / "s.zarr"
    (out / "_manifests").mkdir(parents=True)
    temp = out / "_manifests" / ".items.jsonl.partial"
    temp.symlink_to("/dev/full")  # the store's temporary file for the manifest: this process writes there
    monkeypatch.setattr(local, "_temp", lambda path: temp if path.name == "items.jsonl" else real_temp(path))
    assert extract(tiny_root, out) == exitcodes.STORE
    [line] = error_lines(caplog)
    assert line == f"cannot write the store: {out / '_manifests'}: No space left on device"


def report(failed: int) -> RunReport:
    r = RunReport("run", "sample", "s.zarr", {f: {"done": 2, "skipped": 0, "failed": failed, "n/a": 0}
                                              for f in ("frames", "faces")})
    for feat in ("frames", "faces") if failed else ():
        r.failures.append({"feature": feat, "item": "clip-x", "stage": "decode:frames", "file": "/raw/clip-x.mp4",
                           "error": "InputError: corrupt"})
    return r


def test_failed_pairs_exit_non_zero_with_a_line_per_feature(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture) -> None:
    seen = {}

    def fake_run(*a, **k):
        seen.update(k)
        return report(failed=1)

    monkeypatch.setattr("pipeline.run.run_extract", fake_run)
    (tmp_path / "siq2").mkdir()
    assert extract(tmp_path, tmp_path / "s.zarr", "--verify") == exitcodes.FAILURES
    assert seen["verify"] is True
    out = capsys.readouterr().out
    assert "FAILED frames/clip-x [decode:frames] /raw/clip-x.mp4: corrupt" in out  # the input's error, in words
    assert "FAILED faces/clip-x [decode:frames] /raw/clip-x.mp4: corrupt" in out
    assert "completed with 2 failed (feature, item) pair(s): exit code 3" in out
    assert report(failed=0).exit_code == exitcodes.OK


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("where", ["part", "index"])
def test_a_disk_that_fills_during_a_batch_commit_leaves_the_store_as_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """ENOSPC while writing a batch's part, or while appending its index line: every pair of the batch
    failed with the store named, the run stops with exit 5, and the store's files are as before the batch."""
    import store.index as si
    import store.parts as parts
    from manifests.records import MediaItem
    from media.kinds import Decoded
    from pipeline.committer import Committer
    from pipeline.config import RunConfig
    from pipeline.progress import Progress
    from pipeline.runner import Identity, Runner

    config = RunConfig.model_validate({"features": {"frames": {"extractor": "densenet161", "weights": "random"}}})
    out = tmp_path / "s.zarr"
    w = StoreWriter(out, "sample")
    w.set_feature("frames", config.specs()[0].store_attrs())
    w.commit("frames", "old", FeatureRows(np.ones((2, 2)), np.array([[0.0, 1.0], [1.0, 2.0]])), {"spec_hash": "x"})
    before = _files(out)

    def enospc() -> OSError:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if where == "part":
        real = parts.write_array

        def full(group, name, data, *rest):  # noqa: ANN001, ANN002, ANN202
            real(group, name, data, *rest)
            if name == "intervals":
                raise enospc()
        monkeypatch.setattr(parts, "write_array", full)
    else:
        real_pwrite = os.pwrite

        def half(fd: int, data: bytes, offset: int) -> int:
            real_pwrite(fd, data[: len(data) // 2], offset)  # a torn line on disk, then the disk is full
            raise enospc()
        monkeypatch.setattr(si.os, "pwrite", half)
    r = RunReport("run", "sample", "s.zarr", {"frames": {"done": 0, "skipped": 0, "failed": 0, "n/a": 0}})
    runner = Runner(config, config.specs(), w, r)
    runner.committer = Committer(w, batch_items=2)
    runner.progress = Progress(2, bar=False, emit=lambda line: None)  # what Runner.run makes first
    for i in ("a", "b"):
        runner.identities["frames", i] = Identity("x", {}, "fp")
        runner.commit("frames", MediaItem(id=i, dataset="sample"), FeatureRows(np.zeros((1, 2)), np.array([[0.0, 1.0]])),
                      Decoded("frames", 1, 0, 0.1), 0.1)
    runner.committed(runner.committer.close())
    monkeypatch.undo()
    w.close()
    assert r.counts["frames"] == {"done": 0, "skipped": 0, "failed": 2, "n/a": 0}
    assert r.exit_code == exitcodes.STORE
    assert "No space left on device" in r.store_error and "the batch of 2 item(s) was not committed" in r.store_error
    assert f"FAILED frames/a [write:frames] {out / 'frames'}: StoreError: cannot write the store" in r.summary()
    assert "STOPPED: cannot write the store" in r.summary()
    assert _files(out) == before  # nothing of the batch: no part, no index line
    assert open_store(out).items("frames", include_stale=True) == ["old"]


def test_a_disk_full_stop_accounts_for_every_planned_pair_each_failure_with_its_own_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53 point 5: after the first ENOSPC the other features' pairs are not listed with the first
    feature's path and error (they were never sent to the store): each planned pair is done, failed (its own
    commit hit the full disk: its own feature's folder) or not computed, and the summary counts all three."""
    import store.parts as parts
    from manifests.records import MediaItem
    from media.kinds import Decoded
    from pipeline.committer import Committer
    from pipeline.config import RunConfig
    from pipeline.progress import Progress
    from pipeline.runner import Identity, Runner

    frames = {"extractor": "densenet161", "weights": "random"}
    config = RunConfig.model_validate({"features": {"frames": frames, "other": frames}})
    out = tmp_path / "s.zarr"
    w = StoreWriter(out, "sample")
    for spec in config.specs():
        w.set_feature(spec.name, spec.store_attrs())
    real = parts.write_array
    writes = []

    def full(group, name, data, *rest):  # noqa: ANN001, ANN002, ANN202
        writes.append(name)
        if len(writes) > 2:  # the first batch (a part of two arrays) goes in whole, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(group, name, data, *rest)
    monkeypatch.setattr(parts, "write_array", full)
    counts = {f: {"done": 0, "skipped": 0, "failed": 0, "n/a": 0} for f in ("frames", "other")}
    r = RunReport("run", "sample", "s.zarr", counts)
    r.planned = {"frames": 5, "other": 5}  # 4 + 4 reach the committer below; 1 + 1 never did (the run stopped)
    runner = Runner(config, config.specs(), w, r)
    runner.committer = Committer(w, batch_items=2)
    runner.progress = Progress(10, bar=False, emit=lambda line: None)
    for feat, i in [("frames", "a"), ("frames", "b"), ("other", "a"), ("other", "b"),
                    ("frames", "c"), ("frames", "d"), ("other", "c"), ("other", "d")]:
        runner.identities[feat, i] = Identity("x", {}, "fp")
        runner.commit(feat, MediaItem(id=i, dataset="sample"), FeatureRows(np.zeros((1, 2)), np.array([[0.0, 1.0]])),
                      Decoded("frames", 1, 0, 0.1), 0.1)
    runner.committed(runner.committer.close())
    monkeypatch.undo()
    w.close()
    done = {f: c["done"] for f, c in r.counts.items()}
    failed = {f: c["failed"] for f, c in r.counts.items()}
    assert done == {"frames": 2, "other": 0} and failed == {"frames": 0, "other": 2}, (done, failed)
    assert r.not_computed() == {"frames": 3, "other": 3}  # frames c, d: never sent, not "failed" with other's error
    assert sum(done.values()) + sum(failed.values()) + sum(r.not_computed().values()) == 10
    text = r.summary()
    fails = [x for x in text.splitlines() if x.startswith("  FAILED")]
    assert len(fails) == 2 and all(f"[write:other] {out / 'other'}: StoreError" in x for x in fails), fails
    assert "NOT COMPUTED after the stop: 6 planned pair(s) (frames 3, other 3)" in text
    assert "completed with" not in text and "2 failed, 6 planned pair(s) not computed" in text
    assert r.exit_code == exitcodes.STORE


def test_verify_command_lists_damage_and_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "s.zarr"
    with StoreWriter(out, "demo") as w:
        w.set_feature("feat", {"spec_hash": "s1", "columns": ["a"]})
        for item in ("a", "b"):
            w.commit("feat", item, FeatureRows(np.ones((3, 1), np.float32), np.array([[0, 1], [1, 2], [2, 3.0]])),
                     {"spec_hash": "s1"})
    assert main(["verify", "--out", str(out)]) == exitcodes.OK
    assert "feat             2        0" in capsys.readouterr().out
    part = out / "feat" / "parts" / open_store(out).index("feat").entries["b"].part
    (part / "features" / "c" / "0" / "0").unlink()
    assert main(["verify", "--out", str(out)]) == exitcodes.DAMAGED
    printed = capsys.readouterr().out
    assert f"DAMAGED feat/b ({part}): features/c/0/0 is missing" in printed


def hold_lock(path: Path, content: str = "") -> subprocess.Popen:
    """Another process that takes the store's lock and has written `content` into it (nothing: it is between
    its flock and its write, or it is a run of older code)."""
    code = ("import fcntl, os, sys, time\n"
            f"fd = os.open({str(path / '.lock')!r}, os.O_RDWR | os.O_CREAT, 0o644)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n")
    path.mkdir(parents=True, exist_ok=True)
    (path / ".lock").write_text(content)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.parametrize("content", ["", "pid 1 on an-old-run"])
def test_the_lock_message_names_the_holder_even_before_it_wrote_its_pid(tmp_path: Path, content: str) -> None:
    """The pid comes from the kernel's lock table when the lock file does not name the holder (yet)."""
    from store.writer import StoreLocked

    out = tmp_path / "s.zarr"
    proc = hold_lock(out, content)
    try:
        with pytest.raises(StoreLocked, match=f"another run is writing to this store \\(pid {proc.pid}\\b"):
            StoreWriter(out, "sample")
    finally:
        proc.kill()
        proc.wait()
    with StoreWriter(out, "sample"):
        assert (out / ".lock").read_text().startswith(f"pid {os.getpid()} on ")
    assert (out / ".lock").read_text() == ""  # released: no stale holder left behind


def test_the_lock_is_checked_before_the_manifests_are_read(tiny_root: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    read = []
    monkeypatch.setattr("pipeline.run.load_items", lambda *a, **k: read.append(1) or ([], [], []))
    out = tmp_path / "s.zarr"
    with StoreWriter(out, "sample"):
        assert extract(tiny_root, out) == exitcodes.LOCKED
    assert read == []


def test_split_chooses_items_before_limit_and_an_empty_one_names_the_others(tiny_root: Path, tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    from manifests.socialiq import read_siq2
    from pipeline.sources import choose_items as _chosen

    items, _ = read_siq2(tiny_root)
    assert [i.id for i in _chosen(items, "dev", None, tiny_root)] == ["tiny-c"]  # the release's name for val
    assert [i.id for i in _chosen(items, "train", 1, tiny_root)] == ["tiny-a"]
    assert [i.id for i in _chosen(items, None, 2, tiny_root)] == ["tiny-a", "tiny-b"]
    assert extract(tiny_root, tmp_path / "s.zarr", "--split", "test") == exitcodes.BAD_INPUT
    [line] = error_lines(caplog)
    assert line == f"{tiny_root}: no items in split 'test'; the splits here: train (2 items), val (1 items)"


# --- the raw folder is read-only to extract (issue 26 item 6) ---

USER_CONFIG = '[features.acoustic]\nextractor = "covarep"\n'


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every path under `root` with its kind and bytes: equal snapshots mean nothing was written there."""
    out = {}
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = ("dir", b"") if path.is_dir() else ("file", path.read_bytes())
    return out


@pytest.fixture
def user_raw(tmp_path: Path) -> Path:
    """A user's raw folder that holds something other than the sample (a TinySocial-like layout)."""
    raw = tmp_path / "my_raw"
    (raw / "video").mkdir(parents=True)
    (raw / "video" / "clip.mp4").write_bytes(b"\0not a video")
    (raw / "clips.csv").write_text("clip_id,video\nclip,clip.mp4\n")
    return raw


@pytest.mark.parametrize("args", [
    ["--config", "{cfg}"],  # no --dataset and a config that names none: once the sample, generated into raw
    ["--dataset", "sample", "--config", "{cfg}"],  # the sample asked for, but raw holds something else
    ["--dataset", "sample"],
    ["--dataset", "sample-socratis", "--config", "{cfg_socialiq}"],  # they disagree
    ["--dataset", "socialiq", "--config", "sample"],  # a preset names its dataset too
], ids=["config-without-dataset", "sample-into-user-folder", "sample-preset-into-user-folder", "disagree",
        "preset-disagrees"])
def test_extract_never_writes_into_a_raw_folder(args: list[str], user_raw: Path, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text(USER_CONFIG)
    cfg_socialiq = tmp_path / "siq.toml"
    cfg_socialiq.write_text('dataset = "socialiq"\n' + USER_CONFIG)
    before = snapshot(user_raw)
    argv = [a.format(cfg=cfg, cfg_socialiq=cfg_socialiq) for a in args]
    out = tmp_path / "s.zarr"
    assert main(["extract", "--raw", str(user_raw), "--out", str(out), *argv]) == exitcodes.BAD_INPUT
    assert snapshot(user_raw) == before
    assert not out.exists()
    assert len(error_lines(caplog)) == 1  # one line, no traceback (the exact lines: the next test)


def test_the_errors_say_what_to_do(user_raw: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text('dataset = "socialiq"\n' + USER_CONFIG)
    out = str(tmp_path / "s.zarr")
    assert main(["extract", "--raw", str(user_raw), "--out", out, "--dataset", "tinysocial", "--config", str(cfg)]) == 2
    assert main(["extract", "--raw", str(user_raw), "--out", out, "--dataset", "sample"]) == 2
    assert main(["extract", "--raw", str(user_raw), "--out", out]) == 2
    assert error_lines(caplog) == [
        f"--dataset tinysocial disagrees with the config {cfg}, which is for dataset 'socialiq': drop one, or make "
        "them agree",
        f"{user_raw}: holds no sample data and is not empty; extract generates a sample only into a new or empty "
        "folder, never into a raw data folder: give --raw another folder",
        "extract needs --dataset (or a --config that names its dataset)"]


def test_a_config_that_names_its_dataset_needs_no_flag(user_raw: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr("pipeline.run.run_extract", lambda dataset, raw, *a, **k: seen.update(dataset=dataset)
                        or report(failed=0))
    cfg = tmp_path / "my.toml"
    cfg.write_text('dataset = "tinysocial"\n' + USER_CONFIG)
    before = snapshot(user_raw)
    assert main(["extract", "--raw", str(user_raw), "--out", str(tmp_path / "s.zarr"), "--config", str(cfg)]) == 0
    assert main(["extract", "--raw", str(user_raw), "--out", str(tmp_path / "s.zarr"), "--config", str(cfg),
                 "--dataset", "tinysocial"]) == 0
    assert seen == {"dataset": "tinysocial"}
    assert snapshot(user_raw) == before


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_a_sample_is_generated_only_into_a_new_or_empty_folder(state: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample writers are replaced by a stub (the real ones take seconds; test_end_to_end runs them)."""
    import dataclasses

    from manifests import layouts

    written = []
    stub = dataclasses.replace(layouts.samples()["sample"], write=lambda raw: written.append(("sample", raw))
                               or (raw / "siq2").mkdir(parents=True))
    monkeypatch.setitem(layouts._SAMPLES, "sample", stub)
    monkeypatch.setattr("pipeline.run.run_extract", lambda *a, **k: report(failed=0))
    raw = tmp_path / "build" / "sample"
    if state == "empty":
        raw.mkdir(parents=True)
    args = ["extract", "--dataset", "sample", "--raw", str(raw), "--out", str(tmp_path / "s.zarr")]
    assert main(args) == 0
    assert main(args) == 0  # the second time it is there: nothing generated
    assert written == [("sample", raw)]
