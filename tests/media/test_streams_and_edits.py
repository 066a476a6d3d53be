"""Issue 50's classes against ffprobe/ffmpeg's own output on files made here: stream-copied cuts (edit lists with
pre-roll), which stream of several is decoded, a video that starts late, a fragmented MP4's timestamp step, and
exact ties in the frame choice.

- A stream-copied cut (`ffmpeg -ss S -i src -c copy cut.mp4`) keeps the samples from the keyframe before S and an
  edit list that hides them: ffprobe says the cut lasts src - S; a count of the samples at the frame rate is the
  pre-roll longer (and called the file truncated).
- Several streams of a kind: ffmpeg shows the default-flagged one (`av_find_best_stream`), never cover art; the
  reference is ffmpeg's own decode of the file with no stream named.
- A late start (`-itsoffset`, an empty edit) and a fragmented MP4's step after its first AAC packet are notes, not
  damage: nothing in `missing_s`.
- Ties: the rule (docs/design.md) on ffprobe's integer timestamps in exact rationals.
"""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from media.container import InputError
from media.decode import decode_audio, decode_frames, decode_frames_segment
from testing.synth_display import FPS, display_frames, read_index
from tests.media.test_stream_timelines import runner_books

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg and ffprobe")


def _run(*args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(args, input=data, capture_output=True, check=True).stdout


def _probe(path: Path, entries: str, select: str | None = None) -> list[dict[str, str]]:
    """ffprobe's `entries` as one dict per section (stream, frame, format...)."""
    out = _run("ffprobe", "-v", "error", *(["-select_streams", select] if select else []), "-show_entries", entries,
               "-of", "compact=nokey=0", str(path)).decode()
    rows = []
    sections = {e.split("=")[0] for e in entries.split(":")}
    for line in out.splitlines():
        fields = line.split("|")
        if fields[0] not in sections:  # (side data, blank lines)
            continue
        rows.append({"section": fields[0], **dict(f.split("=", 1) for f in fields[1:] if "=" in f)})
    return rows


def _barcode_video(path: Path, seconds: float, keyint_s: float, *extra: str) -> Path:
    """`seconds` of pictures that show their own index (testing/synth_display.py) at FPS, H.264 with a keyframe
    every `keyint_s` exactly, and a 440 Hz tone."""
    frames = display_frames(round(seconds * FPS))
    _run("ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "96x64", "-framerate",
         str(FPS), "-i", "-", "-f", "lavfi", "-i", f"sine=d={seconds}", "-c:v", "libx264", "-preset", "ultrafast",
         "-crf", "16", "-g", str(round(keyint_s * FPS)), "-keyint_min", str(round(keyint_s * FPS)),
         "-sc_threshold", "0", "-bf", "2", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", *extra, str(path),
         data=frames.tobytes())
    return path


def _shown(path: Path) -> tuple[list[Fraction], Fraction, list[int]]:
    """(Display times of the frames ffmpeg shows, exact, from the format's start; the end of the last one; the
    index each picture shows), from ffprobe's integer best-effort timestamps and ffmpeg's own decode."""
    [stream] = _probe(path, "stream=time_base,start_time", "v:0")
    tb = Fraction(stream["time_base"])
    [fmt] = _probe(path, "format=start_time")
    origin = Fraction(fmt["start_time"])
    frames = _probe(path, "frame=best_effort_timestamp,pkt_duration", "v:0")
    ticks = [int(f["best_effort_timestamp"]) for f in frames]
    end = ticks[-1] + int(frames[-1]["pkt_duration"])
    raw = _run("ffmpeg", "-v", "error", "-i", str(path), "-map", "0:v:0", "-vsync", "passthrough", "-f", "rawvideo",
               "-pix_fmt", "rgb24", "-")
    pictures = np.frombuffer(raw, np.uint8).reshape(-1, 64, 96, 3)
    assert len(pictures) == len(ticks)
    return [t * tb - origin for t in ticks], end * tb - origin, [read_index(p) for p in pictures]


def _rule(times: list[Fraction], duration: Fraction) -> list[int | None]:
    """docs/design.md's rule in exact arithmetic: row k, [k, min(k+1, D)), takes the frame nearest its middle,
    ties to the earlier; None for a row that ends before the first frame starts."""
    out: list[int | None] = []
    for k in range(math.ceil(duration)):
        lo, hi = Fraction(k), min(Fraction(k + 1), duration)
        if hi <= times[0]:
            out.append(None)
            continue
        mid = (lo + hi) / 2
        out.append(min(range(len(times)), key=lambda i: (abs(times[i] - mid), i)))
    return out


def _check_rows(path: Path, frames, times: list[Fraction], duration: Fraction, shows: list[int]) -> None:
    want = _rule(times, duration)
    rows = [k for k, w in enumerate(want) if w is not None]
    np.testing.assert_array_equal(frames.intervals[:, 0], rows)
    assert [read_index(p) for p in frames.pixels] == [shows[want[k]] for k in rows], path.name
    assert frames.pts_s.tolist() == pytest.approx([float(times[want[k]]) for k in rows], abs=1e-9)


# 1. stream-copied cuts: (container, keyframe interval s, cut at s)
CUTS = [("mp4", 3.0, 1.5), ("mov", 3.0, 1.5), ("mp4", 4.0, 2.2), ("mov", 2.0, 0.9), ("mp4", 3.0, 4.6)]


@pytest.mark.parametrize(("ext", "keyint_s", "cut_s"), CUTS, ids=[f"{e}-g{k:g}-ss{c:g}" for e, k, c in CUTS])
def test_a_stream_copied_cut_reads_as_ffprobe_shows_it(tmp_path: Path, ext: str, keyint_s: float, cut_s: float,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    src = _barcode_video(tmp_path / f"src.{ext}", 12, keyint_s)
    path = tmp_path / f"cut.{ext}"
    _run("ffmpeg", "-loglevel", "error", "-y", "-ss", str(cut_s), "-i", str(src), "-c", "copy", str(path))
    [fmt] = _probe(path, "format=duration")
    times, end, shows = _shown(path)
    # D is the last frame's end (docs/design.md), which in a cut from a B-frame stream may fall short of the
    # edit list's end by less than a frame; the edit list's end is what ffprobe says
    assert 0 <= float(fmt["duration"]) - float(end) < 1 / FPS, "the reference's own check"
    with caplog.at_level(logging.INFO):
        frames, audio = decode_frames(path), decode_audio(path)
    assert frames.duration_s == pytest.approx(float(end), abs=1e-9)
    assert not len(frames.missing_s) and frames.stream_start_s is None
    _check_rows(path, frames, times, end, shows)
    assert audio.duration_s == pytest.approx(float(fmt["duration"]), abs=0.03) and not len(audio.missing_s)
    assert not any("truncated" in r.getMessage() or "damaged" in r.getMessage() for r in caplog.records)
    # segments of one row each (a seek per row) give the same rows
    first, n = decode_frames_segment(path, None, 0, 96 * 64 * 3)
    parts = [first] + [decode_frames_segment(path, None, s, 96 * 64 * 3)[0] for s in range(1, n)]
    np.testing.assert_array_equal(np.concatenate([p.pixels for p in parts]), frames.pixels)


# 2. and 3. stream selection
def _tone(freq: int, seconds: float = 4, channels: int = 1) -> list[str]:
    layout = "mono" if channels == 1 else "stereo"
    return ["-f", "lavfi", "-i", f"sine=f={freq}:d={seconds},aformat=channel_layouts={layout}"]


def _video(size: str, rate: int, seconds: float = 4) -> list[str]:
    return ["-f", "lavfi", "-i", f"testsrc2=s={size}:r={rate}:d={seconds}"]


def _dominant_hz(samples: np.ndarray, rate_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples[rate_hz // 2:rate_hz * 3]))
    return float(np.argmax(spectrum) * rate_hz / (2 * (len(spectrum) - 1)))


# (audio inputs as (frequency, channels), the index among them flagged default or None, language tags)
AUDIO_LAYOUTS = {
    "second-default": ([(440, 1), (880, 1)], 1, None),
    "first-default": ([(440, 1), (880, 1)], 0, None),
    "third-of-three-default": ([(440, 1), (660, 1), (880, 1)], 2, None),
    "second-default-fewer-channels": ([(440, 2), (880, 1)], 1, ("eng", "fra")),
}


@pytest.mark.parametrize("ext", ["mp4", "mkv"])
@pytest.mark.parametrize("layout", sorted(AUDIO_LAYOUTS))
def test_the_audio_track_is_the_one_ffmpeg_plays(tmp_path: Path, layout: str, ext: str) -> None:
    tones, default, languages = AUDIO_LAYOUTS[layout]
    path = tmp_path / f"{layout}.{ext}"
    inputs = [*_video("160x90", 25)] + [a for f, c in tones for a in _tone(f, channels=c)]
    maps = [a for i in range(len(tones) + 1) for a in ("-map", str(i))]
    flags = [a for i in range(len(tones)) for a in (f"-disposition:a:{i}", "default" if i == default else "0")]
    tags = [a for i, lang in enumerate(languages or ()) for a in (f"-metadata:s:a:{i}", f"language={lang}")]
    _run("ffmpeg", "-loglevel", "error", "-y", *inputs, *maps, "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac",
         *flags, *tags, str(path))
    reference = np.frombuffer(_run("ffmpeg", "-v", "error", "-i", str(path), "-vn", "-ac", "1", "-ar", "16000", "-f",
                                   "f32le", "-"), np.float32)
    audio = decode_audio(path)
    assert _dominant_hz(audio.samples, 16000) == pytest.approx(_dominant_hz(reference, 16000), abs=2)
    assert _dominant_hz(audio.samples, 16000) == pytest.approx(tones[default][0], abs=2)
    indices = [int(s["index"]) for s in _probe(path, "stream=index", "a")]
    assert audio.streams is not None and audio.streams["index"] == indices[default]
    assert [o["index"] for o in audio.streams["others"]] == [i for i in indices if i != indices[default]]
    # another track by index, or by language
    other = indices[1 - default if default < 2 else 0]
    chosen = decode_audio(path, track=other)
    assert _dominant_hz(chosen.samples, 16000) == pytest.approx(tones[indices.index(other)][0], abs=2)
    if languages:
        assert _dominant_hz(decode_audio(path, track="eng").samples, 16000) == pytest.approx(tones[0][0], abs=2)
        assert audio.streams["others"][0]["language"] == "eng"
    with pytest.raises(InputError, match=rf"{path.name}: no audio stream language 'deu'; the file has #"):
        decode_audio(path, track="deu")
    with pytest.raises(InputError, match=rf"{path.name}: no audio stream #0"):  # (#0 is the video)
        decode_audio(path, track=0)


def test_a_file_with_one_track_says_nothing_of_streams(tmp_path: Path) -> None:
    path = _barcode_video(tmp_path / "one.mp4", 3, 1)
    assert decode_frames(path).streams is None and decode_audio(path).streams is None


# (video inputs as (size, rate), the index among them flagged default or None)
VIDEO_LAYOUTS = {
    "thumbnail-first-main-default": ([("160x90", 5), ("320x180", 25)], 1),
    "main-first-default": ([("320x180", 25), ("160x90", 5)], 0),
    "small-default-second": ([("320x180", 25), ("160x90", 25)], 1),
    "none-default-main-second": ([("160x90", 5), ("320x180", 25)], None),
}


@pytest.mark.parametrize("ext", ["mp4", "mkv"])
@pytest.mark.parametrize("layout", sorted(VIDEO_LAYOUTS))
def test_the_video_stream_is_the_one_ffmpeg_shows(tmp_path: Path, layout: str, ext: str) -> None:
    videos, default = VIDEO_LAYOUTS[layout]
    path = tmp_path / f"{layout}.{ext}"
    inputs = [a for size, rate in videos for a in _video(size, rate)] + _tone(440)
    maps = [a for i in range(len(videos) + 1) for a in ("-map", str(i))]
    flags = [a for i in range(len(videos)) for a in (f"-disposition:v:{i}", "default" if i == default else "0")]
    _run("ffmpeg", "-loglevel", "error", "-y", *inputs, *maps, "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac",
         *flags, str(path))
    # ffplay's choice is av_find_best_stream's: with no default flag (Matroska writes one on every track unless
    # told), ffprobe's own stream order and sizes say which one ffmpeg's CLI shows: the largest
    shown = _run("ffmpeg", "-v", "error", "-i", str(path), "-frames:v", "1", "-f", "image2pipe", "-c:v", "ppm", "-")
    want_wh = [int(v) for v in shown.split(b"\n")[1].split()]
    frames = decode_frames(path)
    assert [frames.pixels.shape[2], frames.pixels.shape[1]] == want_wh == frames.picture["display_size"]
    v_indices = [int(s["index"]) for s in _probe(path, "stream=index", "v")]
    want = v_indices[[size for size, _ in videos].index(f"{want_wh[0]}x{want_wh[1]}")]
    assert frames.streams is not None and frames.streams["index"] == want
    assert [o["size"] for o in frames.streams["others"]] == [[int(v) for v in s.split("x")] for s, _ in videos
                                                             if s != f"{want_wh[0]}x{want_wh[1]}"]
    other = next(i for i in v_indices if i != want)
    assert decode_frames(path, track=other).streams["index"] == other


# 4. a video that starts late
LATE = [("mp4", 1.5), ("mov", 2.3), ("mkv", 1.5), ("mp4", 3.2)]


@pytest.mark.parametrize(("ext", "offset_s"), LATE, ids=[f"{e}-{o:g}" for e, o in LATE])
def test_a_video_that_starts_late_is_a_note_not_damage(tmp_path: Path, ext: str, offset_s: float,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    video = _barcode_video(tmp_path / "v.mp4", 6, 1, "-an")
    audio = tmp_path / "a.m4a"
    _run("ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "sine=d=10", "-c:a", "aac", str(audio))
    path = tmp_path / f"late.{ext}"
    _run("ffmpeg", "-loglevel", "error", "-y", "-itsoffset", str(offset_s), "-i", str(video), "-i", str(audio),
         "-map", "0:v", "-map", "1:a", "-c", "copy", str(path))
    times, end, shows = _shown(path)
    assert float(times[0]) == pytest.approx(offset_s, abs=0.05), "the reference's own check"
    with caplog.at_level(logging.INFO):
        frames = decode_frames(path)
    assert not len(frames.missing_s)
    assert frames.stream_start_s == pytest.approx(float(times[0]), abs=1e-6)
    _check_rows(path, frames, times, end, shows)
    assert not any("damaged" in r.getMessage() or "truncated" in r.getMessage() for r in caplog.records)
    assert any(str(path) in r.getMessage() and "late start" in r.getMessage() for r in caplog.records)
    # a clip cut from it (media/cut.py) starting before the video: the same note on the clip's timeline
    clip = decode_frames(path, clip=(0.5, None))
    assert not len(clip.missing_s) and clip.stream_start_s == pytest.approx(float(times[0]) - 0.5, abs=1e-6)


# 5. fragmented MP4
@pytest.mark.parametrize("flags", ["frag_keyframe+empty_moov", "frag_keyframe+empty_moov+default_base_moof",
                                   "frag_every_frame+empty_moov"])
def test_a_fragmented_mp4_has_no_hole(tmp_path: Path, flags: str, caplog: pytest.LogCaptureFixture) -> None:
    path = _barcode_video(tmp_path / "frag.mp4", 8, 1, "-movflags", flags)
    [audio_start] = _probe(path, "stream=start_time", "a")
    steps = [(int(p["pts"]), p["duration"]) for p in _probe(path, "packet=pts,duration", "a")[:3]]
    with caplog.at_level(logging.INFO):
        frames, audio = decode_frames(path), decode_audio(path)
    assert not len(audio.missing_s) and not len(frames.missing_s), steps
    times, end, shows = _shown(path)
    _check_rows(path, frames, times, end, shows)
    # placed by its timestamps: the track starts where ffprobe says, the tone after the step where its packets say
    assert float(audio_start["start_time"]) == pytest.approx(0.0, abs=1e-6)
    assert not any("damaged" in r.getMessage() for r in caplog.records)


def test_a_real_hole_in_an_mp4_audio_track_is_still_missing(tmp_path: Path) -> None:
    """The line between a step and a hole: packets that do not decode leave a hole even in MP4."""
    path = _barcode_video(tmp_path / "whole.mp4", 6, 1, "-movflags", "+faststart")
    import av

    with av.open(str(path)) as c:
        a = c.streams.audio[0]
        spans = [(p.pos, p.size) for p in c.demux(a) if p.size and 2.0 <= float(p.pts * a.time_base) < 2.3]
    data = bytearray(path.read_bytes())
    for pos, size in spans:
        data[pos:pos + size] = b"\xff" * size
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    audio = decode_audio(damaged)
    assert len(audio.missing_s) and audio.missing_s[0][0] == pytest.approx(2.0, abs=0.05)


# 6. exact ties
@pytest.mark.parametrize("n_frames", [229, 227, 233, 109, 51])
@pytest.mark.parametrize("ext", ["mp4", "mkv"])
def test_ties_go_to_the_earlier_frame_for_every_frame_count(tmp_path: Path, n_frames: int, ext: str) -> None:
    """30 fps, n frames: the last row [k, n/30)'s middle lies exactly between two frames whenever 30k + n is odd
    (in Matroska's milliseconds, wherever the rounded times say so)."""
    frames_in = display_frames(n_frames)
    path = tmp_path / f"tie{n_frames}.{ext}"
    _run("ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "96x64", "-framerate",
         "30", "-i", "-", "-c:v", "libx264", "-preset", "ultrafast", "-crf", "16", "-pix_fmt", "yuv420p", str(path),
         data=frames_in.tobytes())
    times, end, shows = _shown(path)
    frames = decode_frames(path)
    assert frames.duration_s == pytest.approx(float(end), abs=1e-9)
    _check_rows(path, frames, times, end, shows)


def test_late_starts_and_other_streams_are_notes_in_the_item_and_the_run_report(tmp_path: Path) -> None:
    """The runner's books without Ray (as tests/media/test_stream_timelines.py's shorter stream): the item's attributes
    say the late start and the streams; the run report lists the late start per pair and the other streams once per
    (item, stream), with nothing PARTIAL."""
    from manifests.records import MediaItem
    from pipeline import actors
    from pipeline.config import RunConfig

    video = _barcode_video(tmp_path / "v.mp4", 4, 1, "-an")
    path = tmp_path / "late.mkv"
    _run("ffmpeg", "-loglevel", "error", "-y", "-itsoffset", "1.5", "-i", str(video), *_tone(440, 6), *_tone(880, 6),
         "-map", "0:v", "-map", "1", "-map", "2", "-c:v", "copy", "-c:a", "aac", "-disposition:a:0", "0",
         "-disposition:a:1", "default", str(path))
    item = MediaItem(id="late", dataset="tiny", video=path, audio=path)
    meta, frames, audio = actors.decode_item(item, ["frames", "audio"], [], 16000)
    assert meta["late"] == {"frames": pytest.approx(1.5, abs=0.05)} and not meta["missing"]
    assert meta["streams"] == {"audio": {"index": 2, "others": [{"index": 1, "codec": "aac", "channels": 1}]}}
    config = RunConfig.model_validate({"features": {
        "frames": {"extractor": "densenet161", "weights": "random"},
        "acoustic": {"extractor": "covarep"}, "acoustic2": {"extractor": "covarep", "f0_method": "harvest"}}})
    report, put = runner_books(tmp_path / "s.zarr", config, item, meta, np.array([[2.0, 3.0], [3.0, 4.0]]))
    from store.reader import Store

    store = Store(tmp_path / "s.zarr")
    attrs = {feature: store.item_attrs(feature, "late") for feature, _, _, _ in put}
    assert attrs["frames"]["stream_start_s"] == meta["late"]["frames"] and "streams" not in attrs["frames"]
    assert attrs["acoustic"]["streams"] == meta["streams"]["audio"] and "stream_start_s" not in attrs["acoustic"]
    assert not report.partial and [n["feature"] for n in report.late] == ["frames"]
    assert report.streams == [{"item": "late", "file": str(path), "stream": "audio", "index": 2,
                               "others": [{"index": 1, "codec": "aac", "channels": 1}]}]
    summary = report.summary()
    start = meta["late"]["frames"]
    assert f"  late start frames/late {path}: the video starts at {start:.2f} s (not damage: no rows before it)" \
        in summary
    assert summary.count("  streams late") == 1 and "audio stream #2 decoded; also in the file: #1 aac 1 ch" in summary
    from pipeline.info import store_info

    info = store_info(tmp_path / "s.zarr")
    assert {f.name: [x["item"] for x in f.late] for f in info.features} == {"frames": ["late"], "acoustic": [],
                                                                            "acoustic2": []}
    assert f"late start frames/late: starts at {start:g} s (not damage)" in info.summary()
