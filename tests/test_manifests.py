import json
import logging
from pathlib import Path

import pytest

from manifests.records import MediaItem, QAItem, read_jsonl, write_jsonl
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
