"""Clips cut out of a whole video (TinySocial) against the same content pre-cut with ffmpeg: the same frames
chosen (read from each frame's barcode), the same audio samples within the resampler's edge, the same word
times. The source is the TinySocial sample's 7 s video (30 fps; speech at 0.4 s and 3.0 s)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from manifests.sample import read_barcode
from manifests.tinysocial import read_tinysocial, write_sample_tinysocial
from media import kinds
from media.decode import InputError, decode_audio, decode_frames

START_S, END_S = 2.5, 5.5
RATE_HZ = 16000
EDGE_S = 0.01  # the resampler's filter reaches this far past a cut; samples within it may differ


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_tinysocial(tmp_path_factory.mktemp("tinysocial"))


@pytest.fixture(scope="module")
def precut(raw: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """ffmpeg's own cut: accurate input seek, video re-encoded near-losslessly, audio decoded to float PCM."""
    out = tmp_path_factory.mktemp("precut")
    src = raw / "video" / "ts-source-a.mp4"
    _ffmpeg("-ss", str(START_S), "-i", str(src), "-t", str(END_S - START_S), "-c:v", "libx264", "-preset",
            "ultrafast", "-crf", "10", "-c:a", "pcm_f32le", str(out / "clip.mkv"))
    _ffmpeg("-i", str(raw / "transcript" / "ts-crowd-01.vtt"), "-ss", str(START_S), "-t", str(END_S - START_S),
            str(out / "clip.vtt"))
    return out / "clip.mkv", out / "clip.vtt"


def _item(raw: Path):
    return next(i for i in read_tinysocial(raw)[0] if i.id == "ts-crowd-01")


def test_same_frames_as_the_precut_clip(raw: Path, precut) -> None:
    item = _item(raw)
    mine = kinds.decode(item, "frames", audio_rate_hz=RATE_HZ)
    ref = decode_frames(precut[0])
    assert mine.intervals.tolist() == ref.intervals.tolist() == [[0, 1], [1, 2], [2, 3]]
    barcodes = [read_barcode(p) for p in mine.pixels]
    assert barcodes == [read_barcode(p) for p in ref.pixels]
    assert barcodes == [90, 120, 150]  # the source frames shown at 3.0, 4.0, 5.0 s: the rows' middles
    np.testing.assert_allclose(mine.pts_s, ref.pts_s, atol=1e-3)
    assert mine.duration_s == pytest.approx(3.0, abs=1e-6)


def test_same_audio_samples_within_the_resampler_edge(raw: Path, precut) -> None:
    mine = kinds.decode(_item(raw), "audio", audio_rate_hz=RATE_HZ)
    ref = decode_audio(precut[0], RATE_HZ)
    assert abs(mine.samples.size - ref.samples.size) <= 1 and mine.samples.size == pytest.approx(3 * RATE_HZ, abs=1)
    edge = round(EDGE_S * RATE_HZ)
    n = min(mine.samples.size, ref.samples.size)
    inner = slice(edge, n - edge)
    assert np.abs(ref.samples[inner]).max() > 0.1  # speech is there to compare
    np.testing.assert_allclose(mine.samples[inner], ref.samples[inner], atol=1e-4)


def test_same_word_times_as_the_precut_captions(raw: Path, precut) -> None:
    from media.captions import parse_captions

    mine = kinds.decode(_item(raw), "transcript", audio_rate_hz=RATE_HZ)
    ref = parse_captions(precut[1])
    assert mine.words == ref.words == ("I", "am", "not", "so", "sure", "about", "that.")
    np.testing.assert_allclose(mine.intervals, ref.intervals, atol=1e-3)
    assert mine.intervals[0, 0] == pytest.approx(0.5, abs=1e-3)
    uncut = _item(raw).model_copy(update={"clip_start_s": 0.0, "clip_end_s": None, "cut_from_source": False})
    whole = kinds.decode(uncut, "transcript")
    assert len(whole.words) == 12  # uncut, both sentences: the cut dropped the first


@pytest.mark.parametrize("span", [(6.5, 9.0), (7.5, 8.0), (2.0, 7.5)])
def test_a_clip_outside_the_video_is_an_error_naming_file_and_times(raw: Path, span) -> None:
    item = _item(raw).model_copy(update={"clip_start_s": span[0], "clip_end_s": span[1]})
    for kind, what in (("frames", "video"), ("audio", "audio")):
        with pytest.raises(InputError, match=rf"ts-source-a\.mp4: clip \[{span[0]:g}, {span[1]:g}\) s lies outside "
                                             rf"the {what} \(duration 7\.0"):
            kinds.decode(item, kind, audio_rate_hz=RATE_HZ)


def test_an_end_just_past_the_video_is_clipped_to_it(raw: Path) -> None:
    item = _item(raw).model_copy(update={"clip_start_s": 5.0, "clip_end_s": 7.05})
    frames, audio = (kinds.decode(item, kind, audio_rate_hz=RATE_HZ) for kind in ("frames", "audio"))
    assert frames.intervals.tolist() == [[0, 1], [1, 2]] and frames.duration_s == pytest.approx(2.0, abs=1e-6)
    # the audio stops at its own track's end (an AAC track may run a few ms past the last frame)
    assert 2 * RATE_HZ - 2 <= audio.samples.size <= 2.05 * RATE_HZ
    with pytest.raises(InputError):
        kinds.decode(item.model_copy(update={"clip_end_s": 7.2}), "frames", audio_rate_hz=RATE_HZ)
