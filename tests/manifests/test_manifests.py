import json
import logging
from pathlib import Path

import pytest

from manifests.records import ManifestNote, MediaItem, QAItem, read_jsonl, write_jsonl
from manifests.socialiq import read_siq1, read_siq2


def test_siq2_reader_on_the_sample(sample_root: Path) -> None:
    items, qa = read_siq2(sample_root, dataset="sample")
    assert [i.id for i in items] == ["sample-a", "sample-b", "sample-c", "sample-d", "sample-e"]
    a = items[0]
    assert a.video.name == "sample-a.mp4" and a.audio.name == "sample-a.wav" and a.transcript.name == "sample-a.vtt"
    assert a.split == "train" and items[3].split == "val"
    assert a.clip_start_s == 0.0 and a.clip_end_s == 60.0
    assert len(qa) == 10 and qa[0].correct == (True, False, False, False) and qa[0].ts == (0.0, 24.0)
    assert qa[1].correct.index(True) == 1


def test_siq2_test_split_has_no_labels_and_bad_lines_are_skipped(tmp_path: Path, caplog) -> None:
    root = tmp_path / "siq2"
    (root / "qa").mkdir(parents=True)
    (root / "video").mkdir()
    good = {"qid": "q-1", "q": "Why?", "vid_name": "-abc_123", "ts": "1.5-60.06",
            "a0": "A", "a1": "B", "a2": "C", "a3": "D"}
    lines = [json.dumps(good), "{not json", json.dumps({**good, "qid": "q-2", "answer_idx": 9})]
    (root / "qa" / "qa_test.json").write_text("\n".join(lines))
    (root / "trims.json").write_text(json.dumps({"-abc_123": [12.5, 72.5]}))
    with caplog.at_level(logging.WARNING):
        items, qa = read_siq2(tmp_path)
    assert [q.qid for q in qa] == ["q-1"] and qa[0].correct == () and qa[0].split == "test"
    assert qa[0].ts == (1.5, 60.06)
    assert "qa_test.json:2" in caplog.text and "qa_test.json:3" in caplog.text
    assert items[0].id == "-abc_123" and items[0].clip_start_s == 12.5 and items[0].clip_end_s == 72.5


def test_siq1_reader_with_folds_and_a_malformed_question(tmp_path: Path, caplog) -> None:
    raw = tmp_path / "raw"
    (raw / "qa").mkdir(parents=True)
    (raw / "vision" / "raw").mkdir(parents=True)
    (raw / "vision" / "raw" / "vidA_trimmed-out.mp4").write_bytes(b"")
    (raw / "qa" / "vidA_trimmed.txt").write_text(
        "q0: What is he feeling?\n"
        "a: He is happy.\na2: He is content.\ni: He is sad.\ni: He is angry.\n"
        "q1: Broken question?\nthis line has no tag\na: yes\n"
        "q2: Is she listening?\na:Yes.\ni : No.\n"
    )
    folds = tmp_path / "socialiq_std_folds.py"
    folds.write_text("standard_train_fold=['vidA']\nstandard_valid_fold=['vidB']\n")
    with caplog.at_level(logging.WARNING):
        items, qa = read_siq1(tmp_path, folds=folds)
    assert [i.id for i in items] == ["vidA"] and items[0].split == "train" and items[0].video.exists()
    assert [q.question for q in qa] == ["What is he feeling?", "Is she listening?"]
    assert qa[0].correct == (True, True, False, False) and qa[1].answers == ("Yes.", "No.")
    assert "vidA_trimmed.txt:7" in caplog.text


def test_records_validate_and_roundtrip(tmp_path: Path) -> None:
    for bad in ("a/b", "..", ".hidden", "__x", "", "a b"):
        with pytest.raises(ValueError):
            MediaItem(id=bad, dataset="d")
    with pytest.raises(ValueError, match="2 answers but 1 labels"):
        QAItem(qid="q", item_id="i", dataset="d", question="?", answers=("a", "b"), correct=(True,))
    qa = [QAItem(qid="q", item_id="i", dataset="d", question="?", answers=("a", "b"), correct=(True, False))]
    write_jsonl(tmp_path / "qa.jsonl", qa)
    assert list(read_jsonl(tmp_path / "qa.jsonl", QAItem)) == qa


# --- Social-IQ 2.0 as published: question identity, the nested split file, trims, unusable ids ----------


