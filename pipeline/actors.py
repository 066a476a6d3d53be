"""Ray-side code: decode tasks and model actors. Everything here also runs without Ray (tests call
the plain functions), so `pipeline/run.py` wraps them with `ray.remote` at run time, never at import."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from extractors.base import ExtractorConfig, get_extractor
from manifests import limits
from manifests.limits import InputLimits
from manifests.records import MediaItem, QAItem
from media import kinds as input_kinds
from media import nvdec
from media.kinds import Decoded
from media.kinds.base import Tracks
from pipeline import ownparts, stages
from rows import FeatureRows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Failure:
    """A failed (feature, item) pair's record: the item, the stage (`decode:frames`, `extract:faces`,
    `write:frames`, `manifest`), the file and the error, in one line a person can act on."""

    item: str
    stage: str
    file: str | None
    error: str  # "ErrorClass: message"

    @classmethod
    def of(cls, item: str, stage: str, file: Any, error: BaseException) -> Failure:
        message = str(error) or type(error).__name__
        return cls(item, stage, str(file) if file else None, f"{type(error).__name__}: {message}")

    def record(self, feature: str) -> dict[str, Any]:
        """As the run report lists it (pipeline/report.py `failures`)."""
        return {"item": self.item, "stage": self.stage, "file": self.file, "error": self.error, "feature": feature}


@dataclass(frozen=True)
class DecodeReport:
    """What a decode task tells the driver; the decoded inputs themselves are the task's other return values,
    left in Ray's object store for the model actors."""

    item: str
    inputs: dict[str, Decoded | Failure]  # per input kind: its record, or why it did not decode
    node: str | None = None  # the Ray node it ran on
    calls: tuple[dict[str, Any], ...] = ()  # one `stages.call_record` per kind


@dataclass(frozen=True)
class Extracted:
    """One item's result of a model call."""

    item: str
    rows: FeatureRows | None  # None: it failed
    failure: Failure | None
    seconds: float
    decoded: Decoded | None = None  # frames this actor decoded from a plan: the decoder, and why the CPU if it had to


def decode_item(item: MediaItem, kinds: list[str], questions: list[QAItem], audio_rate_hz: int,
                segment_bytes: int | None = None, on_device: tuple[str, tuple[str, ...]] | None = None,
                tracks: Tracks | None = None, input_limits: InputLimits | None = None) -> list[Any]:
    """Decode each input kind an item needs. Returns [DecodeReport, input_kind_0, input_kind_1, …]; a kind that
    fails does not stop the others. A video whose frames exceed `segment_bytes` gives its first segment here
    (its `Decoded.segments`: how many), the others come from `decode_segment`. `on_device` (device, the
    features reading the frames): the scheduler sent this video's frames to the model actors' decoder
    (media/nvdec.py): only planned here, unless the file needs the CPU path (`Decoded.cpu_reason`). `tracks`: the
    run's choice of streams (RunConfig.tracks); `input_limits`: what one input may cost (RunConfig.limits)."""
    with limits.applied(input_limits or limits.current()):  # the run's, in this worker (manifests/limits.py)
        return _decode_kinds(item, kinds, questions, audio_rate_hz, segment_bytes, on_device, tracks)


def _decode_kinds(item: MediaItem, kinds: list[str], questions: list[QAItem], audio_rate_hz: int,
                  segment_bytes: int | None, on_device: tuple[str, tuple[str, ...]] | None,
                  tracks: Tracks | None) -> list[Any]:
    inputs: dict[str, Decoded | Failure] = {}
    calls, out = [], []
    for kind in kinds:
        t0, started = time.perf_counter(), stages.clock()
        try:
            k = input_kinds.of(kind, item)
            if k.segmented:
                value, facts = _decode_frames(item, k, 0, segment_bytes, on_device, tracks)
            else:
                value, facts = k.decode(item, k.span(item, tracks), questions, audio_rate_hz), {}
            inputs[kind] = Decoded.of(kind, value, time.perf_counter() - t0, **facts)
        except Exception as e:  # recorded per (item, kind); the run goes on
            value = None
            inputs[kind] = Failure.of(item.id, f"decode:{kind}", _source(item, kind), e)
        unit = input_kinds.KINDS[kind].unit if kind in input_kinds.KINDS else "items"
        calls.append(stages.call_record(f"decode:{kind}", started, stages.units_of(value), 1, unit))
        out.append(value)
    return [DecodeReport(item.id, inputs, node_id(), tuple(calls)), *out]


