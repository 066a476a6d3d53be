"""Decoding on CPU workers: 1 fps frames (PyAV; audio in media/audio.py), QA text. Which input kind is
decoded how, from which file and span: media/kinds/.

Which frame stands for a second: row k covers [k, min(k+1, D)) where D is the video's duration
(end of its last frame); it uses the decoded frame whose display time is nearest the middle of
that interval (k + 0.5 s for every full second), ties going to the earlier frame. Comparisons are made in whole
ticks of a base in which every time compared is an integer (the stream's time base and microseconds, doubled for
a middle: `exact_hz`), so float rounding never breaks a tie. Times are on the clip's timeline (media/container.py).

Display times: the container's integer PTS times its time base, in float64, read by demuxing alone (no pixels
decoded), so variable and odd frame rates, B-frames and hour-long clips need no special case; a decoded frame
is matched to its time by its PTS. Where packet PTS are not the display times, the pictures come out of the
decoder in display order instead, and the n-th picture out is shown at the n-th smallest PTS (what ffmpeg's
best-effort timestamps give): always for MPEG-4 Part 2 (DivX/XviD "packed B-frames", whose packets each hold
the next P-frame and the B-frame shown before it, their PTS guessed by the demuxer, mostly from AVI), and for
any other stream whose decoded PTS turn out missing or out of order. The decoder starts at the file's first
picture, so in a clip cut from such a file the n-th picture out is still the file's n-th.

Decoding only what the choice needs (bit-exact with decoding everything): unwanted non-reference pictures are
skipped, decoding stops at the last chosen picture, and in H.264 the packets after a GOP's last chosen picture up
to the next IDR keyframe go undecoded (`_GopTails`). `plan_rows` is the choice alone (demuxing): media/nvdec.py
decodes the same frames on the GPU.

Segments (long videos): each segment decodes from the last keyframe at or before its first frame (found in the
demuxing pass; the seek goes back further until the demuxer lands at or before it, which MPEG-TS's
timestamp search does not promise) and drops what it decodes before its first frame, so its rows and pictures
are exactly the whole video's. In display-order mode every segment decodes from the start.

Damaged files (docs/design.md): a video whose data is partly undecodable yields the seconds that decode;
a row whose chosen frame is lost uses the nearest intact frame shown during its interval, else it is
left out (alignment then marks that second missing) and `missing_s` lists it. Intact: as the intact file shows it,
so the pictures after a damage up to the next keyframe, which may refer to what was lost, are not (`_tainted`);
a row's frame must be shown during its own second (bytes the demuxer skipped end the showing of the frame before).
A truncated file (the container says the media lasts more than TAIL_MIN_S longer than the last frame, and its
audio stops short of that too) keeps D from the container: the rows after the last frame are missing, listed in
`missing_s`, with a warning. A video that ends while the file's audio goes on (media/container.py
`truncated_end_s`) is shorter by design: D is its own. A video that starts late (an empty edit, `-itsoffset`)
has no rows before its first frame, and they are not missing either (`Frames.stream_start_s`).

Pictures are as displayed: turned upright and given square pixels (media/picture.py, one call where a decoded
frame becomes RGB), and `Frames.picture` records how.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from extractors.base import Frames
from media import picture
from media.audio import AUDIO_GAP_MIN_S, decode_audio
from media.container import (
    STREAM_OFFSET_MIN_S,
    TAIL_MIN_S,
    InputError,
    Track,
    choose_stream,
    cut_frame_times,
    declared_end_s,
    existing,
    first_line,
    media_streams,
    open_media,
    origin_s,
    packet_end_s,
    stream_note,
    truncated_end_s,
)
from rows import fixed_rate_intervals

__all__ = ["AUDIO_GAP_MIN_S", "STREAM_OFFSET_MIN_S", "InputError", "decode_audio", "decode_frames",
           "decode_frames_segment", "existing"]  # (re-exported: callers keep importing them from here)

log = logging.getLogger(__name__)

# Matroska/WebM and FLV demuxers resync after damaged bytes by scanning for the next element, silently: a jump this
# large between one packet's end and the next one's start, over the packets of every stream (intact files: at most
# 24 bytes of block and cluster headers) is data they skipped. MP4 (sample tables) and MPEG-TS (continuity counters:
# lavf flags the packets corrupt) say so themselves; AVI is left out (OpenDML index chunks lie between packets).
SKIP_MIN_BYTES = 1024
RESYNCING_FORMATS = {"matroska", "flv"}
# the fast pass skips GOP tails (`_GopTails`) and unwanted non-reference pictures (libavcodec's skip_frame NONREF):
# switches for the benchmark and the tests that compare with and without
GOP_TAILS = True
SKIP_NONREF = True
SEEK_TRIES = 6  # seeks that land after the keyframe go back 1, 2, 4, 8, 16 s; then decoding starts at the file's start
# enters every frames/audio fingerprint: bump when decoding gives different samples for the same file
# (2: streams that start late keep their place on the container's timeline; 3: PyAV instead of decord,
# float64 timestamps from integer PTS, audio ends at the track's end, damaged data left out; 4: segments seek to
# the keyframe at or before their first frame (MPEG-TS lost and shifted rows), MPEG-4 Part 2 and streams whose
# PTS are not display times use the decoder's output order, every stream placed by its own timestamps from the
# picture's start (audio priming before it cut: MKV/TS/FLV audio no longer 21-25 ms late), truncated files keep
# the container's duration with the missing tail listed; 5: a clip cut from a stream decoded in display order (AVI,
# MPEG-4 Part 2) matches the decoder's n-th picture to the file's n-th display time, not the clip's; Matroska's
# duration counts from timestamp 0; a shorter stream keeps its own duration; pictures after damage up to the next
# keyframe and frames not shown during a row's second are left out)
DECODE_VERSION = "5"

MICROSECOND_HZ = 1_000_000


def exact_hz(time_base: Fraction | None, *times_s: np.ndarray) -> int:
    """Ticks per second of a common base in which every time a frame choice compares is a whole number: the stream's
    time base (frame times), microseconds (the container's start, manifests' clip edges), both doubled (an
    interval's middle). The seconds, float64, come back exact by rounding while they stay under 2^50 ticks (at
    96 MHz, over 100 days); past that, or for an odd time base, whole microseconds."""
    if time_base is None:
        return 2 * MICROSECOND_HZ
    hz = math.lcm(2 * time_base.denominator, 2 * MICROSECOND_HZ)
    top = max((float(np.abs(t).max()) for t in times_s if np.size(t)), default=0.0)
    return hz if top * hz < 2 ** 50 else 2 * MICROSECOND_HZ


def pick_frames(frame_starts_s: np.ndarray, intervals: np.ndarray, hz: int = 2 * MICROSECOND_HZ) -> np.ndarray:
    """Index of the frame nearest each interval's middle (ties → earlier frame), compared in whole ticks of `hz`
    (`exact_hz`): twice a start against the sum of the interval's ends, so a middle is never rounded."""
    starts = np.round(np.asarray(frame_starts_s, np.float64) * hz).astype(np.int64)
    ends = np.round(np.asarray(intervals, np.float64) * hz).astype(np.int64)
    target2 = ends[:, 0] + ends[:, 1]  # twice the middle
    right = np.clip(np.searchsorted(2 * starts, target2, side="left"), 0, len(starts) - 1)
    left = np.clip(right - 1, 0, len(starts) - 1)
    take_left = np.abs(target2 - 2 * starts[left]) <= np.abs(2 * starts[right] - target2)
    return np.where(take_left, left, right)


