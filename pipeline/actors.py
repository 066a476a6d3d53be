"""Ray-side code: decode tasks and model actors. Everything here also runs without Ray (tests call
the plain functions), so `pipeline/run.py` wraps them with `ray.remote` at run time, never at import."""

from __future__ import annotations

import logging
import os
import time
import traceback
from typing import Any

import numpy as np

from extractors.base import ExtractorConfig, get_extractor
from manifests.records import MediaItem, QAItem
from pipeline import kinds as input_kinds
from pipeline import stages
from rows import FeatureRows

log = logging.getLogger(__name__)


def failure(item: str, stage: str, file: Any, error: BaseException) -> dict[str, Any]:
    """A failure record: what failed, where, and why, in one line a person can act on."""
    message = str(error) or type(error).__name__
    return {"item": item, "stage": stage, "file": str(file) if file else None,
            "error": f"{type(error).__name__}: {message}"}


def decode_item(item: MediaItem, kinds: list[str], questions: list[QAItem], audio_rate_hz: int,
                segment_bytes: int | None = None) -> list[Any]:
    """Decode each input kind an item needs. Returns [meta, input_kind_0, input_kind_1, …];
    meta holds sizes, per-kind failures (a kind that fails does not stop the others) and, in `calls`, one
    `stages.call_record` per kind. A video whose frames exceed `segment_bytes` gives its first segment here
    (meta["segments"]["frames"]: how many), the others come from `decode_segment`."""
    meta = _new_meta(item)
    out: list[Any] = []
    for kind in kinds:
        t0, started = time.perf_counter(), stages.clock()
        try:
            k = input_kinds.of(kind, item)
            if k.segmented:
                value, meta["segments"][kind] = k.decode_segment(k.span(item), 0, segment_bytes)
            else:
                value = k.decode(item, k.span(item), questions, audio_rate_hz)
            _describe(meta, kind, value)
        except Exception as e:  # recorded per (item, kind); the run goes on
            value = None
            meta["failures"][kind] = failure(item.id, f"decode:{kind}", _source(item, kind), e)
        meta["seconds"][kind] = time.perf_counter() - t0
        unit = input_kinds.KINDS[kind].unit if kind in input_kinds.KINDS else "items"
        meta["calls"].append(stages.call_record(f"decode:{kind}", started, stages.units_of(value), 1, unit))
        out.append(value)
    return [meta, *out]


def decode_segment(item: MediaItem, segment: int, segment_bytes: int) -> list[Any]:
    """[meta, Frames] of one later segment of a long video (see `decode_item`)."""
    meta = _new_meta(item)
    t0, started = time.perf_counter(), stages.clock()
    value = None
    try:
        value, _ = input_kinds.FRAMES.decode_segment(input_kinds.FRAMES.span(item), segment, segment_bytes)
        _describe(meta, "frames", value)
    except Exception as e:
        meta["failures"]["frames"] = failure(item.id, f"decode:frames#{segment}", item.video, e)
    meta["seconds"]["frames"] = time.perf_counter() - t0
    meta["calls"].append(stages.call_record("decode:frames", started, stages.units_of(value), 1,
                                            input_kinds.FRAMES.unit))
    return [meta, value]


def _new_meta(item: MediaItem) -> dict[str, Any]:
    return {"item": item.id, "sizes": {}, "bytes": {}, "failures": {}, "seconds": {}, "durations": {},
            "missing": {}, "shorter": {}, "segments": {}, "node": node_id(), "calls": []}


def _describe(meta: dict[str, Any], kind: str, value: Any) -> None:
    meta["sizes"][kind] = _size(value)
    meta["bytes"][kind] = nbytes(value)
    meta["durations"][kind] = getattr(value, "duration_s", None)
    if len(getattr(value, "missing_s", ())):  # damaged data: these seconds have no rows
        meta["missing"][kind] = np.round(value.missing_s, 6).tolist()
    if getattr(value, "streams_end_s", None) is not None:  # a shorter stream: its own end, and the file's
        meta["shorter"][kind] = round(float(value.streams_end_s), 6)


def node_id() -> str | None:
    """The Ray node this code runs on, as Ray placed it (None without Ray): the run report counts it."""
    import sys

    ray = sys.modules.get("ray")  # never imports Ray: plain calls (tests, no cluster) stay Ray-free
    return ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else None


def _source(item: MediaItem, kind: str) -> Any:
    try:
        return input_kinds.source(item, kind)
    except ValueError:  # an unknown kind: its failure names no file
        return None


def without_missing(rows: FeatureRows, x: Any) -> FeatureRows:
    """Rows that overlap the input's undecodable spans (`missing_s`: damaged audio, silent in the samples) are
    dropped, so alignment reports those times missing instead of averaging silence into them."""
    spans = np.asarray(getattr(x, "missing_s", ()), np.float64).reshape(-1, 2)
    iv = rows.intervals
    if not len(spans) or not len(iv):
        return rows
    spans = spans[np.argsort(spans[:, 0])]
    before = np.searchsorted(spans[:, 0], iv[:, 1], side="left") - 1  # the last span starting before a row ends
    hit = (before >= 0) & (np.maximum.accumulate(spans[:, 1])[np.maximum(before, 0)] > iv[:, 0])
    if not hit.any():
        return rows
    keep = ~hit
    extras = {k: v[keep] if len(v) == len(iv) else v for k, v in rows.extras.items()}
    return FeatureRows(rows.features[keep], iv[keep], extras, rows.attrs)


