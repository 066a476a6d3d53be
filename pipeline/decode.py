"""Decoding on CPU workers: 1 fps frames and 16 kHz mono audio (both PyAV), transcripts, QA text.

Which frame stands for a second: row k covers [k, min(k+1, D)) where D is the video's duration
(end of its last frame); it uses the decoded frame whose start timestamp is nearest the middle of
that interval (k + 0.5 s for every full second), ties going to the earlier frame. Timestamps are the
container's integer PTS times its time base, in float64 (read by demuxing alone, no pixels decoded), so
variable and odd frame rates, B-frames and hour-long clips need no special case. Comparisons are made in
whole microseconds, so float rounding never breaks a tie.

The clip's timeline is the container's: time 0 is its start time, where captions start too. A video or
audio stream that starts later than the container (an offset of more than `STREAM_OFFSET_MIN_S`) keeps
its place on it: its frames are stamped later, its audio is preceded by silence (or trimmed when it
starts earlier). Smaller offsets (encoder delay, AAC priming) are left alone. Audio ends where its track
says it ends (the last packet's timestamp plus its duration: in mp4 the edit list's end), never after the
container's duration (Matroska, MPEG-TS), so the encoder's padding of the last AAC frame is not audio; priming before the edit list's
start is dropped by the demuxer. Within the track, decoded audio is placed by its timestamps.

Damaged files (docs/design.md): a video whose data is partly undecodable yields the seconds that decode;
a row whose chosen frame is lost uses the nearest intact frame shown during its interval, else it is
left out (alignment then marks that second missing) and `missing_s` lists it. Audio packets that do not
decode become silence of their length, listed in `missing_s`, so later audio keeps its place.

Pictures are as displayed: turned upright and given square pixels (pipeline/picture.py, one call where a decoded
frame becomes RGB), and `Frames.picture` records how.
"""

from __future__ import annotations

import logging
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from extractors.base import Audio, Frames, QAText, Words, rate_intervals
from manifests.records import MediaItem, QAItem
from pipeline import picture

log = logging.getLogger(__name__)

STREAM_OFFSET_MIN_S = 0.05
AUDIO_GAP_MIN_S = 0.02  # timestamp jumps in an audio track shorter than this are jitter, not missing audio
# enters every frames/audio fingerprint: bump when decoding gives different samples for the same file
# (2: streams that start late keep their place on the container's timeline; 3: PyAV instead of decord,
# float64 timestamps from integer PTS, audio ends at the track's end, damaged data left out)
DECODE_VERSION = "3"


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


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def _open(path: Path) -> Any:
    import av

    try:
        return av.open(str(path))
    except (av.FFmpegError, OSError, ValueError) as e:
        raise InputError(f"{path}: cannot open: {_first_line(e)}") from e


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


def _video_stream(container: Any, path: Path) -> Any:
    import av

    streams = [s for s in container.streams.video if not s.disposition & av.stream.Disposition.attached_pic]
    if not streams:
        raise InputError(f"{path}: no video stream")
    stream = streams[0]
    if not stream.codec_context.width or not stream.codec_context.height:
        raise InputError(f"{path}: the video stream has no picture size")
    stream.thread_count = 1  # one decode task per CPU that Ray gives it
    return stream


def _ticks_to_s(ticks: np.ndarray, time_base: Fraction) -> np.ndarray:
    """Integer stream ticks → float64 seconds (exact to float64 precision at any clip length)."""
    return ticks.astype(np.float64) * time_base.numerator / time_base.denominator


def _frame_times(container: Any, stream: Any, path: Path) -> tuple[np.ndarray, np.ndarray, float]:
    """(sorted PTS in stream ticks, their seconds on the clip's timeline, the end of the last frame), from the
    demuxer alone. Frames the demuxer marks for discarding (before an edit list's start) do not play."""
    import av

    pts, ends = [], []
    try:
        for packet in container.demux(stream):
            if packet.pts is None or packet.is_discard:
                if packet.pts is None and packet.size:
                    raise InputError(f"{path}: video packets without timestamps (raw stream?); remux it into mp4/mkv")
                continue
            pts.append(packet.pts)
            ends.append(packet.pts + max(0, packet.duration or 0))
    except av.FFmpegError as e:  # a damaged container: the frames demuxed so far are all we know of
        log.warning("%s: demuxing stopped after %d frames: %s", path, len(pts), _first_line(e))
    if not pts:
        raise InputError(f"{path}: video has no frames")
    ticks = np.unique(np.asarray(pts, np.int64))
    step = int(np.median(np.diff(ticks))) if len(ticks) > 1 else 0
    end = max(max(ends), int(ticks[-1]) + (step if max(ends) <= ticks[-1] else 0))
    tb = Fraction(stream.time_base)
    offset_s = _stream_offset_s(container, [stream])
    starts = _ticks_to_s(ticks - ticks[0], tb) + offset_s
    if end <= ticks[-1]:  # a single frame of unknown length: show it for one frame of the nominal rate
        rate = stream.average_rate or stream.guessed_rate or 25
        return ticks, starts, float(starts[-1] + 1 / float(rate))
    return ticks, starts, float(_ticks_to_s(np.array([end - ticks[0]]), tb)[0] + offset_s)


