"""Frame features: torchvision DenseNet161, the 2,208-d output of the final ReLU + global average pool.

As in Social-IQ's Q+A+V baseline: one frame per second (see pipeline/decode.py for which frame),
ImageNet preprocessing taken from the weights' own transforms (resize 256, centre crop 224, normalise).
The forward runs channels_last (faster on CPU and GPU); on CUDA under fp16/bf16 autocast, on CPU in fp32.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import Field

from extractors import calibrate
from extractors.base import Extractor, ExtractorConfig, Frames, Still, bounded_batches, register
from extractors.pixels import repeat
from extractors.pixels import to_device as pixels_on
from extractors.weights import require, weights_dir
from rows import FeatureRows

if TYPE_CHECKING:  # torch is imported where a model runs, never by the driver (it only reads configs): ~0.7 GB
    import torch

FEATURE_DIM = 2208
# "auto" without a calibrator (direct calls, SIQ_CALIBRATE=0): on 2 CPU threads a frame cost 94 ms at a batch of
# 8, 117 ms at 1 and 146 ms at 64 (issue 27); on an H100 64 frames keep it busy.
DEFAULT_BATCH = {"cpu": 8, "cuda": 64}


def _tv_weights(name: str):
    from torchvision.models import DenseNet161_Weights

    return {"imagenet1k_v1": DenseNet161_Weights.IMAGENET1K_V1}[name]


class DenseNetConfig(ExtractorConfig):
    extractor: Literal["densenet161"] = "densenet161"
    weights: Literal["imagenet1k_v1", "random"] = "imagenet1k_v1"
    random_seed: int = 0  # only for weights = "random": the same seed gives the same network
    precision: Literal["fp32", "fp16", "bf16"] = "fp16"  # CUDA only; CPU always runs fp32
    # How the work is run, not what it computes: left out of the fingerprint.
    # frames per forward; "auto": measured by the model actor (extractors/calibrate.py), else DEFAULT_BATCH
    batch_size: Annotated[int, Field(ge=1)] | Literal["auto"] = Field("auto", exclude=True)
    # decoded pixels per forward (at least one frame): bounds the full-size frames preprocessing holds at once
    batch_bytes: int = Field(256 * 2**20, ge=1, exclude=True)
    weights_dir: Path | None = Field(None, exclude=True)


def weights_file(config: DenseNetConfig) -> Path:
    url = _tv_weights(config.weights).url
    return weights_dir(config.weights_dir) / "torchvision" / url.rsplit("/", 1)[-1]


def load_densenet(config: DenseNetConfig) -> torch.nn.Module:
    import torch
    from torchvision.models import densenet161

    if config.weights == "random":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.random_seed)
            return densenet161(weights=None).eval()
    path = require(weights_file(config), f"DenseNet161 {config.weights} weights", weights_dir(config.weights_dir))
    state = torch.load(path, map_location="cpu", weights_only=True)
    model = densenet161(weights=None)
    model.load_state_dict(_rename_legacy_keys(state))
    return model.eval()


def _rename_legacy_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """torchvision's published DenseNet files use 'norm.1'-style keys; the module now says 'norm1'."""
    import re

    pattern = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var|num_batches_tracked))$")
    out = {}
    for key, value in state.items():
        m = pattern.match(key)
        out[m.group(1) + m.group(2) if m else key] = value
    return out