def _size(value: Any) -> int:
    """A batching weight: frames count one per frame, everything else one per item."""
    pixels = getattr(value, "pixels", None)
    return len(pixels) if pixels is not None else 1


def nbytes(value: Any) -> int:
    """The bytes of a decoded input's arrays (pixels, samples): what batches and in-flight data are bounded
    by. Texts count as nothing: they are tiny next to any frame or second of audio."""
    fields = getattr(value, "__dataclass_fields__", {})
    return sum(int(v.nbytes) for v in (getattr(value, f) for f in fields) if isinstance(v, np.ndarray))


# glibc's malloc gives a freed block of the heap's top back to the system past M_TRIM_THRESHOLD and serves blocks
# past M_MMAP_THRESHOLD with their own mmap, both 128 KiB at start and then raised by glibc as it sees fit. A model
# forward allocates and frees the same tens of MiB of activations every call: served so, every call pays page
# faults and zeroing for memory it had a moment ago. Fixed thresholds keep a call's working memory in the heap for
# the next call (its peak is reached either way): DenseNet161 at a pinned batch of 4 on 2 CPU threads took
# 50.6-51.9 ms a frame against 56.2-59.9 and a 10-clip frames-only run 40.6 s against 46.0 (median of 3, A/B in
# turn; docs/scale.md). 32 MiB is glibc's largest mmap threshold: a larger block (a 720p frame batch) still gets
# its own mapping and goes back when freed.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
HEAP_TRIM_BYTES = 1 << 30
HEAP_MMAP_BYTES = 32 << 20


def keep_heap() -> bool:
    """Set this process's malloc thresholds (glibc only; elsewhere nothing changes). Whether they were set."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, HEAP_MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, HEAP_TRIM_BYTES))


class ExtractorWorker:
    """Holds one extractor (its model loaded once) and runs batches of items through it."""

    def __init__(self, feature: str, config: ExtractorConfig, device: str, threads: int | None = None,
                 calibration: str | None = None) -> None:
        """`calibration`: the batch-size cache file (extractors/calibrate.py), None: fixed default batches."""
        import torch

        if threads:
            torch.set_num_threads(threads)
        if not keep_heap():
            log.info("%s: malloc thresholds left as they are (not glibc)", feature)
        from extractors.calibrate import Calibrator

        self.feature = feature
        self.extractor = get_extractor(config.extractor)(config, device=device)
        self.extractor.calibrator = Calibrator(feature, device, calibration)  # "auto" batches measured on first use
        self.model_s, self.units = 0.0, 0  # this actor's model calls, for the per-unit cost in the run report
        log.info("%s: %s ready on %s (pid %d)", feature, config.extractor, device, os.getpid())

    def ready(self) -> dict[str, Any]:
        """Where it runs: its Ray node, and its GPUs (the run report's utilisation counts per GPU)."""
        import sys

        ray = sys.modules.get("ray")
        gpus = [str(g) for g in ray.get_gpu_ids()] if ray is not None and ray.is_initialized() else []
        return {"node": node_id(), "gpus": gpus}

    def batches(self) -> dict[str, Any]:
        """The batch sizes this actor used (per input size: pinned, calibrated, cached or default, with the
        calibration's per-unit costs) and the per-unit cost of its model calls in this run."""
        choices = [c.record() for c in self.extractor.calibrator.choices.values()]
        model_s = self.model_s - self.extractor.calibrator.spent_s
        return {"choices": choices, "model_s": round(model_s, 3), "units": self.units,
                "run_per_unit_s": model_s / self.units if self.units else None}

    def __call__(self, item_ids: list[str], *inputs: Any) -> tuple[list[tuple[str, Any, dict[str, Any] | None, float]],
                                                                    dict[str, Any]]:
        """→ ([(item, rows or None, failure or None, seconds)], the call's `stages.call_record`)."""
        started, t0 = stages.clock(), time.perf_counter()
        results = self._batch(item_ids, inputs)
        kind = self.extractor.input_kind
        units = sum(stages.units_of(x) for x in inputs)
        self.units += units
        self.model_s = self.model_s + time.perf_counter() - t0
        return results, stages.call_record(f"model:{self.feature}", started, units, len(inputs),
                                           input_kinds.KINDS[kind].unit if kind in input_kinds.KINDS else "items")

    def _batch(self, item_ids: list[str], inputs: tuple[Any, ...]) -> list[tuple[str, Any, dict[str, Any] | None, float]]:
        """A batch that fails is retried item by item, so one bad item cannot take its batch-mates down with it."""
        t0 = time.perf_counter()
        try:
            rows = self.extractor.extract_batch(list(inputs))
            per_item = (time.perf_counter() - t0) / max(1, len(inputs))
            return [(i, without_missing(r, x), None, per_item) for i, r, x in zip(item_ids, rows, inputs, strict=True)]
        except Exception:
            if len(inputs) == 1:
                return [self._one(item_ids[0], inputs[0])]
            return [self._one(i, x) for i, x in zip(item_ids, inputs, strict=True)]

    def _one(self, item_id: str, x: Any) -> tuple[str, Any, dict[str, Any] | None, float]:
        t0 = time.perf_counter()
        try:
            return item_id, without_missing(self.extractor.extract(x), x), None, time.perf_counter() - t0
        except Exception as e:
            log.debug("%s/%s failed:\n%s", self.feature, item_id, traceback.format_exc())
            return item_id, None, failure(item_id, f"extract:{self.feature}", None, e), time.perf_counter() - t0
