"""Manifest records: the contract between steps. Validated on creation; JSONL on disk."""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    InstanceOf,
    PlainSerializer,
    TypeAdapter,
    field_validator,
    model_validator,
)

from atomicio import atomic_path
from manifests.jsonfile import QAFileError, Row, json_rows
from objectio import ObjectPath, is_url

Split = Literal["train", "val", "test", "unknown"]
# The releases' own names for the splits -> the stored split (SocialIQA's "dev" and Social-IQ 1.0's "valid" are "val")
SPLIT_NAMES: dict[str, Split] = {"train": "train", "val": "val", "valid": "val", "validation": "val", "dev": "val",
                                 "test": "test", "unknown": "unknown"}
_ID_OK = re.compile(r"^[A-Za-z0-9_.\-]+$")
log = logging.getLogger(__name__)


def check_id(value: str) -> str:
    """Item ids become store group names: no separators, no '..', nothing zarr reserves."""
    if not value or not _ID_OK.match(value) or value.startswith(("__", ".")) or ".." in value or value == "zarr.json":
        raise ValueError(f"invalid id {value!r}: use letters, digits, '_', '-', '.' "
                         "(no '..', no leading '.' or '__', not 'zarr.json')")
    return value


def _object_url(value: Any) -> Any:
    """An s3:// (gs://, az://) URL read back from a manifest is the object, never a Path (which folds its //)."""
    if isinstance(value, str) and is_url(value):
        bucket, _, key = value.partition("://")[2].partition("/")
        return ObjectPath(value.partition("://")[0] + "://" + bucket, key)
    return value


# An input file: a local path, or an object in a bucket (--raw s3://...; objectio/paths.py); JSON has its text.
Source = Annotated[Path | InstanceOf[ObjectPath], BeforeValidator(_object_url), PlainSerializer(str, when_used="json")]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reaction(_Record):
    """One worker's reaction to a Socratis image-caption pair, as the file gives it: emotion word(s) and
    the reason(s). Kept as given (not paired up here): pairing, and the per-item error when the counts
    differ, happen when the item is decoded, so one bad entry fails only that item's reactions."""

    emotions: tuple[str, ...]
    reasons: tuple[str, ...]
    demographics: str | None = None  # anonymised, often missing; kept as found, JSON-encoded (hashable)


class MediaItem(_Record):
    """One clip, or one still image. Times are seconds; the clip's own timeline starts at 0."""

    id: str
    dataset: str
    split: Split = "unknown"
    subset: str | None = None  # the dataset's own grouping (Social-IQ 2.0: youtubeclips, movieclips, car)
    video: Source | None = None
    audio: Source | None = None  # a separate audio file; else the video's own track
    transcript: Source | None = None  # WebVTT or SRT
    clip_start_s: float = 0.0  # where the clip starts in its source video (Social-IQ 2.0 trims)
    clip_end_s: float | None = None
    # True (TinySocial): video, audio and transcript are the whole source; the pipeline cuts
    # [clip_start_s, clip_end_s) out of them and re-times it so 0 is the clip's start. False (Social-IQ 2.0):
    # the files already are the clip; clip_start_s only says where it came from.
    cut_from_source: bool = False
    image: Source | None = None  # a still image (Socratis): one row for frames and faces, interval [0, 0]
    caption: str | None = None  # the text shown with the image (Socratis)
    reactions: tuple[Reaction, ...] = ()  # Socratis: one per worker
    annotations: Source | None = None  # the file the caption and reactions come from (named in errors)

    _check = field_validator("id")(check_id)

    @model_validator(mode="after")
    def _times(self) -> MediaItem:
        if self.clip_start_s < 0 or (self.clip_end_s is not None and self.clip_end_s <= self.clip_start_s):
            raise ValueError(f"item {self.id}: bad clip times start={self.clip_start_s} end={self.clip_end_s}")
        if self.image is not None and (self.video is not None or self.audio is not None):
            raise ValueError(f"item {self.id}: a still image and a video/audio in one item")
        return self


class QAItem(_Record):
    """One question with its answers; `correct[i]` says whether `answers[i]` is right (empty: unlabelled)."""

    qid: str
    item_id: str  # the MediaItem (or text-only item) the question is about
    dataset: str
    split: Split = "unknown"
    question: str
    answers: tuple[str, ...]
    correct: tuple[bool, ...] = ()
    context: str | None = None  # text-only datasets (SocialIQA) carry their context here
    q_type: str | None = None
    ts: tuple[float, float] | None = None  # seconds of the clip the question is about, when given

    _check_q = field_validator("qid")(check_id)
    _check_i = field_validator("item_id")(check_id)

    @model_validator(mode="after")
    def _labels(self) -> QAItem:
        if not self.answers:
            raise ValueError(f"question {self.qid}: no answers")
        if self.correct and len(self.correct) != len(self.answers):
            raise ValueError(f"question {self.qid}: {len(self.answers)} answers but {len(self.correct)} labels")
        return self


