"""Decoding on CPU workers: 1 fps frames (decord), 16 kHz mono audio (PyAV), transcripts, QA text.

Which frame stands for a second: row k covers [k, min(k+1, D)) where D is the video's duration
(end of its last frame); it uses the decoded frame whose start timestamp is nearest the middle of
that interval (k + 0.5 s for every full second), ties going to the earlier frame. Timestamps come from
the container (so variable and odd frame rates need no special case). Comparisons are made in whole
microseconds, so float rounding never breaks a tie.

The clip's timeline is the container's: time 0 is its start time, where captions start too. A video or
audio stream that starts later than the container (an offset of more than `STREAM_OFFSET_MIN_S`) keeps
its place on it: its frames are stamped later, its audio is preceded by silence (or trimmed when it
starts earlier). Smaller offsets (encoder delay, AAC priming) are left alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from extractors.base import Audio, Frames, QAText, Words, rate_intervals
from manifests.records import MediaItem, QAItem

STREAM_OFFSET_MIN_S = 0.05
# enters every frames/audio fingerprint: bump when decoding gives different samples for the same file
# (2: streams that start late keep their place on the container's timeline)
DECODE_VERSION = "2"


class InputError(ValueError):
    """A problem with one input file; the message names the file and the problem."""


def _existing(path: Path | None, what: str) -> Path:
    if path is None:
        raise InputError(f"no {what} file in the manifest")
    if not path.exists():
        raise InputError(f"{path}: {what} file does not exist")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: {what} file is empty")
    return path


def second_intervals(duration_s: float) -> np.ndarray:
    """(N, 2) rows [k, min(k+1, D)), N = ceil(D)."""
    return rate_intervals(max(0, math.ceil(duration_s - 1e-6)), 1.0, duration_s)


def pick_frames(frame_starts_s: np.ndarray, intervals: np.ndarray) -> np.ndarray:
    """Index of the frame nearest each interval's middle (ties → earlier frame)."""
    starts_us = np.round(np.asarray(frame_starts_s, np.float64) * 1e6).astype(np.int64)
    target_us = np.round(intervals.mean(axis=1) * 1e6).astype(np.int64)
    right = np.clip(np.searchsorted(starts_us, target_us, side="left"), 0, len(starts_us) - 1)
    left = np.clip(right - 1, 0, len(starts_us) - 1)
    take_left = np.abs(target_us - starts_us[left]) <= np.abs(starts_us[right] - target_us)
    return np.where(take_left, left, right)


def decode_frames(path: Path, clip: tuple[float, float | None] | None = None) -> Frames:
    """One picture per second; of the clip [start_s, end_s) of the file when `clip` is given (pipeline/cut.py)."""
    import decord

    path = _existing(path, "video")
    try:
        reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1)
    except Exception as e:  # decord raises its own DECORDError for unreadable containers
        raise InputError(f"{path}: cannot open video: {str(e).splitlines()[0][:200]}") from e
    n = len(reader)
    if n == 0:
        raise InputError(f"{path}: video has no frames")
    ts = np.asarray(reader.get_frame_timestamp(range(n)), np.float64)
    if not np.all(np.isfinite(ts)) or np.any(np.diff(ts[:, 0]) < 0):
        raise InputError(f"{path}: frame timestamps are missing or not increasing")
    # decord counts from the stream's first frame; put the frames where the container says they play
    origin = ts[0, 0] - video_offset_s(path)
    starts, duration = ts[:, 0] - origin, float(ts[-1, 1] - origin)
    frame_no = np.arange(n)
    if clip is not None:  # a clip inside the file: only its frames, on its own timeline
        from pipeline.cut import cut_frame_times

        keep, starts, duration = cut_frame_times(starts, duration, *clip, path)
        frame_no = frame_no[keep]
    intervals = second_intervals(duration)
    index = pick_frames(starts, intervals)
    try:
        pixels = reader.get_batch(frame_no[index].tolist()).asnumpy()
    except Exception as e:
        raise InputError(f"{path}: decoding failed: {str(e).splitlines()[0][:200]}") from e
    return Frames(pixels=np.ascontiguousarray(pixels), intervals=intervals, pts_s=starts[index],
                  source_fps=float(reader.get_avg_fps()), duration_s=duration)


def decode_audio(path: Path, rate_hz: int = 16000) -> Audio:
    """The first audio stream, resampled once to `rate_hz` mono float32."""
    import av

    path = _existing(path, "audio")
    try:
        container = av.open(str(path))
    except av.FFmpegError as e:
        raise InputError(f"{path}: cannot open: {e}") from e
    with container:
        if not container.streams.audio:
            raise InputError(f"{path}: no audio track")
        offset_s = _stream_offset_s(container, container.streams.audio)
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate_hz)
        chunks = []
        try:
            for frame in container.decode(container.streams.audio[0]):
                chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(frame))
            chunks.extend(f.to_ndarray().reshape(-1) for f in resampler.resample(None))
        except av.FFmpegError as e:
            raise InputError(f"{path}: audio decoding failed: {e}") from e
    samples = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    if samples.size == 0:
        raise InputError(f"{path}: audio track is empty")
    shift = round(offset_s * rate_hz)  # the stream's place on the container's timeline
    samples = np.concatenate([np.zeros(shift, np.float32), samples]) if shift >= 0 else samples[-shift:]
    return Audio(samples=samples, sample_rate_hz=rate_hz, duration_s=samples.size / rate_hz)


def video_offset_s(path: Path) -> float:
    """The video stream's offset on the container's timeline (decord does not expose it)."""
    import av

    with av.open(str(path)) as container:
        return _stream_offset_s(container, container.streams.video)


def _stream_offset_s(container: Any, streams: Any) -> float:  # a PyAV container and one of its stream lists
    """Seconds from the container's start to the first of `streams`' start; 0 when under
    STREAM_OFFSET_MIN_S or unknown."""
    import av

    if not streams or streams[0].start_time is None or container.start_time is None:
        return 0.0
    offset = float(streams[0].start_time * streams[0].time_base) - container.start_time / av.time_base
    return offset if abs(offset) > STREAM_OFFSET_MIN_S else 0.0


def decode_transcript(item: MediaItem) -> Words:
    from extractors.captions import parse_captions

    path = _existing(item.transcript, "transcript")
    duration = item.clip_end_s - item.clip_start_s if item.clip_end_s is not None else None
    return parse_captions(path, clip_duration_s=duration, trim_s=item.clip_start_s or None)


def qa_text(questions: list[QAItem]) -> QAText:
    if not questions:
        raise InputError("no questions for this item")
    return QAText(
        qids=tuple(q.qid for q in questions),
        questions=tuple(q.question for q in questions),
        answers=tuple(q.answers for q in questions),
        correct=tuple(q.correct for q in questions),
        context=questions[0].context,
        ts=tuple(q.ts for q in questions),
    )


def audio_source(item: MediaItem) -> Path | None:
    """A separate audio file when the manifest gives one, else the video's own track."""
    return item.audio or item.video


def source_path(item: MediaItem, kind: str) -> Path | None:
    """The file an input kind is decoded from (None for QA text, which lives in the manifest)."""
    return {"frames": item.video or item.image, "audio": audio_source(item), "transcript": item.transcript,
            "caption": item.annotations, "reactions": item.annotations}.get(kind)
