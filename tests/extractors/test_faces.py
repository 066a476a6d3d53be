"""MTCNN faces: checked against facenet-pytorch's own per-image `MTCNN.detect` and against known face positions.

Test frames are scikit-image's astronaut photo (one face) rescaled with PIL and pasted onto plain or uniform-noise
canvases; the reference face box comes from the unscaled photo, so a pasted copy's face must sit at
scale * box + offset.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image
from pydantic import ValidationError
from skimage.data import astronaut

from extractors.base import Frames, get_extractor, parse_config
from extractors.faces import (
    COLUMNS,
    Detections,
    FacesConfig,
    MTCNNFaces,
    detections_from_facenet,
    face_filter_attrs,
    pack_video,
)

H, W = 240, 320
ASTRONAUT = astronaut()


def scaled(scale: float) -> np.ndarray:
    side = round(ASTRONAUT.shape[0] * scale)
    return np.asarray(Image.fromarray(ASTRONAUT).resize((side, side), Image.BILINEAR))


def canvas(kind: str, seed: int = 0, h: int = H, w: int = W) -> np.ndarray:
    if kind == "plain":
        return np.full((h, w, 3), 200, np.uint8)
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def paste(base: np.ndarray, img: np.ndarray, y: int, x: int) -> np.ndarray:
    out = base.copy()
    hh, ww = min(img.shape[0], out.shape[0] - y), min(img.shape[1], out.shape[1] - x)
    out[y : y + hh, x : x + ww] = img[:hh, :ww]
    return out


def make_frames(pixels: list[np.ndarray]) -> Frames:
    n = len(pixels)
    intervals = np.stack([np.arange(n), np.arange(n) + 1.0], axis=1)
    return Frames(
        np.stack(pixels) if n else np.zeros((0, H, W, 3), np.uint8), intervals, intervals[:, 0] + 0.5, 25.0, float(n)
    )


def iou(a: np.ndarray, b: np.ndarray) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return float(inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter))


# (scale, y, x, background, seed): faces at several sizes and places, partly cut off at the frame edge
PLACEMENTS = [
    (0.4, 10, 20, "plain", 0),
    (0.45, 0, 100, "noise", 1),
    (0.3, 60, 150, "noise", 2),
    (0.6, 0, 0, "plain", 0),
]


def face_frames() -> list[np.ndarray]:
    return [paste(canvas(bg, seed), scaled(s), y, x) for s, y, x, bg, seed in PLACEMENTS]


def empty_frames() -> list[np.ndarray]:
    return [canvas("plain"), canvas("noise", 5), canvas("noise", 6)]


@pytest.fixture(scope="module")
def faces() -> MTCNNFaces:
    return MTCNNFaces(FacesConfig(batch_size=16))


@pytest.fixture(scope="module")
def reference():
    """facenet-pytorch's MTCNN, called one image at a time, as its README does."""
    from facenet_pytorch import MTCNN

    return MTCNN(keep_all=True, select_largest=False, device=torch.device("cpu"))


def reference_detections(
    mtcnn, img: np.ndarray, prob_threshold: float = 0.9
) -> list[tuple[np.ndarray, float, np.ndarray]]:
    boxes, probs, points = mtcnn.detect(img, landmarks=True)
    if boxes is None:
        return []
    found = [
        (np.asarray(b, float), float(p), np.asarray(q, float)) for b, p, q in zip(boxes, probs, points, strict=True)
    ]
    return sorted([f for f in found if f[1] >= prob_threshold], key=lambda f: -f[1])


def assert_matches_reference(rows, pixels: list[np.ndarray], mtcnn) -> None:
    for i, img in enumerate(pixels):
        ref = reference_detections(mtcnn, img)
        got = rows.extras["mask"][i]
        assert rows.extras["count"][i] == len(ref) == got.sum(), f"frame {i}: {rows.extras['count'][i]} vs {len(ref)}"
        for j, (box, prob, points) in enumerate(ref):
            assert iou(rows.extras["boxes"][i, j], box) >= 0.9, (i, j, rows.extras["boxes"][i, j], box)
            assert abs(rows.extras["probs"][i, j] - prob) <= 1e-3
            np.testing.assert_allclose(rows.extras["landmarks"][i, j], points, atol=0.05 * (box[2] - box[0]))