def _video_stream(container: Any, path: Path, track: Track = None) -> Any:
    stream = choose_stream(container, "video", path, track)
    if not stream.codec_context.width or not stream.codec_context.height:
        raise InputError(f"{path}: the video stream has no picture size")
    stream.thread_count = 1  # one decode task per CPU that Ray gives it
    return stream


def _ticks_to_s(ticks: np.ndarray, time_base: Fraction) -> np.ndarray:
    """Integer stream ticks → float64 seconds (exact to float64 precision at any clip length)."""
    return ticks.astype(np.float64) * time_base.numerator / time_base.denominator


@dataclass(frozen=True)
class _Timing:
    """A video stream's display times, on the clip's timeline."""

    ticks: np.ndarray  # display times, stream ticks, increasing
    starts: np.ndarray  # their seconds on the clip's timeline
    end_s: float  # the end of the last frame
    duration_s: float  # D: end_s, or the container's end when the file is truncated
    keys: np.ndarray  # (K, 2) (pts, dts) of the keyframe packets, in decode order
    in_order: bool  # decoded frames carry their display PTS (False: the n-th picture out is at ticks[n])
    time_base: Fraction
    origin_s: float  # container seconds of clip time 0
    container_end_s: float | None  # container seconds where the container says the media ends
    data_end_s: float | None  # container seconds where the file's audio and video packets end (the latest)
    # not in_order: the display time of every picture the decoder gives, the n-th out at shown[n], over the whole
    # file (a cut clip's `ticks` are a part of it, but the decoder still starts at the file's first picture)
    shown: np.ndarray | None = None
    # where the demuxer skipped damaged bytes: the PTS of the first video packet after each skip (damage from there
    # on in decode order, media/decode.py `_tainted`), and for the last frame before it, in display order, the end
    # of its own showing (its PTS + duration: the frames lost in the skip, not it, were shown after that)
    after_skip: frozenset[int] = frozenset()
    before_skip: frozenset[int] = frozenset()  # the video packet read last before a skip: damaged itself
    cut_short: dict[int, int] = dataclasses.field(default_factory=dict)
    others_end_s: float | None = None  # the file's other streams' end (clip seconds) when this stream is shorter
    idr: frozenset[int] = frozenset()  # H.264: the PTS of the keyframes that are IDR pictures (`_GopTails`)
    stream_index: int | None = None  # the stream decoded (`choose_stream`): every later open takes the same
    streams: dict[str, Any] | None = None  # a file with other video streams: `stream_note`


