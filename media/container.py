"""What frame and audio decoding share: opening a media file, errors that name it, and the clip's timeline.

The timeline (docs/design.md, "Time conventions"): clip time 0 is the container's start, moved up to the
video stream's start (`main_video`: the one ffmpeg shows) when that lies within `STREAM_OFFSET_MIN_S` after it.
Every stream is then placed by its own timestamps on that one timeline, so audio and pictures that the container
says play together land at the same clip time: AAC priming or MP3 encoder delay that Matroska, MPEG-TS and FLV
keep before the picture's start (where mp4 cuts it with an edit list) falls before 0 and is cut; a stream that
starts later than that keeps its place (frames stamped later, silence in front of audio).

A clip cut out of a whole file (media/cut.py) has its own timeline on top of this one: `check_span` and
`cut_frame_times` live here because the frame decoder applies them before choosing frames.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from manifests.limits import not_a_file
from objectio import ObjectPath, as_path

STREAM_OFFSET_MIN_S = 0.05  # a video stream this close after the container's start starts the clip's timeline
END_TOLERANCE_S = 0.1  # a cut clip's end this far past its file's end is clipped to it, not an error
TAIL_MIN_S = 0.5  # a stream ending this much before the container's declared end is truncated (docs/design.md)


class InputError(ValueError):
    """A problem with one input file; the message names the file and the problem."""


def existing(path: Path | str | None, what: str) -> Path:
    if path is None:
        raise InputError(f"no {what} file in the manifest")
    if isinstance(path, ObjectPath):  # in a bucket: decoded from the node's copy (objectio/cache.py)
        return _local_copy(path, what)
    path = Path(path)  # callers outside the pipeline pass a str (decode_frames("clip.mp4"))
    if not path.exists() and not path.is_symlink():
        raise InputError(f"{path}: {what} file does not exist")
    why = not_a_file(path)  # a FIFO, /dev/zero or a folder: never "empty", never read until memory runs out
    if why is not None:
        raise InputError(f"{path}: {what} file: {why}")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: {what} file is empty")
    return path


def _local_copy(path: ObjectPath, what: str) -> Path:
    """The object's copy on this node; a missing object, or storage that cannot be read, fails this pair alone,
    naming the URL."""
    from objectio.cache import local_copy

    try:
        if path.stat().st_size == 0:
            raise InputError(f"{path}: {what} file is empty")
        return local_copy(path)
    except (OSError, ValueError) as e:  # RawUnavailable is a ValueError: the message names the URL already
        raise InputError(str(e) if str(path) in str(e) else f"{path}: {what} file: {first_line(e)}") from e


def first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def open_media(path: Path) -> Any:
    import av

    try:
        return av.open(str(path))
    except (av.FFmpegError, OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open: {first_line(e)}") from e


def best_stream(streams: list[Any]) -> Any | None:
    """The stream ffmpeg picks among `streams` (all of one kind), as `av_find_best_stream` ranks them: the default
    disposition first (minus one for a hearing- or visually-impaired track), then the higher bit rate, then for
    video the larger picture and for audio more channels (where `av_find_best_stream` counts the frames its probe
    read, which PyAV does not say: the larger stream probes more), then the first. Audio without channels or a
    sample rate, and video without a picture size, are never picked (ffmpeg skips them too)."""
    import av

    flags = av.stream.Disposition

    def rank(s: Any) -> tuple[int, int, int, int]:
        d = s.disposition
        disposition = int(not d & (flags.hearing_impaired | flags.visual_impaired)) + int(bool(d & flags.default))
        cc = s.codec_context
        size = (cc.width or 0) * (cc.height or 0) if s.type == "video" else (cc.channels or 0)
        return disposition, int(cc.bit_rate or s.bit_rate or 0), size, -s.index

    def usable(s: Any) -> bool:
        cc = s.codec_context
        return bool(cc.width and cc.height) if s.type == "video" else bool(cc.sample_rate and cc.channels)

    return max((s for s in streams if usable(s)), key=rank, default=None)


def video_streams(container: Any) -> list[Any]:
    """The container's video streams that are moving pictures (not cover art)."""
    import av

    return [s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic]