def test_matches_facenet_per_image_and_empty_frames_count_zero(faces, reference) -> None:
    pixels = face_frames() + empty_frames()
    rows = faces.extract(make_frames(pixels))
    assert_matches_reference(rows, pixels, reference)
    assert rows.extras["count"].tolist() == [1, 1, 1, 1, 0, 0, 0]
    assert rows.extras["count"].dtype == np.int32
    assert np.isnan(rows.features[4:, 1:]).all() and (rows.features[4:, 0] == 0).all()
    assert rows.attrs == {"face_ratio": 4 / 7, "filtered": True, "min_face_ratio": 0.8}


def test_boxes_sit_where_the_face_was_pasted(faces, reference) -> None:
    ((box0, _, points0),) = reference_detections(reference, ASTRONAUT)
    rows = faces.extract(make_frames(face_frames()))
    for i, (s, y, x, _, _) in enumerate(PLACEMENTS):
        expected = box0 * s + np.array([x, y, x, y])
        assert iou(rows.extras["boxes"][i, 0], expected) >= 0.8, (i, rows.extras["boxes"][i, 0], expected)
        np.testing.assert_allclose(
            rows.extras["landmarks"][i, 0], points0 * s + [x, y], atol=0.08 * s * (box0[2] - box0[0])
        )
        # dense columns describe the same box, normalised to the frame
        cx, cy = (expected[0] + expected[2]) / 2 / W, (expected[1] + expected[3]) / 2 / H
        np.testing.assert_allclose(rows.features[i, COLUMNS.index("largest_cx")], cx, atol=0.02)
        np.testing.assert_allclose(rows.features[i, COLUMNS.index("largest_cy")], cy, atol=0.02)


def face_ratio_frames(face_seconds: set[int], n: int) -> Frames:
    face = np.asarray(Image.fromarray(ASTRONAUT[20:220, 130:320]).resize((95, 100), Image.BILINEAR))
    small = canvas("plain", h=120, w=160)
    return make_frames([paste(small, face, 10, 30) if k in face_seconds else small for k in range(n)])


@pytest.mark.parametrize(("min_face_ratio", "filtered"), [(0.75, False), (0.8, False), (0.85, True)])
def test_face_ratio_is_exact_and_filter_splits_at_threshold(min_face_ratio: float, filtered: bool) -> None:
    seconds = {0, 1, 2, 4, 5, 7, 8, 9}
    rows = MTCNNFaces(FacesConfig(min_face_ratio=min_face_ratio)).extract(face_ratio_frames(seconds, 10))
    assert np.flatnonzero(rows.extras["count"]).tolist() == sorted(seconds)
    assert rows.attrs == {"face_ratio": 0.8, "filtered": filtered, "min_face_ratio": min_face_ratio}


def test_filter_rule_edges() -> None:
    at_rule = np.array([1] * 55 + [0] * 45)  # 55/100 meets 0.55 although 0.55 * 100 > 55 in floats
    assert face_filter_attrs(at_rule, 0.55) == {"face_ratio": 0.55, "filtered": False, "min_face_ratio": 0.55}
    assert face_filter_attrs(np.array([1] * 12 + [0] * 3), 0.8)["filtered"] is False
    assert face_filter_attrs(np.array([2] * 11 + [0] * 4), 0.8)["filtered"] is True
    assert face_filter_attrs(np.zeros(0, np.int32), 0.0) == {"face_ratio": 0.0, "filtered": True, "min_face_ratio": 0.0}
    assert face_filter_attrs(np.zeros(3, np.int32), 0.0)["filtered"] is False


def test_videos_of_different_sizes_batch_together(reference) -> None:
    faces = MTCNNFaces(FacesConfig(batch_size=2))
    calls: list[tuple[int, ...]] = []
    detect = faces.mtcnn.detect

    def spy(img, landmarks=False):
        calls.append(tuple(img.shape))
        return detect(img, landmarks=landmarks)

    faces.mtcnn.detect = spy
    f = face_frames()
    small = [paste(canvas("noise", 9, 200, 200), scaled(0.35), 10, 5), canvas("plain", h=200, w=200)]
    videos = [[f[0], empty_frames()[0], f[1]], small, [f[2], f[3]]]
    out = faces.extract_batch([make_frames(v) for v in videos])
    # frames of same-size videos share chunks of batch_size, across the video boundary
    assert calls == [(2, H, W, 3), (2, H, W, 3), (1, H, W, 3), (2, 200, 200, 3)]
    for rows, pixels in zip(out, videos, strict=True):
        assert_matches_reference(rows, pixels, reference)
        np.testing.assert_array_equal(rows.intervals, make_frames(pixels).intervals)
    assert [r.extras["count"].tolist() for r in out] == [[1, 0, 1], [1, 0], [1, 1]]


