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
    root = Path(__file__).resolve().parents[1]
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
