"""Damaged data inside a video (issue 35 item 12 and "First"): a row holds a picture of its own second, exactly as
the intact file shows it, or it is missing.

4 KiB of noise at several points of 12 s files (H.264 in MKV, FLV and MP4; VP9 in WebM). Matroska and FLV
demuxers skip what they cannot parse and go on silently: an MKV's row [6, 7) held the picture at 7.133 s across
such a skip, and pictures decoded after it from lost references (and the one the noise began in) were stored as
data. Reference: the intact file's own decode (PyAV, none of the pipeline's code), each picture at ffmpeg's
best-effort time (tests/media/test_truncated_and_sync.py `_pictures_by_time`); a row's picture must be bit-identical to
one of them shown during the row's second.
"""

from __future__ import annotations

import logging
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from media.decode import decode_frames, decode_frames_segment
from tests.media.test_truncated_and_sync import _pictures_by_time

CODECS = {
    "mkv": ["-c:v", "libx264", "-c:a", "aac"],
    "flv": ["-c:v", "libx264", "-c:a", "aac"],
    "mp4": ["-c:v", "libx264", "-c:a", "aac"],
    "webm": ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-g", "60", "-c:a", "libopus"],
}
NOISE_AT = (0.3, 0.45, 0.5, 0.55, 0.7)


@pytest.mark.parametrize("ext", CODECS)
def test_a_row_holds_a_true_picture_of_its_own_second_or_is_missing(tmp_path: Path, ext: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    whole = tmp_path / f"whole.{ext}"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=s=320x180:r=25:d=12", "-f",
                    "lavfi", "-i", "sine=d=12", *CODECS[ext], "-pix_fmt", "yuv420p", str(whole)], check=True)
    intact = _pictures_by_time(whole)
    data = whole.read_bytes()
    rng = np.random.default_rng(35)
    kept = 0
    for at in NOISE_AT:
        damaged = bytearray(data)
        i = int(len(data) * at)
        damaged[i:i + 4096] = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
        path = tmp_path / f"noise-{at}.{ext}"
        path.write_bytes(bytes(damaged))
        with caplog.at_level(logging.WARNING):
            frames = decode_frames(path)
        seconds = sorted([*frames.intervals[:, 0].tolist(), *frames.missing_s[:, 0].tolist()])
        assert seconds == list(range(math.ceil(frames.duration_s - 1e-6))), f"{path.name}: every second, once"
        for k, pixels in zip(frames.intervals[:, 0].astype(int), frames.pixels, strict=True):
            shown = [round(t, 3) for t, p in intact if np.array_equal(p, pixels)]
            assert shown, f"{path.name}: row {k} is no picture of the intact file"
            assert any(k - 1e-6 <= t < k + 1 for t in shown), f"{path.name}: row {k} shows the picture at {shown} s"
        kept += len(frames.pixels)
        if at in (0.45, 0.55):  # segments (each from a keyframe at or before it) keep the whole decode's rows
            first, n = decode_frames_segment(path, None, 0, 3 * 320 * 180 * 3)
            parts = [first] + [decode_frames_segment(path, None, s, 3 * 320 * 180 * 3)[0] for s in range(1, n)]
            np.testing.assert_array_equal(np.concatenate([p.intervals for p in parts]), frames.intervals)
            np.testing.assert_array_equal(np.concatenate([p.pixels for p in parts]), frames.pixels)
    assert kept >= len(NOISE_AT) * 12 // 2  # damage costs seconds near it, not the file


def test_an_intact_matroska_with_large_subtitle_packets_is_not_damaged(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Skipped bytes are told by the gap between packets of every stream: a subtitle event of 3 KB between two
    video packets is no skip (counted over audio and video alone, it would drop pictures of an intact file)."""
    srt = tmp_path / "long.srt"
    srt.write_text("".join(f"{k + 1}\n00:00:0{k},000 --> 00:00:0{k},900\n{'word ' * 600}\n\n" for k in range(6)))
    path = tmp_path / "subs.mkv"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=s=320x180:r=25:d=6", "-i", str(srt),
                    "-c:v", "libx264", "-c:s", "srt", "-pix_fmt", "yuv420p", str(path)], check=True)
    with caplog.at_level(logging.WARNING):
        frames = decode_frames(path)
    assert len(frames.intervals) == 6 and not len(frames.missing_s)
    assert not [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