Track = int | str | None  # which stream of a kind: None ffmpeg's choice, an int its index, a str its language


def choose_stream(container: Any, kind: str, path: Path, track: Track = None) -> Any:
    """The `kind` ("video": moving pictures, never cover art; "audio") stream to decode: ffmpeg's choice
    (`best_stream`), or the one `track` names by its index in the file or by language (ISO 639 code as the
    container tags it, the best of several); InputError naming the file and what it has when there is none."""
    streams = video_streams(container) if kind == "video" else list(container.streams.audio)
    if not streams:
        raise InputError(f"{path}: no {kind} stream" if kind == "video" else f"{path}: no audio track")
    if track is None:
        chosen = best_stream(streams)
    elif isinstance(track, int):
        chosen = next((s for s in streams if s.index == track), None)
    else:
        chosen = best_stream([s for s in streams if (s.metadata.get("language") or "").lower() == track.lower()])
    if chosen is None:
        have = ", ".join(f"#{s.index}" + (f" ({s.metadata['language']})" if s.metadata.get("language") else "")
                         for s in streams)
        wanted = ("a decodable one" if track is None else f"#{track}" if isinstance(track, int)
                  else f"language {track!r}")
        raise InputError(f"{path}: no {kind} stream {wanted}; the file has {have}")
    return chosen


@functools.lru_cache(maxsize=4096)
def _chosen_of_several(path: str | ObjectPath, size: int, version: int | str,
                       tracks: tuple[Track, Track]) -> tuple[int | None, ...]:
    import av

    out: list[int | None] = []
    try:
        with _opened(path) as container:
            for kind, track in zip(("video", "audio"), tracks, strict=True):
                streams = video_streams(container) if kind == "video" else container.streams.audio
                try:
                    several = len(streams) > 1
                    out.append(choose_stream(container, kind, as_path(path), track).index if several else None)
                except InputError:  # decoding it reports the problem
                    out.append(None)
    except (av.FFmpegError, OSError, ValueError):
        return None, None
    return tuple(out)


@contextlib.contextmanager
def _opened(path: str | ObjectPath) -> Iterator[Any]:
    """PyAV's container of a local file, or of an object read by ranged GETs (only its header is read)."""
    import av

    if not isinstance(path, ObjectPath):
        with av.open(path) as container:
            yield container
        return
    from objectio.cache import ranged

    with ranged(path) as f, av.open(f) as container:
        yield container


def chosen_of_several(path: Path | None, kind: str, track: Track = None) -> int | None:
    """The index of the `kind` stream decoded from `path` when the file has more than one stream of that kind (the
    decode identity names it: which stream a file's rows are of is part of what they are), else None; None also
    for a file that cannot be read, whose decode fails on its own. One open per file version and choice, for both
    kinds (planning asks for every feature of every item)."""
    if path is None or not path.is_file():
        return None
    st = path.stat()
    tracks = (track, None) if kind == "video" else (None, track)
    if isinstance(path, ObjectPath):  # the object's header by ranged reads, not a copy of it (docs/scale.md)
        return _chosen_of_several(path, st.st_size, st.etag, tracks)[0 if kind == "video" else 1]
    return _chosen_of_several(str(path), st.st_size, st.st_mtime_ns, tracks)[0 if kind == "video" else 1]


def stream_note(container: Any, chosen: Any) -> dict[str, Any] | None:
    """What the item's attributes and the run report say about a file with more than one stream of the chosen one's
    kind: its index, the others' and their languages; None for a file with one (nothing to say)."""
    streams = video_streams(container) if chosen.type == "video" else list(container.streams.audio)
    if len(streams) < 2:
        return None

    import av

    def describe(s: Any) -> dict[str, Any]:
        d: dict[str, Any] = {"index": s.index, "codec": s.codec_context.name}
        if s.type == "video":
            d["size"] = [s.codec_context.width, s.codec_context.height]
        else:
            d["channels"] = s.codec_context.channels
        if s.metadata.get("language", "und") != "und":  # (ffmpeg's muxers write "und" for none)
            d["language"] = s.metadata["language"]
        if s.disposition & av.stream.Disposition.default:
            d["default"] = True
        return d

    return {"index": chosen.index, "others": [describe(s) for s in streams if s is not chosen]}


