"""The small edges a new user hits (issue 49, point 9), each with its test."""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from pipeline import exitcodes
from pipeline.cli import main


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_an_xarray_zarr_export_is_consolidated(info_store: Path, tmp_path: Path) -> None:
    import xarray as xr

    out = tmp_path / "faces.zarr"
    assert cli("export", str(info_store), "--xarray", str(out), "--features", "faces")[0] == exitcodes.OK
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # xarray's "failed to open Zarr store with consolidated metadata"
        ds = xr.open_zarr(out)
    assert list(ds["item_id"].values) == ["tiny-a", "tiny-b", "tiny-c"]
    ds.close()


@pytest.mark.parametrize("command", ["verify", "compact"])
def test_the_store_is_positional_everywhere_and_out_still_works(info_store: Path, tmp_path: Path, command: str,
                                                                capsys: pytest.CaptureFixture) -> None:
    store = tmp_path / "s.zarr"
    shutil.copytree(info_store, store)
    new = main([command, str(store), "--features", "frames"])
    old = main([command, "--out", str(store), "--features", "frames"])
    assert new == old and new in (exitcodes.OK, exitcodes.DAMAGED)
    printed = capsys.readouterr().out
    assert printed.count(str(store)) >= 2  # each form named the store it worked on
    with pytest.raises(SystemExit) as e:  # two different stores: which one?
        main([command, str(store), "--out", str(info_store)])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        main([command])


