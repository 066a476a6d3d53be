"""The picture as players show it: a decoded frame turned upright and given square pixels.

Rules (docs/design.md, "Pictures as displayed"):
- **Pixel aspect.** A frame stored w x h with sample aspect ratio (SAR) p:q is scaled to floor(w * p / q) x h,
  exactly what ffmpeg's `scale=iw*sar:ih,setsar=1` gives (its scale filter truncates), with swscale's bicubic
  filter (the scale filter's default). The SAR is the container's when it gives one (Matroska display size,
  mp4 `pasp`), else the bitstream's, as ffmpeg's `av_guess_sample_aspect_ratio` chooses. Square pixels are
  converted as before, with no scaling.
- **Orientation.** The display matrix (mp4/mov `tkhd`, Matroska projection; ffmpeg gives it as frame side data)
  is applied after the scaling (the SAR belongs to the stored picture): any multiple of 90 degrees, mirrored
  when the matrix says so, as ffmpeg's autorotate and players do. A file with no matrix but a `rotate` tag
  (written by old muxers) is turned clockwise by the tag's degrees, as older ffmpeg versions did. A matrix that is
  not a multiple of 90 degrees is left as stored, with a warning.
- Stills are turned upright by their EXIF orientation (media/inputs.py); their record says how, in the
  same terms.

Each item records what was done (`View.attrs`): the stored size, the SAR, the displayed size and the rotation.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# enters every frames fingerprint (pipeline/run.py): bump when the same file would give other pictures or a
# different picture record. 1: rotation and pixel aspect applied, recorded per item.
PICTURE_VERSION = "1"
# EXIF orientation tag -> (mirrored, clockwise degrees): the same picture PIL's `exif_transpose` gives
EXIF_ORIENTATION = {1: (False, 0), 2: (True, 0), 3: (False, 180), 4: (True, 180), 5: (True, 270),
                    6: (False, 90), 7: (True, 90), 8: (False, 270)}


@dataclass(frozen=True)
class View:
    """How a stored picture becomes the displayed one: scaled to square pixels (`sar`), mirrored left-right
    when `mirrored`, then turned `rotation_deg` clockwise."""

    stored_wh: tuple[int, int]
    sar: Fraction = Fraction(1)
    mirrored: bool = False
    rotation_deg: int = 0

    def __post_init__(self) -> None:
        if min(self.stored_wh) < 1 or self.sar <= 0 or self.rotation_deg not in (0, 90, 180, 270):
            raise ValueError(f"View: needs a positive size and SAR and a rotation of 0/90/180/270, got "
                             f"{self.stored_wh = }, {self.sar = }, {self.rotation_deg = }")

    @property
    def square_wh(self) -> tuple[int, int]:
        """The stored picture with square pixels, before turning it."""
        w, h = self.stored_wh
        return max(1, math.floor(w * self.sar)), h

    @property
    def display_wh(self) -> tuple[int, int]:
        w, h = self.square_wh
        return (h, w) if self.rotation_deg in (90, 270) else (w, h)

    @property
    def frame_bytes(self) -> int:
        """Bytes of one displayed RGB picture."""
        return self.display_wh[0] * self.display_wh[1] * 3

    def attrs(self) -> dict[str, Any]:
        """The item's record (plain JSON): sizes are [width, height]."""
        return {"stored_size": list(self.stored_wh), "sar": f"{self.sar.numerator}:{self.sar.denominator}",
                "display_size": list(self.display_wh), "rotation_deg": self.rotation_deg, "mirrored": self.mirrored}

    def rgb(self, frame: Any) -> np.ndarray:
        """The displayed RGB picture (H, W, 3) uint8 of a decoded PyAV frame. A frame whose stored size differs
        from the stream's (a mid-stream size change) is scaled to the stream's first, as ffmpeg does."""
        w, h = self.square_wh
        extra = {"interpolation": "BICUBIC"} if self.sar != 1 else {}  # square pixels: converted as before
        pixels = frame.to_ndarray(format="rgb24", width=w, height=h, **extra)
        return np.ascontiguousarray(orient(pixels, self.mirrored, self.rotation_deg))


