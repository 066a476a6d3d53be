"""What frame and audio decoding share: opening a media file, errors that name it, and the clip's timeline.

The timeline (docs/design.md, "Time conventions"): clip time 0 is the container's start, moved up to the
first video stream's start when that lies within `STREAM_OFFSET_MIN_S` after it. Every stream is then placed
by its own timestamps on that one timeline, so audio and pictures that the container says play together land
at the same clip time: AAC priming or MP3 encoder delay that Matroska, MPEG-TS and FLV keep before the
picture's start (where mp4 cuts it with an edit list) falls before 0 and is cut; a stream that starts later
than that keeps its place (frames stamped later, silence in front of audio).

A clip cut out of a whole file (pipeline/cut.py) has its own timeline on top of this one: `check_span` and
`cut_frame_times` live here because the frame decoder applies them before choosing frames.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

STREAM_OFFSET_MIN_S = 0.05  # a video stream this close after the container's start starts the clip's timeline
END_TOLERANCE_S = 0.1  # a cut clip's end this far past its file's end is clipped to it, not an error


class InputError(ValueError):
    """A problem with one input file; the message names the file and the problem."""


def existing(path: Path | str | None, what: str) -> Path:
    if path is None:
        raise InputError(f"no {what} file in the manifest")
    path = Path(path)  # callers outside the pipeline pass a str (decode_frames("clip.mp4"))
    if not path.exists():
        raise InputError(f"{path}: {what} file does not exist")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: {what} file is empty")
    return path


def first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def open_media(path: Path) -> Any:
    import av

    try:
        return av.open(str(path))
    except (av.FFmpegError, OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open: {first_line(e)}") from e


def video_streams(container: Any) -> list[Any]:
    """The container's video streams that are moving pictures (not cover art)."""
    import av

    return [s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic]


def origin_s(container: Any) -> float:
    """The container time (seconds) that is clip time 0 (see the module docstring); 0 when unknown."""
    import av

    start = container.start_time / av.time_base if container.start_time is not None else 0.0
    videos = video_streams(container)
    if videos and videos[0].start_time is not None:
        video_start = float(videos[0].start_time * videos[0].time_base)
        if 0 < video_start - start <= STREAM_OFFSET_MIN_S:
            return video_start
    return start


def container_end_s(container: Any) -> float | None:
    """The container's own end (its start plus its duration), container seconds; None when it has no start
    (raw ADTS: a duration guessed from the bit rate) or no duration."""
    import av

    if container.start_time is None or not container.duration or container.duration <= 0:
        return None
    return (container.start_time + container.duration) / av.time_base


def declared_end_s(container: Any) -> float | None:
    """Where the container says the media ends, in container seconds: the later of its duration (its header's,
    or for formats without one (MPEG-TS) lavf's estimate from the last timestamps of every stream) and the
    first video stream's frame count at its frame rate (AVI's header, mp4's sample table: what a truncated file
    still declares). None when it says nothing, or has no start (raw ADTS: a duration guessed from the bit rate)."""
    if container.start_time is None:
        return None
    ends = [e for e in (container_end_s(container),) if e is not None]
    videos = video_streams(container)
    if videos and videos[0].frames and videos[0].average_rate and videos[0].start_time is not None:
        v = videos[0]
        ends.append(float(v.start_time * v.time_base) + v.frames / float(v.average_rate))
    return max(ends) if ends else None


def check_span(start_s: float, end_s: float | None, duration_s: float, path: Path | None, what: str) -> float:
    """The clip's duration, or InputError when [start_s, end_s) does not lie in the file's [0, duration_s)."""
    if start_s >= duration_s or (end_s is not None and end_s > duration_s + END_TOLERANCE_S):
        end = f"{end_s:g}" if end_s is not None else "end"
        raise InputError(f"{path}: clip [{start_s:g}, {end}) s lies outside the "
                         f"{what} (duration {duration_s:.3f} s)")
    end = duration_s if end_s is None else min(end_s, duration_s)
    return end - start_s


def cut_frame_times(starts_s: np.ndarray, duration_s: float, start_s: float, end_s: float | None,
                    path: Path | None) -> tuple[np.ndarray, np.ndarray, float]:
    """(which frames lie in the clip (bool mask), their start times on the clip's timeline, the clip's duration).

    A frame belongs to the clip when it starts in [start_s, end_s); row intervals and the frame choice then work
    on the clip's timeline exactly as for a pre-cut file."""
    clip_s = check_span(start_s, end_s, duration_s, path, "video")
    shifted = np.asarray(starts_s, np.float64) - start_s
    # whole microseconds, as pick_frames compares: float noise never moves a frame across the clip's edges
    us = np.round(shifted * 1e6)
    keep = (us >= 0) & (us < round(clip_s * 1e6))
    if not keep.any():
        raise InputError(f"{path}: no video frame starts inside the clip [{start_s:g}, {start_s + clip_s:g}) s")
    return keep, shifted[keep], clip_s