def test_no_face_anywhere_keeps_one_masked_slot(faces) -> None:
    rows = faces.extract(make_frames(empty_frames()))
    assert rows.extras["boxes"].shape == (3, 1, 4) and rows.extras["landmarks"].shape == (3, 1, 5, 2)
    assert (
        not rows.extras["mask"].any() and np.isnan(rows.extras["probs"]).all() and np.isnan(rows.extras["boxes"]).all()
    )
    assert rows.features.shape == (3, len(COLUMNS)) and rows.features.dtype == np.float32
    assert rows.attrs["face_ratio"] == 0.0 and rows.attrs["filtered"] is True


def test_frames_smaller_than_min_face_and_zero_frames(faces) -> None:
    tiny = Frames(
        np.full((2, 15, 40, 3), 100, np.uint8), np.array([[0.0, 1.0], [1.0, 1.5]]), np.array([0.5, 1.2]), 25.0, 1.5
    )
    empty = make_frames([])
    rows_tiny, rows_empty = faces.extract_batch([tiny, empty])
    assert rows_tiny.extras["count"].tolist() == [0, 0] and rows_tiny.intervals.tolist() == [[0.0, 1.0], [1.0, 1.5]]
    assert rows_empty.features.shape == (0, len(COLUMNS)) and rows_empty.extras["boxes"].shape == (0, 1, 4)
    assert rows_empty.attrs["filtered"] is True


def test_two_faces_padding_and_max_faces_cap(faces) -> None:
    two = paste(paste(canvas("plain"), scaled(0.35), 20, 0), scaled(0.35), 20, 150)
    frames = make_frames([two, face_frames()[0]])
    rows = faces.extract(frames)
    assert rows.extras["count"].tolist() == [2, 1] and rows.extras["mask"].tolist() == [[True, True], [True, False]]
    assert np.isnan(rows.extras["boxes"][1, 1]).all() and np.diff(rows.extras["probs"][0]) <= 0  # highest first
    capped = MTCNNFaces(FacesConfig(max_faces=1)).extract(frames)
    assert capped.extras["boxes"].shape == (2, 1, 4) and capped.extras["count"].tolist() == [2, 1]
    np.testing.assert_array_equal(capped.extras["boxes"][:, 0], rows.extras["boxes"][:, 0])
    assert capped.features[0, 0] == 2
    # the dense "largest" columns pick the larger of the two faces
    areas = np.prod(rows.extras["boxes"][0, :, 2:] - rows.extras["boxes"][0, :, :2], axis=1)
    big = rows.extras["boxes"][0, int(np.argmax(areas))]
    np.testing.assert_allclose(rows.features[0, COLUMNS.index("largest_w")], (big[2] - big[0]) / W, rtol=1e-5)


def test_detections_above_threshold_sorted() -> None:
    boxes = np.arange(16, dtype=np.float32).reshape(4, 4)
    d = Detections(boxes, np.array([0.95, 0.5, 0.99, 0.9], np.float32), np.zeros((4, 5, 2), np.float32))
    kept = d.above(0.9)
    assert kept.probs.tolist() == pytest.approx([0.99, 0.95, 0.9]) and kept.boxes[:, 0].tolist() == [8.0, 0.0, 12.0]
    with pytest.raises(ValueError, match="disagree"):
        Detections(boxes[:2], np.zeros(3, np.float32), np.zeros((3, 5, 2), np.float32))


