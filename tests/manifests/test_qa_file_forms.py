"""A QA file is read in whatever top-level JSON form it comes (JSON Lines, one array of questions, one
object of questions keyed by qid or wrapping the list), or fails as a whole file with one clear line, for
every dataset whose questions come from JSON files (Social-IQ 2.0, TinySocial, SocialIQA)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from manifests.records import ManifestNote
from manifests.socialiq import read_siq2

Rows = list[dict]


def jsonl(rows: Rows) -> str:
    return "\n".join(json.dumps(r) for r in rows) + "\n"


FORMS: dict[str, Callable[[Rows], str]] = {
    "json lines": jsonl,
    "array, one line": lambda rows: json.dumps(rows),
    "array, indented": lambda rows: json.dumps(rows, indent=2),
    "object keyed by qid": lambda rows: json.dumps({r["qid"]: {k: v for k, v in r.items() if k != "qid"}
                                                    for r in rows}, indent=1),
    "object wrapping the list": lambda rows: json.dumps({"version": "1", "questions": rows}),
    "json lines, one question": lambda rows: json.dumps(rows[0]),
    "json lines with a byte-order mark": lambda rows: "\ufeff" + jsonl(rows),
}
BROKEN = {
    "truncated array": lambda rows: json.dumps(rows, indent=2)[:-40],
    "a number": lambda rows: "42",
    "array of strings": lambda rows: json.dumps([r["qid"] for r in rows]),
    "not UTF-8": lambda rows: "\udcff",
}


def siq2_rows(path: Path) -> Rows:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_in_form(qa_file: Path, form: str, read: Callable[[list[ManifestNote]], list]) -> tuple[list, list, list]:
    """(questions read from the file as released, the same rewritten in `form`, the notes of that read)."""
    rows = siq2_rows(qa_file)
    if form == "json lines, one question":
        rows = rows[:1]
        qa_file.write_text(jsonl(rows))
    want = read([])
    qa_file.write_text(FORMS[form](rows))
    notes: list[ManifestNote] = []
    return want, read(notes), notes


@pytest.mark.parametrize("form", sorted(FORMS))
def test_siq2_qa_file_in_any_json_form_gives_the_same_questions(tiny_root: Path, form: str) -> None:
    want, got, notes = read_in_form(tiny_root / "siq2" / "qa" / "qa_train.json", form,
                                    lambda notes: read_siq2(tiny_root, notes=notes)[1])
    assert got == want and len(got) >= 1
    assert [n for n in notes if n.kind != "note"] == []


@pytest.mark.parametrize("form", sorted(BROKEN))
def test_an_unreadable_siq2_qa_file_fails_alone_with_one_line(tiny_root: Path, form: str) -> None:
    qa_file = tiny_root / "siq2" / "qa" / "qa_train.json"
    text = BROKEN[form](siq2_rows(qa_file))
    qa_file.write_bytes(text.encode("utf-8", "surrogateescape"))
    notes: list[ManifestNote] = []
    _, qa = read_siq2(tiny_root, notes=notes)
    bad = [n for n in notes if n.kind != "note"]
    assert [(n.kind, n.what, n.file) for n in bad] == [("failed", "QA file", str(qa_file))], bad
    assert {q.split for q in qa} == {"val"}  # qa_val.json's questions are read as before


def manifest_report(raw: Path) -> object:
    """The run report of a frames + qa run over `raw` as its manifests leave it: the failures they counted."""
    from pipeline.config import load_config
    from pipeline.report import RunReport
    from pipeline.run import _manifest_failures

    notes: list[ManifestNote] = []
    read_siq2(raw, notes=notes)
    specs = load_config("sample").specs(["frames", "qa"])
    report = RunReport("r", "sample", "s", {s.name: dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)
                                           for s in specs})
    _manifest_failures(report, notes, specs)
    return report


def test_a_failed_qa_file_fails_the_qa_feature_only_and_the_run_exits_3(tiny_root: Path) -> None:
    from pipeline import exitcodes

    (tiny_root / "siq2" / "qa" / "qa_train.json").write_text("[{")
    report = manifest_report(tiny_root)
    assert {f: c["failed"] for f, c in report.counts.items()} == {"frames": 0, "qa": 1}
    assert report.exit_code == exitcodes.FAILURES
    [line] = [x for x in report.summary().splitlines() if "FAILED" in x]
    assert line.startswith("  FAILED qa/qa_train.json [manifest]") and "qa_train.json" in line


@pytest.mark.parametrize("form", sorted(FORMS))
def test_tinysocial_qa_file_in_any_json_form(tmp_path: Path, form: str) -> None:
    from manifests.tinysocial import read_tinysocial, write_sample_tinysocial

    raw = write_sample_tinysocial(tmp_path / "raw")
    want, got, notes = read_in_form(sorted((raw / "qa").glob("qa_*.jsonl"))[0], form,
                                    lambda notes: read_tinysocial(raw, notes=notes)[1])
    assert got == want and len(got) >= 1 and notes == []


def test_socialiqa_entries_as_a_json_array(tmp_path: Path) -> None:
    from manifests.socialiqa import read_socialiqa, write_sample_socialiqa

    write_sample_socialiqa(tmp_path, n=4)
    want = read_socialiqa(tmp_path)
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps([json.loads(x) for x in path.read_text().splitlines() if x.strip()], indent=2))
    assert read_socialiqa(tmp_path) == want
    path.write_text("7")
    with pytest.raises(ValueError, match=f"{path}: .*a number"):
        read_socialiqa(tmp_path)


def test_a_dangling_video_link_without_questions_is_listed(tiny_root: Path) -> None:
    """A symbolic link in video/ whose target is gone: with questions the item fails at decode (missing
    file); without any, it would vanish; it is listed as dropped with the link's target."""
    video = tiny_root / "siq2" / "video"
    (video / "ghost.mp4").symlink_to(tiny_root / "nowhere" / "ghost.mp4")
    (video / "folder.mp4").mkdir()
    notes: list[ManifestNote] = []
    items, _ = read_siq2(tiny_root, notes=notes)
    assert "ghost" not in {i.id for i in items}
    dropped = {n.id: n for n in notes if n.kind == "dropped"}
    assert set(dropped) == {"ghost.mp4", "folder.mp4"}
    assert "broken symbolic link" in dropped["ghost.mp4"].reason
    assert str(tiny_root / "nowhere" / "ghost.mp4") in dropped["ghost.mp4"].detail
    assert dropped["folder.mp4"].reason == "not a regular file: a folder"
    (video / "tiny-a.mp4").unlink()
    (video / "tiny-a.mp4").symlink_to(tiny_root / "nowhere" / "tiny-a.mp4")  # a video with questions
    notes = []
    items, _ = read_siq2(tiny_root, notes=notes)
    assert "tiny-a" in {i.id for i in items}
    assert [n.reason for n in notes if n.id == "tiny-a.mp4"] == [
        "broken symbolic link: its target does not exist; the item is kept for its questions, its media fail"]


