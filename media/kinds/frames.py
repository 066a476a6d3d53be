"""Frames: one picture per second of an item's video (media/decode.py; on the clip's own timeline when the item
is cut from a longer video), counted in frames and decoded in segments when a video's pixels pass `batch_bytes`.
An item with a still image instead of a video has its one picture (media/kinds/still.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extractors.base import Frames
from manifests.records import MediaItem, QAItem
from media import decode, picture
from media.kinds.base import Kind, Span, Tracks, cut_identity, recording_identity, stream_identity
from media.kinds.still import STILL


class VideoFrames(Kind):
    name = "frames"
    unit = "frames"
    batch_unit = "frames"
    item_units = 60
    segmented = True
    stream = "video"

    def of(self, item: MediaItem) -> Kind:
        return STILL if item.image is not None else self

    def source(self, item: MediaItem) -> Path | None:
        return item.video

    def identity(self, item: MediaItem, questions: list[QAItem], audio_rate_hz: int,
                 tracks: Tracks | None = None) -> dict[str, Any]:
        span = self.span(item, tracks)
        # the pictures as displayed and their record (media/picture.py)
        return {**recording_identity(span), "decode": decode.DECODE_VERSION, "picture": picture.PICTURE_VERSION,
                **cut_identity(span), **stream_identity(span, "video")}

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Frames:
        return decode.decode_frames(span.recording, span.clip, span.track)

    def decode_segment(self, span: Span, segment: int, segment_bytes: int | None) -> tuple[Frames, int]:
        return decode.decode_frames_segment(span.recording, span.clip, segment, segment_bytes, track=span.track)


FRAMES = VideoFrames()
