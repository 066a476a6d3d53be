"""Audio decoding (PyAV): the audio stream ffmpeg plays (media/container.py `choose_stream`) resampled once to
16 kHz mono float32, on the clip's timeline.

Decoded audio is placed by its frames' timestamps on the clip's timeline (media/container.py): time 0 is the
container's start, or the picture's start just after it, so what the container says plays with the first
frame plays at 0. The decoder applies what the container signals about the encoder's delay: the skip-samples
side data that mp4 edit lists, Matroska's codec delay (Opus pre-skip) and MP3's LAME header give. Where the
container keeps the delay as a head start instead (AAC priming and MP3 encoder delay in Matroska, MPEG-TS and
FLV: audio starting a few ms before the picture), it falls before clip time 0 and is cut. Residual offsets per
container, measured: docs/design.md.

Audio ends where its track says it ends (the last packet's timestamp plus its duration: in mp4 the edit list's
end), never after the container's duration (Matroska, MPEG-TS), so the encoder's padding of the last AAC frame
is not audio. A run of frames whose timestamps follow on from each other is resampled as one piece; a jump
forward of more than AUDIO_GAP_MIN_S ends the piece and is left silent. It is a hole, listed in `missing_s`, when
audio was lost there (a packet before it did not decode or came flagged corrupt, or the format may drop damaged
bytes silently: all but STEP_FORMATS); else it is a step the file declares (a fragmented MP4 after its first AAC
packet), placed as its timestamps say and not missing. A track that ends more than TAIL_MIN_S before the container says
the media ends, in a file whose video stops short of that too (a truncated file), gets its missing tail as silence,
listed in `missing_s`; a track that ends while the video goes on is shorter by design and keeps its own end
(media/container.py `truncated_end_s`).
"""

from __future__ import annotations

import logging
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from extractors.base import Audio
from media.container import (
    TAIL_MIN_S,
    InputError,
    Track,
    choose_stream,
    container_end_s,
    declared_end_s,
    existing,
    first_line,
    open_media,
    origin_s,
    packet_end_s,
    stream_note,
    truncated_end_s,
    video_streams,
)

log = logging.getLogger(__name__)

AUDIO_GAP_MIN_S = 0.02  # timestamp jumps in an audio track shorter than this are jitter, not missing audio
# formats that cannot lose a packet silently: MP4/MOV list every sample in their tables, MPEG-TS flags the packet
# after a gap in its continuity counters as corrupt. A jump in their timestamps with every packet before it decoded
# is a step the file declares, not lost audio (a fragmented MP4, `frag_keyframe+empty_moov` as recorders and DASH
# write it, steps after its first AAC packet, having no edit list); ffmpeg places the samples after it by their
# timestamps as its resampler does, and so do we. Elsewhere (Matroska and FLV resync over damaged bytes silently)
# a jump is lost audio.
STEP_FORMATS = {"mov", "mp4", "mpegts"}


class _AudioTrack:
    """Decoded audio placed by its timestamps on the clip's timeline, resampled to `rate_hz` mono."""

    def __init__(self, rate_hz: int, time_base: Fraction, origin: float, first_s: float) -> None:
        self.rate_hz, self.tb, self.origin_s, self.first_s = rate_hz, time_base, origin, first_s
        self.pieces: list[tuple[float, np.ndarray]] = []  # (start seconds, samples)
        self.missing_s: list[tuple[float, float]] = []
        self._chunks: list[np.ndarray] = []
        self._start_s: float | None = None
        self._next_ticks: float | None = None
        self._resampler: Any = None
        self.lost = False  # a packet did not decode (or came flagged corrupt) since the last frame
        self.strict = True  # every jump is a hole (formats not in STEP_FORMATS)
        self.steps_s: list[tuple[float, float]] = []  # timestamp steps: silent, placed by timestamps, not missing

    def seconds(self, ticks: float) -> float:
        return float(ticks * self.tb) - self.origin_s

    def add(self, frame: Any) -> None:
        import av

        if frame.pts is not None:
            jump = (self.seconds(self._next_ticks), self.seconds(frame.pts)) if self._next_ticks is not None else None
            if jump is not None and jump[1] - jump[0] > AUDIO_GAP_MIN_S:
                hole = self.lost or self.strict
                (self.missing_s if hole else self.steps_s).append(jump)
                self.finish()
            self.lost = False
            if self._start_s is None:
                self._start_s = self.seconds(frame.pts)
            self._next_ticks = frame.pts + frame.samples / frame.sample_rate / self.tb
        elif self._start_s is None:  # no timestamp: it follows the previous piece, or starts the stream
            self._start_s = self.pieces[-1][0] + self.pieces[-1][1].size / self.rate_hz if self.pieces else self.first_s
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

    def decoded_end_s(self) -> float:
        return max((s + p.size / self.rate_hz for s, p in self.pieces), default=0.0)

    def samples(self, end_s: float) -> np.ndarray:
        """All pieces on one buffer from clip time 0 to `end_s` (silence where nothing decoded; what lies
        before 0, priming kept as a head start, is cut)."""
        self.finish()
        out = np.zeros(max(0, round(end_s * self.rate_hz)), np.float32)
        for start_s, piece in self.pieces:
            at = round(start_s * self.rate_hz)
            lo = max(0, -at)
            n = max(0, min(piece.size - lo, out.size - (at + lo)))
            out[at + lo:at + lo + n] = piece[lo:lo + n]
        return out


