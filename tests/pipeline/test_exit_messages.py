"""Issue 53 point 6: exit codes and messages as README's table says, for the inputs and damage no earlier round
tried: a feature whose zarr.json does not read, a damaged byte in the manifests, /dev/zero and a FIFO as inputs,
a newline in a file name, a run report that does not parse."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from manifests.records import ManifestNote
from manifests.socialiq import read_siq2
from media.container import InputError, existing
from pipeline import exitcodes
from pipeline.cli import main


@pytest.fixture
def store(info_store: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "s.zarr"
    shutil.copytree(info_store, copy)
    return copy


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]


def test_info_exits_4_naming_a_feature_whose_metadata_does_not_read(
        store: Path, capsys: pytest.CaptureFixture) -> None:
    import json

    for report in (store / "_runs").glob("*.json"):  # as in test_info: no failed pair, no damaged item
        report.write_text(json.dumps({**json.loads(report.read_text()), "failures": []}))
    shutil.rmtree(store / "transcript")
    assert main(["info", str(store)]) == exitcodes.OK
    capsys.readouterr()
    (store / "frames" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "gro')
    assert main(["info", str(store)]) == exitcodes.DAMAGED
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if "DAMAGED METADATA" in x]
    assert line.startswith("  DAMAGED METADATA frames: ") and str(store / "frames" / "zarr.json") in line


@pytest.mark.parametrize("command", ["info", "report"])
def test_a_damaged_manifest_byte_is_damage_in_one_line_not_a_bad_argument(
        store: Path, tmp_path: Path, command: str, caplog: pytest.LogCaptureFixture) -> None:
    items = store / "_manifests" / "items.jsonl"
    data = bytearray(items.read_bytes())
    data[data.index(b'"dataset"') + 3] = ord("#")  # one byte: the line is JSON still, not a record
    items.write_bytes(bytes(data))
    argv = [command, str(store)] + (["--out", str(tmp_path / "page")] if command == "report" else [])
    assert main(argv) == exitcodes.DAMAGED
    [error] = _errors(caplog)
    assert "\n" not in error and error.startswith(f"{items}: damaged manifest (line 1: ") and "verify" in error


def test_verify_checks_the_run_reports(store: Path, capsys: pytest.CaptureFixture) -> None:
    runs = sorted((store / "_runs").glob("*.json"))
    assert runs
    assert main(["verify", "--out", str(store)]) in (exitcodes.OK, exitcodes.DAMAGED)
    before = capsys.readouterr().out
    assert "DAMAGED METADATA" not in before
    runs[0].write_bytes(runs[0].read_bytes()[:-20])
    (store / "_runs" / "zz-other.json").write_text("[1, 2]")
    assert main(["verify", "--out", str(store)]) == exitcodes.DAMAGED
    out = capsys.readouterr().out
    assert f"DAMAGED METADATA {runs[0]}: unreadable" in out
    assert f"DAMAGED METADATA {store / '_runs' / 'zz-other.json'}: not a run report" in out


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "folder"])
def test_a_device_fifo_or_folder_as_a_video_is_named_for_what_it_is(tiny_root: Path, kind: str) -> None:
    video = tiny_root / "siq2" / "video" / "tiny-a.mp4"  # a video with questions: kept, its media fail
    video.unlink()
    want = {"/dev/zero": "a device (a symbolic link to /dev/zero)", "fifo": "a FIFO", "folder": "a folder"}[kind]
    if kind == "fifo":
        os.mkfifo(video)
    elif kind == "folder":
        video.mkdir()
    else:
        video.symlink_to(kind)
    notes: list[ManifestNote] = []
    items, _ = read_siq2(tiny_root, notes=notes)
    [note] = [n for n in notes if n.id == "tiny-a.mp4"]
    assert note.reason.startswith(f"not a regular file: {want}") and "broken" not in note.reason, note.reason
    with pytest.raises(InputError, match=re.escape(f"video file: not a regular file: {want}")):
        existing(video, "video")  # at decode: never "is empty", never read (a FIFO would block)


def test_a_newline_in_a_file_name_stays_on_its_summary_line(tiny_root: Path) -> None:
    from pipeline.report import RunReport

    odd = tiny_root / "siq2" / "video" / "two\nlines\u2028x.mkv"
    odd.write_bytes(b"not a video")
    notes: list[ManifestNote] = []
    read_siq2(tiny_root, notes=notes)
    report = RunReport("r", "sample", "s", {"frames": dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)})
    report.manifest = [n.model_dump() for n in notes]
    report.failures = [{"feature": "frames", "item": "tiny-a", "stage": "decode:frames", "file": str(odd),
                        "error": "InputError: bad\nthing"}]
    lines = report.summary().splitlines()
    dropped = [x for x in lines if "DROPPED" in x and "two" in x]
    assert len(dropped) == 1 and "two\\nlines\\u2028x.mkv" in dropped[0], lines
    failed = [x for x in lines if x.startswith("  FAILED")]
    escaped = str(odd).replace("\n", "\\n").replace("\u2028", "\\u2028")
    assert failed == [f"  FAILED frames/tiny-a [decode:frames] {escaped}: bad\\nthing"]
    assert not any(x.startswith("lines") or x.startswith("thing") for x in lines)
