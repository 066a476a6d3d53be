"""Long videos are decoded and extracted in segments of at most `batch_bytes` of pixels: the segments' rows
are the whole video's rows, and decoding one never holds more than its segment's frames."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from extractors.base import Frames
from extractors.densenet import DenseNet161, DenseNetConfig
from extractors.faces import Detections, FacesConfig, MTCNNFaces, pack_video
from media.decode import decode_frames, decode_frames_segment, segment_rows
from rows import FeatureRows
from testing.synth_video import H, W, damage_packets, make_index_video, read_index

FRAME_BYTES = H * W * 3


@pytest.fixture(scope="module")
def long_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 minutes at 29.97 fps, 64x48 (about a second to make): 600 rows at 1 fps."""
    return make_index_video(tmp_path_factory.mktemp("long") / "long.mp4", "30000/1001", 17982)


def segments(path: Path, max_bytes: int) -> list[Frames]:
    first, n = decode_frames_segment(path, None, 0, max_bytes)
    return [first] + [decode_frames_segment(path, None, k, max_bytes)[0] for k in range(1, n)]


def test_segment_rows_cover_the_video_in_bounded_pieces() -> None:
    assert segment_rows(10, 100, None) == [(0, 10)]
    assert segment_rows(10, 100, 350) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert segment_rows(3, 1000, 10) == [(0, 1), (1, 2), (2, 3)]  # a frame bigger than the limit: one a segment
    assert segment_rows(0, 100, 350) == [(0, 0)]


@pytest.mark.parametrize("rows_per_segment", [7, 250])
def test_segments_give_the_whole_videos_rows(long_video: Path, rows_per_segment: int) -> None:
    whole = decode_frames(long_video)
    parts = segments(long_video, rows_per_segment * FRAME_BYTES)
    assert len(parts) == -(-len(whole.intervals) // rows_per_segment)
    assert all(len(p.pixels) <= rows_per_segment for p in parts)
    np.testing.assert_array_equal(np.concatenate([p.pixels for p in parts]), whole.pixels)
    np.testing.assert_array_equal(np.concatenate([p.intervals for p in parts]), whole.intervals)
    np.testing.assert_array_equal(np.concatenate([p.pts_s for p in parts]), whole.pts_s)
    # independent reference: row k shows the frame nearest k + 0.5 s, the one whose index reads round((k+.5)*29.97 - .5)
    shown = [read_index(p) for p in parts[len(parts) // 2].pixels[:3]]
    k0 = parts[len(parts) // 2].intervals[0, 0]
    assert shown == [int(np.floor((k0 + i + 0.5) * 30000 / 1001 + 0.5 - 1e-9)) for i in range(len(shown))]


def test_decoding_a_segment_holds_only_its_frames(long_video: Path) -> None:
    """Peak Python-side memory (numpy arrays included) while decoding one segment of 20 rows, against the
    whole video's 600 rows: bounded by the segment, not the clip."""
    def peak(fn) -> int:
        tracemalloc.start()
        fn()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    whole_bytes = 600 * FRAME_BYTES
    peak_whole = peak(lambda: decode_frames(long_video))
    peak_segment = peak(lambda: decode_frames_segment(long_video, None, 15, 20 * FRAME_BYTES))
    assert peak_whole > whole_bytes
    # the segment's pictures (twice: decoded, then stacked) plus the video's timestamps (18k of them)
    assert peak_segment < 3 * 20 * FRAME_BYTES + 2_000_000 < whole_bytes / 2


def test_damaged_video_segments_follow_the_whole_videos_rule(long_video: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.mp4"
    damage_packets(long_video, broken, lambda kind, t: 100.2 < t < 103.7 or 300.0 < t < 300.5)
    whole = decode_frames(broken)
    assert len(whole.missing_s)  # the damage left seconds without a frame
    parts = segments(broken, 37 * FRAME_BYTES)
    np.testing.assert_array_equal(np.concatenate([p.intervals for p in parts]), whole.intervals)
    np.testing.assert_array_equal(np.concatenate([p.pixels for p in parts]), whole.pixels)
    np.testing.assert_array_equal(np.concatenate([p.missing_s for p in parts]), whole.missing_s)


def test_densenet_rows_joined_from_segments_equal_one_piece(long_video: Path) -> None:
    whole = decode_frames(long_video, clip=(0.0, 5.0))
    parts = [decode_frames_segment(long_video, (0.0, 5.0), k, 2 * FRAME_BYTES)[0] for k in range(3)]
    model = DenseNet161(DenseNetConfig(weights="random"))
    one = model.extract(whole)
    joined = DenseNet161.join(model.extract_batch(parts), model.config)
    np.testing.assert_allclose(joined.features, one.features, rtol=1e-4, atol=2e-5)
    np.testing.assert_array_equal(joined.intervals, one.intervals)
    assert joined.attrs == one.attrs


def _detections(rng: np.random.Generator, k: int) -> Detections:
    boxes = rng.uniform(0, 40, (k, 4)).astype(np.float32)
    return Detections(boxes, rng.uniform(0.95, 1, k).astype(np.float32), rng.uniform(0, 40, (k, 5, 2)).astype(np.float32))


def test_faces_rows_joined_from_segments_equal_one_piece() -> None:
    """Segments find different numbers of faces (so pad differently) and the filter's ratio is the video's."""
    rng = np.random.default_rng(3)
    counts = [0, 0, 1, 0, 3, 1, 0, 0, 2, 0, 1]
    dets = [_detections(rng, k) for k in counts]
    pixels = np.zeros((len(counts), H, W, 3), np.uint8)
    intervals = np.stack([np.arange(len(counts)), np.arange(1, len(counts) + 1)], 1).astype(float)
    config = FacesConfig(min_face_ratio=0.5)
    frames = Frames(pixels, intervals, intervals[:, 0] + 0.5, 30.0, float(len(counts)))
    one = pack_video(dets, frames, config)
    cuts = [(0, 4), (4, 8), (8, 11)]  # K: 1, 3, 2
    parts = [pack_video(dets[a:b], Frames(pixels[a:b], intervals[a:b], intervals[a:b, 0] + 0.5, 30.0, 11.0), config)
             for a, b in cuts]
    joined = MTCNNFaces.join(parts, config)
    np.testing.assert_array_equal(joined.features, one.features)
    np.testing.assert_array_equal(joined.intervals, one.intervals)
    assert joined.extras.keys() == one.extras.keys()
    for key in one.extras:
        np.testing.assert_array_equal(joined.extras[key], one.extras[key], err_msg=key)
    assert joined.attrs == one.attrs and joined.attrs["filtered"]  # 5 of 11 frames with a face < 0.5


def test_join_refuses_attrs_it_cannot_join() -> None:
    rows = [FeatureRows(np.zeros((1, 2), np.float32), np.array([[i, i + 1.0]]), {}, {"mean": float(i)}) for i in (0, 1)]
    with pytest.raises(ValueError, match="'mean' differs between segments"):
        DenseNet161.join(rows, DenseNetConfig(weights="random"))
