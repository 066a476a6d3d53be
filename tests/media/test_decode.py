import bisect
import json
import math
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from extractors.base import Audio
from manifests.sample import read_barcode
from media.decode import InputError, decode_audio, decode_frames, pick_frames
from rows import fixed_rate_intervals
from testing.synth_video import damage_packets, make_index_video, make_timed_video, read_index


def expected_frame(k: int, fps: Fraction, duration: Fraction) -> int:
    """Brute force over exact frame times i/fps: nearest to the middle of [k, min(k+1, D)), ties → earlier."""
    mid = (k + min(Fraction(k + 1), duration)) / 2
    n = int(duration * fps)
    return min(range(n), key=lambda i: (abs(Fraction(i) / fps - mid), i))


@pytest.mark.parametrize("vid", ["sample-a", "sample-b", "sample-c"])  # 30, 29.97 and 25 fps
def test_one_frame_per_second_is_the_frame_nearest_the_middle(sample_root: Path, vid: str) -> None:
    truth = json.loads((sample_root / "siq2" / "sample_truth.json").read_text())[vid]
    fps = Fraction(truth["fps"])
    n_frames = int(truth["duration_s"] * fps)
    duration = n_frames / fps
    frames = decode_frames(sample_root / "siq2" / "video" / f"{vid}.mp4")
    assert len(frames.pixels) == math.ceil(duration)
    picked = [read_barcode(p) for p in frames.pixels]
    assert picked == [expected_frame(k, fps, duration) for k in range(len(picked))]
    assert frames.intervals[0].tolist() == [0.0, 1.0]
    assert frames.intervals[-1, 1] == pytest.approx(float(duration), abs=1e-4)
    assert frames.pixels.shape[1:] == (truth["height"], truth["width"], 3)


def test_pick_frames_on_variable_frame_rate() -> None:
    starts = np.array([0.0, 0.1, 0.45, 0.55, 1.2, 1.9, 2.5])
    intervals = fixed_rate_intervals(2.6, 1.0, slack_rows=1e-6)
    assert intervals.tolist() == [[0, 1], [1, 2], [2, 2.6]]
    # middles 0.5, 1.5, 2.3: 0.45 vs 0.55 tie → earlier; 1.2 vs 1.9 → 1.2 (0.3 < 0.4); 2.5 nearest 2.3
    assert pick_frames(starts, intervals).tolist() == [2, 4, 6]


def test_corrupt_and_missing_videos_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 20)
    with pytest.raises(InputError, match="bad.mp4"):
        decode_frames(bad)
    with pytest.raises(InputError, match="missing.mp4: video file does not exist"):
        decode_frames(tmp_path / "missing.mp4")


def test_video_without_audio_track(sample_root: Path, tmp_path: Path) -> None:
    silent = tmp_path / "silent.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(sample_root / "siq2/video/sample-c.mp4"), "-an",
                    "-c:v", "copy", str(silent)], check=True)
    with pytest.raises(InputError, match="silent.mp4: no audio track"):
        decode_audio(silent)
    assert len(decode_frames(silent).pixels) == 20  # the frames still decode


def test_audio_is_resampled_to_16k_mono_on_the_clip_timeline(sample_root: Path) -> None:
    wav = decode_audio(sample_root / "siq2/audio/wav/sample-a.wav")
    track = decode_audio(sample_root / "siq2/video/sample-a.mp4")
    assert wav.sample_rate_hz == track.sample_rate_hz == 16000
    assert wav.duration_s == pytest.approx(24.0, abs=1e-3)
    assert track.duration_s == pytest.approx(24.0, abs=0.05)
    # speech starts at 1.0 s in the sample: the first loud sample is there in both
    for audio in (wav, track):
        onset = np.flatnonzero(np.abs(audio.samples) > 0.05)[0] / 16000
        assert onset == pytest.approx(1.0, abs=0.06)


