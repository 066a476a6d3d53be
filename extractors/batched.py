"""One base for the extractors that run a model over batches of units: DenseNet161, MTCNN, the text encoders.

A model supplies its `units(x)` (what one item contributes: frames, token sequences), its `forward(batch)` (a batch
of units from any items to one output per unit), its `pack(x, units, outputs)` (one item's `FeatureRows`), and how
its batch size is keyed and defaulted. The base owns the rest: the units of all items of a call batched together
per `group` (MTCNN: frames of one size), shortest first where `by_length` (text: less padding); batches bounded by
the batch size and the config's `batch_bytes`; the batch size pinned, measured by the actor's calibrator on the
call's own first units (`calibrate.py`) or the model's default; each forward under inference mode on the device in
the model's `precision`; the outputs split back per item. A unit is whatever `forward` takes and is never converted
here: `Frame` is (pixels, index) of an item's frames, a numpy array or a torch tensor on the device, and a batch of
them is sliced (`frame_runs`) or stacked (`stacked_frames`) in the kind it came in.
"""

from __future__ import annotations

import sys
from abc import abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from contextlib import nullcontext
from typing import Any, ClassVar, Generic, Literal, NamedTuple, TypeVar

import numpy as np

from extractors import calibrate
from extractors.base import C, Extractor, Frames, Still
from rows import FeatureRows

U = TypeVar("U")  # a unit
Precision = Literal["fp32", "fp16", "bf16"]


def bounded_batches(item_bytes: Sequence[int], max_items: int, max_bytes: int) -> list[slice]:
    """Consecutive items in batches of at most `max_items` items and `max_bytes` bytes, in input order.

    A model call then holds at most `max_bytes` of input, or one item when that item alone is larger
    (it still runs, alone). Greedy: a batch closes when the next item would pass either limit.
    """
    if max_items < 1 or max_bytes < 1:
        raise ValueError(f"bounded_batches needs max_items >= 1 and max_bytes >= 1, got {max_items = }, {max_bytes = }")
    batches, start, total = [], 0, 0
    for i, size in enumerate(item_bytes):
        if i > start and (i - start >= max_items or total + size > max_bytes):
            batches.append(slice(start, i))
            start, total = i, 0
        total += size
    if start < len(item_bytes):
        batches.append(slice(start, len(item_bytes)))
    return batches


class Units(list):
    """An item's units with what its packing needs beside them (`plan`, e.g. a transcript's token-to-word map):
    `units` may return one, and `pack` gets it back."""

    def __init__(self, units: Iterable[Any], plan: Any = None) -> None:
        super().__init__(units)
        self.plan = plan


