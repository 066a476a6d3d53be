"""Frames decoded on the GPU (NVDEC, through torchcodec) for the models that run there (issue 37).

The CPU path (media/decode.py) stays the reference and the fallback. This path takes the same rows and the
same source frames: `decode.plan_rows` (demuxing alone, on the CPU) chooses them by the 1 fps rule from the
packets' timestamps, and torchcodec is asked for exactly those frames, each at the middle of its own showing;
the PTS it returns are checked against the chosen ones, tick for tick, before any picture is used. Colour
conversion runs where the decoder runs (NVDEC's NV12 through torchcodec's kernel on CUDA; swscale on CPU, the
CPU path's own conversion, so there the pictures are bit-exact with it), and the pictures stay a device tensor
(N, H, W, 3) uint8 for DenseNet's resize and MTCNN.

A file goes to the CPU path, with the reason recorded (`CpuFallback.reason`, the run report's per-file note),
when the GPU path could not show it as the CPU path does:
- a codec NVDEC does not decode (ProRes, MJPEG, MPEG-4 Part 2, …: `NVDEC_CODECS`), a pixel format other than
  8-bit 4:2:0, an odd or out-of-range size (NVDEC's limits per codec, CUDA only);
- timestamps that are not display times (AVI, MPEG-4 Part 2: the CPU path's display-order mode);
- damage the demuxer saw (skipped bytes, a truncated file): the CPU path's damaged-data rule needs every
  picture's corrupt flag, which torchcodec does not give;
- non-square pixels (the CPU path's swscale bicubic scale is the reference) and mirrored display matrices
  (torchcodec applies the matrix's rotation only);
- torchcodec missing, or frames it returns that are not the chosen ones.

In a run (`frames_decoder`, docs/design.md "Frames decoded on the GPU"): the decode task calls `plan_for_device`
and sends the `FramesPlan`, or decodes a file that needs the CPU path with its reason; the frames model actor
calls `frames_of_plan` once per plan for every frames feature it hosts (pipeline/actors.py `DeviceFramesCache`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from extractors.base import Frames
from media import decode
from media.container import Track, first_line
from rows import check_intervals

log = logging.getLogger(__name__)

# NVDEC's decode limits (NVIDIA Video Codec SDK, NVDEC application note, "Video decoder capabilities", Ampere
# and later): codec -> ((min width, min height), (max width, max height)). 8-bit 4:2:0 only here: the pixel
# formats below; 4:4:4 and 10-bit go to the CPU path (the models take 8-bit RGB either way).
NVDEC_CODECS = {"h264": ((48, 16), (4096, 4096)), "hevc": ((144, 144), (8192, 8192)),
                "vp9": ((128, 128), (8192, 8192)), "av1": ((128, 128), (8192, 8192))}
NVDEC_PIXEL_FORMATS = {"yuv420p", "yuvj420p", "nv12"}


class CpuFallback(Exception):
    """The file's frames are decoded on the CPU path instead; `reason` says why, for the run report."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason


# what a file's frames were decoded by, as the store's items and the run report name it: the CPU path (the
# reference; no "decoder" in an item's identity, as before this path existed), NVDEC, or torchcodec's CPU decoder
# (this path run on a CPU: bit-exact with the CPU path, the tests' way of running it without a GPU)
CPU, NVDEC, TORCHCODEC_CPU = "cpu", "nvdec", "torchcodec-cpu"


def decoder_name(device: str) -> str:
    return NVDEC if device.startswith("cuda") else TORCHCODEC_CPU


@dataclass(frozen=True)
class DeviceFrames(Frames):
    """`extractors.base.Frames` with the pixels a device tensor (N, H, W, 3) uint8, as displayed: the visual
    extractors take it as they take `Frames` (extractors/pixels.py)."""

    decoder: str = NVDEC  # NVDEC on CUDA, TORCHCODEC_CPU where the same code ran on the CPU

    def __post_init__(self) -> None:
        import torch

        if self.pixels.ndim != 4 or self.pixels.shape[-1] != 3 or self.pixels.dtype != torch.uint8:
            raise ValueError(f"pixels must be (N, H, W, 3) uint8, got {tuple(self.pixels.shape)}, {self.pixels.dtype}")
        check_intervals(self.intervals, "Frames intervals", len(self.pixels))


