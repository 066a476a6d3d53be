"""Faces per sampled frame with facenet-pytorch's MTCNN, and the Social-IQ face filter.

Social-IQ kept only videos with at least one MTCNN face in 80 % of frames. This extractor stores, per 1 fps frame,
every face whose probability reaches `prob_threshold` (boxes, probabilities, five-point landmarks, padded with a
mask) and marks the item `filtered` when its face ratio is below `min_face_ratio` (the item is never dropped here).

MTCNN's first stage runs one image pyramid over a batch of same-size images, so the frames of all given videos are
grouped by (H, W) (`group`) and detected in chunks of at most `batch_size` frames and `batch_bytes` bytes of pixels,
then split back per video (the batching is extractors/batched.py's). On CUDA, stages 2 and 3 run vectorised over all candidate boxes
(`extractors/mtcnn_stages.py`, same outputs as facenet-pytorch's per-box loop); on CPU facenet-pytorch's own
`MTCNN.detect` runs, one frame per call by default (both choices measured: docs/faces.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from extractors import calibrate
from extractors.base import ExtractorConfig, Frames, SdkSequence, Still, register
from extractors.batched import Frame, FrameModel, source_attrs, stacked_frames
from extractors.pixels import to_device
from extractors.weights import Weights
from rows import FeatureRows

# "auto" batch sizes, measured (docs/faces.md, Batching): on CUDA (H100) 32 frames per call were 2.9× one frame at
# 360p; on CPU with 1–2 threads batching loses at 720p (0.70–0.97×), gains little at 360p (0.89–1.16×) and holds
# up to 16× the memory; with 16 threads a batch of 16 was 1.43× (one frame's small pyramid levels cannot use them).
AUTO_BATCH_SIZE_CUDA = 32
AUTO_BATCH_SIZE_CPU_MANY_THREADS = 16
# MTCNN's peak memory is ~15× the pixels it is given (float32 frames, P-net pyramid, summed-area tables; measured in
# docs/faces.md, "Memory"). 96 MiB of pixels keeps a call near 1.5 GB and still fits the 32 frames of 720p that the
# CUDA default was measured with; frames of 4000×3000 go 2 per call (+4.4 GB for 8 in one call before).
DEFAULT_BATCH_BYTES = 96 * 2**20

COLUMNS = ["count", "max_prob", "largest_area_frac", "largest_cx", "largest_cy", "largest_w", "largest_h"]


class FacesConfig(ExtractorConfig):
    """MTCNN settings (the detector's own names and defaults) plus what counts as a face and the item filter."""

    extractor: Literal["mtcnn"] = "mtcnn"
    prob_threshold: float = Field(0.9, ge=0.0, le=1.0)  # faces kept per frame: prob >= this (select_boxes' default)
    min_face_ratio: float = Field(0.8, ge=0.0, le=1.0)  # Social-IQ: a face in >= 80 % of frames, else filtered
    # How the work is run, not what it computes (batching changes boxes by < 1e-3 px): left out of the fingerprint.
    batch_size: Annotated[int, Field(ge=1)] | Literal["auto"] = Field("auto", exclude=True)  # frames per call
    batch_bytes: int = Field(DEFAULT_BATCH_BYTES, ge=1, exclude=True)  # pixel bytes per call (>= one frame runs)
    vectorised: bool | Literal["auto"] = Field("auto", exclude=True)  # stages 2/3 over all boxes; auto: on CUDA
    min_face_size: int = Field(20, ge=1)  # pixels; facenet-pytorch default
    thresholds: tuple[float, float, float] = (0.6, 0.7, 0.7)  # P-, R-, O-net score thresholds
    factor: float = Field(0.709, gt=0.0, lt=1.0)  # image pyramid scale step
    max_faces: int | None = Field(None, ge=1)  # cap on stored faces per frame (highest probability first)


@dataclass(frozen=True)
class Detections:
    """Faces found in one frame, sorted by probability (highest first)."""

    boxes: np.ndarray  # (k, 4) float32 x1, y1, x2, y2 in pixels (may extend past the frame)
    probs: np.ndarray  # (k,) float32
    landmarks: np.ndarray  # (k, 5, 2) float32 x, y in pixels: eyes, nose, mouth corners

    def __post_init__(self) -> None:
        k = len(self.probs)
        if self.boxes.shape != (k, 4) or self.landmarks.shape != (k, 5, 2):
            raise ValueError(
                f"detections disagree: {self.boxes.shape = }, {self.probs.shape = }, {self.landmarks.shape = }"
            )

    @classmethod
    def empty(cls) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros((0, 5, 2), np.float32))

    def above(self, prob_threshold: float) -> Detections:
        keep = np.flatnonzero(self.probs >= prob_threshold)
        order = keep[np.argsort(-self.probs[keep], kind="stable")]
        return Detections(self.boxes[order], self.probs[order], self.landmarks[order])