def test_pack_video_keeps_faces_at_or_above_prob_threshold() -> None:
    def det(probs: list[float]) -> Detections:
        k = len(probs)
        boxes = np.tile(np.array([[10.0, 20.0, 50.0, 80.0]], np.float32), (k, 1))
        return Detections(boxes, np.array(probs, np.float32), np.ones((k, 5, 2), np.float32))

    frames = Frames(np.zeros((3, 100, 200, 3), np.uint8), np.array([[0.0, 1], [1, 2], [2, 3]]), np.zeros(3), 25.0, 3.0)
    rows = pack_video([det([0.5, 0.95]), det([0.8]), det([0.9, 0.91, 0.1])], frames, FacesConfig(min_face_ratio=0.6))
    assert rows.extras["count"].tolist() == [1, 0, 2] and rows.extras["probs"].shape == (3, 2)
    np.testing.assert_allclose(rows.extras["probs"][[0, 2]], [[0.95, np.nan], [0.91, 0.9]])
    np.testing.assert_allclose(rows.features[0], [1, 0.95, 40 * 60 / (100 * 200), 0.15, 0.5, 0.2, 0.6], rtol=1e-6)
    assert rows.attrs == {"face_ratio": 2 / 3, "filtered": False, "min_face_ratio": 0.6}


def test_deterministic(faces) -> None:
    frames = make_frames(face_frames()[:2] + empty_frames()[:1])
    a, b = faces.extract(frames), faces.extract(frames)
    np.testing.assert_array_equal(a.features, b.features)
    for key in a.extras:
        np.testing.assert_array_equal(a.extras[key], b.extras[key])


def test_config_registry_and_declared_output() -> None:
    assert get_extractor("mtcnn") is MTCNNFaces
    config = parse_config({"extractor": "mtcnn", "min_face_ratio": 0.5})
    assert isinstance(config, FacesConfig) and config.prob_threshold == 0.9 and config.thresholds == (0.6, 0.7, 0.7)
    assert config.canonical()["thresholds"] == [0.6, 0.7, 0.7]
    for bad in ({"batch_size": 0}, {"min_face_ratio": 1.5}, {"thresholds": [0.6, 0.7]}, {"max_faces": 0}, {"oops": 1}):
        with pytest.raises(ValidationError):
            parse_config({"extractor": "mtcnn", **bad})
    assert MTCNNFaces.columns(config) == COLUMNS and MTCNNFaces.rate_hz(config) == 1.0
    assert MTCNNFaces.weights_id(config) == "facenet-pytorch-2.6.0-mtcnn"
    assert MTCNNFaces.input_kind == "frames" and MTCNNFaces.uses_gpu


def test_rejects_other_inputs(faces) -> None:
    with pytest.raises(TypeError, match="expects Frames"):
        faces.extract_batch([np.zeros((1, 8, 8, 3), np.uint8)])


@pytest.mark.gpu
def test_cuda_matches_cpu(faces) -> None:
    if not torch.cuda.is_available():
        if os.environ.get("FAIL_WITHOUT_CUDA") == "1":
            pytest.fail("FAIL_WITHOUT_CUDA=1 but torch.cuda.is_available() is False")
        pytest.skip("needs CUDA")
    f = face_frames()
    videos = [make_frames([f[0], empty_frames()[1], f[1]]), make_frames([f[2], f[3]])]
    on_gpu = MTCNNFaces(FacesConfig(batch_size=4), device="cuda").extract_batch(videos)
    for gpu, cpu in zip(on_gpu, faces.extract_batch(videos), strict=True):
        np.testing.assert_array_equal(gpu.extras["count"], cpu.extras["count"])
        for i, j in zip(*np.nonzero(cpu.extras["mask"]), strict=True):
            assert iou(gpu.extras["boxes"][i, j], cpu.extras["boxes"][i, j]) >= 0.9
        np.testing.assert_allclose(gpu.extras["probs"], cpu.extras["probs"], atol=1e-3)


# --- vectorised stages 2/3 (extractors/mtcnn_stages.py) and batching --------------------------------------------