def cpu_reason(plan: decode.RowPlan, device: str) -> str | None:
    """Why `plan`'s file must be decoded on the CPU path, or None when this path shows it as that one does.
    NVDEC's codec size limits apply on CUDA only (torchcodec's CPU decoder, which the tests run, has none)."""
    timing, view = plan.timing, plan.view
    if plan.codec not in NVDEC_CODECS:
        return f"codec {plan.codec}: NVDEC decodes {', '.join(sorted(NVDEC_CODECS))}"
    if plan.pixel_format not in NVDEC_PIXEL_FORMATS:
        return f"pixel format {plan.pixel_format}: not 8-bit 4:2:0"
    w, h = view.stored_wh
    if w % 2 or h % 2:
        return f"odd size {w}x{h}"
    (min_w, min_h), (max_w, max_h) = NVDEC_CODECS[plan.codec]
    if device.startswith("cuda") and not (min_w <= w <= max_w and min_h <= h <= max_h):
        return f"size {w}x{h} outside NVDEC's {plan.codec} range {min_w}x{min_h} to {max_w}x{max_h}"
    if not timing.in_order:
        return "timestamps are not display times (decoded in display order)"
    if timing.after_skip or timing.before_skip or timing.cut_short or timing.duration_s > timing.end_s:
        return "damaged data (the demuxer skipped bytes or the file is truncated): the CPU path's damage rule"
    if view.sar != 1:
        return f"non-square pixels (SAR {view.sar}): the CPU path's swscale scale is the reference"
    if view.mirrored:
        return "mirrored display matrix: torchcodec turns pictures without mirroring them"
    return None


def decode_on_device(path: Path | str, clip: tuple[float, float | None] | None = None, device: str = "cuda",
                     segment: int = 0, max_bytes: int | None = None, track: Track = None) -> DeviceFrames:
    """The rows `decode.decode_frames_segment` gives, their pictures decoded on `device` by torchcodec (NVDEC on
    CUDA). Raises CpuFallback when the CPU path must decode this file (see the module docstring)."""
    plan = decode.plan_rows(path, clip, segment, max_bytes, track=track)
    reason = cpu_reason(plan, device)
    if reason is not None:
        raise CpuFallback(plan.path, reason)
    return decode_plan(plan, clip, device)


def decode_plan(plan: decode.RowPlan, clip: tuple[float, float | None] | None, device: str) -> DeviceFrames:
    """`plan`'s chosen frames decoded on `device` (a plan `cpu_reason` passed: the decode task checked it)."""
    try:
        from torchcodec.decoders import VideoDecoder
    except (ImportError, RuntimeError, OSError) as e:  # (RuntimeError: no FFmpeg 4-9 shared libraries to load)
        raise CpuFallback(plan.path, f"torchcodec not available ({first_line(e)})") from e
    keep = plan.index >= 0
    if not keep.any():
        raise CpuFallback(plan.path, "no row has a frame: the CPU path's error")
    chosen = plan.timing.ticks[plan.index[keep]]
    try:
        decoder = VideoDecoder(str(plan.path), stream_index=plan.stream_index, device=device,
                               dimension_order="NHWC", num_ffmpeg_threads=1, seek_mode="exact")
        if device.startswith("cuda") and getattr(decoder, "cpu_fallback", False):
            raise CpuFallback(plan.path, f"NVDEC refused it: {decoder.cpu_fallback}")
        batch = decoder.get_frames_played_at(_showing_middles(plan, chosen).tolist())
    except CpuFallback:
        raise
    except Exception as e:  # torchcodec's errors are RuntimeErrors naming FFmpeg's or NVDEC's complaint
        raise CpuFallback(plan.path, f"torchcodec failed: {first_line(e)}") from e
    got = np.round(batch.pts_seconds.cpu().numpy().astype(np.float64) / float(plan.timing.time_base)).astype(np.int64)
    if not np.array_equal(got, chosen):
        bad = int(np.flatnonzero(got != chosen)[0])
        raise CpuFallback(plan.path, f"torchcodec gave the frame at PTS {got[bad]} for the one at {chosen[bad]}")
    pixels = _upright(batch.data, decoder.metadata.rotation, plan.view)
    if tuple(pixels.shape[1:3]) != plan.view.display_wh[::-1]:
        raise CpuFallback(plan.path, f"torchcodec's pictures are {tuple(pixels.shape[1:3])}, the displayed size "
                                     f"is {plan.view.display_wh[::-1]} (height, width)")
    timing = plan.timing
    return DeviceFrames(pixels.contiguous(), plan.intervals[keep], timing.starts[plan.index[keep]], plan.fps,
                        timing.duration_s, picture=plan.view.attrs(), **plan.notes(plan.index),
                        decoder=decoder_name(device))


