"""Input kinds: what an extractor's `input_kind` names, one module each, found through `KINDS`.

| kind | module | source (the file read) | decoded to | unit |
|---|---|---|---|---|
| frames | frames.py (still.py for an image item) | the video (the image) | `Frames` (`Still`) | frames |
| audio | audio.py | the audio file, else the video's track | `Audio` | audio_s |
| transcript | transcript.py | the WebVTT/SRT file | `Words` | words |
| qa | qa.py | none: the manifest's questions | `QAText` | questions |
| caption, reactions | texts.py | the annotations file (the item's own texts) | `Texts` | texts |

Each kind has its `source`, its `identity` for the fingerprint, its `decode` given a `Span` (the recording and
the part of it the item is: a clip cut from a longer video is a span like any other, so no caller tells it
apart) and its `unit`. A new kind is a module here and a line in `KINDS`. What the run knows of a decoded input
without the input itself (its size, duration, damaged spans, decoder) is a `Decoded` (decoded.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from manifests.records import MediaItem, QAItem
from media.kinds.audio import AUDIO
from media.kinds.base import Kind, Span, Tracks
from media.kinds.decoded import Decoded
from media.kinds.frames import FRAMES
from media.kinds.qa import QA
from media.kinds.still import STILL
from media.kinds.texts import CAPTION, REACTIONS
from media.kinds.transcript import TRANSCRIPT

__all__ = ["KINDS", "STILL", "Decoded", "Kind", "Span", "applicable", "decode", "identity", "of", "source"]

KINDS: dict[str, Kind] = {k.name: k for k in (FRAMES, AUDIO, TRANSCRIPT, QA, CAPTION, REACTIONS)}


def of(name: str, item: MediaItem) -> Kind:
    """The input kind `name` as `item` has it."""
    if name not in KINDS:
        raise ValueError(f"unknown input kind {name!r}; known: {sorted(KINDS)}")
    return KINDS[name].of(item)


def source(item: MediaItem, name: str) -> Path | None:
    """The file the item's input of kind `name` is decoded from (None for QA text, which lives in the manifest)."""
    return of(name, item).source(item)


def applicable(item: MediaItem, name: str, questions: list[QAItem]) -> bool:
    return of(name, item).applicable(item, questions)


def identity(item: MediaItem, name: str, questions: list[QAItem], audio_rate_hz: int,
             tracks: Tracks | None = None) -> dict[str, Any]:
    """The declared identity of what the input is decoded from: it enters the fingerprint."""
    return of(name, item).identity(item, questions, audio_rate_hz, tracks)


def decode(item: MediaItem, name: str, questions: list[QAItem] | None = None, audio_rate_hz: int = 16000,
           tracks: Tracks | None = None) -> Any:
    """The item's whole input of kind `name`, decoded from its span (of the streams `tracks` chooses)."""
    kind = of(name, item)
    return kind.decode(item, kind.span(item, tracks), questions or [], audio_rate_hz)