@pytest.mark.parametrize("argv", [["info", "--json"], ["info"], ["verify"]])
def test_a_closed_pipe_ends_the_command_quietly(info_store: Path, argv: list[str]) -> None:
    """`info --json | head`: the reader closed its end before the command wrote; no `error: Broken pipe`, no
    Python noise, and the exit status of a command ended by SIGPIPE (what a shell expects of `… | head`)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", *argv, str(info_store)], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={"PYTHONPATH": str(root),
                                                                                  "PATH": "/usr/bin:/bin"})
    proc.stdout.close()  # before the command has imported anything: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("argv", [
    ["extract", "--dataset", "sample", "--raw", "{raw}", "--out", "{store}/frames/inner.zarr"],
    ["extract", "--dataset", "sample", "--raw", "{raw}", "--out", "{store}/new.zarr"],
    ["export", "{store}", "--sdk", "{store}/sdk"],
    ["export", "{store}", "--xarray", "{store}/faces/x.nc", "--features", "faces"],
    ["report", "{store}", "--out", "{store}/qa/page.html"],
], ids=["extract-in-a-feature", "extract-in-the-root", "export-sdk", "export-xarray", "report"])
def test_an_output_inside_an_existing_store_is_refused(info_store: Path, tmp_path: Path, argv: list[str],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "s.zarr"
    shutil.copytree(info_store, store)
    before = _tree(store)
    args = [a.format(store=store, raw=tmp_path / "raw") for a in argv]
    assert main(args) == exitcodes.BAD_INPUT
    [line] = _errors(caplog)
    assert line.startswith(f"{args[args.index(next(a for a in args if a.startswith(str(store) + '/')))]}: inside "
                           f"the store {store}: ")
    assert _tree(store) == before


def test_info_text_gives_each_features_dimension_and_rate(info_store: Path) -> None:
    from store.reader import open_store

    code, text = cli("info", str(info_store))
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["feature"])
    assert lines[header].split()[4:6] == ["dim", "rate"]
    s = open_store(info_store)
    for line in lines[header + 1:header + 1 + len(s.features())]:
        name, dim, rate = line.split()[0], int(line.split()[4]), line.split()[5:7]
        attrs = s.feature_attrs(name)
        assert dim == len(attrs["columns"]), name  # the reference: the store's own columns
        assert rate == ([f"{attrs['rate_hz']:g}", "Hz"] if attrs["rate_hz"] else ["per", "unit"]), name


def _with_runs(info_store: Path, tmp_path: Path, *reports: dict) -> Path:
    from store.writer import StoreWriter

    store = tmp_path / "s.zarr"
    shutil.copytree(info_store, store)
    with StoreWriter(store, "sample") as w:
        for rep in reports:
            w.write_run_report(rep["run_id"], rep)
    return store


def _run(run_id: str, done: int = 0, skipped: int = 0, failures: list | None = None) -> dict:
    from testing.info_store import EXPECTED

    counts = {f: {"done": 0, "skipped": skipped, "failed": 0, "n/a": 0} for f in EXPECTED}
    counts["frames"].update(done=done, failed=len(failures or []))
    return {"run_id": run_id, "dataset": "sample", "store": "s", "counts": counts, "seconds": 1.5,
            "failures": failures or [], "partial": []}


def test_info_last_run_is_the_one_that_computed_the_data(info_store: Path, tmp_path: Path) -> None:
    from testing.info_store import RUN_ID

    noop = "20261128T090000Z-00ff00"
    store = _with_runs(info_store, tmp_path, _run(noop, skipped=3), _run("20261128T080000Z-0a0a0a", skipped=3))
    lines = cli("info", str(store))[1].splitlines()
    assert lines[1].startswith(f"  last run that computed data {RUN_ID} (2026-11-27T12:00:00+00:00): 12.5 s, 1 done")
    assert lines[2].startswith(f"  latest run {noop} (2026-11-28T09:00:00+00:00): 1.5 s, 0 done, 0 failed, 15 skipped")
    assert lines[2].endswith("; 3 run report(s) in _runs/")
    only = cli("info", str(info_store))[1].splitlines()  # the latest run computed: one line, as before
    assert only[1].startswith(f"  last run {RUN_ID} (") and not only[2].startswith("  latest run")


FFMPEG = "InputError: {f}: cannot open: [Errno 1094995529] Invalid data found when processing input: '{f}'"


def test_failed_lines_name_the_file_once_without_errno_and_info_advises_by_kind(info_store: Path,
                                                                                tmp_path: Path) -> None:
    from pipeline.report import RunReport

    bad, lost = str(tmp_path / "raw/video/tiny-x.mp4"), str(tmp_path / "raw/video/tiny-y.mp4")
    failures = [{"item": "tiny-x", "feature": "frames", "stage": "decode:frames", "file": bad,
                 "error": FFMPEG.format(f=bad)}]
    store = _with_runs(info_store, tmp_path, _run("20261128T090000Z-00ff00", done=1, failures=failures))
    code, text = cli("info", str(store))
    assert code == exitcodes.FAILURES
    [line] = [x for x in text.splitlines() if "FAILED" in x]
    assert line == (f"  FAILED frames/tiny-x [decode:frames] {bad}: cannot open: Invalid data found when processing "
                    "input (run 20261128T090000Z-00ff00)")
    [advice] = [x for x in text.splitlines() if x.startswith("  failed pairs")]
    assert "replace or repair those files first" in advice and "retries them" not in advice

    report = RunReport("r", "sample", "s", {"frames": {"done": 0, "skipped": 0, "failed": 1, "n/a": 0}})
    report.failures = [{**failures[0], "feature": "frames"}]
    [line] = [x for x in report.summary().splitlines() if "FAILED" in x]
    assert line.count(bad) == 1 and "Errno" not in line and "InputError" not in line

    worker = [{"item": "tiny-y", "feature": "frames", "stage": "decode:frames", "file": lost,
               "error": "WorkerLost: WorkerCrashedError: The worker died unexpectedly"}]
    store = _with_runs(info_store, tmp_path / "w", _run("20261128T090000Z-00ff00", done=1, failures=worker))
    [advice] = [x for x in cli("info", str(store))[1].splitlines() if x.startswith("  failed pairs")]
    assert "`make extract` again retries them" in advice


def test_a_first_run_prints_no_compaction_lines_but_reclaimed_rows_get_one(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A run merges its own small commit batches (housekeeping: no line); reclaiming superseded rows, which were
    the user's data before, is said."""
    from types import SimpleNamespace

    import numpy as np

    from pipeline.report import RunReport
    from pipeline.run import _compact_if_worthwhile
    from rows import FeatureRows
    from store.reader import open_store
    from store.writer import StoreWriter

    def commit(w: StoreWriter, item: str, n: int) -> None:
        w.commit("f", item, FeatureRows(np.zeros((n, 2), np.float32), np.c_[np.arange(n), np.arange(n) + 1.0]),
                 {"spec_hash": "s", "fingerprint": item, "duration_s": float(n)})

    specs = [SimpleNamespace(name="f")]
    caplog.set_level(logging.INFO)
    with StoreWriter(tmp_path / "s.zarr", "test") as w:
        w.set_feature("f", {"extractor": "f", "version": "0", "config": {}, "columns": ["a", "b"], "rate_hz": 1.0,
                            "weights": "none", "spec_hash": "s"})
        for k in range(4):  # a first run: four commit batches, four small parts
            commit(w, f"i{k}", 3)
        first = RunReport("r1", "test", "s", {"f": {}})
        _compact_if_worthwhile(w, specs, first)
    assert len(open_store(tmp_path / "s.zarr").index("f").parts) == 1  # merged all the same
    assert first.notes == []
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "compact" in r.getMessage()]
    assert said == [], said  # nor the merged parts' removal
    with StoreWriter(tmp_path / "s.zarr", "test") as w:
        for k in range(3):  # recomputed: their first rows superseded
            commit(w, f"i{k}", 3)
        again = RunReport("r2", "test", "s", {"f": {}})
        _compact_if_worthwhile(w, specs, again)
    [line] = again.notes
    assert line.startswith("  compacted f: ") and "9 superseded row(s) dropped" in line


