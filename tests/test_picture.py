"""Pictures as displayed (pipeline/picture.py): the issue's phone and anamorphic files against ffmpeg's own
decode, stills' EXIF orientations against PIL, and the per-item record on its way to the store. The matrix of
containers and codecs is tests/test_video_conformance.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from extractors.base import FeatureRows, Frames
from extractors.faces import FacesConfig, MTCNNFaces
from pipeline.decode import decode_frames
from pipeline.inputs import decode_image
from pipeline.picture import orient


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", *args], check=True)


def ffmpeg_rgb(path: Path, h: int, w: int) -> np.ndarray:
    """Every frame as the ffmpeg binary shows it (autorotated, square pixels)."""
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-vf", "scale=iw*sar:ih,setsar=1", "-f",
                          "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


@pytest.fixture(scope="module")
def land(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("picture") / "land.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=320x180:r=30:d=4", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(path))
    return path


@pytest.mark.parametrize("tag", [90, 180, 270])
def test_a_phone_video_comes_out_as_ffmpeg_shows_it(tag: int, land: Path) -> None:
    """The issue's repro: the rotate tag becomes mp4's display matrix; every frame equals ffmpeg's own."""
    path = land.with_name(f"rot{tag}.mp4")
    ffmpeg("-i", str(land), "-c", "copy", "-metadata:s:v:0", f"rotate={tag}", str(path))
    frames = decode_frames(path)
    h, w = (320, 180) if tag in (90, 270) else (180, 320)
    assert frames.pixels.shape == (4, h, w, 3)
    reference = ffmpeg_rgb(path, h, w)
    rows = np.round(frames.pts_s * 30).astype(int)  # 30 fps: the frame each row took
    np.testing.assert_array_equal(frames.pixels, reference[rows])
    assert frames.picture["stored_size"] == [320, 180] and frames.picture["display_size"] == [w, h]
    # this ffmpeg writes the tag's matrix as a counterclockwise turn (newer ones clockwise): either way the
    # recorded turn is what the matrix asks, and undoing it gives the stored picture back
    stored = decode_frames(land).pixels
    turned = np.stack([orient(s, frames.picture["mirrored"], frames.picture["rotation_deg"]) for s in stored])
    np.testing.assert_array_equal(turned, frames.pixels)


@pytest.mark.parametrize("sar, shown", [("4/3", 320), ("10/11", 218), ("1/3", 80)])
def test_an_anamorphic_video_gets_square_pixels(sar: str, shown: int, tmp_path: Path) -> None:
    """Stored 240x180: displayed floor(240 * SAR) x 180 (ffmpeg's scale=iw*sar:ih truncates), bicubic, within
    4 of 255 of ffmpeg's picture on average (1.0-2.7 measured); the old code gave 240 columns."""
    path = tmp_path / "sar.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=240x180:r=25:d=3", "-vf", f"setsar={sar}", "-c:v", "libx264",
           "-pix_fmt", "yuv420p", str(path))
    frames = decode_frames(path)
    assert frames.pixels.shape == (3, 180, shown, 3)
    reference = ffmpeg_rgb(path, 180, shown)[np.round(frames.pts_s * 25).astype(int)]
    assert np.abs(frames.pixels.astype(int) - reference).mean() < 4
    num, den = sar.split("/")
    assert frames.picture == {"stored_size": [240, 180], "sar": f"{num}:{den}", "display_size": [shown, 180],
                              "rotation_deg": 0, "mirrored": False}


@pytest.mark.parametrize("orientation", range(1, 9))
def test_stills_record_their_exif_turn(orientation: int, tmp_path: Path) -> None:
    """PIL's exif_transpose is the reference: the recorded turn, applied to the stored pixels, gives its picture."""
    stored = np.zeros((30, 50, 3), np.uint8)
    stored[:10, :20] = (255, 0, 0)  # an asymmetric picture: every one of the 8 turns differs
    stored[20:, 40:] = (0, 0, 255)
    img = Image.fromarray(stored)
    exif = img.getexif()
    exif[0x0112] = orientation
    path = tmp_path / "still.png"
    img.save(path, exif=exif)
    still = decode_image(path)
    with Image.open(path) as reread:
        upright = np.asarray(ImageOps.exif_transpose(reread).convert("RGB"))
    np.testing.assert_array_equal(still.pixels[0], upright)
    p = still.picture
    np.testing.assert_array_equal(orient(stored, p["mirrored"], p["rotation_deg"]), upright)
    assert p["stored_size"] == [50, 30] and p["display_size"] == [upright.shape[1], upright.shape[0]]


def test_the_record_survives_the_faces_join() -> None:
    """Faces joins segments' rows and recomputes its filter attrs: the picture record must stay."""
    record = {"stored_size": [240, 180], "sar": "4:3", "display_size": [320, 180], "rotation_deg": 90,
              "mirrored": False}
    extractor = MTCNNFaces(FacesConfig())
    frames = Frames(np.zeros((2, 24, 32, 3), np.uint8), np.array([[0, 1], [1, 2.0]]), np.array([0.5, 1.5]), 1.0, 2.0,
                    picture=record)
    rows = extractor.extract(frames)
    assert rows.attrs["picture"] == record
    parts = [FeatureRows(rows.features[i:i + 1], rows.intervals[i:i + 1],
                         {k: v[i:i + 1] for k, v in rows.extras.items()}, rows.attrs) for i in range(2)]
    assert MTCNNFaces.join(parts, extractor.config).attrs["picture"] == record