def decode_segment(item: MediaItem, segment: int, segment_bytes: int,
                   on_device: tuple[str, tuple[str, ...]] | None = None, tracks: Tracks | None = None) -> list[Any]:
    """[DecodeReport, Frames] of one later segment of a long video (see `decode_item`)."""
    t0, started = time.perf_counter(), stages.clock()
    value = None
    try:
        value, facts = _decode_frames(item, input_kinds.FRAMES, segment, segment_bytes, on_device, tracks)
        result: Decoded | Failure = Decoded.of("frames", value, time.perf_counter() - t0, **facts)
    except Exception as e:
        result = Failure.of(item.id, f"decode:frames#{segment}", item.video, e)
    call = stages.call_record("decode:frames", started, stages.units_of(value), 1, input_kinds.FRAMES.unit)
    return [DecodeReport(item.id, {"frames": result}, node_id(), (call,)), value]


def _decode_frames(item: MediaItem, kind: input_kinds.Kind, segment: int, segment_bytes: int | None,
                   on_device: tuple[str, tuple[str, ...]] | None = None,
                   tracks: Tracks | None = None) -> tuple[Any, dict[str, Any]]:
    """One segment of a video's frames by the CPU path, or (`on_device`: the device and the features that will
    read them) its plan for the model actors to decode on their device, where the file allows (media/nvdec.py);
    with what its `Decoded` says beyond the value (segments; a plan, or why the CPU path decoded it)."""
    span = kind.span(item, tracks)
    if on_device is None:
        value, segments = kind.decode_segment(span, segment, segment_bytes)
        return value, {"segments": segments}
    device, readers = on_device
    value, segments, reason = nvdec.plan_for_device(span.recording, span.clip, device, item.id, readers, segment,
                                                    segment_bytes, span.track)
    return value, {"segments": segments, "on_device": reason is None, "cpu_reason": reason}


def node_id() -> str | None:
    """The Ray node this code runs on, as Ray placed it (None without Ray): the run report counts it."""
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


