"""TinySocial: the layout's manifest (validated rows, malformed rows skipped with file:line)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from manifests.tinysocial import read_tinysocial
from pipeline.sources import detect_layout

CSV = """clip_id,subset,source,start_s,end_s,video
c1,crowd,https://youtu.be/x,2.5,5.5,video/src.mp4
c2, inhouse ,yyyyyyyyyyy,,,
bad id,crowd,z,0,1,
c3,neither,z,0,1,
c4,crowd,z,4,3,
c5,crowd,z,1,,
c1,crowd,z,0,1,
c6,crowd,z,0,1,video/c6.mkv,extra
c7,crowd,z,0.0,10
"""


def _qa(**kw) -> str:
    row = {"qid": "q", "vid_name": "c1", "q": "Why?", "a0": "A", "a1": "B", "a2": "C", "a3": "D", "answer_idx": 2}
    row.update(kw)
    return json.dumps({k: v for k, v in row.items() if v is not None})


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    (tmp_path / "qa").mkdir()
    (tmp_path / "transcript").mkdir()
    (tmp_path / "video").mkdir()
    (tmp_path / "clips.csv").write_text(CSV)
    (tmp_path / "transcript" / "c2.vtt").write_text("WEBVTT\n")
    (tmp_path / "qa" / "qa_crowd.jsonl").write_text("\n".join([
        _qa(qid="q1"), _qa(qid="q2", answer_idx=None), _qa(qid="q3", vid_name="nope"), "{not json",
        _qa(qid="q4", answer_idx=4), _qa(qid="q1", q="again"), _qa(qid="q5", a3=None), "",
    ]) + "\n")
    (tmp_path / "qa" / "qa_inhouse.jsonl").write_text(_qa(qid="q6", vid_name="c2", answer_idx=0) + "\n")
    return tmp_path


def test_rows_become_items_and_bad_rows_are_skipped_with_file_and_line(raw: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        items, qa = read_tinysocial(raw)
    assert detect_layout(raw) == "tinysocial"  # before Social-IQ's rules: it has qa/ and video/ too
    by_id = {i.id: i for i in items}
    assert list(by_id) == ["c1", "c2", "c7"]
    c1, c2 = by_id["c1"], by_id["c2"]
    assert (c1.video, c1.clip_start_s, c1.clip_end_s, c1.cut_from_source) == (raw / "video/src.mp4", 2.5, 5.5, True)
    assert (c2.video, c2.clip_start_s, c2.clip_end_s, c2.cut_from_source) == (raw / "video/c2.mp4", 0.0, None, False)
    assert c1.subset == "crowd" and c2.subset == "inhouse" and c1.transcript is None
    assert c2.transcript == raw / "transcript/c2.vtt"
    warned = {r.getMessage().split(": ")[0] for r in caplog.records}
    clips = raw / "clips.csv"
    assert warned >= {f"{clips}:{n}" for n in (4, 5, 6, 7, 8, 9)}
    assert [q.qid for q in qa] == ["q1", "q2", "q6"]
    assert qa[0].correct == (False, False, True, False) and qa[1].correct == ()
    assert qa[0].answers == ("A", "B", "C", "D") and qa[2].item_id == "c2"
    crowd = raw / "qa" / "qa_crowd.jsonl"
    assert warned >= {f"{crowd}:{n}" for n in (3, 4, 5, 6, 7)}
    notes: list = []
    read_tinysocial(raw, notes=notes)  # the same, noted for the run report
    assert {(n.kind, n.file) for n in notes} == {("dropped", w) for w in warned}
    assert len(notes) == 11 and {n.what for n in notes} == {"clip", "question"}


def test_header_without_the_columns_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "clips.csv").write_text("id,subset\nc1,crowd\n")
    with pytest.raises(ValueError, match=r"clips\.csv:1: header lacks columns \['clip_id', 'source'"):
        read_tinysocial(tmp_path)