def _as_float32(x: Any, tail: tuple[int, ...]) -> np.ndarray:
    """facenet-pytorch returns None or nested object arrays; make a plain (k, *tail) float32 array."""
    if x is None:
        return np.zeros((0, *tail), np.float32)
    arr = np.asarray(np.asarray(x, dtype=object).tolist(), dtype=np.float64)
    if arr.size == 0:
        return np.zeros((0, *tail), np.float32)
    return arr.reshape(-1, *tail).astype(np.float32)


def detections_from_facenet(boxes: Any, probs: Any, points: Any) -> Detections:
    """One image's output of `MTCNN.detect(..., landmarks=True)` as `Detections` (unfiltered)."""
    if boxes is None:  # facenet-pytorch gives boxes None, probs [None] for an image without faces
        return Detections.empty()
    return Detections(_as_float32(boxes, (4,)), _as_float32(probs, ()), _as_float32(points, (5, 2)))


def detect_frames(mtcnn: Any, pixels: Any, device: str, vectorised: bool = False) -> list[Detections]:
    """Detect faces once in a batch of same-size frames (B, H, W, 3) uint8 (numpy, or a tensor already on the
    device); one `Detections` per frame.

    `vectorised` runs `mtcnn_stages.detect` (stages 2/3 over all boxes at once) instead of `mtcnn.detect`; the
    detections are the same (tests/extractors/test_faces.py compares them bit for bit)."""
    if pixels.ndim != 4 or pixels.shape[-1] != 3:
        raise ValueError(f"pixels must be (B, H, W, 3), got {pixels.shape = }")
    if len(pixels) == 0 or min(pixels.shape[1:3]) < mtcnn.min_face_size:
        # MTCNN's pyramid would be empty (facenet-pytorch then fails in torch.cat): no face fits the frame
        return [Detections.empty() for _ in range(len(pixels))]
    import torch  # here, not at the top: the driver reads this module's config without loading torch

    batch = to_device(pixels, device)
    with torch.inference_mode():
        if vectorised:
            from extractors import mtcnn_stages

            found = mtcnn_stages.detect(mtcnn, batch)
            return [Detections(b[:, :4].copy(), b[:, 4].copy(), p) for b, p in found]
        boxes, probs, points = mtcnn.detect(batch, landmarks=True)
    return [detections_from_facenet(b, p, q) for b, p, q in zip(boxes, probs, points, strict=True)]


def face_filter_attrs(count: np.ndarray, min_face_ratio: float) -> dict[str, Any]:
    """Item attrs of the Social-IQ rule: keep when the fraction of frames with a face is >= `min_face_ratio`.

    An item without frames has ratio 0 and is filtered. The comparison allows for float rounding
    (55 frames of 100 meet 0.55 although 0.55 * 100 > 55 in floating point).
    """
    n = len(count)
    n_face = int(np.count_nonzero(count))
    ratio = n_face / n if n else 0.0
    filtered = n == 0 or n_face < min_face_ratio * n - 1e-9
    return {"face_ratio": float(ratio), "filtered": bool(filtered), "min_face_ratio": float(min_face_ratio)}


def _dense_features(dets: list[Detections], height: int, width: int) -> np.ndarray:
    """COLUMNS per frame; the largest face by its area inside the frame; NaN where the frame has no face."""
    out = np.full((len(dets), len(COLUMNS)), np.nan, np.float32)
    for i, d in enumerate(dets):
        out[i, 0] = len(d.probs)
        if not len(d.probs):
            continue
        clipped = np.clip(d.boxes, 0.0, [width, height, width, height])
        w, h = clipped[:, 2] - clipped[:, 0], clipped[:, 3] - clipped[:, 1]
        j = int(np.argmax(w * h))
        cx, cy = (clipped[j, 0] + clipped[j, 2]) / 2, (clipped[j, 1] + clipped[j, 3]) / 2
        out[i, 1:] = [
            d.probs.max(),
            w[j] * h[j] / (width * height),
            cx / width,
            cy / height,
            w[j] / width,
            h[j] / height,
        ]
    return out


def _padded(dets: list[Detections], k_max: int | None) -> dict[str, np.ndarray]:
    """Extras: per-frame faces padded to the video's largest count K (>= 1), NaN-filled, with a mask."""
    n = len(dets)
    k = max([1, *(len(d.probs) for d in dets)])
    k = min(k, k_max) if k_max is not None else k
    boxes = np.full((n, k, 4), np.nan, np.float32)
    probs = np.full((n, k), np.nan, np.float32)
    landmarks = np.full((n, k, 5, 2), np.nan, np.float32)
    mask = np.zeros((n, k), bool)
    for i, d in enumerate(dets):
        m = min(len(d.probs), k)
        boxes[i, :m], probs[i, :m], landmarks[i, :m], mask[i, :m] = d.boxes[:m], d.probs[:m], d.landmarks[:m], True
    count = np.array([len(d.probs) for d in dets], np.int32)
    return {"boxes": boxes, "probs": probs, "landmarks": landmarks, "mask": mask, "count": count}