def _decode_pictures(path: Path, wanted: set[int], view: picture.View, fast: bool,
                     span: tuple[int, int] | None = None) -> tuple[dict[int, np.ndarray], set[int], list[tuple[int, str]]]:
    """Decode the video stream in order; RGB pictures as displayed (`view`) of the `wanted` PTS, the PTS of
    every intact frame, and the (PTS, error) of packets the decoder refused. Frames the decoder flags as corrupt are not intact.
    `fast`: stop once every wanted picture is in, and skip decoding unwanted frames that no other frame refers
    to (non-reference B-frames); the intact set is then incomplete. `span` (first PTS, last PTS): a segment of
    the video; decoding starts at the keyframe before the first (a seek) and stops after the last."""
    import av

    pictures: dict[int, np.ndarray] = {}
    intact: set[int] = set()
    errors: list[tuple[int, str]] = []
    with _open(path) as container:
        stream = _video_stream(container, path)
        if span is not None and span[0] > 0:
            container.seek(int(span[0]), stream=stream, backward=True, any_frame=False)
        try:
            context = stream.codec_context
            for packet in container.demux(stream):
                if fast:
                    context.skip_frame = "DEFAULT" if packet.pts is None or packet.pts in wanted else "NONREF"
                try:
                    frames = packet.decode()
                except av.FFmpegError as e:
                    errors.append((packet.pts if packet.pts is not None else -1, _first_line(e)))
                    continue
                for frame in frames:
                    if frame.pts is None or frame.is_corrupt:
                        continue
                    intact.add(frame.pts)
                    if frame.pts in wanted and frame.pts not in pictures:
                        pictures[frame.pts] = view.rgb(frame)
                # the decoder gives frames in presentation order: past the span's end, nothing it needs comes
                if (fast and len(pictures) == len(wanted)) or (span is not None and any(
                        f.pts is not None and f.pts > span[1] for f in frames)):
                    break
        except av.FFmpegError as e:
            errors.append((-1, f"demuxing stopped: {_first_line(e)}"))
    return pictures, intact, errors


def _fallback_frames(index: np.ndarray, lost: np.ndarray, ticks: np.ndarray, starts: np.ndarray,
                     duration: float, intervals: np.ndarray, intact: set[int]) -> np.ndarray:
    """For rows whose chosen frame is lost: the intact frame nearest the middle among those shown during the
    row's interval (frame i is shown over [start_i, start_i+1)), or -1 when none is."""
    shown_until = np.append(starts[1:], duration)
    ok = np.fromiter((t in intact for t in ticks.tolist()), bool, len(ticks))
    out = index.copy()
    for row in np.flatnonzero(lost):
        lo, hi = intervals[row]
        candidates = np.flatnonzero(ok & (starts < hi) & (shown_until > lo))
        if candidates.size == 0:
            out[row] = -1
            continue
        mid = (lo + hi) / 2
        distance_us = np.round(np.abs(starts[candidates] - mid) * 1e6)
        out[row] = candidates[np.argmin(distance_us)]  # argmin takes the first: ties → earlier frame
    return out


def decode_frames(path: Path, clip: tuple[float, float | None] | None = None) -> Frames:
    """One RGB picture per second of the video (see the module docstring for which); of the clip
    [start_s, end_s) of the file, on the clip's own timeline, when `clip` is given (pipeline/cut.py)."""
    return decode_frames_segment(path, clip)[0]


