"""What one hostile input may cost is bounded (manifests/limits.py): JSON nested past the limit, a file over its
byte limit, a device or FIFO in place of a file, a caption file of too many cues. Each fails alone with one
line naming the file and the limit, quickly; the rest of the run goes on."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from manifests import limits
from manifests.limits import InputLimits
from manifests.records import ManifestNote
from manifests.socialiq import read_siq2
from tests.manifests.test_qa_file_forms import manifest_report

DEEP = {
    "arrays": "[" * 1000 + "]" * 1000,
    "objects": '{"a":' * 1000 + "1" + "}" * 1000,
    "a question's field": json.dumps([{"qid": "x", "q": "deep?"}]).replace('"deep?"', "[" * 5000 + "]" * 5000),
    "indented": "[\n" * 3000 + "]\n" * 3000,
    "brackets in strings do not count": json.dumps([{"qid": "s", "q": "[" * 5000}]) + "[" * 900 + "]" * 900,
}


def _qa_file(root: Path) -> Path:
    return root / "siq2" / "qa" / "qa_train.json"


def _failed(notes: list[ManifestNote]) -> list[ManifestNote]:
    return [n for n in notes if n.kind == "failed"]


@pytest.mark.parametrize("form", sorted(DEEP))
def test_a_qa_file_nested_past_the_limit_fails_alone(tiny_root: Path, form: str) -> None:
    qa_file = _qa_file(tiny_root)
    qa_file.write_text(DEEP[form])
    notes: list[ManifestNote] = []
    t0 = time.perf_counter()
    _, qa = read_siq2(tiny_root, notes=notes)
    assert time.perf_counter() - t0 < 5
    [bad] = _failed(notes)
    assert (bad.what, bad.file) == ("QA file", str(qa_file))
    if form == "brackets in strings do not count":
        assert "900 levels deep" in bad.detail  # the 5,000 brackets inside the string are text, not nesting
    assert "levels deep, over the limit of 64 (limits.json_max_depth" in bad.detail, bad.detail
    assert {q.split for q in qa} == {"val"}  # qa_val.json's questions are read as before


def test_one_deep_line_among_json_lines_drops_that_question_only(tiny_root: Path) -> None:
    qa_file = _qa_file(tiny_root)
    rows = qa_file.read_text().splitlines()
    want = len([r for r in rows if r.strip()])
    rows.insert(1, "[" * 1000 + "]" * 1000)
    rows.insert(3, json.dumps({"qid": "deep-q", "q": {"a": 1}}).replace("1", "[" * 800 + "]" * 800))
    qa_file.write_text("\n".join(rows) + "\n")
    notes: list[ManifestNote] = []
    _, qa = read_siq2(tiny_root, notes=notes)
    assert _failed(notes) == []
    dropped = [n for n in notes if n.kind == "dropped"]
    assert [(n.file, n.reason) for n in dropped] == [(f"{qa_file}:2", "malformed question"),
                                                     (f"{qa_file}:4", "malformed question")]
    assert all("levels deep, over the limit of 64" in n.detail for n in dropped), dropped
    assert sum(q.split == "train" for q in qa) == want


def test_the_depth_limit_is_the_run_configs(tiny_root: Path) -> None:
    """A release nested 5 deep is read at the default limit and refused at a limit of 4."""
    qa_file = _qa_file(tiny_root)
    qa_file.write_text(json.dumps({"questions": [{"qid": "a", "q": "why?", "vid_name": "tiny-a", "a0": "x",
                                                  "extra": [[1]]}]}))
    notes: list[ManifestNote] = []
    assert [q.qid for q in read_siq2(tiny_root, notes=notes)[1] if q.split == "train"] == ["a"]
    with limits.applied(InputLimits(json_max_depth=4)):
        notes = []
        read_siq2(tiny_root, notes=notes)
    assert "5 levels deep, over the limit of 4" in _failed(notes)[0].detail


def test_a_qa_file_over_the_byte_limit_is_refused_before_it_is_read(tiny_root: Path) -> None:
    qa_file = _qa_file(tiny_root)
    size = qa_file.stat().st_size
    with limits.applied(InputLimits(json_max_bytes=size - 1)):
        notes: list[ManifestNote] = []
        _, qa = read_siq2(tiny_root, notes=notes)
    [bad] = _failed(notes)
    assert bad.file == str(qa_file) and f"over {size - 1:,} bytes (limits.json_max_bytes" in bad.detail
    assert {q.split for q in qa} == {"val"}


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_as_a_qa_file_fails_alone_without_blocking(tiny_root: Path, kind: str) -> None:
    qa_file = _qa_file(tiny_root)
    qa_file.unlink()
    if kind == "fifo":
        os.mkfifo(qa_file)  # nobody writes to it: opening it to read would block the run for good
    else:
        qa_file.symlink_to(kind)
    notes: list[ManifestNote] = []
    _, qa = read_siq2(tiny_root, notes=notes)
    [bad] = _failed(notes)
    assert bad.file == str(qa_file) and "not a regular file" in bad.detail
    assert {q.split for q in qa} == {"val"}


def test_a_deep_qa_file_fails_the_qa_feature_and_the_run_exits_3(tiny_root: Path) -> None:
    from pipeline import exitcodes

    _qa_file(tiny_root).write_text(DEEP["arrays"])
    report = manifest_report(tiny_root)
    assert report.exit_code == exitcodes.FAILURES
    [line] = [x for x in report.summary().splitlines() if "FAILED" in x]
    assert line.startswith("  FAILED qa/qa_train.json [manifest]") and "levels deep" in line


def _cues(n: int, text: str = "word") -> str:
    return "WEBVTT\n\n" + "".join(f"{k // 3600:02d}:{k // 60 % 60:02d}:{k % 60:02d}.000 --> "
                                  f"{k // 3600:02d}:{k // 60 % 60:02d}:{k % 60:02d}.500\n{text}\n\n" for k in range(n))


def test_a_caption_file_of_too_many_cues_fails_before_its_cues_are_built(tmp_path: Path) -> None:
    from media.captions import parse_captions

    path = tmp_path / "many.vtt"
    path.write_text(_cues(InputLimits().caption_max_cues + 1, "w"))  # 3 MB, under the byte limit
    t0 = time.perf_counter()
    with pytest.raises(limits.InputTooLarge, match=rf"{path}: over 100,000 cues .*limits.caption_max_cues"):
        parse_captions(path)
    assert time.perf_counter() - t0 < 2  # refused on a count, not after parsing 100,001 cues
    path.write_text(_cues(50))
    assert len(parse_captions(path).words) == 50
    with limits.applied(InputLimits(caption_max_cues=49)), pytest.raises(limits.InputTooLarge, match="over 49 cues"):
        parse_captions(path)


def test_a_caption_file_over_the_byte_limit_is_read_no_further(tmp_path: Path) -> None:
    """The issue's file: a million cues, 36 MB; refused after 8 MiB read, not parsed for minutes."""
    from media.captions import parse_captions

    path = tmp_path / "huge.srt"
    cue = "1\n00:00:01,000 --> 00:00:01,500\nword\n\n"
    path.write_text(cue * (36 * 2**20 // len(cue)))
    t0 = time.perf_counter()
    with pytest.raises(limits.InputTooLarge, match=rf"{path}: caption file over 8,388,608 bytes"):
        parse_captions(path)
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_as_a_caption_file_fails_without_blocking(tmp_path: Path, kind: str) -> None:
    from media.captions import parse_captions

    path = tmp_path / "cap.vtt"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(kind)
    with pytest.raises(limits.InputTooLarge, match=rf"{path}: not a regular file"):
        parse_captions(path)


def test_the_run_limits_reach_the_decode_worker_and_fail_that_pair_alone(tmp_path: Path) -> None:
    """decode_item (the Ray decode task) applies the limits the driver sends: the transcript fails with the
    file and the limit named, and the item's other kinds are decoded as before."""
    from manifests.records import MediaItem
    from pipeline.actors import decode_item

    path = tmp_path / "cap.vtt"
    path.write_text(_cues(5))
    item = MediaItem(id="x", dataset="d", transcript=path, caption="a caption")
    meta, words = decode_item(item, ["transcript"], [], 16000)
    assert len(words.words) == 5 and meta["failures"] == {}
    meta, words = decode_item(item, ["transcript"], [], 16000, input_limits=InputLimits(caption_max_cues=4))
    failure = meta["failures"]["transcript"]
    assert words is None and failure["file"] == str(path) and failure["stage"] == "decode:transcript"
    assert "InputTooLarge" in failure["error"] and "over 4 cues" in failure["error"]