def pack_video(raw: list[Detections], frames: Frames | Still, config: FacesConfig) -> FeatureRows:
    """One video's (or still image's) FeatureRows from its frames' raw detections."""
    if len(raw) != len(frames.pixels):
        raise ValueError(f"{len(raw)} detections for {len(frames.pixels)} frames")
    dets = [d.above(config.prob_threshold) for d in raw]
    height, width = frames.pixels.shape[1:3]
    extras = _padded(dets, config.max_faces)
    attrs = face_filter_attrs(extras["count"], config.min_face_ratio)
    attrs.update(source_attrs(frames))  # boxes are in the picture's coordinates: the one displayed (docs/faces.md)
    return FeatureRows(_dense_features(dets, height, width), frames.intervals.copy(), extras, attrs)


@register
class MTCNNFaces(FrameModel[FacesConfig]):
    """Faces per 1 fps frame (facenet-pytorch MTCNN), batched across frames and videos of the same size."""

    name = "mtcnn"
    # 2: the CPU default with 1-2 threads is one frame per call (was 16): boxes move by float rounding (~5e-5 px)
    version = "2"
    config_type = FacesConfig
    item_measures = {"face_ratio": "face ratio"}
    # the SDK has no faces sequence: the name is ours, in its pattern
    sdk_sequence = SdkSequence("SOCIAL_IQ_MTCNN_FACES_1FPS")

    @classmethod
    def weights(cls, config: FacesConfig) -> tuple[Weights, ...]:
        return (Weights("MTCNN's three networks", package="facenet-pytorch"),)  # in the package's own files

    @classmethod
    def citation(cls, config: dict) -> str:
        return ("@article{zhang2016joint, title={Joint Face Detection and Alignment Using Multitask Cascaded "
                "Convolutional Networks}, author={Zhang, Kaipeng and Zhang, Zhanpeng and Li, Zhifeng and Qiao, Yu}, "
                "journal={IEEE Signal Processing Letters}, year={2016}}")

    def __init__(self, config: FacesConfig, device: str = "cpu", calibrator: calibrate.Calibrator | None = None) -> None:
        import torch

        super().__init__(config, device, calibrator)
        from facenet_pytorch import MTCNN  # imported here: the registry must not pull in model libraries

        # keep_all / select_largest=False: every face, ordered by probability; we only call detect().
        self.mtcnn = MTCNN(
            min_face_size=config.min_face_size,
            thresholds=list(config.thresholds),
            factor=config.factor,
            keep_all=True,
            select_largest=False,
            device=torch.device(device),
        ).eval()
        self.vectorised = self.on_cuda if config.vectorised == "auto" else config.vectorised

    def default_batch(self) -> int:
        """Frames per call unless measured; read per call, as the pipeline may set torch's threads after loading."""
        if self.on_cuda:
            return AUTO_BATCH_SIZE_CUDA
        import torch

        return 1 if torch.get_num_threads() <= 2 else AUTO_BATCH_SIZE_CPU_MANY_THREADS

    def group(self, unit: Frame) -> tuple[int, ...]:
        """MTCNN's first stage runs one image pyramid over a batch of same-size frames."""
        return tuple(unit.pixels.shape[1:])

    def batch_key(self, reference: Frame) -> tuple[str, str]:
        """Per frame size: MTCNN's cost depends on it (its pyramid) and on the faces found."""
        return f"mtcnn-{'vectorised' if self.vectorised else 'facenet'}", "x".join(map(str, self.group(reference)))

    def forward(self, batch: Sequence[Frame]) -> list[Detections]:
        return detect_frames(self.mtcnn, stacked_frames(batch), self.device, self.vectorised)

    def pack(self, x: Frames | Still, units: Sequence[Frame], outputs: list[Detections]) -> FeatureRows:
        return pack_video(outputs, x, self.config)

    @classmethod
    def weights_id(cls, config: FacesConfig) -> str:
        # The P/R/O-net weights ship inside the package, so its version names them.
        return f"facenet-pytorch-{metadata.version('facenet-pytorch')}-mtcnn"

    @classmethod
    def filter_reason(cls, attrs: dict[str, Any]) -> str:
        """`face_filter_attrs`' rule in numbers: the item's face ratio under the bound it missed."""
        ratio, bound = attrs.get("face_ratio"), attrs.get("min_face_ratio")
        if ratio is None:
            return super().filter_reason(attrs)
        return f"face_ratio {float(ratio):.2f}" + (f" < {float(bound):.2f}" if bound is not None else "") + " (faces policy)"

    @classmethod
    def columns(cls, config: FacesConfig) -> list[str]:
        return list(COLUMNS)

    @classmethod
    def join(cls, parts: Sequence[FeatureRows], config: FacesConfig) -> FeatureRows:
        """Segments' rows joined; the filter attrs are the whole video's (its share of frames with a face)."""
        kept = {k: v for k, v in parts[0].attrs.items() if k in ("input", "picture")}  # the same in every segment
        parts = [FeatureRows(p.features, p.intervals, p.extras, {}) for p in parts]
        rows = super().join(parts, config)
        return FeatureRows(rows.features, rows.intervals, rows.extras,
                           {**face_filter_attrs(rows.extras["count"], config.min_face_ratio), **kept})