class DeviceFramesCache:
    """Frames the model actor decoded on its device (media/nvdec.py), kept until every feature of this actor
    that reads them has (`FramesPlan.readers`): DenseNet and MTCNN share one actor where frames are decoded
    there, so a clip is decoded once for both. Only a saving, never a source of truth: an entry evicted (the
    oldest, past `max_bytes`) or lost with a restarted actor is decoded again, the same frames."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: dict[tuple[str, int], tuple[Any, str | None, set[str], int]] = {}  # insertion order: oldest first
        self.decoded = 0  # decodes this actor ran (a clip decoded twice shows here)

    def take(self, plan: nvdec.FramesPlan, feature: str) -> tuple[Any, str | None]:
        """(The frames, the reason they came from the CPU path or None) for `feature`; a decode failure is
        raised to every reader alike."""
        entry = self.entries.pop(plan.key, None)
        if entry is None:
            try:
                value, reason = nvdec.frames_of_plan(plan)
            except Exception as e:  # the CPU path's error for this file, kept for its other readers
                value, reason = e, None
            self.decoded += 1
            size = plan.pixel_bytes if not isinstance(value, Exception) else 0
            entry = (value, reason, set(plan.readers), size)
        value, reason, readers, size = entry
        readers.discard(feature)
        if readers:
            self.entries[plan.key] = (value, reason, readers, size)
            while sum(e[3] for e in self.entries.values()) > self.max_bytes and len(self.entries) > 1:
                self.entries.pop(next(iter(self.entries)))
        if isinstance(value, Exception):
            raise value
        return value, reason


# device frames an actor keeps for its other features: the scheduler already bounds what is decoded and not yet
# read by every feature (`max_inflight_bytes`, counted at the plans' pixel bytes); this is the backstop
DEVICE_CACHE_BYTES = 4 << 30


class GpuUnusable(ValueError):  # a ValueError: the CLI ends the run with its one line, exit 2 (BAD_INPUT)
    """Ray gave an actor a GPU that CUDA cannot use here (a logical `--num-gpus`, a broken or missing driver)."""


def check_gpu(device: str) -> None:
    """An actor placed on a GPU (`device` "cuda"): raise `GpuUnusable` naming this node and CUDA's own error when
    torch cannot put a tensor there. Only where torch is already loaded (an extractor that never imports it has
    no use for CUDA: testing/waiting.py's sleepers on a logical GPU)."""
    torch = sys.modules.get("torch")
    if not device.startswith("cuda") or torch is None:
        return
    try:
        torch.zeros(1, device=device)
    except Exception as e:  # noqa: BLE001 - RuntimeError (no driver), AssertionError (torch built without CUDA)
        raise gpu_unusable(e) from e


def gpu_unusable(error: BaseException) -> GpuUnusable:
    import socket

    ray = sys.modules.get("ray")
    gpus = ",".join(map(str, ray.get_gpu_ids())) if ray is not None and ray.is_initialized() else "?"
    first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    return GpuUnusable(f"node {socket.gethostname()} (Ray node {node_id()}): Ray advertises GPU {gpus} but CUDA "
                       f"cannot use it: {type(error).__name__}: {first}")


class ExtractorWorker:
    """Holds one extractor (its model loaded once) and runs batches of items through it; or several, for
    features that share the actor (`cohosted`: the frames features where the actor decodes their frames on its
    device, so that each clip is decoded once for all of them)."""

    def __init__(self, feature: str, config: ExtractorConfig, device: str, threads: int | None = None,
                 calibration: str | None = None, cohosted: dict[str, ExtractorConfig] | None = None) -> None:
        """`calibration`: the batch-size cache file (extractors/calibrate.py), None: fixed default batches."""
        if not keep_heap():
            log.info("%s: malloc thresholds left as they are (not glibc)", feature)
        from extractors.batched import BatchedModel
        from extractors.calibrate import Calibrator

        self.feature = feature
        self.extractors, self.calibrators = {}, {}
        for feat, conf in {feature: config, **(cohosted or {})}.items():
            self.calibrators[feat] = Calibrator(feat, device, calibration)  # "auto" batches measured on first use
            cls = get_extractor(conf.extractor)
            try:
                self.extractors[feat] = cls(conf, device=device, calibrator=self.calibrators[feat]) \
                    if issubclass(cls, BatchedModel) else cls(conf, device=device)
            except Exception:
                check_gpu(device)  # a model that failed on an unusable GPU: that is the error to report
                raise
            log.info("%s: %s ready on %s (pid %d)", feat, conf.extractor, device, os.getpid())
        check_gpu(device)  # a model that loads lazily would otherwise fail only at its first call
        self.threads = threads
        self._torch_threads()
        self.extractor, self.calibrator = self.extractors[feature], self.calibrators[feature]
        # per feature: its model calls' seconds and units, for the per-unit cost in the run report
        self.model_s = dict.fromkeys(self.extractors, 0.0)
        self.units = dict.fromkeys(self.extractors, 0)
        self.frames = DeviceFramesCache(DEVICE_CACHE_BYTES)

    def _torch_threads(self) -> None:
        """torch's threads, once torch is in this process (the extractors bring it in: DenseNet, MTCNN and BERT
        when built); an actor whose extractor never uses it (covarep's numpy reference) does not import it for this
        alone: 2-3 CPU-s of a process's start (bench/actor_start.py)."""
        torch = sys.modules.get("torch")
        if self.threads and torch is not None:
            torch.set_num_threads(self.threads)
            self.threads = None  # set: nothing to do on the next call

    def ready(self) -> dict[str, Any]:
        """Where it runs: its Ray node, and its GPUs (the run report's utilisation counts per GPU)."""
        ray = sys.modules.get("ray")
        gpus = [str(g) for g in ray.get_gpu_ids()] if ray is not None and ray.is_initialized() else []
        return {"node": node_id(), "gpus": gpus}

    def batches(self, feature: str | None = None) -> dict[str, Any]:
        """The batch sizes this actor used for `feature` (per input size: pinned, calibrated, cached or default,
        with the calibration's per-unit costs) and the per-unit cost of its model calls in this run."""
        feature = feature or self.feature
        calibrator = self.calibrators[feature]
        choices = [c.record() for c in calibrator.choices.values()]
        model_s, units = self.model_s[feature] - calibrator.spent_s, self.units[feature]
        return {"choices": choices, "model_s": round(model_s, 3), "units": units,
                "run_per_unit_s": model_s / units if units else None}

    def __call__(self, item_ids: list[str], *inputs: Any, feature: str | None = None,
                 store: ownparts.StoreTarget | None = None) -> tuple[list[Extracted], dict[str, Any]]:
        """→ (each item's `Extracted`, the call's `stages.call_record`). Frames sent as plans are decoded here
        first (once for this actor's features); that decode has a record of its own under the call's
        `device_decode`, and each such item's `Extracted.decoded` says which decoder made its frames (and why the
        CPU path, where it had to). `store`: the items whose rows this actor writes to the store itself, each
        `Extracted.rows` then their `WrittenRows` record, not the rows (pipeline/ownparts.py)."""
        feature = feature or self.feature
        self._torch_threads()  # (torch first imported by a call: set before it computes anything more)
        inputs, decoded, decode_record = self._device_frames(feature, inputs)  # (a record of its own: not the model's)
        started, t0 = stages.clock(), time.perf_counter()
        results = [dataclasses.replace(r, decoded=d)
                   for r, d in zip(self._batch(item_ids, inputs, feature), decoded, strict=True)]
        kind = self.extractors[feature].input_kind
        units = sum(stages.units_of(x) for x in inputs)
        self.units[feature] += units
        self.model_s[feature] += time.perf_counter() - t0
        retried: dict[str, int] = {}
        if store is not None:  # the actor's time (in its call's span), not the model's per-unit cost
            results, retried = ownparts.store_results(store, feature, self.extractors[feature], results, Failure.of)
        record = stages.call_record(f"model:{feature}", started, units, len(inputs),
                                    input_kinds.KINDS[kind].unit if kind in input_kinds.KINDS else "items")
        if self.units[feature] == units:  # its first call of the feature: the model's warm-up (bench.simulate)
            record["first"] = True
        if decode_record is not None:
            record["device_decode"] = decode_record
        if retried:  # counted in this process only: the driver adds them to the run report's (`Runner.results`)
            record["storage_retries"] = retried
        return results, record

    def _device_frames(self, feature: str, inputs: tuple[Any, ...]
                       ) -> tuple[tuple[Any, ...], list[Decoded | None], dict[str, Any] | None]:
        """Inputs with each plan replaced by its frames (an Exception where they failed to decode), each one's
        `Decoded` (None: not a plan, or it failed), and the record of the decodes this call ran (None: none)."""
        out: list[Any] = []
        notes: list[Decoded | None] = []
        started, decoded, frames = stages.clock(), self.frames.decoded, 0.0
        for x in inputs:
            if not isinstance(x, nvdec.FramesPlan):
                out.append(x)
                notes.append(None)
                continue
            before = self.frames.decoded
            try:
                value, reason = self.frames.take(x, feature)
            except Exception as e:  # the file's own error, for this item alone
                out.append(e)
                notes.append(None)
                continue
            out.append(value)
            notes.append(Decoded.of("frames", value, decoder=getattr(value, "decoder", nvdec.CPU), cpu_reason=reason))
            frames += stages.units_of(value) if self.frames.decoded > before else 0  # (not what the cache gave)
        record = None
        if self.frames.decoded > decoded:
            record = stages.call_record("decode:frames@device", started, frames, self.frames.decoded - decoded,
                                        input_kinds.FRAMES.unit)
        return tuple(out), notes, record

    def _batch(self, item_ids: list[str], inputs: tuple[Any, ...], feature: str | None = None) -> list[Extracted]:
        """A batch that fails is retried item by item, so one bad item cannot take its batch-mates down with it."""
        feature = feature or self.feature
        t0 = time.perf_counter()
        try:
            if any(isinstance(x, Exception) for x in inputs):
                raise ValueError("an input did not decode")
            rows = self.extractors[feature].extract_batch(list(inputs))
            per_item = (time.perf_counter() - t0) / max(1, len(inputs))
            return [Extracted(i, without_missing(r, x), None, per_item)
                    for i, r, x in zip(item_ids, rows, inputs, strict=True)]
        except Exception:
            return [self._one(i, x, feature) for i, x in zip(item_ids, inputs, strict=True)]

    def _one(self, item_id: str, x: Any, feature: str | None = None) -> Extracted:
        feature = feature or self.feature
        t0 = time.perf_counter()
        if isinstance(x, Exception):  # its frames did not decode in this actor (the CPU path's error)
            return Extracted(item_id, None, Failure.of(item_id, "decode:frames", None, x), 0.0)
        try:
            return Extracted(item_id, without_missing(self.extractors[feature].extract(x), x), None,
                             time.perf_counter() - t0)
        except Exception as e:
            log.debug("%s/%s failed:\n%s", feature, item_id, traceback.format_exc())
            return Extracted(item_id, None, Failure.of(item_id, f"extract:{feature}", None, e), time.perf_counter() - t0)
