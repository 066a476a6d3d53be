import json
import math
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from manifests.sample import read_barcode
from pipeline.decode import InputError, decode_audio, decode_frames, pick_frames, second_intervals


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
    intervals = second_intervals(2.6)
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
