"""The CPU fast pass's skips (media/decode.py, issue 37): the GOP tail (`_GopTails`: after the last chosen
frame before the next IDR keyframe, packets up to that keyframe go undecoded) and the unwanted non-reference
pictures (`SKIP_NONREF`). The pictures must be bit for bit those of a full decode, and each the frame the 1 fps
rule chose (the index-coded clips show their own frame number)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from media import decode
from testing.synth_video import make_index_video, read_index


def _decode(path: Path, tails: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[object, int]:
    dropped = []
    drop = decode._GopTails.drop

    def counting(self, packet):
        out = drop(self, packet)
        dropped.append(out)
        return out

    monkeypatch.setattr(decode, "GOP_TAILS", tails)
    monkeypatch.setattr(decode._GopTails, "drop", counting)
    return decode.decode_frames(path), sum(dropped)


@pytest.mark.parametrize("name, args, skips", [
    ("idr.mp4", ("-g", "45"), True),  # B-frames, an IDR every 1.5 s
    ("idr.ts", ("-g", "45"), True),  # Annex B start codes
    ("idr.mkv", ("-g", "45"), True),
    ("open-gop.mkv", ("-g", "45", "-x264-params", "open-gop=1:scenecut=0"), False),  # recovery points: no skip
])
def test_skipped_gop_tails_give_the_full_decodes_pictures(name: str, args: tuple[str, ...], skips: bool,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_index_video(tmp_path / name, "30", 300, args)
    full, _ = _decode(path, False, monkeypatch)
    fast, dropped = _decode(path, True, monkeypatch)
    assert (dropped > 0) == skips
    np.testing.assert_array_equal(fast.pts_s, full.pts_s)
    np.testing.assert_array_equal(fast.pixels, full.pixels)
    assert [read_index(p) for p in fast.pixels] == np.round(fast.pts_s * 30).astype(int).tolist()


def test_idr_slices_are_found_in_both_bitstream_forms() -> None:
    sei, idr, non_idr = b"\x06\x05\x01\x00", b"\x65\x88\x84", b"\x41\x9a\x02"
    avcc = lambda *nals: b"".join(len(n).to_bytes(4, "big") + n for n in nals)  # noqa: E731
    annex_b = lambda *nals: b"".join(b"\x00\x00\x00\x01" + n for n in nals)  # noqa: E731
    assert decode._h264_idr(avcc(sei, idr), 4) and not decode._h264_idr(avcc(sei, non_idr), 4)
    assert decode._h264_idr(annex_b(sei, idr), 0) and not decode._h264_idr(annex_b(non_idr), 0)


def _pictures_decoded(path: Path, skip_nonref: bool, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many pictures the fast pass decodes for the 1 fps choice of `path` (its intact set)."""
    plan = decode.plan_rows(path)
    wanted = set(plan.timing.ticks[plan.index[plan.index >= 0]].tolist())
    monkeypatch.setattr(decode, "SKIP_NONREF", skip_nonref)
    pictures, intact, errors = decode._decode_pictures(path, wanted, plan.view, True, plan.timing)
    assert len(pictures) == len(wanted) and not errors
    return len(intact)


def _encoder(name: str) -> bool:
    out = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True, text=True).stdout
    return f" {name} " in out


@pytest.mark.parametrize("name, args", [
    ("pyramid.mp4", ("-g", "45")),  # 3 B-frames, b-pyramid normal: the middle B of each run is a reference
    ("flat.mp4", ("-g", "45", "-x264-params", "b-pyramid=none")),
    ("weighted.mkv", ("-g", "45", "-x264-params", "weightp=2:weightb=1:ref=4")),  # weighted prediction, 4 refs
    ("mbaff.ts", ("-g", "45", "-x264-params", "interlaced=1")),  # interlaced (MBAFF), Annex B
    ("hevc.mp4", ("-g", "45", "-c:v", "libx265", "-x265-params", "log-level=error:bframes=3:b-pyramid=1")),
])
def test_skipped_non_reference_pictures_give_the_full_decodes_pictures(
        name: str, args: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unwanted pictures no other picture refers to are not decoded (libavcodec's skip_frame NONREF, H.264 and
    HEVC); every other picture, and so every chosen one, is bit for bit a full decode's, its PTS too."""
    if "libx265" in args and not _encoder("libx265"):
        pytest.skip("ffmpeg has no libx265")
    path = make_index_video(tmp_path / name, "30", 300, args)
    with_skip, without = _pictures_decoded(path, True, monkeypatch), _pictures_decoded(path, False, monkeypatch)
    assert with_skip < 0.7 * without  # more than 30 % of the pictures left undecoded: the skip works
    for clip in (None, (2.3, 7.9)):  # the whole file, and a clip cut from it (its own timeline)
        monkeypatch.setattr(decode, "SKIP_NONREF", False)
        full = decode.decode_frames(path, clip)
        monkeypatch.setattr(decode, "SKIP_NONREF", True)
        fast = decode.decode_frames(path, clip)
        np.testing.assert_array_equal(fast.pts_s, full.pts_s)
        np.testing.assert_array_equal(fast.pixels, full.pixels)
        start = clip[0] if clip else 0.0
        assert [read_index(p) for p in fast.pixels] == np.round((fast.pts_s + start) * 30).astype(int).tolist()