def _timing(ticks: np.ndarray, end_ticks: int | None, base: _Timing) -> _Timing:
    """`base` with the display times `ticks` whose last frame ends at `end_ticks` (None: unknown, one frame of
    the nominal rate after it, `base.end_s` holding that length); D the container's end when it is more than
    TAIL_MIN_S later and the file's other streams stop short of it too (a truncated file, `truncated_end_s`)."""
    starts = _ticks_to_s(ticks, base.time_base) - base.origin_s
    if end_ticks is None or end_ticks <= ticks[-1]:
        end_s = float(starts[-1] + base.end_s)
    else:
        end_s = float(_ticks_to_s(np.array([end_ticks]), base.time_base)[0] - base.origin_s)
    cut_at = truncated_end_s(base.container_end_s, base.data_end_s, end_s + base.origin_s)
    duration = end_s if cut_at is None else cut_at - base.origin_s
    return dataclasses.replace(base, ticks=ticks, starts=starts, end_s=end_s, duration_s=duration)


def _frame_times(container: Any, stream: Any, path: Path) -> _Timing:
    """The stream's display times from the demuxer alone. Frames the demuxer marks for discarding (before an
    edit list's start) do not play (their keyframes still count for seeking)."""
    import av

    pts, ends, keys = [], [], []
    idr: set[int] = set()
    nal_length = _avcc_nal_length(stream) if stream.codec_context.codec.canonical_name == "h264" else None
    data_end: float | None = None
    resyncs = bool(RESYNCING_FORMATS & set(container.format.name.split(",")))
    byte_end, skipped, read_last = None, False, None
    after_skip: set[int] = set()
    before_skip: set[int] = set()
    cut_short: dict[int, int] = {}
    media = {s.index for s in media_streams(container)}
    try:
        # every stream: the audio says how far the file's data reaches, all of them where bytes were skipped
        for packet in container.demux(*container.streams):
            if packet.size and packet.stream_index in media and (end_s := packet_end_s(packet)) is not None:
                data_end = max(data_end or end_s, end_s)
            if resyncs and packet.size and packet.pos is not None and packet.pos >= 0:
                if byte_end is not None and packet.pos - byte_end > SKIP_MIN_BYTES:
                    skipped = True
                    if pts:  # the latest picture before the skip stops where its own duration ends
                        last = max(pts)
                        cut_short[last] = last + max(1, ends[pts.index(last)] - last)
                    if read_last is not None:  # the damage began inside it: its header held, its data may not
                        before_skip.add(read_last)
                byte_end = packet.pos + packet.size
                read_last = packet.pts if packet.stream_index == stream.index else None
            if packet.stream_index != stream.index:
                continue
            if skipped and packet.pts is not None:
                after_skip.add(packet.pts)
                skipped = False
            if packet.pts is None and packet.size:
                raise InputError(f"{path}: video packets without timestamps (raw stream?); remux it into mp4/mkv")
            if packet.pts is None:
                continue
            if packet.is_keyframe:
                keys.append((packet.pts, packet.dts if packet.dts is not None else packet.pts))
                if nal_length is not None and _h264_idr(bytes(packet), nal_length):
                    idr.add(packet.pts)
            if not packet.is_discard:
                pts.append(packet.pts)
                ends.append(packet.pts + max(0, packet.duration or 0))
    except (av.FFmpegError, IndexError) as e:  # a damaged container: the frames demuxed so far are all we know of
        # (IndexError: PyAV meeting a stream that damaged FLV data made lavf add while demuxing)
        log.warning("%s: demuxing stopped after %d frames: %s", path, len(pts), first_line(e))
    if not pts:
        raise InputError(f"{path}: video has no frames")
    ticks = np.unique(np.asarray(pts, np.int64))
    step = int(np.median(np.diff(ticks))) if len(ticks) > 1 else 0
    end = max(max(ends), int(ticks[-1]) + (step if max(ends) <= ticks[-1] else 0))
    # PTS are display times, except where the container stores none (AVI: the demuxer guesses them) or the
    # codec packs two pictures in a packet (MPEG-4 Part 2's packed B-frames)
    in_order = stream.codec_context.name != "mpeg4" and "avi" not in container.format.name.split(",")
    base = _Timing(ticks, ticks, 1 / float(stream.average_rate or stream.guessed_rate or 25), 0.0,
                   np.asarray(keys, np.int64).reshape(-1, 2), in_order, Fraction(stream.time_base),
                   origin_s(container), declared_end_s(container), data_end,
                   after_skip=frozenset(after_skip), before_skip=frozenset(before_skip), cut_short=cut_short,
                   idr=frozenset(idr), stream_index=stream.index, streams=stream_note(container, stream))
    if after_skip:
        log.warning("%s: damaged data: the demuxer skipped %d stretch(es) of bytes (first before the frame at PTS "
                    "%d): the pictures that depend on them are missing", path, len(after_skip), min(after_skip))
    timing = _timing(ticks, end, base)
    if timing.duration_s == timing.end_s and base.container_end_s is not None \
            and base.container_end_s - base.origin_s - timing.end_s > TAIL_MIN_S:
        log.info("%s: the video stream ends at %.2f s, before the file's other streams (%.2f s): a shorter stream, "
                 "not damage; its rows end there", path, timing.end_s, base.container_end_s - base.origin_s)
        timing = dataclasses.replace(timing, others_end_s=base.container_end_s - base.origin_s)
    return timing