def test_manifest_notes_are_said_once_not_on_every_run(tmp_path: Path) -> None:
    """The trim notes of a release are in every run's report, but the summary says them on the run that first
    met them; a later run over the same release says one line, and a new note is still said."""
    from manifests.records import ManifestNote
    from pipeline.run import mark_repeated
    from pipeline.sources import manifest_summary
    from store.writer import StoreWriter

    trims = "/raw/siq2/trims.json"
    notes = [ManifestNote(kind="note", what="trim", id=v, file=trims, reason="trim is 0: the clip is taken as the "
                          "source's first 60 s (no trim correction)").model_dump(mode="json") for v in ("a", "b")]
    out = tmp_path / "s.zarr"
    first = [dict(n) for n in notes]
    mark_repeated(first, out)  # no store yet: nothing said before
    assert sum("note: 2 trim(s): trim is 0" in line for line in manifest_summary(first)) == 1
    with StoreWriter(out, "test") as w:
        w.write_run_report("20261128T080000Z-aaaaaa", {"run_id": "x", "counts": {}, "manifest": first})
        w.write_run_report("20261128T090000Z-bbbbbb", {"run_id": "y", "counts": {}})  # stopped before the manifests
    again = [dict(n) for n in notes]
    mark_repeated(again, out)
    assert manifest_summary(again) == ["  manifest: 0 input(s) dropped, 2 kept with a note, as the previous run "
                                       "said (listed in _runs/)"]
    new = ManifestNote(kind="note", what="trim", id="c", file=trims, reason="no trim entry").model_dump(mode="json")
    third = [dict(n) for n in notes] + [new]
    mark_repeated(third, out)
    lines = manifest_summary(third)
    assert lines[0].endswith("3 kept with a note (2 as the previous run said, not repeated here)")
    assert lines[1:] == ["  note: 1 trim(s): no trim entry: c"]


def test_the_busy_line_is_short_and_starts_with_the_binding_resource() -> None:
    from pipeline.report import utilisation_lines

    busy = {"cpu": 0.61, "driver": 0.03, **{f"gpu {g}": 0.5 + g / 100 for g in range(4)},
            **{f"actors {f}": b for f, b in (("frames", 0.95), ("faces", 0.7), ("transcript", 0.2), ("qa", 0.1),
                                             ("acoustic", 0.4))}}
    [line] = utilisation_lines({"policy": "balanced", "steady": {"seconds": 41.6, "busy": busy},
                                "binding": "actors frames"})
    assert len(line) <= 160, (len(line), line)
    assert line == ("  busy (42 s steady): actors frames 95 % binding (add actors: `actors_per_gpu = {frames = N}`), "
                    "actors faces 70 %, cpu 61 %, gpu 3 53 %, +7 more")
    cpu_only = {k: v for k, v in busy.items() if not k.startswith("gpu")}
    [line] = utilisation_lines({"steady": {"seconds": 10, "busy": cpu_only}, "binding": "actors frames"})
    assert "actors frames 95 % binding (add actors: `cpu_actors`), " in line and len(line) <= 160