def _showing_middles(plan: decode.RowPlan, chosen: np.ndarray) -> np.ndarray:
    """Container seconds halfway through each chosen frame's showing (its PTS to the next frame's; the last
    frame's: its nominal length), where torchcodec's "played at" can only mean that frame."""
    ticks = plan.timing.ticks
    at = np.searchsorted(ticks, chosen)
    step = int(np.median(np.diff(ticks))) if len(ticks) > 1 else 1
    following = np.append(ticks[1:], ticks[-1] + max(1, step))[at]
    return (chosen + (following - chosen) / 2) * float(plan.timing.time_base)


def _upright(pixels: Any, decoder_ccw: float | None, view: Any) -> Any:
    """Pictures torchcodec turned by its reading of the display matrix (counterclockwise degrees), turned the
    rest of the way to the CPU path's `view.rotation_deg` clockwise (a `rotate` tag, which the CPU path follows
    and torchcodec may not)."""
    import torch

    done_cw = -round(decoder_ccw or 0) % 360
    rest = (view.rotation_deg - done_cw) % 360
    return torch.rot90(pixels, -(rest // 90), dims=(1, 2)) if rest else pixels


@dataclass(frozen=True)
class FramesPlan:
    """What a decode task sends for a file whose frames the model actor decodes on its device: the rows and the
    source frame each takes (`decode.plan_rows`, a few KiB to a few MiB of timestamps, never pixels) and which
    features read it (the actor keeps the decoded frames on the device until the last of them has: decoded once
    for DenseNet and MTCNN, pipeline/actors.py `DeviceFramesCache`)."""

    item: str
    segment: int
    plan: decode.RowPlan
    clip: tuple[float, float | None] | None
    device: str
    readers: tuple[str, ...]
    max_bytes: int | None = None  # the segments' bound it was planned with (the CPU path's, if it must fall back)

    @property
    def key(self) -> tuple[str, int]:
        return self.item, self.segment

    @property
    def n_frames(self) -> int:
        return int((self.plan.index >= 0).sum())

    @property
    def pixel_bytes(self) -> int:
        """The decoded frames' bytes: what the scheduler's books count for it (the actor's device memory)."""
        return self.n_frames * self.plan.view.frame_bytes

    @property
    def duration_s(self) -> float:
        return self.plan.timing.duration_s

    @property
    def missing_s(self) -> np.ndarray:
        return self.plan.notes(self.plan.index)["missing_s"]

    @property
    def streams_end_s(self) -> float | None:
        return self.plan.notes(self.plan.index)["streams_end_s"]

    @property
    def stream_start_s(self) -> float | None:
        return self.plan.notes(self.plan.index)["stream_start_s"]

    @property
    def streams(self) -> dict[str, Any] | None:
        return self.plan.timing.streams


def plan_for_device(path: Path | str, clip: tuple[float, float | None] | None, device: str, item: str,
                    readers: tuple[str, ...], segment: int = 0, max_bytes: int | None = None,
                    track: Track = None) -> tuple[FramesPlan | Frames, int, str | None]:
    """The decode task's side of this path: (the plan, its segments, None) for a file `device` can decode as the
    CPU path does, else (the CPU path's frames, its segments, the reason). Demuxing once either way."""
    plan = decode.plan_rows(path, clip, segment, max_bytes, track=track)
    reason = cpu_reason(plan, device)
    if reason is None and not torchcodec_present():
        reason = "torchcodec is not installed"
    if reason is None and not (plan.index >= 0).any():
        reason = "no row has a frame: the CPU path's error"
    if reason is None:
        return FramesPlan(item, segment, plan, clip, device, readers, max_bytes), plan.segments, None
    log.info("%s: frames decoded on the CPU: %s", plan.path, reason)
    frames, segments = decode.decode_frames_segment(path, clip, segment, max_bytes, plan=plan)
    return frames, segments, reason


def torchcodec_present() -> bool:
    """Whether torchcodec is installed (without importing it: it loads torch and FFmpeg's libraries)."""
    import importlib.util

    return importlib.util.find_spec("torchcodec") is not None


def frames_of_plan(p: FramesPlan) -> tuple[DeviceFrames | Frames, str | None]:
    """The model actor's side: (the frames on `p.device`, None), or (the CPU path's frames, the reason) where the
    decoder refused what the plan promised (torchcodec failing, frames at other timestamps)."""
    try:
        return decode_plan(p.plan, p.clip, p.device), None
    except CpuFallback as e:
        log.info("%s: frames decoded on the CPU: %s", p.plan.path, e.reason)
        frames, _ = decode.decode_frames_segment(p.plan.path, p.clip, p.segment, p.max_bytes, plan=p.plan)
        return frames, e.reason