class ManifestNote(_Record):
    """An input the manifest saw and did not take as it was, so that no run passes over it in silence.

    kind: "failed" (an item whose metadata is bad: no item made; it counts as a failure of the run),
    "dropped" (an input that could not become a record: an unusable id, a malformed line, a duplicate),
    "note" (made into a record, with a caveat the user should know: a zero trim, a renamed qid).
    `reason` is short and the same for every input of its kind (the summary groups by it); `detail`
    says what exactly happened to this input.
    """

    kind: Literal["failed", "dropped", "note"]
    what: str  # "video", "question", "trim", "split entry", ...
    id: str  # as found in the input (it may be an unusable id)
    file: str | None = None  # the file (with :line where it has lines) the input came from
    reason: str
    detail: str = ""


def note_empty_qa_file(notes: list[ManifestNote] | None, path: Path) -> None:
    """A QA file with no question in it (empty, blank lines, an empty array): read as it is, but never in silence
    (a file cut short on download reads so too)."""
    log.warning("%s: QA file holds no questions (%d bytes)", path, path.stat().st_size)
    if notes is not None:
        notes.append(ManifestNote(kind="note", what="QA file", id=path.name, file=str(path),
                                  reason="QA file holds no questions",
                                  detail=f"{path.stat().st_size} bytes"))


def qa_file_rows(path: Path, notes: list[ManifestNote] | None) -> list[Row] | None:
    """A question file's rows (any form `json_rows` reads); None when the whole file is unreadable: its questions
    are lost, which is logged and noted as a failed QA file (the run says so and fails). An empty file is noted."""
    try:
        found = json_rows(path)
    except QAFileError as e:
        log.warning("%s", e)
        if notes is not None:
            notes.append(ManifestNote(kind="failed", what="QA file", id=path.name, file=str(path),
                                      reason="unreadable QA file", detail=str(e).removeprefix(f"{path}: ")))
        return None
    if not found:
        note_empty_qa_file(notes, path)
    return found


def note_dropped(notes: list[ManifestNote] | None, what: str, id_: str, where: str | Path, reason: str,
                 detail: str = "") -> None:
    """Log an input a reader skips, with its file (and :line), and note it for the run report when `notes` is given."""
    log.warning("%s: skipping %s %s: %s%s", where, what, id_, reason, f": {detail}" if detail else "")
    if notes is not None:
        notes.append(ManifestNote(kind="dropped", what=what, id=id_, file=str(where), reason=reason, detail=detail))


R = TypeVar("R", bound=_Record)


def write_jsonl(path: Path, records: Iterable[_Record]) -> None:
    """One record a line, written whole (atomicio: durable, a manifest is the store's truth)."""
    with atomic_path(path) as tmp, tmp.open("w") as f:
        for r in records:
            f.write(r.model_dump_json() + "\n")


def read_jsonl_all(path: Path, kind: type[R]) -> list[R]:
    """Every record of a JSONL file, validated as `read_jsonl` does, in one pydantic call over the whole
    file (a third of the time of line by line: SocialIQA's 35k questions). A file that does not validate
    is read again line by line, so that the error names the line."""
    return parse_jsonl_all(path.read_bytes(), kind, path)


def parse_jsonl_all(data: bytes, kind: type[R], where: Path | str) -> list[R]:
    """`read_jsonl_all` of a file's bytes read already (from object storage); `where` names it in errors."""
    lines = [line for line in data.splitlines() if line.strip()]
    try:
        records = _list_adapter(kind).validate_json(b"[" + b",".join(lines) + b"]")
    except ValueError:
        records = None
    if records is None or len(records) != len(lines):  # a line holding two records: line by line says so
        return list(_parse_lines(data, kind, where))
    return records


@functools.cache
def _list_adapter(kind: type[R]) -> TypeAdapter[list[R]]:
    return TypeAdapter(list[kind])  # type: ignore[valid-type]


def read_jsonl(path: Path, kind: type[R]) -> Iterator[R]:
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield kind.model_validate(json.loads(line))
                except ValueError as e:
                    raise ValueError(f"{path}:{line_no}: {e}") from e


# control characters and Unicode line breaks, as Python escapes them: a file name or an error holding one must not
# split or rewrite a summary line (`DROPPED …`, `FAILED …` are read one line each, by people and by grep)
_UNPRINTABLE = {c: repr(chr(c))[1:-1] for c in (*range(32), 127, 0x85, 0x2028, 0x2029)}


def one_line(text: str) -> str:
    """`text` with every control character and line break escaped (`\\n`, `\\x1b`, `\\u2028`)."""
    return text.translate(_UNPRINTABLE)


def _parse_lines(data: bytes, kind: type[R], where: Path | str) -> Iterator[R]:
    """`read_jsonl` of bytes: each line validated alone, so that the error names the line."""
    for line_no, line in enumerate(data.decode().splitlines(), 1):
        if line.strip():
            try:
                yield kind.model_validate(json.loads(line))
            except ValueError as e:
                raise ValueError(f"{where}:{line_no}: {e}") from e
