"""Pictures as displayed (media/picture.py): the issue's phone and anamorphic files against ffmpeg's own
decode, stills' EXIF orientations against PIL, and the per-item record on its way to the store. The matrix of
containers and codecs is tests/media/test_video_conformance.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from extractors.base import Frames
from extractors.faces import FacesConfig, MTCNNFaces
from media.decode import decode_frames
from media.inputs import decode_image
from media.picture import orient
from rows import FeatureRows


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


def remux(src: Path, dst: Path, matrix: list[int] | None = None, tags: dict[str, str] | None = None) -> Path:
    import av

    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        stream = out.add_stream_from_template(inp.streams.video[0])
        if matrix:
            stream.set_display_matrix(matrix)
        stream.metadata.update(tags or {})
        for packet in inp.demux(inp.streams.video[0]):
            if packet.size:
                packet.stream = stream
                out.mux(packet)
    return dst


def test_a_rotate_tag_without_a_matrix_turns_clockwise(land: Path, tmp_path: Path) -> None:
    """Old muxers wrote only a `rotate` tag (Matroska keeps it as ROTATE): turned clockwise, as older ffmpeg versions did
    (the ffmpeg binary here ignores it, so the reference is the stored picture turned a quarter clockwise)."""
    frames = decode_frames(remux(land, tmp_path / "tag.mkv", tags={"rotate": "90"}))
    stored = decode_frames(land).pixels
    np.testing.assert_array_equal(frames.pixels, np.rot90(stored, -1, axes=(1, 2)))
    assert (frames.picture["rotation_deg"], frames.picture["mirrored"]) == (90, False)


def test_a_matrix_that_is_not_a_quarter_turn_is_left_as_stored(land: Path, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    c = s = round(0.5 ** 0.5 * (1 << 16))  # 45 degrees
    path = remux(land, tmp_path / "r45.mp4", matrix=[c, -s, 0, s, c, 0, 0, 0, 1 << 30])
    frames = decode_frames(path)
    np.testing.assert_array_equal(frames.pixels, decode_frames(land).pixels)
    assert frames.picture["rotation_deg"] == 0
    assert any("not a multiple of 90" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_the_record_reaches_the_store_and_its_version_the_fingerprint(tiny_root: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Through Ray (decode tasks and actors import this checkout): a phone video's frames and faces items
    record its turn, every other item its plain picture; a new PICTURE_VERSION recomputes every frames pair."""
    from media import picture
    from pipeline.config import RunConfig
    from pipeline.run import run_extract
    from store.reader import open_store

    video = tiny_root / "siq2/video/tiny-c.mp4"  # 320x180: turned a quarter by its display matrix
    remux(video, tmp_path / "c.mp4", matrix=[0, 1 << 16, 0, -(1 << 16), 0, 0, 0, 0, 1 << 30]).replace(video)
    config = RunConfig.model_validate({"layout": "siq2", "features": {
        "frames": {"extractor": "densenet161", "weights": "random"}, "faces": {"extractor": "mtcnn"}}})
    out = tmp_path / "s.zarr"
    assert run_extract("tiny", tiny_root, out, config).exit_code == 0
    store = open_store(out)
    for feature in ("frames", "faces"):
        assert store.item_attrs(feature, "tiny-c")["picture"] == {
            "stored_size": [320, 180], "sar": "1:1", "display_size": [180, 320], "rotation_deg": 90,
            "mirrored": False}
        assert store.item_attrs(feature, "tiny-a")["picture"]["display_size"] == [320, 240]
    monkeypatch.setattr(picture, "PICTURE_VERSION", "test")
    again = run_extract("tiny", tiny_root, out, config, only=["frames"])
    assert again.counts["frames"]["done"] == 3


@pytest.mark.parametrize("container", ["mkv", "mp4"])
def test_the_containers_aspect_wins_over_the_bitstreams(container: str, tmp_path: Path) -> None:
    """`-aspect 2:1` on a stream copy: the container says SAR 3:2, the H.264 bitstream still 4:3; ffmpeg (and
    so this) displays 360x180."""
    coded = tmp_path / "sar.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=240x180:r=25:d=2", "-vf", "setsar=4/3", "-c:v", "libx264",
           "-pix_fmt", "yuv420p", str(coded))
    path = tmp_path / f"wide.{container}"
    ffmpeg("-i", str(coded), "-c", "copy", "-aspect", "2:1", str(path))
    frames = decode_frames(path)
    reference = ffmpeg_rgb(path, 180, 360)[np.round(frames.pts_s * 25).astype(int)]
    assert frames.pixels.shape == reference.shape
    assert np.abs(frames.pixels.astype(int) - reference).mean() < 4
    assert frames.picture["sar"] == "3:2"
