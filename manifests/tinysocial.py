"""TinySocial (Characterizing Datasets for Social Visual Question Answering, and the New TinySocial Dataset)
-> MediaItem / QAItem records. Nothing here opens media.

The release gives YouTube links and multiple-choice questions; its file format is not public, so this is our
layout, in the spirit of the release and of Social-IQ 2.0 (the same QA code serves both). Under RAW:

    clips.csv                   clip_id,subset,source,start_s,end_s[,video]
    video/<clip_id>.mp4         or the `video` column: a path relative to RAW (several clips may share one file)
    qa/qa_<subset>.jsonl        {"qid", "vid_name", "q", "a0", "a1", "a2", "a3", "answer_idx"} (answer_idx may be
                                absent: unlabelled)
    transcript/<clip_id>.vtt    optional (WebVTT or SRT), on the video file's timeline

`subset` is crowd or inhouse (TinySocial-Crowd / -InHouse); `source` is the YouTube id or URL (kept for
provenance only). `start_s`/`end_s` say where the clip lies inside the video file: frames, audio and the
transcript are cut to [start_s, end_s) and re-timed so 0 is the clip's start. Leave both empty when the file
already is the clip. A malformed row (clips.csv or a QA line) is logged with file:line and skipped alone.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from manifests.layouts import Layout, Sample, register_layout, register_sample
from manifests.records import ManifestNote, MediaItem, QAItem, check_id, note_dropped, qa_file_rows
from objectio import as_path

log = logging.getLogger(__name__)

DATASET = "tinysocial"
CLIP_COLUMNS = ("clip_id", "subset", "source", "start_s", "end_s")
N_ANSWERS = 4


class ClipRow(BaseModel):
    """One line of clips.csv, validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    clip_id: str
    subset: Literal["crowd", "inhouse"]
    source: str = Field(min_length=1)
    start_s: float | None = Field(None, ge=0)
    end_s: float | None = None
    video: str | None = None

    _check = field_validator("clip_id")(check_id)

    @field_validator("start_s", "end_s", "video", mode="before")
    @classmethod
    def _empty(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _times(self) -> ClipRow:
        if (self.start_s is None) != (self.end_s is None):
            raise ValueError("give both start_s and end_s, or neither (the file is the clip)")
        if self.start_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s {self.end_s} is not after start_s {self.start_s}")
        return self


class QARow(BaseModel):
    """One line of qa/qa_<subset>.jsonl, validated (other keys are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    qid: str
    vid_name: str
    q: str
    a0: str
    a1: str
    a2: str
    a3: str
    answer_idx: int | None = Field(None, ge=0, lt=N_ANSWERS)

    _check = field_validator("qid", "vid_name")(check_id)


def _why(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'row'}: {err['msg']}" for err in e.errors())
    return str(e)


def read_clips(path: Path, notes: list[ManifestNote] | None = None) -> list[ClipRow]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        missing = [c for c in CLIP_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}:1: header lacks columns {missing} (has {reader.fieldnames})")
        rows: list[ClipRow] = []
        seen: set[str] = set()
        for row in reader:
            where, name = f"{path}:{reader.line_num}", str(row.get("clip_id") or f"line {reader.line_num}")
            if None in row or any(row[c] is None for c in CLIP_COLUMNS):  # the optional `video` may be left off
                note_dropped(notes, "clip", name, where, "wrong number of fields")
                continue
            try:
                clip = ClipRow.model_validate({k: v.strip() for k, v in row.items() if v is not None})
            except ValidationError as e:
                note_dropped(notes, "clip", name, where, "malformed row", _why(e))
                continue
            if clip.clip_id in seen:
                note_dropped(notes, "clip", name, where, "clip_id already listed")
                continue
            seen.add(clip.clip_id)
            rows.append(clip)
    return rows


def read_qa(qa_dir: Path, clips: dict[str, ClipRow], dataset: str = DATASET,
            notes: list[ManifestNote] | None = None) -> list[QAItem]:
    out: list[QAItem] = []
    seen: set[str] = set()
    for path in sorted(qa_dir.glob("qa_*.jsonl")):
        found = qa_file_rows(path, notes)  # JSON Lines, or an array/object of questions (manifests/jsonfile.py)
        for r in found or ():
            where = r.where
            try:
                row = QARow.model_validate(r.parsed())
            except (json.JSONDecodeError, ValidationError) as e:
                note_dropped(notes, "question", r.label, where, "malformed question", _why(e))
                continue
            if row.vid_name not in clips:
                note_dropped(notes, "question", row.qid, where, "its clip is not in clips.csv", row.vid_name)
                continue
            if row.qid in seen:
                note_dropped(notes, "question", row.qid, where, "qid already used")
                continue
            seen.add(row.qid)
            answers = (row.a0, row.a1, row.a2, row.a3)
            correct = tuple(i == row.answer_idx for i in range(N_ANSWERS)) if row.answer_idx is not None else ()
            out.append(QAItem(qid=row.qid, item_id=row.vid_name, dataset=dataset, question=row.q, answers=answers,
                              correct=correct))
    return out


def read_tinysocial(raw: Path, dataset: str = DATASET,
                    notes: list[ManifestNote] | None = None) -> tuple[list[MediaItem], list[QAItem]]:
    """Items and questions; what was skipped is logged and, when `notes` is given, noted there (run report)."""
    raw = as_path(raw)  # a folder, or a bucket prefix (--raw s3://...)
    clips_csv = raw / "clips.csv"
    if not clips_csv.is_file():
        raise FileNotFoundError(f"{raw}: no TinySocial layout (expected clips.csv, video/, qa/qa_<subset>.jsonl)")
    clips = {c.clip_id: c for c in read_clips(clips_csv, notes)}
    items = []
    for c in clips.values():
        transcript = raw / "transcript" / f"{c.clip_id}.vtt"
        items.append(MediaItem(
            id=c.clip_id, dataset=dataset, subset=c.subset, video=raw / (c.video or f"video/{c.clip_id}.mp4"),
            transcript=transcript if transcript.is_file() else None,
            clip_start_s=c.start_s or 0.0, clip_end_s=c.end_s, cut_from_source=c.start_s is not None,
        ))
    return items, read_qa(raw / "qa", clips, dataset, notes)


# ---- the offline sample: two generated videos (barcoded frames, espeak-ng speech, WebVTT; see sample.py) ----

def _sample_specs():
    from manifests.sample import ClipSpec

    return (  # a 7 s "downloaded source video" holding the crowd clip [2.5, 5.5); a 3 s file that is its own clip
        ClipSpec("ts-source-a", "30", 320, 240, 7, (2, 3, 4),
                 ((0.4, "Hello, nice to see you."), (3.0, "I am not so sure about that.")), "unknown"),
        ClipSpec("ts-inhouse-01", "25", 320, 180, 3, (), ((0.5, "See you later, then."),), "unknown"),
    )


SAMPLE_CLIPS = (  # clip_id, subset, source, start_s, end_s, video
    ("ts-crowd-01", "crowd", "https://www.youtube.com/watch?v=aaaaaaaaaaa", "2.5", "5.5", "video/ts-source-a.mp4"),
    ("ts-inhouse-01", "inhouse", "bbbbbbbbbbb", "", "", ""),
)
SAMPLE_QA = {
    "crowd": [("ts-crowd-01-q0", "How does the speaker feel about the plan?",
               ("Doubtful.", "Delighted.", "Asleep.", "Furious."), 0),
              ("ts-crowd-01-q1", "Is anyone shown on screen?", ("Nobody.", "A cat.", "A person.", "A crowd."), 2)],
    "inhouse": [("ts-inhouse-01-q0", "Are they saying goodbye?", ("No.", "Yes.", "They sing.", "They argue."), 1),
                ("ts-inhouse-01-q1", "What happens next?", ("They leave.", "They dance.", "It rains.", "Nothing."), None)],
}


def write_sample_tinysocial(dest: Path) -> Path:
    """The TinySocial layout with two generated videos: a cut clip (whole source + start/end) and a pre-cut one,
    four questions (one unlabelled), transcripts on each video file's timeline. Returns `dest`."""
    import shutil
    import tempfile

    from manifests.sample import _make_clip

    dest = Path(dest)
    for sub in ("video", "audio/wav", "transcript", "qa"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        truth = {spec.vid: _make_clip(spec, dest, Path(tmp)) for spec in _sample_specs()}
    shutil.rmtree(dest / "audio")  # the videos carry their audio; TinySocial has no separate audio files
    (dest / "transcript" / "ts-source-a.vtt").rename(dest / "transcript" / "ts-crowd-01.vtt")
    lines = ["clip_id,subset,source,start_s,end_s,video"] + [",".join(row) for row in SAMPLE_CLIPS]
    (dest / "clips.csv").write_text("\n".join(lines) + "\n")
    for subset, questions in SAMPLE_QA.items():
        rows = []
        for qid, q, answers, idx in questions:
            row = {"qid": qid, "vid_name": qid.rsplit("-q", 1)[0], "q": q, **{f"a{i}": a for i, a in enumerate(answers)}}
            rows.append(json.dumps(row if idx is None else {**row, "answer_idx": idx}))
        (dest / "qa" / f"qa_{subset}.jsonl").write_text("\n".join(rows) + "\n")
    (dest / "sample_truth.json").write_text(json.dumps(truth, indent=1))
    return dest


# checked first: its qa/ and video/ look like Social-IQ 2.0's, its clips.csv is its own
register_layout(Layout(
    "tinysocial", "TinySocial", "clips.csv, video/, qa/qa_<subset>.jsonl",
    detect=lambda raw: (raw / "clips.csv").is_file(),
    read=lambda raw, dataset, config, notes: read_tinysocial(raw, dataset=dataset, notes=notes),
    media_dir=lambda raw: raw / "video", detect_first=10))
register_sample(Sample("sample-tinysocial", "tinysocial", write_sample_tinysocial))