def test_a_stream_that_starts_late_keeps_its_place_on_the_container_timeline(sample_root: Path, tmp_path: Path) -> None:
    """Video delayed by 0.5 s (audio not), then audio delayed by 0.5 s (video not), against the original file."""
    src = sample_root / "siq2/video/sample-c.mp4"  # 25 fps, frames carry their index as a barcode
    late_video, late_audio = tmp_path / "late_video.mp4", tmp_path / "late_audio.mp4"
    for out, delayed in ((late_video, "0:v"), (late_audio, "0:a")):
        kept = "1:a" if delayed == "0:v" else "1:v"
        subprocess.run(["ffmpeg", "-loglevel", "error", "-itsoffset", "0.5", "-i", str(src), "-i", str(src),
                        "-map", delayed, "-map", kept, "-c", "copy", str(out)], check=True)
    fps = Fraction(25)
    orig, late = decode_frames(src), decode_frames(late_video)
    assert late.duration_s == pytest.approx(orig.duration_s + 0.5, abs=1e-3)
    # row k covers [k, min(k+1, D)) of the container's time; frame i now plays at i/fps + 0.5
    n = round(orig.duration_s * 25)
    duration = Fraction(n, 25) + Fraction(1, 2)
    mids = [(k + min(Fraction(k + 1), duration)) / 2 for k in range(len(late.pixels))]
    expected = [min(range(n), key=lambda i: (abs(Fraction(i) / fps + Fraction(1, 2) - mid), i)) for mid in mids]
    assert [read_barcode(p) for p in late.pixels] == expected

    audio, shifted = decode_audio(src), decode_audio(late_audio)
    # 0.5 s of silence in front (the remuxed AAC track's priming may differ by a few samples)
    assert abs(shifted.samples.size - (audio.samples.size + 8000)) <= 16
    assert not shifted.samples[:7980].any()
    onset = [np.flatnonzero(np.abs(a.samples) > 0.05)[0] / 16000 for a in (audio, shifted)]
    assert onset[1] - onset[0] == pytest.approx(0.5, abs=0.002)
    assert decode_audio(late_video).samples.size == audio.samples.size  # audio that did not move stays put


def nearest_to_middles(times: list[Fraction], duration: Fraction, n_rows: int) -> list[int]:
    """Independent reference (exact fractions): per row k, the frame whose time is nearest the middle of
    [k, min(k+1, D)), ties → earlier. Only the two frames around the middle can win."""
    out = []
    for k in range(n_rows):
        mid = (k + min(Fraction(k + 1), duration)) / 2
        j = bisect.bisect_right(times, mid)
        candidates = [i for i in (j - 1, j) if 0 <= i < len(times)]
        out.append(min(candidates, key=lambda i: (abs(times[i] - mid), i)))
    return out


@pytest.fixture(scope="module")
def hour_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """60 min at 29.97 fps, B-frames, 64x48: 107,892 frames that show their own index (~10 s to make)."""
    n = 107_892
    return make_index_video(tmp_path_factory.mktemp("hour") / "hour.mp4", "30000/1001", n), n


def test_every_row_of_an_hour_long_clip_picks_the_exact_frame(hour_clip: tuple[Path, int]) -> None:
    """float32 timestamps (decord) picked frame 35499 instead of 35500 for row 1184 (also rows 2185, 3186)."""
    path, n = hour_clip
    fps = Fraction(30000, 1001)
    frames = decode_frames(path)
    duration = n / fps
    assert frames.duration_s == pytest.approx(float(duration), abs=1e-6)
    assert len(frames.pixels) == math.ceil(duration) == 3600
    picked = [read_index(p) for p in frames.pixels]
    assert picked == nearest_to_middles([i / fps for i in range(n)], duration, 3600)
    np.testing.assert_allclose(frames.pts_s, [float(i / fps) for i in picked], atol=1e-9)


@pytest.mark.parametrize(("fps", "container"), [("24000/1001", "mp4"), ("60000/1001", "mkv"),
                                                ("30000/1001", "ts"), ("25", "mov")])
def test_odd_frame_rates_in_several_containers(tmp_path: Path, fps: str, container: str) -> None:
    """B-frames everywhere; MPEG-TS starts its clock at 1.4 s and keeps no edit list, Matroska counts in ms."""
    rate = Fraction(fps)
    n = int(75 * rate)
    frames = decode_frames(make_index_video(tmp_path / f"clip.{container}", fps, n))
    times = [i / rate for i in range(n)]
    duration = n / rate
    assert frames.duration_s == pytest.approx(float(duration), abs=2e-3 if container == "mkv" else 1e-6)
    if container == "mkv":  # millisecond timestamps: the reference uses the same rounding
        times = [Fraction(round(t * 1000), 1000) for t in times]
        duration = Fraction(round(frames.duration_s * 1000), 1000)
    assert [read_index(p) for p in frames.pixels] == nearest_to_middles(times, duration, math.ceil(duration))


