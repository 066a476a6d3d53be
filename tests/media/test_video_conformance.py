"""Conformance over containers, codecs, rotations and pixel aspects: the picture stored for each second is the
one the documented rule picks from ffmpeg's own display timestamps, as ffmpeg displays it.

For every generated file (testing/synth_display.py): ffprobe's best-effort timestamps give each displayed frame's
time; the rule (docs/design.md: row k uses the frame nearest the middle of [k, min(k+1, D)), ties to the earlier,
in whole microseconds) picks a frame per second; that frame's index (read from ffmpeg's own decode) must be the
index our row shows, decoding the whole file and in segments of one row each. The row's picture must be ffmpeg's
(autorotated, `scale=iw*sar:ih`) within a tolerance, with the displayed size, and upright by the file's own
marker. AVI stores no presentation timestamps: with B-frames (packed or not) its pictures are placed by their
best-effort timestamps (issue 26 item 4); MPEG-TS segments seek to a keyframe at or before their first frame
(item 1).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from media.decode import decode_frames, decode_frames_segment
from testing.synth_display import FPS, Case, ffmpeg_display, make_case, read_index, upright

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg and ffprobe")

# the mean absolute difference (of 255) between our picture and ffmpeg's: the same conversion gives 0 for
# square pixels; anamorphic scaling (bicubic, swscale of PyAV's libraries vs the ffmpeg binary's) differed by
# 1-2.7 on testsrc2 pictures, about what ffmpeg's own bilinear and bicubic filters differ by (1.6)
PICTURE_TOLERANCE = 4.0

CASES = [
    Case("mp4", "h264"), Case("mp4", "hevc"), Case("mp4", "av1"), Case("mp4", "mpeg4"),
    Case("mkv", "h264"), Case("mkv", "hevc"), Case("mkv", "vp9"), Case("mkv", "av1"),
    Case("webm", "vp9"), Case("webm", "av1"),
    Case("ts", "h264"), Case("ts", "hevc"),
    Case("avi", "mpeg4-nob"), Case("avi", "mpeg4"), Case("avi", "xvid"), Case("avi", "h264"),
    Case("mov", "h264"), Case("mov", "hevc"),
    # phone videos: every quarter turn, and mirrored ones, as the display matrix says
    Case("mp4", "h264", 90), Case("mp4", "h264", 180), Case("mp4", "h264", 270), Case("mov", "h264", 90),
    Case("mp4", "hevc", 270), Case("mkv", "h264", 90), Case("mp4", "h264", 0, True), Case("mp4", "h264", 90, True),
    # anamorphic: stored 64x64 with SAR 3:2, displayed 96x64 (mp4 in the bitstream, Matroska in the container);
    # stored 48x96, SAR 4:3, turned a quarter: the SAR applies to the stored picture, before turning it
    Case("mp4", "h264", sar=(3, 2)), Case("mkv", "h264", sar=(3, 2)), Case("mp4", "h264", 90, sar=(4, 3)),
]


def expected_rows(times_s: np.ndarray) -> np.ndarray:
    """Index (in display order) of the frame the rule picks for each second, from ffmpeg's timestamps alone."""
    times_s = times_s[np.isfinite(times_s)]
    duration = times_s[-1] + 1 / FPS
    n = int(np.ceil(duration - 1e-6))
    mids_us = np.round((np.arange(n) + np.minimum(np.arange(n) + 1, duration)) / 2 * 1e6)
    starts_us = np.round(times_s * 1e6)
    # nearest, ties to the earlier: argmin returns the first of equal distances
    return np.array([int(np.argmin(np.abs(starts_us - m))) for m in mids_us])


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("conformance")
    return {case.name: make_case(case, folder) for case in CASES}


def decoded(path: Path, mode: str):
    if mode == "whole":
        frames = decode_frames(path)
        return frames.pixels, frames.intervals, frames.picture
    one_row = 96 * 64 * 3  # one displayed row per segment: every segment but the first starts with a seek
    first, n = decode_frames_segment(path, None, 0, one_row)
    assert n > 1
    parts = [first] + [decode_frames_segment(path, None, s, one_row)[0] for s in range(1, n)]
    return (np.concatenate([p.pixels for p in parts]), np.concatenate([p.intervals for p in parts]),
            first.picture)


@pytest.mark.parametrize("mode", ["whole", "segments"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_second_shows_the_frame_ffmpeg_displays_then(case: Case, mode: str, media: dict[str, Path]) -> None:
    path = media[case.name]
    times, reference = ffmpeg_display(path, case)
    assert [read_index(p) for p in reference] == list(range(len(reference))), "the generator's own check"
    want = expected_rows(times)
    pixels, intervals, picture = decoded(path, mode)
    assert len(pixels) == len(want), f"{len(pixels)} rows, the rule on ffmpeg's timestamps gives {len(want)}"
    np.testing.assert_array_equal(intervals[:, 0], np.arange(len(want)))
    assert [read_index(p) for p in pixels] == want.tolist()
    for k, p in enumerate(pixels):
        ref = reference[want[k]]
        assert p.shape == ref.shape == (64, 96, 3)
        assert np.abs(p.astype(int) - ref).mean() < PICTURE_TOLERANCE, f"row {k}"
        assert upright(p), f"row {k} is not upright"
    assert picture["stored_size"] == list(case.stored_wh)
    assert picture["display_size"] == [96, 64]
    assert picture["sar"] == (f"{case.sar[0]}:{case.sar[1]}" if case.sar else "1:1")
    # the matrix turns counterclockwise, then mirrors: the same as mirroring, then turning as far clockwise
    clockwise = case.rotation_ccw if case.mirrored else (360 - case.rotation_ccw) % 360
    assert (picture["rotation_deg"], picture["mirrored"]) == (clockwise, case.mirrored)