def _best_effort_timing(path: Path, timing: _Timing) -> _Timing:
    """Display times from decoding, for streams whose PTS are not display times: ffmpeg's best-effort timestamp
    of each picture in the order the decoder gives them, which for these streams is the DTS of the packet that
    brought it out (ffmpeg's guess_correct_pts falls back to it once PTS go out of order); a picture without
    one (the last ones, flushed) comes one frame after the previous, as ffmpeg's own output stamps it."""
    import av

    step = int(np.median(np.diff(timing.ticks))) if len(timing.ticks) > 1 else 1
    times: list[int] = []
    with open_media(path) as container:
        stream = _video_stream(container, path, timing.stream_index)
        try:
            for packet in container.demux(stream):
                try:
                    frames = packet.decode()
                except av.FFmpegError:
                    continue
                for frame in frames:
                    t = frame.dts if frame.dts is not None else (times[-1] + step if times else frame.pts or 0)
                    times.append(max(t, times[-1] + 1) if times else t)  # never before the previous picture
        except (av.FFmpegError, IndexError):  # (IndexError: see `_frame_times`)
            pass
    if not times:
        raise InputError(f"{path}: no frame could be decoded")
    ticks = np.asarray(times, np.int64)
    return _timing(ticks, int(ticks[-1]) + step, dataclasses.replace(timing, in_order=False, shown=ticks))


class _NotInDisplayOrder(Exception):
    """Decoded frames' PTS are missing or out of order: they are not display times."""


def _packets_from(container: Any, stream: Any, key: tuple[int, int]) -> Iterator[Any] | None:
    """The stream's packets from keyframe `key` (pts, dts) on, in decode order, or None when no seek lands at or
    before it. A seek to its DTS with the backward flag should; where the demuxer lands after it (a timestamp
    search over MPEG-TS bytes), seek further back; packets before it are dropped undecoded."""
    import av

    one_s = max(1, round(1 / stream.time_base))
    back = 0
    for _ in range(SEEK_TRIES):
        try:
            container.seek(int(key[1]) - back, stream=stream, backward=True, any_frame=False)
        except av.FFmpegError:
            return None
        packets = container.demux(stream)
        for packet in packets:
            if packet.pts == key[0] and packet.is_keyframe:
                return itertools.chain([packet], packets)
            if packet.dts is not None and packet.dts > key[1]:
                break  # landed after it
        back = 2 * back or one_s
    return None


def _keyframe_before(keys: np.ndarray, first_pts: int) -> tuple[int, int] | None:
    """The last keyframe in decode order whose PTS is at or before `first_pts`."""
    at = np.flatnonzero(keys[:, 0] <= first_pts) if len(keys) else []
    return (int(keys[at[-1], 0]), int(keys[at[-1], 1])) if len(at) else None


