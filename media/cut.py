"""Clips cut out of a whole video (TinySocial): `MediaItem.cut_from_source` with [clip_start_s, clip_end_s), which
an input kind's `span` (media/kinds/) passes to its decoder like any other span.

Frames, audio and captions are all cut to [start_s, end_s) of the file's timeline and re-timed so that 0 is
the clip's start; the result is what decoding the same content pre-cut (`ffmpeg -ss start_s -i in -t
duration`) gives: the same 1 fps grid [k, k+1) on the clip's timeline, the frame nearest each row's middle
chosen among the frames shown in the clip (start in [start_s, end_s)), the audio samples from
round(start_s * rate) on (`cut_audio`, here), the words re-timed and those wholly outside the clip dropped
(media/captions.py `clip_start_s`). Frames are cut by media/decode.py (`clip`), choosing among the file's
frames only those shown in the clip.

A clip that starts at or after the end of the video, or ends more than `END_TOLERANCE_S` after it, is an
error of that item naming the file and both times; an end within the tolerance is clipped to the video's end
(a clip list's end rounded up to the second must not fail a whole clip). The video's end is the container's
when the file is truncated (media/decode.py): a clip inside it whose frames do not all decode keeps its
rows up to the last frame, the rest listed in `missing_s`.

Imports go one way: this module uses media/container.py; the input kinds (media/kinds/audio.py) use it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from extractors.base import Audio
from media.container import END_TOLERANCE_S, InputError, check_span, cut_frame_times

__all__ = ["END_TOLERANCE_S", "InputError", "check_span", "cut_frame_times", "cut_audio"]


def cut_audio(audio: Audio, start_s: float, end_s: float | None, path: Path | None) -> Audio:
    """Samples [round(start_s * rate), round(end_s * rate)) of the whole track, re-timed to the clip."""
    clip_s = check_span(start_s, end_s, audio.duration_s, path, "audio")
    rate = audio.sample_rate_hz
    lo = round(start_s * rate)
    hi = min(audio.samples.size, lo + round(clip_s * rate))
    samples = np.ascontiguousarray(audio.samples[lo:hi])
    changes: dict[str, object] = {"samples": samples, "duration_s": samples.size / rate}
    missing = getattr(audio, "missing_s", None)  # seconds the decoder could not decode, when it says
    if missing is not None:
        m = np.clip(np.asarray(missing, np.float64).reshape(-1, 2) - start_s, 0.0, clip_s)
        changes["missing_s"] = m[m[:, 1] > m[:, 0]]
    if getattr(audio, "streams_end_s", None) is not None:  # a clip's own end is its cut's, not the file's
        changes["streams_end_s"] = None
    return dataclasses.replace(audio, **changes)