EMPTY = {"no bytes": "", "blank lines": "\n\n  \n", "empty array": "[]", "byte-order mark only": "\ufeff"}


def _empty_qa_notes(notes: list[ManifestNote], path: Path) -> list[tuple[str, str, str | None]]:
    return [(n.kind, n.reason, n.file) for n in notes if n.what == "QA file" and n.file == str(path)]


@pytest.mark.parametrize("form", sorted(EMPTY))
def test_an_empty_qa_file_is_a_manifest_note(tiny_root: Path, tmp_path: Path, form: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Issue 35 item 8: an empty QA file was read as no questions with no word; every dataset whose questions come
    from files notes it (the run report prints manifest notes), and reads its other files as before."""
    from manifests.tinysocial import read_tinysocial, write_sample_tinysocial

    qa_file = tiny_root / "siq2" / "qa" / "qa_train.json"
    qa_file.write_text(EMPTY[form])
    notes: list[ManifestNote] = []
    _, qa = read_siq2(tiny_root, notes=notes)
    assert _empty_qa_notes(notes, qa_file) == [("note", "QA file holds no questions", str(qa_file))]
    assert {q.split for q in qa} == {"val"} and all(n.kind == "note" for n in notes)
    assert any(str(qa_file) in r.getMessage() and "no questions" in r.getMessage() for r in caplog.records)

    raw = write_sample_tinysocial(tmp_path / "raw")
    ts_file = sorted((raw / "qa").glob("qa_*.jsonl"))[0]
    ts_file.write_text(EMPTY[form])
    notes = []
    read_tinysocial(raw, notes=notes)
    assert _empty_qa_notes(notes, ts_file) == [("note", "QA file holds no questions", str(ts_file))]


def test_an_empty_siq1_qa_file_is_a_manifest_note(tmp_path: Path) -> None:
    from manifests.socialiq import read_siq1_qa_file

    path = tmp_path / "vid_QA.txt"
    path.write_text("\n \n")
    notes: list[ManifestNote] = []
    assert read_siq1_qa_file(path, "vid", "train", notes=notes) == []
    assert _empty_qa_notes(notes, path) == [("note", "QA file holds no questions", str(path))]
    path.write_text("q1: what?\n")  # a question without answers is dropped as such, not also "empty"
    notes = []
    read_siq1_qa_file(path, "vid", "train", notes=notes)
    assert [n.reason for n in notes] == ["malformed question"]