def main_video(container: Any) -> Any | None:
    """The video stream a player shows (`best_stream`), None when the file has no moving pictures."""
    return best_stream(video_streams(container))


def origin_s(container: Any) -> float:
    """The container time (seconds) that is clip time 0 (see the module docstring); 0 when unknown."""
    import av

    start = container.start_time / av.time_base if container.start_time is not None else 0.0
    video = main_video(container)
    if video is not None and video.start_time is not None:
        video_start = float(video.start_time * video.time_base)
        if 0 < video_start - start <= STREAM_OFFSET_MIN_S:
            return video_start
    return start


# formats whose header duration counts from timestamp 0, not from the first timestamp: Matroska's muxers write the
# end of the last block (ffmpeg's: a file whose timestamps run from 5 s to 13 s says 13 s), where lavf's start_time +
# duration would put the end at 18 s
_DURATION_FROM_ZERO = {"matroska"}


def container_end_s(container: Any) -> float | None:
    """The container's own end, container seconds: its start plus its duration, or for Matroska its duration (see
    `_DURATION_FROM_ZERO`); None when it has no start (raw ADTS: a duration guessed from the bit rate) or no duration."""
    import av

    if container.start_time is None or not container.duration or container.duration <= 0:
        return None
    if _DURATION_FROM_ZERO & set(container.format.name.split(",")):
        return container.duration / av.time_base
    return (container.start_time + container.duration) / av.time_base


# formats with edit lists: a stream's sample table may hold samples no one plays (a stream-copied cut's pre-roll
# from the keyframe before the cut), and its duration is the edit list's presentation end
_EDIT_LISTS = {"mov", "mp4"}


def declared_end_s(container: Any) -> float | None:
    """Where the container says the media ends, in container seconds: the later of its duration (its header's,
    or for formats without one (MPEG-TS) lavf's estimate from the last timestamps of every stream) and the
    video stream's own end, what a truncated file still declares: its header's frame count at its frame rate (AVI;
    lavf's duration of a truncated AVI counts what is left), but in MP4 and MOV its presentation end after the edit
    list (its start plus its duration, what ffprobe reports): a stream-copied cut keeps the samples from the
    keyframe before the cut, hidden by its edit list, and their count declared the pre-roll more (issue 50).
    None when it says nothing, or has no start (raw ADTS: a duration guessed from the bit rate)."""
    if container.start_time is None:
        return None
    ends = [e for e in (container_end_s(container),) if e is not None]
    v = main_video(container)
    if v is not None and v.start_time is not None:
        if _EDIT_LISTS & set(container.format.name.split(",")):
            if v.duration and v.duration > 0:
                ends.append(float((v.start_time + v.duration) * v.time_base))
        elif v.frames and v.average_rate:
            ends.append(float(v.start_time * v.time_base) + v.frames / float(v.average_rate))
    return max(ends) if ends else None


def media_streams(container: Any) -> list[Any]:
    """The streams whose packets say how far the file's data reaches: moving pictures and audio."""
    return [*video_streams(container), *container.streams.audio]


def packet_end_s(packet: Any) -> float | None:
    """Container seconds where a demuxed packet's media ends (its PTS, else DTS, plus its duration)."""
    ts = packet.pts if packet.pts is not None else packet.dts
    if ts is None or packet.time_base is None:
        return None
    return float((ts + max(0, packet.duration or 0)) * packet.time_base)


def truncated_end_s(declared_end: float | None, data_end: float | None, own_end: float) -> float | None:
    """Where a stream ending at `own_end` (container seconds) should have ended when the file is truncated, else
    None. Truncated: the container declares more than TAIL_MIN_S past the stream's end and the file's data as a whole
    (`data_end`: the latest end of any audio or video packet) stops short of it too. A stream that ends while the
    file's other streams go on to the declared end is shorter by design (video 8 s over 11 s of audio): it keeps its
    own end, and nothing of it is missing."""
    if declared_end is None or declared_end - own_end <= TAIL_MIN_S:
        return None
    if data_end is not None and declared_end - data_end <= TAIL_MIN_S:
        return None
    return declared_end


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