def pooled_features(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """The classifier's input: features → ReLU → global average pool → (B, 2208)."""
    import torch
    import torch.nn.functional as F

    return torch.flatten(F.adaptive_avg_pool2d(F.relu(model.features(batch)), 1), 1)


@register
class DenseNet161(Extractor[DenseNetConfig]):
    name = "densenet161"
    version = "1"
    config_type = DenseNetConfig
    input_kind = "frames"
    uses_gpu = True

    def __init__(self, config: DenseNetConfig, device: str = "cpu") -> None:
        import torch

        super().__init__(config, device)
        self.model = load_densenet(config).to(device)
        self.on_cuda = torch.device(device).type == "cuda"
        # channels_last on CPU too: oneDNN's convolutions skip their layout reorders; DenseNet161 at batch 8 on
        # 2 threads took 0.79× the CPU time a frame (interleaved A/B, docs/scale.md), features within 1.5e-6
        self.model = self.model.to(memory_format=torch.channels_last)
        self.preprocess = _tv_weights("imagenet1k_v1").transforms()  # resize/crop/normalise only

    @classmethod
    def weights_id(cls, config: DenseNetConfig) -> str:
        # "random" exactly (the store contract's marker for features nobody may mistake for real ones);
        # the seed lives in the config, which the fingerprint covers too.
        return config.weights

    @classmethod
    def columns(cls, config: DenseNetConfig) -> list[str]:
        return [f"densenet161_{i}" for i in range(FEATURE_DIM)]

    @classmethod
    def rate_hz(cls, config: DenseNetConfig) -> float | None:
        return 1.0

    def prepare(self, pixels: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(N, H, W, 3) uint8, numpy or already a device tensor → (N, 3, 224, 224) float, normalised; on the
        model's device."""
        return self.preprocess(pixels_on(pixels, self.device).permute(0, 3, 1, 2))

    def embed(self, batch: torch.Tensor) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return self._embed(batch)

    def _embed(self, batch: torch.Tensor) -> np.ndarray:
        import torch

        batch = batch.contiguous(memory_format=torch.channels_last)
        if not self.on_cuda:
            return pooled_features(self.model, batch).float().cpu().numpy()
        if self.config.precision == "fp32":
            with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # true fp32, not TF32
                return pooled_features(self.model, batch).float().cpu().numpy()
        dtype = torch.float16 if self.config.precision == "fp16" else torch.bfloat16
        with torch.autocast("cuda", dtype=dtype):
            out = pooled_features(self.model, batch)
        return out.float().cpu().numpy()

    def extract(self, x: Frames | Still) -> FeatureRows:
        return self.extract_batch([x])[0]

    def extract_batch(self, xs: Sequence[Frames | Still]) -> list[FeatureRows]:
        """All frames of all videos go through the network in batches of at most `batch_size` frames and
        `batch_bytes` of decoded pixels (a batch may span videos), then are split back per video."""
        import torch

        with torch.inference_mode():
            return self._extract_batch(xs)

    def _extract_batch(self, xs: Sequence[Frames | Still]) -> list[FeatureRows]:
        refs = [(v, f) for v, x in enumerate(xs) for f in range(len(x.pixels))]
        sizes = [xs[v].pixels[f].nbytes for v, f in refs]
        trials = calibrate.Trials(len(refs), lambda a, b: self.embed(self._prepare_refs(xs, refs[a:b])),
                                  lambda b: self.embed(self.prepare(repeat(self._first(xs), b))))
        batch = self.batch_size(self._first(xs), max(sizes, default=1), trials) if refs else 1
        rest, done = refs[trials.done:], trials.outputs  # a calibration's trials ran the first frames already
        outs = done + [self.embed(self._prepare_refs(xs, rest[part]))
                       for part in bounded_batches(sizes[trials.done:], batch, self.config.batch_bytes)]
        feats = np.concatenate(outs) if outs else np.zeros((0, FEATURE_DIM), np.float32)
        results, start = [], 0
        precision = self.config.precision if self.on_cuda else "fp32"
        for x in xs:
            n = len(x.pixels)
            source = {"input": "image"} if isinstance(x, Still) else {"frame_pts_s": x.pts_s.tolist()}
            if x.picture:  # how the stored picture became the one the network saw (pipeline/picture.py)
                source["picture"] = x.picture
            results.append(FeatureRows(features=feats[start:start + n], intervals=x.intervals,
                                       attrs={"precision": precision, **source}))
            start += n
        return results

    @staticmethod
    def _first(xs: Sequence[Frames | Still]) -> np.ndarray:
        return next(x.pixels[0] for x in xs if len(x.pixels))

    def batch_size(self, frame: np.ndarray, frame_bytes: int | None = None,
                   trials: calibrate.Trials | None = None) -> int:
        """Frames per forward: pinned, measured (cached) or the device's default. Measured per network input
        (every frame is resized and cropped to it, so the forward's cost does not depend on the frame size) by
        `trials` on the call's frames, or on `frame` repeated; `frame_bytes` (the call's largest frame) bounds
        the candidates by `batch_bytes`."""
        precision = self.config.precision if self.on_cuda else "fp32"
        crop = self.preprocess.crop_size[0]
        probe = trials or (lambda b: self.embed(self.prepare(repeat(frame, b))))
        return calibrate.resolve(
            self.calibrator, self.config.batch_size, DEFAULT_BATCH["cuda" if self.on_cuda else "cpu"],
            f"densenet161-{precision}", f"3x{crop}x{crop}", "frame", probe,
            max_batch=self.config.batch_bytes // max(1, frame_bytes or frame.nbytes))

    def _prepare_refs(self, xs: Sequence[Frames | Still], refs: list[tuple[int, int]]) -> torch.Tensor:
        """Preprocessed frames `refs` (video, frame), in order; each video's run of frames is one slice (a view,
        no copy of the decoded pixels), as videos in one batch may differ in size."""
        import torch

        parts, start = [], 0
        for end in range(1, len(refs) + 1):
            if end == len(refs) or refs[end][0] != refs[start][0]:
                v = refs[start][0]
                parts.append(self.prepare(xs[v].pixels[refs[start][1]:refs[end - 1][1] + 1]))
                start = end
        return torch.cat(parts)
