"""What the run knows of a decoded input without the input itself: the pixels or samples stay in Ray's object store
for the model actors, and this small record is what the driver fetches to batch them, bound the data in flight and
describe the stored item. One type for both decoders: a decode task's (the CPU path, or a plan for the model actors'
device decoder: media/nvdec.py) and a model actor's own decode of that plan."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from media import nvdec


@dataclass(frozen=True)
class Decoded:
    """One decoded input of an item (or one segment of a long video's frames)."""

    kind: str  # the input kind (media/kinds)
    units: int  # its batching count: frames count one per frame, every other input one
    bytes: int  # the bytes of its arrays: what batches and in-flight data are bounded by
    seconds: float = 0.0  # the decode's wall time (segments: their sum)
    duration_s: float | None = None
    # damaged data: [start_s, end_s) spans with no rows, rounded to the microsecond (segments: every segment's)
    missing_s: tuple[tuple[float, float], ...] = ()
    streams_end_s: float | None = None  # a shorter stream: the file's other streams end here (not damage)
    stream_start_s: float | None = None  # a late start: its own first picture or sample (not damage)
    streams: dict[str, Any] | None = None  # one of several streams of its kind: which, and the others
    segments: int = 1  # the segments a long video's frames are decoded in (the first segment's record says)
    on_device: bool = False  # a plan: the model actors decode its frames on their device (media/nvdec.py)
    decoder: str | None = None  # what decoded its frames, where known (nvdec.CPU, NVDEC, TORCHCODEC_CPU)
    cpu_reason: str | None = None  # why the CPU path decoded frames meant for the device decoder

    @classmethod
    def of(cls, kind: str, value: Any, seconds: float = 0.0, **facts: Any) -> Decoded:
        """The record of `value`, a decoded input (extractors/base.py's input types) or a `nvdec.FramesPlan`;
        `facts`: what the decoder knows beyond the value (segments, on_device, decoder, cpu_reason)."""
        end, start = getattr(value, "streams_end_s", None), getattr(value, "stream_start_s", None)
        missing = getattr(value, "missing_s", ())
        spans = np.round(missing, 6).tolist() if len(missing) else []
        return cls(kind, units(value), nbytes(value), seconds, getattr(value, "duration_s", None),
                   tuple((a, b) for a, b in spans),
                   None if end is None else round(float(end), 6), None if start is None else round(float(start), 6),
                   getattr(value, "streams", None), **facts)

    def then(self, later: Decoded) -> Decoded:
        """This first segment's record with a later segment's decode time and damaged spans added: the item's."""
        return dataclasses.replace(self, seconds=self.seconds + later.seconds, missing_s=self.missing_s + later.missing_s)


def units(value: Any) -> int:
    """A batching weight: frames count one per frame, everything else one per item."""
    if isinstance(value, nvdec.FramesPlan):
        return value.n_frames
    pixels = getattr(value, "pixels", None)
    return len(pixels) if pixels is not None else 1


def nbytes(value: Any) -> int:
    """The bytes of a decoded input's arrays (pixels, samples): what batches and in-flight data are bounded
    by. Texts count as nothing: they are tiny next to any frame or second of audio. A plan counts the pixels it
    will be decoded to (on the model actor's device, where the actor's cache holds them)."""
    if isinstance(value, nvdec.FramesPlan):
        return value.pixel_bytes
    fields = getattr(value, "__dataclass_fields__", {})
    return sum(int(v.nbytes) for v in (getattr(value, f) for f in fields) if isinstance(v, np.ndarray))