class BatchedModel(Extractor[C], Generic[C, U]):
    """A model run over batches of units from any items (module docstring). The config has `batch_size` (an int,
    or "auto") and may have `batch_bytes`."""

    unit_name: ClassVar[str]  # what a unit is called in the calibration's records: "frame", "sequence"
    by_length: ClassVar[bool] = False  # a group's units run shortest first (len(unit)); its median is the reference

    def __init__(self, config: C, device: str = "cpu", calibrator: calibrate.Calibrator | None = None) -> None:
        import torch

        super().__init__(config, device)
        self.calibrator = calibrator  # the actor's: "auto" measured, recorded for its report; None: the default
        self.on_cuda = torch.device(device).type == "cuda"

    @abstractmethod
    def units(self, x: Any) -> Sequence[U]:
        """What one item contributes, in the order its outputs come back to `pack`."""

    @abstractmethod
    def forward(self, batch: Sequence[U]) -> Sequence[Any]:
        """One output per unit (run by `infer`)."""

    @abstractmethod
    def pack(self, x: Any, units: Sequence[U], outputs: list[Any]) -> FeatureRows:
        """One item's rows from its `units` (as `units(x)` returned them) and their outputs."""

    @abstractmethod
    def batch_key(self, reference: U) -> tuple[str, str]:
        """What a group's batch size is measured for: (the model and what changes its cost, e.g. precision; the
        input size), from the group's reference unit (its first; its median when `by_length`)."""

    @abstractmethod
    def default_batch(self) -> int:
        """Units per forward when "auto" is not measured (no calibrator; calibration off or cut short)."""

    def group(self, unit: U) -> Hashable:
        """Units of one group may share a batch (and one batch size)."""
        return None

    def unit_bytes(self, unit: U) -> int:
        """What a unit counts against the config's `batch_bytes`: its `nbytes` (a frame's pixels), if it has one."""
        return int(getattr(unit, "nbytes", 0))

    def weigh(self, batch: Sequence[U], reference: U) -> float:
        """A calibration trial in reference units, so that trials on different inputs compare."""
        return float(len(batch))

    def precision(self) -> Precision | None:
        """fp16/bf16: autocast on the device; fp32: true fp32 (no TF32) on CUDA; None: torch's defaults."""
        return None

    def extract(self, x: Any) -> FeatureRows:
        return self.extract_batch([x])[0]

    def extract_batch(self, xs: Sequence[Any]) -> list[FeatureRows]:
        """The units of all items through the model in bounded batches, then packed per item."""
        per_item = [self.units(x) for x in xs]
        flat = [u for units in per_item for u in units]
        outputs: list[Any] = [None] * len(flat)
        groups: dict[Hashable, list[int]] = {}
        for k, u in enumerate(flat):
            groups.setdefault(self.group(u), []).append(k)
        for positions in groups.values():
            if self.by_length:  # stable: equal lengths keep their items' order
                positions.sort(key=lambda k: len(flat[k]))
            self._run_group(flat, positions, outputs)
        rows, at = [], 0
        for x, units in zip(xs, per_item, strict=True):
            rows.append(self.pack(x, units, outputs[at : at + len(units)]))
            at += len(units)
        return rows

    def _run_group(self, flat: list[U], positions: list[int], outputs: list[Any]) -> None:
        """One group's units in batches of the resolved size; a calibration's trials are its first batches."""
        units = [flat[k] for k in positions]
        reference = units[len(units) // 2] if self.by_length else units[0]

        def run(a: int, b: int) -> None:
            for k, out in zip(positions[a:b], self.infer(units[a:b]), strict=True):
                outputs[k] = out

        sizes = [self.unit_bytes(u) for u in units]
        limit = getattr(self.config, "batch_bytes", None)
        trials = calibrate.Trials(len(units), run, lambda b: self.infer([reference] * b),
                                  lambda a, b: self.weigh(units[a:b], reference))
        batch = calibrate.resolve(self.calibrator, self.config.batch_size, self.default_batch(),  # type: ignore[attr-defined]
                                  *self.batch_key(reference), self.unit_name, trials,
                                  max_batch=limit // max(1, *sizes) if limit else None)
        done = trials.done
        for part in bounded_batches(sizes[done:], batch, limit or sys.maxsize):
            run(done + part.start, done + part.stop)

    def infer(self, batch: Sequence[U]) -> Sequence[Any]:
        """`forward` under inference mode, on the device, in the model's precision."""
        import torch

        precision = self.precision()
        if precision in ("fp16", "bf16"):
            dtype = torch.float16 if precision == "fp16" else torch.bfloat16
            amp: Any = torch.autocast(torch.device(self.device).type, dtype=dtype)
        elif precision == "fp32" and self.on_cuda:
            amp = torch.backends.cudnn.flags(enabled=True, allow_tf32=False)  # true fp32, not TF32
        else:
            amp = nullcontext()
        with torch.inference_mode(), amp:
            return self.forward(batch)


class Frame(NamedTuple):
    """A frame as a unit: `pixels[index]` of an item's (N, H, W, 3) uint8 frames (a numpy array, or a torch tensor
    decoded on the device), so that a batch's run of one item's frames is one slice of them, not a copy."""

    pixels: Any
    index: int

    @property
    def nbytes(self) -> int:
        return int(self.pixels[self.index].nbytes)


def frame_units(pixels: Any) -> list[Frame]:
    """Each frame of (N, H, W, 3) pixels (numpy or torch) as a unit."""
    return [Frame(pixels, f) for f in range(len(pixels))]


class FrameModel(BatchedModel[C, Frame]):
    """A model over the frames of a video (`Frames`, 1 fps) or a still image (`Still`): a unit and a row a frame."""

    input_kind = "frames"
    uses_gpu = True
    unit_name = "frame"

    @classmethod
    def rate_hz(cls, config: C) -> float | None:
        return 1.0

    def units(self, x: Frames | Still) -> list[Frame]:
        if not isinstance(x, Frames | Still):
            raise TypeError(f"{self.name} expects Frames or Still, got {type(x).__name__}")
        return frame_units(x.pixels)


def source_attrs(x: Frames | Still) -> dict[str, Any]:
    """What frame rows say of their source: a still image's "input", and how the stored picture became the one the
    model saw (`picture`: media/picture.py)."""
    return {**({"input": "image"} if isinstance(x, Still) else {}), **({"picture": x.picture} if x.picture else {})}


def frame_runs(batch: Sequence[Frame]) -> list[Any]:
    """A batch's frames as slices of their items' pixels, one per run of consecutive frames of one item."""
    runs, start = [], 0
    for end in range(1, len(batch) + 1):
        if end == len(batch) or batch[end].pixels is not batch[start].pixels \
                or batch[end].index != batch[end - 1].index + 1:
            runs.append(batch[start].pixels[batch[start].index : batch[end - 1].index + 1])
            start = end
    return runs


def stacked_frames(batch: Sequence[Frame]) -> Any:
    """A batch's frames (all of one size) as one (B, H, W, 3) array, or tensor on its device."""
    runs = frame_runs(batch)
    if isinstance(runs[0], np.ndarray):
        return np.concatenate(runs)
    import torch

    return torch.cat(runs)