def test_area_resized_crops_equal_facenet_per_box_resample() -> None:
    """The summed-area crops equal facenet-pytorch's `imresample` of each slice bit for bit, for crops smaller and
    larger than the output, at frame edges, of one pixel, whole frames, and in a 2200×4000 frame (int64 table)."""
    from facenet_pytorch.models.utils.detect_face import imresample

    from extractors.mtcnn_stages import crops_area_resized, summed_area

    rng = np.random.default_rng(3)
    for shape in [(3, 70, 90, 3), (1, 2200, 4000, 3)]:
        frames = torch.from_numpy(rng.integers(0, 256, shape, dtype=np.uint8))
        imgs = frames.permute(0, 3, 1, 2)
        table = summed_area(frames)
        assert table.dtype == (torch.int32 if shape[1] < 1000 else torch.int64)
        n_img, h, w, _ = shape
        y0 = torch.from_numpy(rng.integers(0, h, 60))
        x0 = torch.from_numpy(rng.integers(0, w, 60))
        y1 = torch.minimum(y0 + torch.from_numpy(rng.integers(1, 80, 60)), torch.tensor(h))
        x1 = torch.minimum(x0 + torch.from_numpy(rng.integers(1, 3000, 60)), torch.tensor(w))
        inds = torch.from_numpy(rng.integers(0, n_img, 60))
        y0[0], y1[0], x0[0], x1[0] = 0, h, 0, w  # the whole frame
        y0[1], y1[1], x0[1], x1[1] = h - 1, h, w - 1, w  # one pixel in the corner
        for n in (24, 48):
            got = crops_area_resized(table, inds, y0, y1, x0, x1, n)
            ref = torch.cat([imresample(imgs[i : i + 1, :, a:b, c:d].float(), (n, n))
                             for i, a, b, c, d in zip(inds, y0, y1, x0, x1, strict=True)])
            assert torch.equal(got, ref), (shape, n, (got - ref).abs().max())


def edge_and_size_frames() -> dict[tuple[int, int], list[np.ndarray]]:
    """Astronaut faces at several frame sizes, some cut off at an edge (MTCNN's `pad` clips those crops)."""
    return {
        (H, W): face_frames() + empty_frames()[1:2],
        (180, 180): [paste(canvas("noise", 11, 180, 180), scaled(0.5), 0, 0),
                     paste(canvas("plain", 0, 180, 180), scaled(0.3), 90, 100)],
        (96, 400): [paste(canvas("noise", 12, 96, 400), scaled(0.2), 0, 350)],
    }


def as_plain(found) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """facenet-pytorch's `detect` output per frame as float32 (boxes, probs, landmarks); empty arrays for none."""
    out = []
    for b, p, q in zip(*found, strict=True):
        d = detections_from_facenet(b, p, q)
        out.append((d.boxes, d.probs, d.landmarks))
    return out


@pytest.mark.parametrize("one_at_a_time", [False, True])
def test_vectorised_stages_equal_facenet_detect(reference, one_at_a_time: bool) -> None:
    """`mtcnn_stages.detect` finds facenet-pytorch's `MTCNN.detect` faces bit for bit, batched or one frame per call
    (every candidate, not only those above `prob_threshold`; stages 2/3 see hundreds of boxes per frame)."""
    from extractors.mtcnn_stages import detect

    for size, frames in edge_and_size_frames().items():
        batch = torch.from_numpy(np.stack(frames))
        calls = [batch[k : k + 1] for k in range(len(batch))] if one_at_a_time else [batch]
        for call in calls:
            with torch.inference_mode():
                ref = as_plain(reference.detect(call, landmarks=True))
                got = detect(reference, call)
            assert len(got) == len(ref) == len(call)
            for (gb, gq), (rb, rp, rq) in zip(got, ref, strict=True):
                assert gb.shape == (len(rp), 5) and gq.shape == (len(rp), 5, 2), size
                np.testing.assert_array_equal(gb[:, :4], rb)
                np.testing.assert_array_equal(gb[:, 4], rp)
                np.testing.assert_array_equal(gq, rq)
        assert sum(len(g[0]) for g in detect(reference, batch)) >= 1


def assert_same_faces(a, b) -> None:
    """Batching moves MTCNN boxes by float rounding only (CPU convolutions sum in a batch-dependent order)."""
    np.testing.assert_array_equal(a.extras["count"], b.extras["count"])
    np.testing.assert_array_equal(a.extras["mask"], b.extras["mask"])
    np.testing.assert_allclose(a.extras["boxes"], b.extras["boxes"], atol=1e-3)
    np.testing.assert_allclose(a.extras["landmarks"], b.extras["landmarks"], atol=1e-3)
    np.testing.assert_allclose(a.extras["probs"], b.extras["probs"], atol=1e-5)
    np.testing.assert_allclose(a.features, b.features, atol=1e-5)
    assert a.attrs == b.attrs