def orient(pixels: np.ndarray, mirrored: bool, rotation_deg: int) -> np.ndarray:
    """(H, W, …) pixels mirrored left-right when asked, then turned `rotation_deg` clockwise (a view)."""
    if mirrored:
        pixels = pixels[:, ::-1]
    return np.rot90(pixels, -(rotation_deg // 90))


def sample_aspect(stream: Any) -> Fraction:
    """The container's SAR when valid, else the codec's, else 1 (ffmpeg's av_guess_sample_aspect_ratio)."""
    for sar in (stream.sample_aspect_ratio, stream.codec_context.sample_aspect_ratio):
        if sar is not None and sar.numerator > 0 and sar.denominator > 0:
            return Fraction(sar)
    return Fraction(1)


def matrix_orientation(matrix: np.ndarray) -> tuple[bool, int] | None:
    """(mirrored, clockwise degrees) of a display matrix (9 int32, ffmpeg's layout: a displayed point is
    (x', y') = (a x + c y, b x + d y) in image coordinates, y down), or None when it is not a multiple of 90
    degrees. Found by applying the matrix's 2x2 part to a small picture and matching it to the 8 candidates."""
    a, b, c, d = (float(v) for v in np.asarray(matrix, np.float64)[[0, 1, 3, 4]])
    scale = max(abs(a), abs(b), abs(c), abs(d))
    if scale == 0:
        return None
    a, b, c, d = (v / scale for v in (a, b, c, d))
    signs = np.round([a, b, c, d])
    if np.abs(np.array([a, b, c, d]) - signs).max() > 0.02 or abs(signs[0] * signs[3] - signs[1] * signs[2]) != 1:
        return None
    a, b, c, d = (int(v) for v in signs)
    probe = np.arange(6).reshape(2, 3)
    ys, xs = np.mgrid[0:2, 0:3]
    xd, yd = a * xs + c * ys, b * xs + d * ys
    shown = np.zeros((yd.max() - yd.min() + 1, xd.max() - xd.min() + 1), probe.dtype)
    shown[yd - yd.min(), xd - xd.min()] = probe
    for mirrored in (False, True):
        for deg in (0, 90, 180, 270):
            candidate = orient(probe, mirrored, deg)
            if candidate.shape == shown.shape and np.array_equal(candidate, shown):
                return mirrored, deg
    return None  # unreachable for a signed permutation


def frame_orientation(frame: Any, stream: Any, where: object) -> tuple[bool, int]:
    """(mirrored, clockwise degrees) for a decoded frame: its display matrix, else the stream's `rotate` tag."""
    for side in frame.side_data:
        if side.type.name == "DISPLAYMATRIX":
            found = matrix_orientation(np.frombuffer(memoryview(side), np.int32, 9))
            if found is None:
                log.warning("%s: display matrix rotates by %s degrees, not a multiple of 90: left as stored",
                            where, frame.rotation)
                return False, 0
            return found
    return tag_orientation(stream, where)


def tag_orientation(stream: Any, where: object) -> tuple[bool, int]:
    """(False, clockwise degrees) from the stream's `rotate` tag; (False, 0) without one."""
    tags = {k.lower(): v for k, v in stream.metadata.items()}
    try:
        deg = int(float(tags.get("rotate", 0)))
    except ValueError:
        log.warning("%s: rotate tag %r is not a number: left as stored", where, tags["rotate"])
        return False, 0
    if deg % 90:
        log.warning("%s: rotate tag %d is not a multiple of 90 degrees: left as stored", where, deg)
        return False, 0
    return False, deg % 360


def probe_view(container: Any, stream: Any, where: object, max_packets: int = 64) -> View:
    """The stream's View: its size and SAR, and the orientation of its first frame that decodes (the display
    matrix reaches PyAV only on decoded frames). Reads from the container's current position (open it anew)."""
    size = (stream.codec_context.width, stream.codec_context.height)
    sar = sample_aspect(stream)
    frame = _first_frame(container, stream, max_packets)
    if frame is None:  # damaged or empty: decoding says so; the tags are all there is to go by
        return View(size, sar, *tag_orientation(stream, where))
    return View(size, sar, *frame_orientation(frame, stream, where))


def _first_frame(container: Any, stream: Any, max_packets: int) -> Any:
    """The first frame that decodes among the first `max_packets` packets (the demuxer's final empty packet
    flushes the decoder, so a short file's delayed frames come out too), or None."""
    import av

    try:
        for n, packet in enumerate(container.demux(stream)):
            try:
                frames = packet.decode()
            except av.FFmpegError:
                frames = []  # damaged data: a later frame tells
            if frames:
                return frames[0]
            if n >= max_packets:
                return None
    except av.FFmpegError:
        return None
    return None


def exif_view(stored_wh: tuple[int, int], orientation: int | None) -> View:
    """The View of a still stored `stored_wh` with EXIF orientation tag `orientation` (1-8; None or other: 1)."""
    mirrored, deg = EXIF_ORIENTATION.get(orientation or 1, (False, 0))
    return View(stored_wh, Fraction(1), mirrored, deg)