def _decode_pictures(path: Path, wanted: set[int], view: picture.View, fast: bool, timing: _Timing,
                     span: tuple[int, int] | None = None) -> tuple[dict[int, np.ndarray], set[int], list[tuple[int, str]]]:
    """Decode the video stream in order; RGB pictures as displayed (`view`) of the `wanted` PTS, the PTS of
    every intact frame, and the (PTS, error) of packets the decoder refused. Frames the decoder flags as corrupt are not intact.
    `fast`: stop once every wanted picture is in, and skip decoding unwanted frames that no other frame refers
    to (non-reference B-frames); the intact set is then incomplete. `span` (first PTS, last PTS): a segment of
    the video; decoding starts at the keyframe at or before the first and stops after the last.
    Raises _NotInDisplayOrder when `timing.in_order` and the decoded PTS say otherwise."""
    import av

    pictures: dict[int, np.ndarray] = {}
    intact: set[int] = set()
    errors: list[tuple[int, str]] = []
    in_order = timing.in_order
    with open_media(path) as container:
        stream = _video_stream(container, path, timing.stream_index)
        packets = None
        key = _keyframe_before(timing.keys, span[0]) if in_order and span and span[0] > timing.ticks[0] else None
        if key is not None:
            packets = _packets_from(container, stream, key)
        if packets is None:
            if key is not None:
                log.info("%s: no seek reached the keyframe at PTS %d; decoding from the start", path, key[0])
                container.close()
                container = open_media(path)
                stream = _video_stream(container, path, timing.stream_index)
            packets = container.demux(stream)
        fast = fast and in_order  # display order counts every picture out: none may be skipped
        context, shown, last, corrupt = stream.codec_context, 0, None, set()
        # damage in decode order (`_tainted`): the packets' PTS as fed, the keyframes', and (position, whether the
        # packet itself is damaged) of each damage: a packet cut short or refused, a corrupt picture, skipped bytes
        order: list[int] = []
        at: dict[int, int] = {}
        key_pts: set[int] = set()
        events: list[tuple[int, bool]] = []
        damaged = False  # display-order mode: since the last damage, no keyframe's picture came out yet
        tails = _GopTails(timing.idr, wanted) if fast and timing.idr and GOP_TAILS else None
        try:
            for packet in packets:
                if tails is not None and tails.drop(packet):
                    continue
                if packet.pts is not None:
                    at[packet.pts] = len(order)
                    order.append(packet.pts)
                    if packet.is_keyframe:
                        key_pts.add(packet.pts)
                    if packet.pts in timing.after_skip or packet.pts in timing.before_skip:
                        events.append((len(order) - 1, packet.pts in timing.before_skip))
                        damaged = True
                if packet.is_corrupt and packet.pts is not None:  # cut short (a truncated file's last packet)
                    corrupt.add(packet.pts)
                    events.append((len(order) - 1, True))
                    damaged = True
                if fast and SKIP_NONREF:
                    # an unwanted picture no other picture refers to: the decoder parses its slice header and
                    # goes no further (h264: after a frame's first slice, so a second field is never skipped alone;
                    # HEVC: the _N NAL types). Dropping the packet before the decoder saves no more than noise
                    # (docs/scale.md, issue 37), and would have to know fields and parameter sets itself.
                    context.skip_frame = "DEFAULT" if packet.pts is None or packet.pts in wanted else "NONREF"
                try:
                    frames = packet.decode()
                except av.FFmpegError as e:
                    errors.append((packet.pts if packet.pts is not None else -1, first_line(e)))
                    if order:
                        events.append((len(order) - 1, packet.pts is not None))
                    damaged = True
                    continue
                for frame in frames:
                    if in_order:
                        if frame.pts is None or (last is not None and frame.pts <= last):
                            if not errors and not events and not frame.is_corrupt:  # (damage may come out of order)
                                raise _NotInDisplayOrder(f"PTS {frame.pts} after {last}")
                            if frame.pts is None:
                                continue
                        pts = frame.pts
                        last = max(last or pts, pts)
                        if frame.is_corrupt and pts in at:
                            events.append((at[pts], True))
                    else:  # the n-th picture out is shown at the n-th display time of the whole file
                        assert timing.shown is not None
                        if shown >= len(timing.shown):
                            continue
                        pts = last = int(timing.shown[shown])
                        shown += 1
                        damaged = (damaged or frame.is_corrupt) and not (frame.key_frame and not frame.is_corrupt)
                        if damaged:  # (from the damage up to a keyframe's picture: references may be lost)
                            continue
                    if frame.is_corrupt or (in_order and pts in corrupt):
                        continue
                    intact.add(pts)
                    if pts in wanted and pts not in pictures:
                        pictures[pts] = view.rgb(frame)  # the one place a frame becomes RGB
                if tails is not None:
                    tails.fed(packet.pts, pictures)
                # the decoder gives frames in presentation order: past the span's end, nothing it needs comes
                if (fast and len(pictures) == len(wanted)) or (span and last is not None and last > span[1]):
                    break
        except (av.FFmpegError, IndexError) as e:  # (IndexError: see `_frame_times`)
            errors.append((-1, f"demuxing stopped: {first_line(e)}"))
        finally:
            container.close()
    if in_order and events:  # a picture decoded from lost or damaged references is not what the file shows
        for pts in _tainted(order, key_pts, events):
            pictures.pop(pts, None)
            intact.discard(pts)
    return pictures, intact, errors


class _GopTails:
    """The fast pass's GOP tails (H.264): once every wanted picture shown before the next IDR keyframe is out, the
    packets up to that keyframe are dropped undecoded. An IDR picture empties the decoder's references, so nothing
    from it on refers to what was dropped and every picture after it is, bit for bit, what a full decode gives
    (a keyframe that is not an IDR, a recovery point, may be followed by pictures that refer back: no skip there).
    Plain ints per packet (no numpy): a 64x48 picture decodes in ~40 us, and this runs for every packet."""

    def __init__(self, idr: frozenset[int], wanted: set[int]) -> None:
        self.idr = sorted(idr)
        self.wanted = sorted(wanted)
        # how many wanted pictures are shown before each IDR keyframe
        self.before = np.searchsorted(np.asarray(self.wanted, np.int64), self.idr).tolist()
        self.next = 0  # idr[next]: the first IDR keyframe after every PTS fed so far
        self.done = 0  # wanted[:done] are out (the decoder gives pictures in display order)
        self.skip_to: int | None = None  # dropping packets until the IDR keyframe with this PTS

    def drop(self, packet: Any) -> bool:
        """Whether `packet` goes undecoded (never the demuxer's final empty packet, which flushes the decoder)."""
        if self.skip_to is None or not packet.size:
            return False
        if packet.pts == self.skip_to and packet.is_keyframe:
            self.skip_to = None
            return False
        return True

    def fed(self, pts: int | None, pictures: dict[int, np.ndarray]) -> None:
        """After a packet went through the decoder: start skipping when the wanted pictures before the next IDR
        are all out."""
        if pts is None:
            return
        while self.next < len(self.idr) and self.idr[self.next] <= pts:
            self.next += 1
        while self.done < len(self.wanted) and self.wanted[self.done] in pictures:
            self.done += 1  # (a wanted picture that never comes, lost to damage, stops the skipping: the slow pass)
        if self.next < len(self.idr) and self.done >= self.before[self.next]:
            self.skip_to = self.idr[self.next]