def test_batching_and_byte_limit_never_change_faces(monkeypatch) -> None:
    """Every frame reaches MTCNN exactly once, in calls of at most `batch_size` frames and `batch_bytes` bytes
    (one larger frame alone), and the faces are the same batched, one at a time, split by bytes, vectorised."""
    import extractors.faces as faces_module

    sizes = edge_and_size_frames()
    videos = [make_frames(sizes[H, W][:3]), Frames(np.stack(sizes[180, 180]), np.array([[0.0, 1], [1, 2]]),
                                                   np.array([0.5, 1.5]), 25.0, 2.0), make_frames(sizes[H, W][3:])]
    calls: list[tuple[int, ...]] = []
    real = faces_module.detect_frames

    def spy(mtcnn, pixels, device, vectorised=False):
        calls.append(pixels.shape)
        return real(mtcnn, pixels, device, vectorised)

    monkeypatch.setattr(faces_module, "detect_frames", spy)
    frame_bytes = H * W * 3
    outs = {}
    for name, cfg in {
        "one": FacesConfig(batch_size=1),
        "batched": FacesConfig(batch_size=16),
        "bytes": FacesConfig(batch_size=16, batch_bytes=int(2.5 * frame_bytes)),
        "vectorised": FacesConfig(batch_size=16, batch_bytes=int(2.5 * frame_bytes), vectorised=True),
        "tiny_bytes": FacesConfig(batch_size=16, batch_bytes=1),
    }.items():
        calls.clear()
        outs[name] = MTCNNFaces(cfg).extract_batch(videos)
        if name in ("bytes", "vectorised"):  # 5 frames of 240×320 by 2, then the two 180×180 frames (< 2.5 frames)
            assert calls == [(2, H, W, 3), (2, H, W, 3), (1, H, W, 3), (2, 180, 180, 3)], calls
        if name in ("one", "tiny_bytes"):
            assert calls == [(1, H, W, 3)] * 5 + [(1, 180, 180, 3)] * 2, calls
        if name == "batched":
            assert calls == [(5, H, W, 3), (2, 180, 180, 3)], calls
    assert [r.extras["count"].tolist() for r in outs["one"]] == [[1, 1, 1], [1, 1], [1, 0]]
    for out in outs.values():
        for a, b in zip(out, outs["one"], strict=True):
            assert_same_faces(a, b)


def test_auto_batching_per_device_and_left_out_of_fingerprint() -> None:
    faces = MTCNNFaces(FacesConfig())
    threads = torch.get_num_threads()
    try:  # CPU: one frame per call with 1-2 threads, 16 with more; facenet-pytorch's own stages
        torch.set_num_threads(2)
        assert (faces.default_batch(), faces.vectorised) == (1, False)
        torch.set_num_threads(3)
        assert faces.default_batch() == 16
    finally:
        torch.set_num_threads(threads)
    canonical = FacesConfig(batch_size=7, batch_bytes=10, vectorised=True).canonical()
    assert canonical == FacesConfig().canonical() and "batch_size" not in canonical
    for bad in ({"batch_size": "big"}, {"batch_bytes": 0}):
        with pytest.raises(ValidationError):
            FacesConfig(**bad)


@pytest.mark.gpu
def test_cuda_vectorised_equals_facenet_on_cuda() -> None:
    if not torch.cuda.is_available():
        if os.environ.get("FAIL_WITHOUT_CUDA") == "1":
            pytest.fail("FAIL_WITHOUT_CUDA=1 but torch.cuda.is_available() is False")
        pytest.skip("needs CUDA")
    from facenet_pytorch import MTCNN

    from extractors.mtcnn_stages import detect

    mtcnn = MTCNN(keep_all=True, select_largest=False, device=torch.device("cuda"))
    for frames in edge_and_size_frames().values():
        batch = torch.from_numpy(np.stack(frames)).cuda()
        with torch.inference_mode():
            ref, got = as_plain(mtcnn.detect(batch, landmarks=True)), detect(mtcnn, batch)
        for (gb, gq), (rb, rp, rq) in zip(got, ref, strict=True):
            np.testing.assert_allclose(gb[:, :4], rb, atol=1e-3)
            np.testing.assert_allclose(gb[:, 4], rp, atol=1e-5)
            np.testing.assert_allclose(gq, rq, atol=1e-3)