def _decode_track(container: Any, stream: Any, rate_hz: int, path: Path
                  ) -> tuple[_AudioTrack, int | None, list[tuple[float, str]], float | None]:
    """(The decoded track, the end of its last packet in ticks (its true end, before encoder padding), the
    (seconds, error) of packets that did not decode, the latest end of any audio or video packet of the file in
    container seconds: how far its data reaches (the video's packets are demuxed, not decoded))."""
    import av

    tb = Fraction(stream.time_base)
    origin = origin_s(container)
    first = float(stream.start_time * tb) - origin if stream.start_time is not None else 0.0
    track = _AudioTrack(rate_hz, tb, origin, first)
    end_ticks: int | None = None
    data_end: float | None = None
    errors: list[tuple[float, str]] = []
    decoded = False
    track.strict = not STEP_FORMATS & set(container.format.name.split(","))
    try:
        for packet in container.demux(stream, *video_streams(container)):
            if packet.size and (end := packet_end_s(packet)) is not None:
                data_end = max(data_end or end, end)
            if packet.stream_index != stream.index:
                continue
            if packet.pts is not None and not packet.is_discard and packet.duration:
                end_ticks = max(end_ticks or packet.pts, packet.pts + packet.duration)
            track.lost |= bool(packet.is_corrupt)
            try:
                frames = packet.decode()
            except av.FFmpegError as e:  # e.g. InvalidDataError (or EPERM from the AAC decoder) on damaged data
                errors.append((float(packet.pts * tb) if packet.pts is not None else math.nan, first_line(e)))
                track.lost = True
                continue
            for frame in frames:
                decoded = True
                track.add(frame)
    except (av.FFmpegError, IndexError) as e:  # (IndexError: PyAV meeting a stream that damaged FLV data added)
        errors.append((math.nan, f"demuxing stopped: {first_line(e)}"))
    if not decoded:
        why = f" ({errors[0][1]})" if errors else ""
        raise InputError(f"{path}: audio track is empty or undecodable{why}")
    track.finish()
    return track, end_ticks, errors, data_end


def decode_audio(path: Path | str, rate_hz: int = 16000, track: Track = None) -> Audio:
    """The audio stream ffmpeg plays (or the one `track` names: media/container.py `choose_stream`), resampled
    once to `rate_hz` mono float32, on the clip's timeline."""
    path = existing(path, "audio")
    with open_media(path) as container:
        stream = choose_stream(container, "audio", path, track)
        streams = stream_note(container, stream)
        track, end_ticks, errors, data_end = _decode_track(container, stream, rate_hz, path)
        decoded_end = track.decoded_end_s()
        end_s = track.seconds(end_ticks) if end_ticks is not None else decoded_end
        container_end, declared_end = container_end_s(container), declared_end_s(container)
        # never past the container's end (Matroska knows the padded last frame only from its duration), by an
        # encoder's padding at most: a header that says far less than the track holds is read wrong, not the track
        if container_end is not None and 0 < end_s - (container_end - track.origin_s) < TAIL_MIN_S:
            end_s = container_end - track.origin_s
    if end_s - decoded_end > AUDIO_GAP_MIN_S:  # the track's last packets did not decode
        track.missing_s.append((decoded_end, end_s))
    if track.steps_s:
        log.info("%s: the audio timestamps step forward %d time(s) (first %.3f s at %.2f s) with no packet lost: "
                 "placed by their timestamps, not damage", path, len(track.steps_s),
                 track.steps_s[0][1] - track.steps_s[0][0], track.steps_s[0][0])
    if track.missing_s:
        log.warning("%s: damaged audio data, %.2f s of %.2f s could not be decoded (first at %.2f s: %s)", path,
                    sum(b - a for a, b in track.missing_s), end_s, track.missing_s[0][0], errors[0][1] if errors else
                    "a hole in the track's timestamps")
    cut_at = truncated_end_s(declared_end, data_end, end_s + track.origin_s)
    others_end = None
    if cut_at is None and declared_end is not None and declared_end - track.origin_s - end_s > TAIL_MIN_S:
        others_end = round(declared_end - track.origin_s, 6)
        log.info("%s: the audio track ends at %.2f s, before the file's other streams (%.2f s): a shorter track, not "
                 "damage; the audio lasts %.2f s", path, end_s, declared_end - track.origin_s, end_s)
    if cut_at is not None:
        tail = (end_s, cut_at - track.origin_s)
        log.warning("%s: truncated file? the audio track ends at %.2f s but the container says the media lasts "
                    "%.2f s: the last %.2f s are missing", path, tail[0], tail[1], tail[1] - tail[0])
        track.missing_s.append(tail)
    samples = track.samples(end_s)
    if track.missing_s and track.missing_s[-1][1] > end_s:  # the truncated tail: silence
        samples = np.concatenate([samples, np.zeros(max(0, round(track.missing_s[-1][1] * rate_hz) - samples.size),
                                                    np.float32)])
    if samples.size == 0:
        raise InputError(f"{path}: audio track is empty")
    missing = np.array(track.missing_s, np.float64).reshape(-1, 2)
    return Audio(samples=samples, sample_rate_hz=rate_hz, duration_s=samples.size / rate_hz, missing_s=missing,
                 streams_end_s=others_end, streams=streams)