def test_variable_frame_rate_with_b_frames(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    times_ms = np.cumsum(np.r_[0, rng.choice([10, 33, 40, 100, 250, 700], 399)]).tolist()
    frames = decode_frames(make_timed_video(tmp_path / "vfr.mp4", times_ms))
    times = [Fraction(t, 1000) for t in times_ms]
    assert times[-1] < frames.duration_s <= times[-1] + 0.7
    duration = Fraction(frames.duration_s).limit_denominator(10**6)
    assert [read_index(p) for p in frames.pixels] == nearest_to_middles(times, duration, math.ceil(duration))
    np.testing.assert_allclose(frames.pts_s, [float(times[read_index(p)]) for p in frames.pixels], atol=1e-9)


def _clicks_clip(path: Path, rate_hz: int, seconds: int, clicks_s: tuple[float, ...], video_args: tuple[str, ...] = ()) -> Path:
    """AAC at `rate_hz` with 10 ms 1 kHz bursts at `clicks_s`, beside a 64x48 testsrc2 video of the same length."""
    burst = "+".join(f"between(t,{c},{c + 0.01})" for c in clicks_s)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    f"aevalsrc='0.8*sin(2*PI*1000*t)*({burst})':s={rate_hz}:d={seconds}", "-f", "lavfi", "-i",
                    f"testsrc2=size=64x48:rate=30:duration={seconds}", "-c:a", "aac", "-c:v", "libx264",
                    "-preset", "ultrafast", *video_args, str(path)], check=True)
    return path


def _onsets_s(audio) -> list[float]:
    loud = np.flatnonzero(np.abs(audio.samples) > 0.1)
    return [loud[0] / 16000] + [loud[i] / 16000 for i in np.flatnonzero(np.diff(loud) > 1600) + 1]


@pytest.mark.parametrize("rate_hz", [22050, 44100, 48000])
def test_aac_padding_does_not_make_audio_outlive_the_clip(tmp_path: Path, rate_hz: int) -> None:
    """An 8.000 s clip gave 8.034 s of audio at 22.05 kHz (804 acoustic rows): the last AAC frame's padding."""
    from extractors.acoustic import n_rows_for

    clip = _clicks_clip(tmp_path / "clip.mp4", rate_hz, 8, (2.0, 7.5))
    audio = decode_audio(clip)
    assert audio.duration_s == pytest.approx(8.0, abs=1 / 16000)
    assert n_rows_for(audio.duration_s) == 800
    assert _onsets_s(audio) == pytest.approx([2.0, 7.5], abs=1e-3)  # priming dropped: the audio keeps its place
    assert not len(audio.missing_s)
    # Matroska keeps no edit list: the priming starts before the picture, whose start is the clip's 0 (main
    # played the priming first and moved the content and the end 23 ms late)
    mkv = tmp_path / "clip.mkv"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(clip), "-c", "copy", str(mkv)], check=True)
    remuxed = decode_audio(mkv)
    assert _onsets_s(remuxed) == pytest.approx([2.0, 7.5], abs=1e-3)
    assert remuxed.duration_s == pytest.approx(8.0, abs=2e-3)  # (millisecond timestamps)


@pytest.fixture(scope="module")
def damaged_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, float]]]:
    """10 s, 30 fps all-intra index video + 44.1 kHz AAC with bursts at 2.0 and 8.0 s; then frame 45 (row 1's
    choice), frames 90-119 (all of second 3) and the audio packets of [5.0, 5.2) s are overwritten."""
    tmp = tmp_path_factory.mktemp("damaged")
    video = make_index_video(tmp / "v.mp4", "30", 300, ("-g", "1"))
    clicks = _clicks_clip(tmp / "a.mp4", 44100, 10, (2.0, 8.0))
    good = tmp / "good.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(video), "-i", str(clicks), "-map", "0:v", "-map", "1:a",
                    "-c", "copy", str(good)], check=True)
    damaged = damage_packets(good, tmp / "damaged.mp4", lambda kind, t: (
        (kind == "video" and (round(t * 30) == 45 or 90 <= round(t * 30) < 120)) or (kind == "audio" and 5.0 <= t < 5.2)))
    return tmp / "damaged.mp4", damaged


