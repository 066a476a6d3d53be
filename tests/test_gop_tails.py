"""The CPU path's GOP-tail skip (pipeline/decode.py `_GopTails`, issue 37): after the last chosen frame before
the next IDR keyframe, packets up to that keyframe go undecoded. The pictures must be bit for bit those of a
full decode, and each the frame the 1 fps rule chose (the index-coded clips show their own frame number)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline import decode
from tests.synth_video import make_index_video, read_index


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