def _siq2_layout(tmp_path: Path, qa: dict[str, list[dict]], trims: dict | None = None,
                 split: dict | None = None, videos: tuple[str, ...] = ()) -> Path:
    root = tmp_path / "siq2"
    (root / "qa").mkdir(parents=True)
    (root / "video").mkdir()
    for name, rows in qa.items():
        (root / "qa" / f"qa_{name}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if trims is not None:
        (root / "trims.json").write_text(json.dumps(trims))
    if split is not None:
        (root / "original_split.json").write_text(json.dumps(split))
    for v in videos:
        (root / "video" / v).write_bytes(b"")
    return tmp_path


def _row(qid: str, vid: str, q: str, answers: str = "ABCD", idx: int | None = 0) -> dict:
    row = {"qid": qid, "q": q, "vid_name": vid, "ts": "0.00-60.06", **{f"a{i}": a for i, a in enumerate(answers)}}
    return row if idx is None else {**row, "answer_idx": idx}


def test_siq2_question_identity(tmp_path: Path) -> None:
    """(split, qid, video, text) is a question: copies collapse into the labelled one, other questions under
    the same qid get documented qids (manifests/questions.py), and nothing is lost silently."""
    qa = {
        "train": [_row("v_q1", "v", "Why?"), _row("v_q2", "v", "Who?"),
                  _row("v_q2", "v", "Where?", idx=3),  # a reused qid: another question
                  _row("v_q3", "v", "When?", idx=None),  # unlabelled copy first ...
                  _row("v_q3", "v", "When?", idx=1),  # ... of this labelled one
                  _row("v_q1", "v", "Why?")],  # an identical duplicate
        "test": [_row("v_q1", "v", "Why?", "BADC", idx=None),  # the test file asks it again, shuffled
                 _row("v_q2", "v", "Where?", idx=None), _row("v_q2", "v", "Who?", idx=None),
                 _row("v_q9", "v", "How?", idx=None)],
    }
    notes: list[ManifestNote] = []
    items, got = read_siq2(_siq2_layout(tmp_path, qa, {"v": 10.0}, videos=("v.mp4",)), notes=notes)
    by_qid = {q.qid: q for q in got}
    assert len(by_qid) == len(got) == 8  # unique stored qids
    assert (by_qid["v_q1"].split, by_qid["v_q1"].correct) == ("train", (True, False, False, False))
    assert by_qid["v_q1.test"].answers == tuple("BADC") and by_qid["v_q1.test"].correct == ()
    assert by_qid["v_q2"].question == "Who?" and by_qid["v_q2.2"].question == "Where?"
    assert by_qid["v_q2.2"].correct == (False, False, False, True)
    assert by_qid["v_q2.test"].question == "Where?" and by_qid["v_q2.test.2"].question == "Who?"
    assert by_qid["v_q3"].correct == (False, True, False, False) and by_qid["v_q9"].split == "test"
    dropped = sorted((n.id, n.reason) for n in notes if n.kind == "dropped")
    assert dropped == [("v_q1", "identical duplicate"), ("v_q3", "unlabelled copy of a labelled question")]
    renamed = {n.detail.split(";")[0] for n in notes if n.reason.startswith("qid also names")}
    assert renamed == {"stored as v_q1.test", "stored as v_q2.2", "stored as v_q2.test", "stored as v_q2.test.2"}


def test_siq2_nested_split_file_and_subset(tmp_path: Path) -> None:
    split = {"subsets": {"youtubeclips": {"train": ["a"], "val": ["b"], "test": []},
                         "movieclips": {"train": ["c"], "val": [], "test": ["d", "a"]},
                         "car": {"train": [], "val": [], "test": ["e"], "extra": ["f"]}}}
    qa = {"train": [_row("a_q", "a", "?"), _row("c_q", "c", "?"), _row("x_q", "x", "?")],
          "val": [_row("b_q", "b", "?")], "test": [_row("d_q", "d", "?", idx=None), _row("e_q", "e", "?", idx=None)]}
    notes: list[ManifestNote] = []
    items, _ = read_siq2(_siq2_layout(tmp_path, qa, {}, split), notes=notes)
    got = {i.id: (i.split, i.subset) for i in items}
    assert got == {"a": ("train", "youtubeclips"), "b": ("val", "youtubeclips"), "c": ("train", "movieclips"),
                   "d": ("test", "movieclips"), "e": ("test", "car"), "x": ("train", None)}  # x: not listed
    kinds = {(n.what, n.id, n.kind) for n in notes if n.what == "split entry"}
    assert kinds == {("split entry", "a", "note"), ("split entry", "car/extra", "dropped"), ("split entry", "x", "note")}
    # the flat {split: [ids]} form, and current_split.json (what download_all.py writes) before the original
    (tmp_path / "siq2" / "current_split.json").write_text(json.dumps({"val": ["a", "c"]}))
    items, _ = read_siq2(tmp_path)
    assert {i.id: (i.split, i.subset) for i in items if i.id in "ac"} == {"a": ("val", None), "c": ("val", None)}


@pytest.mark.parametrize("bad", [None, "n/a", [], -3.0, True, "nan", {"start": 1}])
def test_siq2_one_bad_trim_fails_that_video_only(tmp_path: Path, bad) -> None:
    qa = {"train": [_row("a_q", "a", "?"), _row("b_q", "b", "?"), _row("c_q", "c", "?"), _row("d_q", "d", "?"),
                    _row("e_q", "e", "?"), _row("z_q", "z", "?")]}
    trims = {"a": bad, "b": 12.5, "c": [3.25, 63.25], "d": "7.5-67.5", "e": 0.0}
    raw = _siq2_layout(tmp_path, qa, trims)
    (raw / "siq2" / "transcript").mkdir()
    (raw / "siq2" / "transcript" / "a.vtt").write_text("")  # the failed video's: not listed again as an orphan
    notes: list[ManifestNote] = []
    items, got = read_siq2(raw, notes=notes)
    assert {i.id: (i.clip_start_s, i.clip_end_s) for i in items} == {
        "b": (12.5, 72.5), "c": (3.25, 63.25), "d": (7.5, 67.5), "e": (0.0, 60.0), "z": (0.0, None)}
    assert len(got) == 6  # the failed video's questions are kept
    failed = [n for n in notes if n.kind == "failed"]
    assert [(n.id, n.file) for n in failed] == [("a", str(raw / "siq2" / "trims.json"))]
    assert not [n for n in notes if n.kind == "dropped"]
    assert repr(bad) in failed[0].detail
    reasons = {n.id: n.reason for n in notes if n.kind == "note"}
    assert reasons["e"].startswith("trim is 0") and reasons["z"].startswith("no trim entry and no video")


def test_siq2_unusable_ids_are_listed_not_lost(tmp_path: Path) -> None:
    qa = {"train": [_row("ok_q", "ok", "?"), _row("sp_q", "a b", "?")]}
    notes: list[ManifestNote] = []
    raw = _siq2_layout(tmp_path, qa, {"ok": 1.0}, videos=("ok.mp4", "a b.mp4", "é.mp4", "zarr.json.mp4", "ok.webm"))
    (raw / "siq2" / "transcript").mkdir()
    (raw / "siq2" / "audio" / "wav").mkdir(parents=True)
    for name in ("transcript/ok.vtt", "transcript/a b.vtt", "transcript/gone.vtt", "audio/wav/gone.wav"):
        (raw / "siq2" / name).write_text("")
    (raw / "siq2" / "qa" / "qa_extra.json").write_text(json.dumps(_row("ok_x", "ok", "?")) + "\n")
    items, got = read_siq2(raw, notes=notes)
    assert [i.id for i in items] == ["ok"] and [(q.qid, q.split) for q in got] == [("ok_x", "unknown"), ("ok_q", "train")]
    dropped = {(n.what, n.id, n.reason) for n in notes if n.kind == "dropped"}
    orphan = "no item of that id (no usable video or question)"
    assert dropped == {("video", "a b", "unusable id"), ("video", "é", "unusable id"),
                       ("video", "zarr.json", "unusable id"), ("video", "ok.webm", "not an .mp4 file"),
                       ("question", "sp_q", "malformed question"), ("transcript", "a b", orphan),
                       ("transcript", "gone", orphan), ("audio", "gone", orphan)}
    assert [n.id for n in notes if n.kind == "note"] == ["qa_extra.json"]  # its questions: split "unknown"
    assert all(n.file for n in notes)


def test_siq1_unusable_id_is_dropped_and_listed(tmp_path: Path) -> None:
    (tmp_path / "qa").mkdir()
    (tmp_path / "qa" / "ok_trimmed.txt").write_text("q0: Why?\na: yes\ni: no\n")
    (tmp_path / "qa" / "a b_trimmed.txt").write_text("q0: Why?\na: yes\ni: no\n")
    notes: list[ManifestNote] = []
    items, qa = read_siq1(tmp_path, notes=notes)
    assert [i.id for i in items] == ["ok"] and [q.item_id for q in qa] == ["ok"]
    assert [(n.kind, n.id, n.reason) for n in notes] == [("dropped", "a b", "unusable id")]


def test_socialiqa_detected_one_folder_down(tmp_path: Path) -> None:
    from manifests.socialiqa import write_sample_socialiqa
    from pipeline.sources import detect_layout

    write_sample_socialiqa(tmp_path / "socialiqa-train-dev", n=2)  # as the release zip unpacks
    assert detect_layout(tmp_path) == "socialiqa"