def test_a_partly_damaged_video_yields_the_seconds_that_decode(damaged_clip: tuple[Path, list]) -> None:
    """decord failed the whole item; now a lost chosen frame gives way to the nearest intact frame shown in
    the same second (frame 45 → 44, a tie with 46 going to the earlier), a second without one has no row."""
    path, damaged = damaged_clip
    assert sum(kind == "video" for kind, _ in damaged) == 31
    frames = decode_frames(path)
    expected = {k: 30 * k + 15 for k in range(10) if k != 3} | {1: 44}
    assert frames.intervals.tolist() == [[k, k + 1] for k in sorted(expected)]
    assert [read_index(p) for p in frames.pixels] == [expected[k] for k in sorted(expected)]
    assert frames.missing_s.tolist() == [[3.0, 4.0]]
    assert frames.duration_s == pytest.approx(10.0)


def test_damaged_audio_packets_become_missing_silence_and_later_audio_keeps_its_place(damaged_clip) -> None:
    """The AAC decoder's error (InvalidDataError, or EPERM: 'Operation not permitted') failed the whole track."""
    path, damaged = damaged_clip
    lost = [t for kind, t in damaged if kind == "audio"]
    audio = decode_audio(path)
    assert audio.duration_s == pytest.approx(10.0, abs=1 / 16000)
    assert audio.missing_s.shape == (1, 2)
    assert audio.missing_s[0] == pytest.approx([lost[0], lost[-1] + 1024 / 44100], abs=1e-4)
    a, b = (round(t * 16000) for t in audio.missing_s[0])
    assert not audio.samples[a:b].any()
    assert _onsets_s(audio) == pytest.approx([2.0, 8.0], abs=1e-3)


def test_rows_over_missing_audio_are_dropped() -> None:
    from pipeline.actors import without_missing
    from rows import FeatureRows

    iv = np.column_stack([np.arange(100) * 0.01, np.arange(1, 101) * 0.01])
    rows = FeatureRows(np.arange(100, dtype=np.float32)[:, None], iv, {"per_row": np.arange(100)}, {"a": 1})
    spans = np.array([[0.255, 0.30], [0.50, 0.501], [0.90, 2.0]])
    kept = without_missing(rows, Audio(np.zeros(16000, np.float32), 16000, 1.0, missing_s=spans))
    gone = set(range(25, 30)) | {50} | set(range(90, 100))
    assert kept.features[:, 0].tolist() == [i for i in range(100) if i not in gone]
    assert kept.extras["per_row"].tolist() == kept.features[:, 0].tolist()
    assert without_missing(rows, Audio(np.zeros(10, np.float32), 16000, 1.0)) is rows


def test_a_video_with_no_decodable_frame_says_so(damaged_clip, tmp_path: Path) -> None:
    path, _ = damaged_clip
    ruined = tmp_path / "ruined.mp4"
    damage_packets(path, ruined, lambda kind, t: kind == "video")
    with pytest.raises(InputError, match="ruined.mp4: no frame could be decoded: .*Invalid data"):
        decode_frames(ruined)
    assert decode_audio(ruined).duration_s == pytest.approx(10.0, abs=1 / 16000)  # the audio is intact


def test_four_kib_of_garbage_in_the_middle_still_decodes(sample_root: Path, tmp_path: Path) -> None:
    """The issue's case: 4 KiB overwritten mid-file (random bytes, fixed seed); both inputs still decode."""
    bad = tmp_path / "garbage.mp4"
    data = bytearray((sample_root / "siq2/video/sample-c.mp4").read_bytes())
    data[len(data) // 2:len(data) // 2 + 4096] = np.random.default_rng(0).integers(0, 256, 4096, np.uint8).tobytes()
    bad.write_bytes(bytes(data))
    frames, audio = decode_frames(bad), decode_audio(bad)
    assert len(frames.pixels) + len(frames.missing_s) == 20
    assert audio.duration_s == pytest.approx(20.0, abs=0.05)


@pytest.mark.parametrize(("width", "height"), [(16, 12), (24, 16), (8, 8)])
def test_tiny_videos_decode(tmp_path: Path, width: int, height: int) -> None:
    """decord failed under ~30 px wide (`Check failed: from_size == to_size`). Frame i is grey level 8 i."""
    levels = np.repeat((np.arange(32) * 8).astype(np.uint8), width * height * 3)
    path = tmp_path / "tiny.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
                    "-framerate", "8", "-i", "-", "-c:v", "libx264", "-qp", "0", "-pix_fmt", "yuv420p", str(path)],
                   input=levels.tobytes(), check=True)
    frames = decode_frames(path)
    assert frames.pixels.shape == (4, height, width, 3)
    assert [round(float(p.mean()) / 8) for p in frames.pixels] == [4, 12, 20, 28]  # nearest k + 0.5 s at 8 fps
