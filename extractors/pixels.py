"""Decoded pixels as the visual extractors take them: a numpy array from the CPU decode path, or a torch tensor
(N, H, W, 3) uint8 already on the model's device where the model actor decoded the frames there itself
(media/nvdec.py: NVDEC, so the pictures never cross host memory or Ray's object store)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def is_tensor(pixels: Any) -> bool:
    return not isinstance(pixels, np.ndarray)


def to_device(pixels: Any, device: str) -> Any:
    """(…, H, W, 3) uint8 as a torch tensor on `device` (a device tensor stays where it is when it is there)."""
    import warnings

    import torch

    if is_tensor(pixels):
        return pixels.to(device, non_blocking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only arrays (Ray's zero-copy): never written to here
        return torch.from_numpy(np.ascontiguousarray(pixels)).to(device, non_blocking=True)


def stack(frames: Sequence[Any]) -> Any:
    """Frames of one size as one batch, numpy or torch as they came."""
    if frames and is_tensor(frames[0]):
        import torch

        return torch.stack(list(frames))
    return np.stack(frames)


def repeat(frame: Any, n: int) -> Any:
    """One frame n times (a calibration trial's batch), numpy or torch as it came."""
    if is_tensor(frame):
        return frame[None].expand(n, *frame.shape).contiguous()
    return np.repeat(frame[None], n, axis=0)
