"""Transcript: the item's WebVTT or SRT captions as words with their own times (media/captions.py), on the
clip's timeline; counted in words.

A clip cut from a longer video takes the words of its span, re-timed to its start. An item that is its whole
file may carry a Social-IQ 2.0 trim (`clip_start_s`): its caption file was written by that dataset's download
script with a misparsed trim, which the parser corrects, and words after the clip's nominal length are dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extractors.base import Words
from manifests.records import MediaItem, QAItem
from media.captions import parse_captions
from media.container import existing
from media.kinds.base import Kind, Span, Tracks, recording_identity


class Transcript(Kind):
    name = "transcript"
    unit = "words"

    def source(self, item: MediaItem) -> Path | None:
        return item.transcript

    def identity(self, item: MediaItem, questions: list[QAItem], audio_rate_hz: int,
                 tracks: Tracks | None = None) -> dict[str, Any]:
        return {**recording_identity(self.span(item)), "clip": [item.clip_start_s, item.clip_end_s]}

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Words:
        path = existing(span.recording, "transcript")
        start, end = span.clip or (item.clip_start_s, item.clip_end_s)
        duration = end - start if end is not None else None
        if span.clip is not None:
            return parse_captions(path, clip_start_s=start, clip_duration_s=duration)
        return parse_captions(path, clip_duration_s=duration, trim_s=start or None)


TRANSCRIPT = Transcript()
