"""A still image (Socratis) as the "frames" kind of its item: one picture, one row at the instant 0
(media/inputs.py `decode_image`), turned upright by its EXIF orientation; counted as one frame."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extractors.base import Still
from manifests.records import MediaItem, QAItem
from media import inputs, picture
from media.kinds.base import Kind, Span, Tracks, recording_identity


class StillImage(Kind):
    name = "frames"
    unit = "frames"
    batch_unit = "frames"

    def source(self, item: MediaItem) -> Path | None:
        return item.image

    def identity(self, item: MediaItem, questions: list[QAItem], audio_rate_hz: int,
                 tracks: Tracks | None = None) -> dict[str, Any]:
        return {**recording_identity(self.span(item)), "decode": f"image-{inputs.IMAGE_DECODE_VERSION}",
                "picture": picture.PICTURE_VERSION}

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Still:
        return inputs.decode_image(span.recording)


STILL = StillImage()