def segment_rows(n_rows: int, frame_bytes: int, max_bytes: int | None) -> list[tuple[int, int]]:
    """Row ranges [a, b) of the segments a video of `n_rows` rows is decoded in: each holds at most
    `max_bytes` of pixels (one row at least), all of them one segment when `max_bytes` is None."""
    step = n_rows if max_bytes is None else max(1, max_bytes // max(1, frame_bytes))
    return [(a, min(n_rows, a + step)) for a in range(0, n_rows, max(1, step))] or [(0, 0)]


def decode_frames_segment(path: Path, clip: tuple[float, float | None] | None = None, segment: int = 0,
                          max_bytes: int | None = None) -> tuple[Frames, int]:
    """(The rows of one segment of the video, the number of segments): rows are cut into segments of at most
    `max_bytes` of RGB pixels (`segment_rows`), so a long video never has all its frames in memory at once.
    Each segment's rows are those the whole video would give (same frame choice, same damaged-data rule
    within the segment); `intervals`, `pts_s` and `missing_s` are the segment's, `duration_s` the video's."""
    path = _existing(path, "video")
    with _open(path) as container:  # its own pass: the orientation comes on the first decoded frame
        view = picture.probe_view(container, _video_stream(container, path), path)
    with _open(path) as container:
        stream = _video_stream(container, path)
        fps = float(stream.average_rate or stream.guessed_rate or 0)
        ticks, starts, duration = _frame_times(container, stream, path)
    if clip is not None:  # a clip inside the file: only its frames, on its own timeline
        from pipeline.cut import cut_frame_times

        keep, starts, duration = cut_frame_times(starts, duration, *clip, path)
        ticks = ticks[keep]
    all_intervals = second_intervals(duration)
    segments = segment_rows(len(all_intervals), view.frame_bytes, max_bytes)
    if not 0 <= segment < len(segments):
        raise ValueError(f"{path}: segment {segment} of a video decoded in {len(segments)}")
    lo, hi = segments[segment]
    intervals = all_intervals[lo:hi]
    index = pick_frames(starts, intervals)
    span = None
    if len(segments) > 1:  # from the frame shown at the segment's start (a fallback may use it) to its end
        first = max(0, int(np.searchsorted(starts, intervals[0, 0], side="right")) - 1)
        last = min(len(ticks) - 1, int(np.searchsorted(starts, intervals[-1, 1], side="left")))
        span = (int(ticks[first]) if segment else 0, int(ticks[last]))
    wanted = set(ticks[index].tolist())
    pictures, intact, errors = _decode_pictures(path, wanted, view, fast=True, span=span)
    lost = np.array([int(ticks[i]) not in pictures for i in index], bool)
    if lost.any():  # damaged data: decode every frame to know which are intact, choose again among those
        pictures, intact, errors = _decode_pictures(path, wanted, view, fast=False, span=span)
        lost = np.array([int(ticks[i]) not in pictures for i in index], bool)
        index = _fallback_frames(index, lost, ticks, starts, duration, intervals, intact)
        extra = set(ticks[index[index >= 0]].tolist()) - set(pictures)
        if extra:
            pictures.update(_decode_pictures(path, extra, view, fast=True, span=span)[0])
        index = np.where([i >= 0 and int(ticks[i]) in pictures for i in index], index, -1)
    keep = index >= 0
    if not keep.any() and len(segments) == 1:
        why = f": {errors[0][1]}" if errors else ""
        raise InputError(f"{path}: no frame could be decoded{why}")
    missing = intervals[~keep]
    if len(missing):
        where = ", ".join(f"{a:g}-{b:g} s" for a, b in missing[:5]) + (" …" if len(missing) > 5 else "")
        log.warning("%s: damaged video data, %d of %d seconds have no decodable frame (%s)",
                    path, len(missing), len(intervals), where)
    pixels = (np.stack([pictures[int(ticks[i])] for i in index[keep]]) if keep.any()
              else np.zeros((0, *view.display_wh[::-1], 3), np.uint8))
    frames = Frames(pixels=pixels, intervals=intervals[keep], pts_s=starts[index[keep]], source_fps=fps,
                    duration_s=duration, missing_s=missing, picture=view.attrs())
    return frames, len(segments)


class _AudioTrack:
    """Decoded audio placed by its timestamps on the clip's timeline, resampled to `rate_hz` mono.

    A run of frames whose timestamps follow on from each other is resampled as one piece; a jump forward of
    more than AUDIO_GAP_MIN_S (packets that did not decode, a hole in the track) ends the piece, and the
    next one starts where its timestamp says, the hole left silent and listed in `missing_s`."""

    def __init__(self, rate_hz: int, origin_ticks: int, time_base: Fraction, shift_s: float) -> None:
        self.rate_hz, self.origin, self.tb, self.shift_s = rate_hz, origin_ticks, time_base, shift_s
        self.pieces: list[tuple[float, np.ndarray]] = []  # (start seconds, samples)
        self.missing_s: list[tuple[float, float]] = []
        self._chunks: list[np.ndarray] = []
        self._start_s: float | None = None
        self._next_ticks: float | None = None
        self._resampler: Any = None

    def seconds(self, ticks: float) -> float:
        return float((ticks - self.origin) * self.tb) + self.shift_s

    def add(self, frame: Any) -> None:
        import av

        if frame.pts is not None:
            if self._next_ticks is not None and self.seconds(frame.pts) - self.seconds(self._next_ticks) > AUDIO_GAP_MIN_S:
                self.missing_s.append((self.seconds(self._next_ticks), self.seconds(frame.pts)))
                self.finish()
            if self._start_s is None:
                self._start_s = self.seconds(frame.pts)
            self._next_ticks = frame.pts + frame.samples / frame.sample_rate / self.tb
        elif self._start_s is None:
            self._start_s = self.pieces[-1][0] + self.pieces[-1][1].size / self.rate_hz if self.pieces else self.shift_s
        if self._resampler is None:
            self._resampler = av.AudioResampler(format="flt", layout="mono", rate=self.rate_hz)
        self._chunks.extend(f.to_ndarray().reshape(-1) for f in self._resampler.resample(frame))

    def finish(self) -> None:
        """Close the current piece (resampler flushed)."""
        if self._resampler is not None:
            self._chunks.extend(f.to_ndarray().reshape(-1) for f in self._resampler.resample(None))
        if self._chunks and self._start_s is not None:
            self.pieces.append((self._start_s, np.concatenate(self._chunks).astype(np.float32)))
        self._chunks, self._start_s, self._resampler = [], None, None

    def samples(self, end_s: float) -> np.ndarray:
        """All pieces on one buffer from clip time 0 to `end_s` (silence where nothing decoded)."""
        self.finish()
        out = np.zeros(max(0, round(end_s * self.rate_hz)), np.float32)
        for start_s, piece in self.pieces:
            at = round(start_s * self.rate_hz)
            lo = max(0, -at)
            n = max(0, min(piece.size - lo, out.size - (at + lo)))
            out[at + lo:at + lo + n] = piece[lo:lo + n]
        return out


def decode_audio(path: Path, rate_hz: int = 16000) -> Audio:
    """The first audio stream, resampled once to `rate_hz` mono float32, on the clip's timeline."""
    import av

    path = _existing(path, "audio")
    with _open(path) as container:
        if not container.streams.audio:
            raise InputError(f"{path}: no audio track")
        stream = container.streams.audio[0]
        tb = Fraction(stream.time_base)
        origin = stream.start_time
        track: _AudioTrack | None = None
        end_ticks: int | None = None  # the end of the last packet: the track's true end, before encoder padding
        errors: list[tuple[float, str]] = []
        try:
            for packet in container.demux(stream):
                if packet.pts is not None and not packet.is_discard and packet.duration:
                    end_ticks = max(end_ticks or packet.pts, packet.pts + packet.duration)
                try:
                    frames = packet.decode()
                except av.FFmpegError as e:  # e.g. InvalidDataError (or EPERM from the AAC decoder) on damaged data
                    errors.append((float(packet.pts * tb) if packet.pts is not None else math.nan, _first_line(e)))
                    continue
                for frame in frames:
                    if track is None:
                        origin = origin if origin is not None else (frame.pts or 0)
                        track = _AudioTrack(rate_hz, origin, tb, _stream_offset_s(container, [stream]))
                    track.add(frame)
        except av.FFmpegError as e:
            errors.append((math.nan, f"demuxing stopped: {_first_line(e)}"))
        if track is None:
            why = f" ({errors[0][1]})" if errors else ""
            raise InputError(f"{path}: audio track is empty or undecodable{why}")
        track.finish()
        decoded_end_s = max((s + p.size / rate_hz for s, p in track.pieces), default=0.0)
        end_s = track.seconds(end_ticks) if end_ticks is not None else decoded_end_s
        if container.duration and container.start_time is not None:  # (raw ADTS has neither: a bit-rate guess)
            # never past the container's end (Matroska knows the padded last frame only from its duration)
            true_offset_s = float(track.origin * tb) - container.start_time / av.time_base
            end_s = min(end_s, container.duration / av.time_base - true_offset_s + track.shift_s)
    if end_s - decoded_end_s > AUDIO_GAP_MIN_S:  # the track's last packets did not decode
        track.missing_s.append((decoded_end_s, end_s))
    samples = track.samples(end_s)
    if samples.size == 0:
        raise InputError(f"{path}: audio track is empty")
    if track.missing_s:
        log.warning("%s: damaged audio data, %.2f s of %.2f s could not be decoded (first at %.2f s: %s)", path,
                    sum(b - a for a, b in track.missing_s), end_s, track.missing_s[0][0], errors[0][1] if errors else
                    "a hole in the track's timestamps")
    missing = np.array(track.missing_s, np.float64).reshape(-1, 2)
    return Audio(samples=samples, sample_rate_hz=rate_hz, duration_s=samples.size / rate_hz, missing_s=missing)


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