def _avcc_nal_length(stream: Any) -> int:
    """Bytes of the NAL unit length prefix of an H.264 stream stored as in MP4/Matroska (avcC extradata: its
    lengthSizeMinusOne), 0 for Annex B start codes (MPEG-TS, raw)."""
    extra = stream.codec_context.extradata or b""
    return (extra[4] & 3) + 1 if len(extra) > 4 and extra[0] == 1 else 0


def _h264_idr(data: bytes, nal_length: int) -> bool:
    """Whether an H.264 packet holds an IDR slice (NAL unit type 5), its NAL units length-prefixed
    (`nal_length` bytes) or, for 0, after 00 00 01 start codes."""
    if nal_length == 0:
        at = data.find(b"\x00\x00\x01")
        while at >= 0 and at + 3 < len(data):
            if data[at + 3] & 0x1F == 5:
                return True
            at = data.find(b"\x00\x00\x01", at + 3)
        return False
    at = 0
    while at + nal_length < len(data):
        size = int.from_bytes(data[at:at + nal_length], "big")
        if data[at + nal_length] & 0x1F == 5:
            return True
        at += nal_length + size
    return False


def _tainted(order: list[int], keys: set[int], events: list[tuple[int, bool]]) -> set[int]:
    """The PTS of the pictures that may refer to damaged data: from each damage (a position in the decode
    `order`; the packet there included when it is damaged itself) up to the next keyframe, and after that
    keyframe, before the one after it, the pictures shown before it (an open GOP's leading pictures refer back
    across it). A picture the decoder does not flag is still wrong when what it refers to was lost."""
    out: set[int] = set()
    for e, own in sorted(set(events)):
        i = e
        if own or order[e] not in keys:
            out.add(order[e])
            i = e + 1
            while i < len(order) and order[i] not in keys:
                out.add(order[i])
                i += 1
        if i < len(order):
            key = order[i]
            i += 1
            while i < len(order) and order[i] not in keys:
                if order[i] < key:
                    out.add(order[i])
                i += 1
    return out


def _shown_until(timing: _Timing) -> np.ndarray:
    """Where each frame stops showing, clip seconds: the next frame's start (the last one's: `end_s`), except
    before bytes the demuxer skipped, where the frames lost in the skip were shown: there its own end."""
    until = np.append(timing.starts[1:], timing.end_s)
    if timing.cut_short:
        scale = timing.time_base.numerator / timing.time_base.denominator
        for i, tick in enumerate(timing.ticks.tolist()):
            if tick in timing.cut_short:
                until[i] = min(until[i], timing.starts[i] + (timing.cut_short[tick] - tick) * scale)
    return until


def _within_rows(index: np.ndarray, intervals: np.ndarray, timing: _Timing) -> np.ndarray:
    """`index` where each row's frame is shown during the row; elsewhere the frame nearest the row's middle among
    those that are, or -1 (a row holds a picture of its own second or none: issue 35, a row [6, 7) held the picture
    at 7.133 s across a skipped stretch of an MKV)."""
    starts, until = timing.starts, _shown_until(timing)
    i = np.maximum(index, 0)
    outside = (index >= 0) & ~((starts[i] < intervals[:, 1]) & (until[i] > intervals[:, 0]))
    if not outside.any():
        return index
    return _fallback_frames(index, outside, timing.ticks, starts, until, intervals, set(timing.ticks.tolist()),
                            exact_hz(timing.time_base, starts, intervals))


def _fallback_frames(index: np.ndarray, lost: np.ndarray, ticks: np.ndarray, starts: np.ndarray,
                     shown_until: np.ndarray, intervals: np.ndarray, intact: set[int],
                     hz: int = 2 * MICROSECOND_HZ) -> np.ndarray:
    """For rows whose chosen frame is lost: the intact frame nearest the middle among those shown during the
    row's interval (frame i is shown over [start_i, shown_until_i): `_shown_until`), or -1 when none is."""
    ok = np.fromiter((t in intact for t in ticks.tolist()), bool, len(ticks))
    out = index.copy()
    for row in np.flatnonzero(lost):
        lo, hi = intervals[row]
        candidates = np.flatnonzero(ok & (starts < hi) & (shown_until > lo))
        if candidates.size == 0:
            out[row] = -1
            continue
        out[row] = candidates[pick_frames(starts[candidates], intervals[row:row + 1], hz)[0]]
    return out


def decode_frames(path: Path | str, clip: tuple[float, float | None] | None = None, track: Track = None) -> Frames:
    """One RGB picture per second of the video (see the module docstring for which); of the clip
    [start_s, end_s) of the file, on the clip's own timeline, when `clip` is given (media/cut.py); of the video
    stream `track` names (media/container.py `choose_stream`: by default the one ffmpeg shows)."""
    return decode_frames_segment(path, clip, track=track)[0]


