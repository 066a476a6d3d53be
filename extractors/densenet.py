"""Frame features: torchvision DenseNet161, the 2,208-d output of the final ReLU + global average pool.

As in Social-IQ's Q+A+V baseline: one frame per second (see media/decode.py for which frame),
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
from extractors.base import ExtractorConfig, Frames, SdkSequence, Still, register
from extractors.batched import Frame, FrameModel, Precision, frame_runs, source_attrs
from extractors.pixels import to_device as pixels_on
from extractors.weights import Weights, require, weights_dir
from rows import FeatureRows

if TYPE_CHECKING:  # torch is imported where a model runs, never by the driver (it only reads configs): ~0.7 GB
    import torch

FEATURE_DIM = 2208
# "auto" without a calibrator (direct calls, SIQ_CALIBRATE=0): on 2 CPU threads a frame cost 94 ms at a batch of
# 8, 117 ms at 1 and 146 ms at 64 (issue 27); on an H100 64 frames keep it busy.
DEFAULT_BATCH = {"cpu": 8, "cuda": 64}
# torchvision's DenseNet161_Weights.<name>.url, spelled here so that declaring the weights imports no torchvision
# (4 s); tests/extractors/test_densenet.py holds it equal to torchvision's
WEIGHTS_URLS = {"imagenet1k_v1": "https://download.pytorch.org/models/densenet161-8d451a50.pth"}
CITATION = ("@inproceedings{huang2017densely, title={Densely Connected Convolutional Networks}, "
            "author={Huang, Gao and Liu, Zhuang and van der Maaten, Laurens and Weinberger, Kilian Q}, "
            "booktitle={CVPR}, year={2017}}")


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


def _cache_path(name: str) -> str:
    """Where torch hub's own cache layout puts the file, under the weights cache."""
    return f"torchvision/{WEIGHTS_URLS[name].rsplit('/', 1)[-1]}"


def weights_file(config: DenseNetConfig) -> Path:
    return weights_dir(config.weights_dir) / _cache_path(config.weights)


def load_densenet(config: DenseNetConfig) -> torch.nn.Module:
    import torch
    from torchvision.models import densenet161

    if config.weights == "random":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.random_seed)
            return densenet161(weights=None).eval()
    path = require(weights_file(config), f"DenseNet161 {config.weights} weights", weights_dir(config.weights_dir))
    state = torch.load(path, map_location="cpu", weights_only=True)
    # built on the meta device (shapes, no memory, no initialisation) and given the file's tensors themselves: the
    # random initialisation that loading overwrote cost more than reading the file (bench/actor_start.py)
    with torch.device("meta"):
        model = densenet161(weights=None)
    model.load_state_dict(_rename_legacy_keys(state), assign=True)  # strict: every parameter and buffer from the file
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:  # a tensor no state dict holds (none in DenseNet161 today) would stay without values
        raise ValueError(f"{path}: no values for {left[:3]} after loading")
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
class DenseNet161(FrameModel[DenseNetConfig]):
    """Units are frames (a batch may span videos of different sizes: each is resized and cropped to the network's
    input); forward: preprocess each video's run of frames, then the pooled features; packing: one row a frame."""

    name = "densenet161"
    version = "1"
    config_type = DenseNetConfig
    sdk_sequence = SdkSequence("SOCIAL_IQ_DENSENET161_1FPS")

    def __init__(self, config: DenseNetConfig, device: str = "cpu", calibrator: calibrate.Calibrator | None = None) -> None:
        import torch

        super().__init__(config, device, calibrator)
        # channels_last on CPU too: oneDNN's convolutions skip their layout reorders; DenseNet161 at batch 8 on
        # 2 threads took 0.79× the CPU time a frame (interleaved A/B, docs/scale.md), features within 1.5e-6
        self.model = load_densenet(config).to(device, memory_format=torch.channels_last)
        self.preprocess = _tv_weights("imagenet1k_v1").transforms()  # resize/crop/normalise only

    @classmethod
    def weights(cls, config: DenseNetConfig) -> tuple[Weights, ...]:
        if config.weights == "random":  # made from the seed: nothing to load
            return ()
        return (Weights(f"DenseNet161 {config.weights} weights", url=WEIGHTS_URLS[config.weights],
                        path=_cache_path(config.weights)),)

    @classmethod
    def citation(cls, config: dict) -> str:
        return CITATION

    @classmethod
    def weights_id(cls, config: DenseNetConfig) -> str:
        # "random" exactly (the store contract's marker for features nobody may mistake for real ones);
        # the seed lives in the config, which the fingerprint covers too.
        return config.weights

    @classmethod
    def columns(cls, config: DenseNetConfig) -> list[str]:
        return [f"densenet161_{i}" for i in range(FEATURE_DIM)]

    def precision(self) -> Precision:
        return self.config.precision if self.on_cuda else "fp32"

    def batch_key(self, reference: Frame) -> tuple[str, str]:
        """Per network input: every frame is resized and cropped to it, so the cost does not depend on its size."""
        crop = self.preprocess.crop_size[0]
        return f"densenet161-{self.precision()}", f"3x{crop}x{crop}"

    def default_batch(self) -> int:
        return DEFAULT_BATCH["cuda" if self.on_cuda else "cpu"]

    def forward(self, batch: Sequence[Frame]) -> np.ndarray:
        """(B, 2208) float32; each video's run of frames preprocessed as one slice (a view: no copy of its pixels)."""
        import torch

        x = torch.cat([self.prepare(run) for run in frame_runs(batch)]).contiguous(memory_format=torch.channels_last)
        return pooled_features(self.model, x).float().cpu().numpy()

    def pack(self, x: Frames | Still, units: Sequence[Frame], outputs: list[np.ndarray]) -> FeatureRows:
        pts = {} if isinstance(x, Still) else {"frame_pts_s": x.pts_s.tolist()}
        features = np.stack(outputs) if outputs else np.zeros((0, FEATURE_DIM), np.float32)
        return FeatureRows(features, x.intervals, attrs={"precision": self.precision(), **pts, **source_attrs(x)})

    def prepare(self, pixels: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(N, H, W, 3) uint8, numpy or already a device tensor (frames the actor decoded on its GPU) → (N, 3, 224,
        224) float, normalised; on the model's device."""
        return self.preprocess(pixels_on(pixels, self.device).permute(0, 3, 1, 2))
