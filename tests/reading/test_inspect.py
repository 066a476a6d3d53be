"""The inspect PNG: produced at its fixed size, right frames re-decoded, and drawn without the video too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from manifests.sample import read_barcode
from reading.inspect import DPI, FIG_SIZE_IN, decode_thumbnails, render_item
from store.reader import open_store
from store.writer import StoreWriter
from testing.synthetic_store import build_synthetic_store

SIZE_PX = (int(FIG_SIZE_IN[0] * DPI), int(FIG_SIZE_IN[1] * DPI))


@pytest.fixture(scope="module")
def store(tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_store(tiny_root_template, tmp_path_factory.mktemp("in") / "tiny.zarr", 8, 16)


def lime_pixels(png: Path) -> int:
    x = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return int(((x[..., 1] > 200) & (x[..., 0] < 90) & (x[..., 2] < 90)).sum())


def test_png_for_a_sample_item(store: Path, tmp_path: Path) -> None:
    out = render_item(store, "tiny-a", tmp_path / "deep" / "a.png")
    with Image.open(out) as img:
        assert img.size == SIZE_PX == (1600, 1000)
        assert np.asarray(img.convert("RGB")).std() > 20  # drawn, not blank
    # Face boxes (lime) are drawn where the faces feature has faces: every second of tiny-a, none in tiny-c.
    assert lime_pixels(out) > 1000
    assert lime_pixels(render_item(store, "tiny-c", tmp_path / "c.png")) == 0


def test_thumbnails_are_the_frames_nearest_each_interval_middle(tiny_root_template: Path) -> None:
    video = tiny_root_template / "siq2/video/tiny-a.mp4"  # 30 fps: the frame nearest k + 0.5 s is 30 k + 15
    intervals = np.array([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]])
    frames, (w, h) = decode_thumbnails(video, intervals, height_px=None)
    assert (w, h) == (320, 240)
    assert [read_barcode(f) for f in frames] == [15, 45, 75]


def test_missing_video_still_renders(store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    s = open_store(copy)
    items = [m.model_copy(update={"video": tmp_path / "gone.mp4"}) for m in s.media_items()]
    StoreWriter(copy, "sample").write_manifests(items, s.qa_items())
    out = tmp_path / "b.png"
    subprocess.run([sys.executable, "-m", "pipeline.inspect", str(copy), "tiny-b", str(out)], check=True)
    with Image.open(out) as img:
        assert img.size == SIZE_PX


def test_the_reading_layer_draws_the_frames_without_the_pipeline(store: Path, tmp_path: Path) -> None:
    """reading/inspect.py decodes its thumbnails with media/ itself: run alone, no pipeline module is imported and
    the frames panel holds the frames with their face boxes."""
    out = tmp_path / "alone.png"
    code = ("import sys; from reading.inspect import main; main(sys.argv[1:]); "
            "assert not any(m.startswith('pipeline') for m in sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code, str(store), "tiny-a", str(out)], check=True)
    with Image.open(out) as img:
        assert img.size == SIZE_PX
    assert lime_pixels(out) > 1000  # the face boxes, drawn over the decoded frames


def test_unknown_item_is_an_error(store: Path, tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no frames, faces, acoustic or transcript rows for item 'nope'"):
        render_item(store, "nope", tmp_path / "x.png")