def segment_rows(n_rows: int, frame_bytes: int, max_bytes: int | None) -> list[tuple[int, int]]:
    """Row ranges [a, b) of the segments a video of `n_rows` rows is decoded in: each holds at most
    `max_bytes` of pixels (one row at least), all of them one segment when `max_bytes` is None."""
    step = n_rows if max_bytes is None else max(1, max_bytes // max(1, frame_bytes))
    return [(a, min(n_rows, a + step)) for a in range(0, n_rows, max(1, step))] or [(0, 0)]


def _timing_in_clip(timing: _Timing, clip: tuple[float, float | None], path: Path) -> _Timing:
    """The frames of the clip [start_s, end_s) of the file, on the clip's own timeline (media/cut.py)."""
    keep, starts, duration = cut_frame_times(timing.starts, timing.duration_s, *clip, path)
    return dataclasses.replace(timing, ticks=timing.ticks[keep], starts=starts,
                               end_s=min(timing.end_s - clip[0], duration), duration_s=duration)


def _pictures(path: Path, index: np.ndarray, intervals: np.ndarray, view: picture.View, timing: _Timing,
              span: tuple[int, int] | None) -> tuple[np.ndarray, dict[int, np.ndarray], list[tuple[int, str]]]:
    """(The frame index per row, -1 where none (the damaged-data rule), the pictures by PTS, decode errors)."""
    ticks, chosen = timing.ticks, index >= 0
    wanted = set(ticks[index[chosen]].tolist())
    pictures, intact, errors = _decode_pictures(path, wanted, view, True, timing, span)
    lost = chosen & np.array([i >= 0 and int(ticks[i]) not in pictures for i in index], bool)
    if lost.any():  # damaged data: decode every frame to know which are intact, choose again among those
        pictures, intact, errors = _decode_pictures(path, wanted, view, False, timing, span)
        lost = chosen & np.array([i >= 0 and int(ticks[i]) not in pictures for i in index], bool)
        index = _fallback_frames(index, lost, ticks, timing.starts, _shown_until(timing), intervals, intact,
                                 exact_hz(timing.time_base, timing.starts, intervals))
        extra = set(ticks[index[index >= 0]].tolist()) - set(pictures)
        if extra:
            pictures.update(_decode_pictures(path, extra, view, True, timing, span)[0])
        index = np.where([i >= 0 and int(ticks[i]) in pictures for i in index], index, -1)
    return index, pictures, errors


@dataclass(frozen=True)
class RowPlan:
    """The rows of one segment of a video and the source frame each takes, before any pixel is decoded: what
    the CPU path decodes next, and what a GPU decoder (media/nvdec.py) is asked for, so both take the same
    frames. `index[r]`: the frame (into `timing.ticks`) for row r, -1 for a row during which no frame shows."""

    path: Path
    view: picture.View
    timing: _Timing
    fps: float
    stream_index: int
    codec: str
    pixel_format: str | None
    intervals: np.ndarray
    index: np.ndarray
    played: np.ndarray
    segments: int
    span: tuple[int, int] | None  # (first PTS, last PTS) a segment of several decodes, None: the whole video
    clip: tuple[float, float | None] | None = None
    own_start: bool = True  # the first frame on this timeline is the stream's first (a clip may begin after it)

    def unstarted(self) -> np.ndarray:
        """Rows that end before the video's first frame starts (a stream that starts late: an empty edit,
        `-itsoffset`): no picture is due there, so they are not missing data. In a clip that begins after the
        stream's first frame, a row before the clip's first frame is no late start: it is missing as before."""
        if not self.own_start:
            return np.zeros(len(self.intervals), bool)
        return np.round(self.intervals[:, 1] * 1e6) <= round(float(self.timing.starts[0]) * 1e6)

    def notes(self, index: np.ndarray) -> dict[str, Any]:
        """What `Frames` says besides its rows, given the frame each row took (-1: none): the seconds missing
        (rows whose frame did not decode, a truncated tail), the late start, the shorter stream, the other
        streams. A clip's own end is its cut's, not the file's; its late start (the clip's time of the stream's
        first frame) is the file's."""
        unstarted = self.unstarted()
        late = bool(unstarted.any())
        return {"missing_s": self.intervals[(index < 0) & ~unstarted],
                "stream_start_s": round(float(self.timing.starts[0]), 6) if late else None,
                "streams_end_s": None if self.clip else self.timing.others_end_s, "streams": self.timing.streams}


def plan_rows(path: Path | str, clip: tuple[float, float | None] | None = None, segment: int = 0,
              max_bytes: int | None = None, best_effort: bool = False, track: Track = None) -> RowPlan:
    """Demuxing alone (and the first frame, for the orientation): the rows of segment `segment` and the frame
    each takes (the module docstring's rule); see `decode_frames_segment`."""
    path = existing(path, "video")
    with open_media(path) as container:  # its own pass: the orientation comes on the first decoded frame
        view = picture.probe_view(container, _video_stream(container, path, track), path)
    with open_media(path) as container:
        stream = _video_stream(container, path, track)
        fps = float(stream.average_rate or stream.guessed_rate or 0)
        timing = _frame_times(container, stream, path)
        stream_index, codec = stream.index, stream.codec_context.codec.canonical_name
        pixel_format = stream.codec_context.format.name if stream.codec_context.format else None
    if best_effort or not timing.in_order:
        timing = _best_effort_timing(path, timing)
    first_tick = int(timing.ticks[0])
    if clip is not None:
        timing = _timing_in_clip(timing, clip, path)
    all_intervals = fixed_rate_intervals(timing.duration_s, 1.0, slack_rows=1e-6)  # [k, min(k+1, D))
    segments = segment_rows(len(all_intervals), view.frame_bytes, max_bytes)
    if not 0 <= segment < len(segments):
        raise ValueError(f"{path}: segment {segment} of a video decoded in {len(segments)}")
    if segment == 0 and timing.duration_s > timing.end_s:
        log.warning("%s: truncated file? the last frame ends at %.2f s but the container says the media lasts "
                    "%.2f s: the seconds after have no rows (missing_s)", path, timing.end_s, timing.duration_s)
    lo, hi = segments[segment]
    intervals = all_intervals[lo:hi]
    starts, ticks = timing.starts, timing.ticks
    played = np.round(intervals[:, 0] * 1e6) < round(timing.end_s * 1e6)  # rows during which some frame shows
    index = np.full(len(intervals), -1)
    span = None
    if played.any():
        index[played] = pick_frames(starts, intervals[played], exact_hz(timing.time_base, starts, intervals))
        index = _within_rows(index, intervals, timing)
        if len(segments) > 1:  # from the frame shown at the segment's start (a fallback may use it) to its end
            first = max(0, int(np.searchsorted(starts, intervals[0, 0], side="right")) - 1)
            last = min(len(ticks) - 1, int(np.searchsorted(starts, intervals[-1, 1], side="left")))
            span = (int(ticks[first]), int(ticks[last]))
    return RowPlan(path, view, timing, fps, stream_index, codec, pixel_format, intervals, index, played,
                   len(segments), span, clip, int(timing.ticks[0]) == first_tick)


def decode_frames_segment(path: Path | str, clip: tuple[float, float | None] | None = None, segment: int = 0,
                          max_bytes: int | None = None, best_effort: bool = False,
                          plan: RowPlan | None = None, track: Track = None) -> tuple[Frames, int]:
    """(The rows of one segment of the video, the number of segments): rows are cut into segments of at most
    `max_bytes` of RGB pixels (`segment_rows`), so a long video never has all its frames in memory at once.
    Each segment's rows are those the whole video would give (same frame choice, same damaged-data rule
    within the segment); `intervals`, `pts_s` and `missing_s` are the segment's, `duration_s` the video's.
    `plan`: this segment's `plan_rows`, made already (media/nvdec.py decided the CPU path decodes it)."""
    plan = plan or plan_rows(path, clip, segment, max_bytes, best_effort, track)
    path, view, timing, intervals, index = plan.path, plan.view, plan.timing, plan.intervals, plan.index
    errors: list[tuple[int, str]] = []
    pictures: dict[int, np.ndarray] = {}
    if plan.played.any():
        try:
            index, pictures, errors = _pictures(path, index, intervals, view, timing, plan.span)
        except _NotInDisplayOrder as e:  # (a whole video always meets it; a segment may miss it: docs/design.md)
            log.info("%s: decoded timestamps are not display times (%s): ffmpeg's best-effort times instead", path, e)
            return decode_frames_segment(path, clip, segment, max_bytes, best_effort=True, track=plan.stream_index)
    keep = index >= 0
    if not keep.any() and plan.segments == 1:
        why = f": {errors[0][1]}" if errors else ""
        raise InputError(f"{path}: no frame could be decoded{why}")
    damaged = intervals[~keep & plan.played & ~plan.unstarted()]
    if len(damaged):
        where = ", ".join(f"{a:g}-{b:g} s" for a, b in damaged[:5]) + (" …" if len(damaged) > 5 else "")
        log.warning("%s: damaged video data, %d of %d seconds have no decodable frame (%s)",
                    path, len(damaged), len(intervals), where)
    notes = plan.notes(index)
    if segment == 0 and notes["stream_start_s"] is not None:
        log.info("%s: the video starts at %.2f s, after the file's other streams: a late start, not damage; the "
                 "seconds before it have no rows", path, notes["stream_start_s"])
    ticks = timing.ticks
    pixels = (np.stack([pictures[int(ticks[i])] for i in index[keep]]) if keep.any()
              else np.zeros((0, *view.display_wh[::-1], 3), np.uint8))
    frames = Frames(pixels=pixels, intervals=intervals[keep], pts_s=timing.starts[index[keep]],
                    source_fps=plan.fps, duration_s=timing.duration_s, picture=view.attrs(), **notes)
    return frames, plan.segments
