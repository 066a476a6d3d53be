"""Batch sizes by measurement: a model actor times a few batch sizes on the device it runs on and keeps the
cheapest per unit (frame, text), cached per machine, device, thread count, model and input size.

Why measured: the best batch depends on all of those. DenseNet161 on 2 CPU threads cost 146 ms a frame at a
batch of 64, 94 ms at 8 and 117 ms at 1 (issue 27); on an H100 a batch of 1 leaves the GPU idle. A fixed
default is wrong somewhere. The batch size changes no feature beyond float rounding (each extractor's tests
say how far), so it stays out of the fingerprints.

The measurement runs on the call's own inputs (`Trials`): each trial batch takes the next units of the real
work and its outputs are kept, so measuring costs only what the trial sizes are slower than the best, not a
second pass (on 2 CPU threads a thrown-away DenseNet measurement was ~6 s of a ~70 s run). Only when the
call's inputs run out does a trial repeat one of them and throw its output away; the time budget (`budget_s`)
bounds that thrown-away work only. Each candidate (1, 2, 4, … up to `max_batch`) runs at least twice and until
it has taken `MIN_REPEAT_S` (at most `MAX_REPEATS` calls), then once more after the others (`_recheck`, on the
call's inputs only), its per-unit cost the fastest call's: the first call
at a new batch shape is slow (cuDNN and oneDNN choose their kernels per shape; on an H100 a DenseNet161 frame
cost 202 ms in the first call of 2 frames, 0.5 ms once warm). It stops early when the next candidate would
overrun the budget with thrown-away work, when two candidates in a row cost more than `STOP_WORSE` × the best
so far (past the knee: bigger only costs memory), on CUDA when the GPU runs out of memory, and on a CPU before
a batch whose working memory would pass `work_budget()` (`WorkMemory`: each trial's peak resident memory above
what the process held before the first, scaled linearly to the next size). The choice is the smallest candidate
within the device's tolerance of the best (`TOLERANCE`): on a GPU that is where it saturates; on a CPU, where the
memory bound already keeps the batches small, only measurement noise.

A cached choice is checked, not trusted for good (issue 33): a calibration measured while the machine was loaded
(MiniLM at batch 4 for 26 ms a sequence beside batch 16 at 3.4 ms; DenseNet161 at 1,125 ms a frame) made every
later run slower until the file was deleted. The first calls of an actor that reads a cached choice time its
batches on their own inputs (`_Check`: the batches it runs anyway, so checking costs nothing) until they make a
measurement the calibration itself would trust (MIN_REPEATS calls and MIN_REPEAT_S, or MAX_REPEATS calls); a
cost more than DRIFT times the cached one either way measures again on the rest of the call's inputs, replaces
the cache entry and is reported with source "re-measured" and both figures (`Choice.check`). Delete the cache
file (`cache_path()`) to measure everything again.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import re
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    StrictInt,
    StrictStr,
    ValidationError,
)

from atomicio import atomic_write

log = logging.getLogger(__name__)

ENV_FILE = "SIQ_CALIBRATION_FILE"  # where the cache lives; SIQ_* variables reach Ray workers (pipeline/run.py)
ENV_OFF = "SIQ_CALIBRATE"  # "0": no measurement, every "auto" batch takes its extractor's fixed default
ENV_WORK = "SIQ_CALIBRATE_WORK_MB"  # the CPU trials' working-memory bound in MiB (CPU_WORK_BYTES by default)
# (read by the driver, which hands the model actors the cache file, or None for off: tests/conftest.py sets it)
BUDGET_S = 6.0  # per (model, input size): the measurement's thrown-away work (trials on repeated inputs)
MIN_REPEAT_S = 0.3
MIN_REPEATS = 2  # the first call at a shape warms its kernels up
MAX_REPEATS = 3
MIN_CANDIDATES = 3  # fewer measured within the budget (a loaded or slow machine): the default, not cached
STOP_WORSE = 1.25
# a cached choice whose cost in this run departs from its cached cost by more than this factor, either way, is
# measured again (issue 33's figure). GPU costs move ~10 % between runs (docs/scale.md); a burst of load inflated
# single CPU calls up to 2.2x (`_recheck`), which the check's fastest-of-its-calls absorbs; the calibration made
# under load held DenseNet161 at 1,125 ms a frame, ~6x its unloaded cost on 2 threads
DRIFT = 1.5
# the choice: the smallest batch within this fraction of the cheapest per unit. On a GPU the costs fall until it
# saturates and then move by ~10 % between runs (docs/scale.md): 5 % finds the saturation point. On a CPU the work
# bound below keeps batches small; the tolerance only absorbs noise, and a larger one trades speed for nothing
# (on 2 threads DenseNet161 cost 192 ms a frame at 4 and 183 at 8: 5 % picked 4).
TOLERANCE = {"cpu": 0.02, "cuda": 0.05}
# DenseNet161 on 2 CPU threads, CPU ms a frame at 1..32: 254, 212, 192, 183, 189, 222, while the forward's working
# memory grows with the batch: the trial at 32 alone lifted a 10-clip frames-only run's peak from 2.3 to 3.4 GiB
# (PSS). A CPU batch past 16 has bought nothing measured here, so trials stop there.
CPU_MAX_BATCH = 16
GPU_MAX_BATCH = 512
# A CPU trial's working memory: what a forward of that batch adds to the actor's resident memory, oneDNN's cache of
# primitives for that batch shape included (DenseNet161 after batches 1, 2, 4, 8: +546 MiB resident; after 8
# alone: +376; with the cache off: +231, but 20 % slower). DenseNet161's trials measure 60-77, 140-155, 310-340
# and 640-690 MiB at 1, 2, 4, 8 (224x224, 2 threads). A 10-clip frames-only run peaked at 2.10 GiB (PSS) pinned at
# 4, 2.36-2.44 pinned at 8 and 2.43-2.60 when its calibration tried 8 (2.91 when it tried 16), while 8 was only
# 4-5 % faster than 4 (docs/scale.md). Trials stop before a batch extrapolated past this bound: on a CPU
# DenseNet161 stops at 4; MTCNN's and the text models' trials stay far below it.
CPU_WORK_BYTES = 512 * 2**20


def cache_path() -> Path:
    """$SIQ_CALIBRATION_FILE, else ~/.cache/siqfeat/calibration.json (beside the weights cache's default)."""
    return Path(os.environ.get(ENV_FILE) or Path.home() / ".cache" / "siqfeat" / "calibration.json").expanduser()


def enabled() -> bool:
    return os.environ.get(ENV_OFF, "1") != "0"


def run_cache_file() -> str | None:
    """What the driver hands its model actors: the cache file, or None when calibration is off."""
    return str(cache_path()) if enabled() else None


def candidates(device: str, max_batch: int | None = None) -> list[int]:
    """Powers of two from 1 to the device's cap (and `max_batch`, e.g. what a byte bound allows)."""
    cap = GPU_MAX_BATCH if device.startswith("cuda") else CPU_MAX_BATCH
    cap = max(1, min(cap, cap if max_batch is None else max_batch))
    return [2**k for k in range(cap.bit_length()) if 2**k <= cap]


def work_budget(device: str) -> int | None:
    """The working-memory bound of CPU trials in bytes ($SIQ_CALIBRATE_WORK_MB, else CPU_WORK_BYTES); None on a
    GPU, whose trials stop where it runs out of memory."""
    if device.startswith("cuda"):
        return None
    value = os.environ.get(ENV_WORK)
    return int(float(value) * 2**20) if value else CPU_WORK_BYTES


def tolerance(device: str) -> float:
    return TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]


def device_key(device: str) -> str:
    """What the choice depends on besides the model: the machine, the device's name, torch's threads and, on a
    CPU, the trials' working-memory bound (a choice made under another bound is measured again)."""
    import torch

    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        name = _cpu_model() + f" threads={torch.get_num_threads()} work<={(work_budget(device) or 0) >> 20}MiB"
    return f"{socket.gethostname()}|{name}|torch={torch.__version__}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class WorkMemory:
    """The working memory of a CPU trial: the process's peak resident memory while it ran (Linux's VmHWM, reset
    before each trial by writing 5 to /proc/self/clear_refs) above what it held before the first trial (`begin`).
    `allows(b)` extrapolates the last trial's linearly to b (activations and oneDNN's per-shape primitives grow
    about linearly with the batch: an estimate, not a bound) against `budget_bytes`. `read` returns (resident, peak) bytes and
    `reset` restarts the peak (both from /proc by default); where they are unavailable (not Linux, a read-only
    /proc) it bounds nothing."""

    def __init__(self, budget_bytes: int, read: Callable[[], tuple[int, int]] | None = None,
                 reset: Callable[[], None] | None = None) -> None:
        self.budget = budget_bytes
        self.read, self.reset = read or _proc_memory, reset or _reset_peak
        self.base: int | None = None
        self.used: dict[int, int] = {}  # batch -> bytes above the base at its trials' peak

    def begin(self) -> None:
        try:
            _trim()
            self.reset()
            self.base = self.read()[0]
        except OSError as e:
            log.info("calibration: no memory measure here (%s); CPU trials are bounded by time only", e)
            self.base = None

    def start_trial(self) -> None:
        if self.base is not None:
            self.reset()

    def end_trial(self, b: int) -> None:
        if self.base is not None:
            self.used[b] = max(self.used.get(b, 0), self.read()[1] - self.base)

    def need(self, b: int) -> int | None:
        """The bytes batch b is expected to need, from the largest batch measured; None before any."""
        if not self.used:
            return None
        last = max(self.used)
        return self.used[last] * b // last

    def allows(self, b: int) -> bool:
        need = self.need(b)
        return need is None or need <= self.budget


def _proc_memory() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes."""
    text = Path("/proc/self/status").read_text()
    got = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M))
    if len(got) < 2:
        raise OSError("/proc/self/status has no VmRSS/VmHWM")
    return int(got["VmRSS"]) * 1024, int(got["VmHWM"]) * 1024


def _trim() -> None:
    """Give the allocator's free memory back to the system (glibc's malloc_trim), so that the base is what the
    process holds, not also what earlier work freed and the allocator kept: a trial that reused such memory
    would show no growth (in a process that had run other work first, batch 2 measured 0 MiB beside batch 1's
    11). Nothing where there is no glibc."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # "5": reset the peak resident size (Linux >= 4.0)
        f.write("5")


@dataclass
class Choice:
    """A batch size and where it came from: "calibrated" now, "cached" from an earlier run, "re-measured" now
    because this run's cost at the cached batch departed from the cached one (`check`), "pinned" by the config,
    "default" (calibration off or impossible). `costs`: seconds per unit at each batch measured; `work_mib`: on a
    CPU, each measured batch's working memory (`WorkMemory`); `check`: a cached choice's check in this run
    (`_Check.record`: the cached and this run's cost at the cached batch)."""

    feature: str
    input: str
    batch: int
    source: str
    unit: str
    per_unit_s: float | None = None
    costs: dict[int, float] = field(default_factory=dict)
    device: str = ""
    measured_at: str = ""
    work_mib: dict[int, float] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        out = asdict(self)
        out["costs"] = {str(k): v for k, v in self.costs.items()}
        out["work_mib"] = {str(k): v for k, v in self.work_mib.items()}
        return out


class Trials:
    """The calibration's trial batches, run on a call's own inputs: `run(start, stop)` does units
    [start, stop) of the call's real work (in the order the call would) and its output is kept in `outputs`;
    `done` units are then finished. When fewer than b units are left, `spare(b)` runs b repeated units and its
    output is thrown away. `units(start, stop)` weighs a trial in the calibration's unit (default: one per
    item; text: padded tokens in median sequences) so that trials on different inputs compare."""

    def __init__(self, n_units: int, run: Callable[[int, int], Any] | None, spare: Callable[[int], Any],
                 units: Callable[[int, int], float] | None = None) -> None:
        self.n, self.run, self.spare, self.units = n_units, run, spare, units
        self.done, self.outputs, self.wasted_s = 0, [], 0.0

    @classmethod
    def thrown_away(cls, probe: Callable[[int], Any]) -> Trials:
        """Every trial on repeated inputs (`probe(b)` runs b of them)."""
        return cls(0, None, probe)

    def keeps(self, n: int) -> bool:
        """Whether the next `n` units are real work (kept)."""
        return self.done + n <= self.n

    def __call__(self, b: int) -> tuple[float, bool]:
        """Runs a trial of b units: (its weight in units, whether its output was kept)."""
        if not self.keeps(b):
            t0 = time.perf_counter()
            self.spare(b)
            self.wasted_s += time.perf_counter() - t0
            return float(b), False
        assert self.run is not None
        start, self.done = self.done, self.done + b
        try:
            self.outputs.append(self.run(start, self.done))
        except BaseException:
            self.done = start  # not done: the caller runs these units (or fails) itself
            raise
        return float(self.units(start, self.done) if self.units else b), True


def measure(probe: Trials | Callable[[int], Any], sizes: list[int], budget_s: float = BUDGET_S,
            is_oom: Callable[[BaseException], bool] = lambda e: False,
            clock: Callable[[], float] = time.perf_counter, memory: WorkMemory | None = None) -> dict[int, float]:
    """Seconds per unit of each trial size tried, on `clock`: the process's CPU time on a CPU (all its
    threads: other users' load on a shared machine lengthens the wall time, much less the CPU time), the wall
    clock on a GPU (its work is not this CPU's). `probe`: `Trials`, or a plain `probe(b)` whose every trial is
    thrown away. `budget_s` bounds the thrown-away trials' time only; `memory` (a CPU's) the trials' working
    memory, measured into `memory.used`."""
    trials = probe if isinstance(probe, Trials) else Trials.thrown_away(probe)
    costs: dict[int, float] = {}
    wasted, rechecked = 0.0, False
    if memory is not None:
        memory.begin()
    for b in sizes:
        if costs and not trials.keeps(MIN_REPEATS * b) and wasted + MIN_REPEATS * b * min(costs.values()) > budget_s:
            break
        if memory is not None and not memory.allows(b):
            log.info("calibration: batch %d would need ~%d MiB of working memory (bound %d MiB); stopping at %d", b,
                     (memory.need(b) or 0) >> 20, memory.budget >> 20, max(costs))
            break
        try:
            per_unit, took = _time(trials, b, clock, memory)
        except Exception as e:
            if not is_oom(e):
                raise
            log.info("calibration: batch %d ran out of device memory; stopping there", b)
            break
        costs[b], wasted = per_unit, wasted + took
        if _past_knee(costs):  # first make sure it is not a burst of load that made the last sizes look slow
            if not rechecked:
                _recheck(trials, costs, clock)
                rechecked = True
            if _past_knee(costs):
                break
    if not rechecked:
        _recheck(trials, costs, clock)
    return costs


def _past_knee(costs: dict[int, float]) -> bool:
    """The last two sizes measured both cost more than STOP_WORSE x the cheapest: bigger only costs memory."""
    last = list(costs.values())[-2:]
    return len(last) == 2 and min(last) > STOP_WORSE * min(costs.values())


def _recheck(trials: Trials, costs: dict[int, float], clock: Callable[[], float]) -> None:
    """Each measured size once more, in order, on the call's own inputs only (no thrown-away work), keeping each
    size's cheapest call: the sizes are measured one after the other, so load that comes and goes (a run's decode
    tasks starting beside the model, Ray's own start-up) inflates the sizes it meets and not the others. On 2 CPU
    threads one run measured DenseNet161 at 147, 188, 188 ms a frame at 1, 2, 4 and the next 327, 124, 109.
    Their working memory is not measured again: after larger trials the heap holds more than a small one needs."""
    for b in list(costs):
        if not trials.keeps(b):
            continue
        t0 = clock()
        units, _ = trials(b)
        costs[b] = min(costs[b], (clock() - t0) / units)


def _time(trials: Trials, b: int, clock: Callable[[], float],
          memory: WorkMemory | None = None) -> tuple[float, float]:
    """(the fastest trial's seconds per unit, seconds of thrown-away trials) of `b` at least MIN_REPEATS times."""
    best, took, wasted, reps = float("inf"), 0.0, 0.0, 0
    while reps < MIN_REPEATS or (reps < MAX_REPEATS and took < MIN_REPEAT_S):
        if memory is not None:
            memory.start_trial()
        t0 = clock()
        units, kept = trials(b)
        dt = clock() - t0
        if memory is not None:
            memory.end_trial(b)
        best, took, reps = min(best, dt / units), took + dt, reps + 1
        wasted += 0.0 if kept else dt
    return best, wasted


@dataclass
class _Check:
    """This run's cost of a cached choice, on the clock the calibration used, timed over the batches the actor
    runs anyway: a size's cost is its cheapest call (the first call at a shape picks its kernels), trusted after
    as many calls as `_time` trusts. `expected`: the cached cost at `batch`."""

    key: str
    dev: str
    batch: int
    expected: float
    best: float = float("inf")
    calls: int = 0
    took: float = 0.0
    units: float = 0.0

    def add(self, seconds: float, units: float) -> None:
        self.best, self.calls = min(self.best, seconds / units), self.calls + 1
        self.took, self.units = self.took + seconds, self.units + units

    def decided(self) -> bool:
        return self.calls >= MIN_REPEATS and (self.calls >= MAX_REPEATS or self.took >= MIN_REPEAT_S)

    def drifted(self) -> bool:
        return not 1 / DRIFT <= self.best / self.expected <= DRIFT

    def record(self) -> dict[str, Any]:
        return {"batch": self.batch, "cached_per_unit_s": self.expected, "run_per_unit_s": self.best,
                "calls": self.calls, "units": round(self.units, 3), "ratio": round(self.best / self.expected, 3),
                "drift": DRIFT}


def pick(costs: dict[int, float], tol: float = TOLERANCE["cuda"]) -> int:
    """The smallest batch within `tol` of the cheapest per unit."""
    best = min(costs.values())
    return min(b for b, c in costs.items() if c <= best * (1 + tol))


class _Entry(BaseModel):
    """One cache entry as `Calibrator._calibrate` writes it; anything else in its place is damage."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    batch: StrictInt = Field(ge=1)
    per_unit_s: PositiveFloat
    costs: dict[PositiveInt, PositiveFloat]
    measured_at: StrictStr = ""
    unit: StrictStr = ""
    work_mib: dict[PositiveInt, NonNegativeFloat] = {}


class Calibrator:
    """One per model actor: batch sizes per (model, input size), measured once per machine and cached in
    `path`; with `path` None it measures nothing and only records the fixed defaults for the run report."""

    def __init__(self, feature: str, device: str, path: Path | str | None, budget_s: float = BUDGET_S,
                 clock: Callable[[], float] | None = None, memory: Callable[[], WorkMemory | None] | None = None) -> None:
        self.feature, self.device, self.budget_s = feature, device, budget_s
        # a fresh WorkMemory per calibration (its base is the resident memory before that calibration's trials)
        self.memory = memory or (lambda: None if (w := work_budget(device)) is None else WorkMemory(w))
        # CPU time on a CPU, the wall clock on a GPU (see `measure`)
        self.clock = clock or (time.perf_counter if device.startswith("cuda") else time.process_time)
        self.path = Path(path) if path is not None else None
        self.choices: dict[str, Choice] = {}  # input key -> the choice, for the run report
        self.checks: dict[str, _Check] = {}  # input key -> a cached choice's check, until it is decided
        self.spent_s = 0.0  # wall time of thrown-away trials: not the model's per-unit cost

    def batch(self, model: str, input_key: str, unit: str, probe: Trials | Callable[[int], Any],
              max_batch: int | None = None, default: int = 1) -> int:
        """The batch size for `model` on inputs described by `input_key` (e.g. "224x224"): from this actor's
        memory, else the cache file, else measured now with `probe` (a call's `Trials`: their
        kept outputs are part of the call's work) and written to the cache; `default` when
        the budget allowed fewer than MIN_CANDIDATES sizes (then nothing is cached: the next run measures)."""
        if input_key in self.choices:
            if input_key in self.checks and isinstance(probe, Trials):
                self._check(input_key, unit, probe, max_batch, default)
            return self.choices[input_key].batch
        dev = device_key(self.device)
        key = f"{dev}|{model}|{input_key}"
        cached = self._entry(key)
        if cached:  # bounded by this call's bytes (frames may be larger than those it was measured on)
            batch = max(1, min(cached.batch, max_batch or cached.batch))
            choice = Choice(self.feature, input_key, batch, "cached", unit, cached.per_unit_s, dict(cached.costs), dev,
                            cached.measured_at, dict(cached.work_mib))
            expected = cached.costs.get(batch, cached.per_unit_s if batch == cached.batch else None)
            if expected:  # an entry without a cost at this batch has nothing to check against: used as it is
                self.checks[input_key] = _Check(key, dev, batch, float(expected))
        else:
            choice = self._calibrate(key, dev, input_key, unit, probe, max_batch, default)
        self.choices[input_key] = choice
        log.info("%s: batch %d for %s (%s, %s per %s)", self.feature, choice.batch, input_key, choice.source,
                 f"{choice.per_unit_s * 1e3:.2f} ms" if choice.per_unit_s else "?", unit)
        if input_key in self.checks and isinstance(probe, Trials):
            self._check(input_key, unit, probe, max_batch, default)
        return self.choices[input_key].batch

    def _check(self, input_key: str, unit: str, trials: Trials, max_batch: int | None, default: int) -> None:
        """Times the cached batch on this call's next inputs (kept: the call's own work at the batch it would run
        anyway) until the check is decided; a cost DRIFT times off the cached one either way measures again on the
        rest of the call's inputs. A call with fewer inputs left than a batch leaves the check to the next call;
        a plain probe (no call's inputs) is never timed for a check, as that work would be thrown away."""
        check = self.checks[input_key]
        while not check.decided() and trials.keeps(check.batch):
            t0 = self.clock()
            units, _ = trials(check.batch)
            check.add(self.clock() - t0, units)
        if not check.decided():
            return
        del self.checks[input_key]
        old = self.choices[input_key]
        old.check = check.record()
        if not check.drifted():
            return
        # info, not a warning: the run's summary says "re-measured" with both figures (a loaded machine drifts)
        log.info("%s: cached batch %d for %s cost %.2f ms per %s in this run against %.2f ms cached (%.2fx, "
                    "more than %.1fx either way): measuring again", self.feature, check.batch, input_key,
                    check.best * 1e3, unit, check.expected * 1e3, check.best / check.expected, DRIFT)
        choice = self._calibrate(check.key, check.dev, input_key, unit, trials, max_batch, default)
        if choice.source == "calibrated":
            choice.source = "re-measured"
        # else cut short by the budget (a loaded machine): the default for this run; the cached entry stays and
        # the next run checks it again
        choice.check = old.check
        self.choices[input_key] = choice

    def _calibrate(self, key: str, dev: str, input_key: str, unit: str, probe: Trials | Callable[[int], Any],
                   max_batch: int | None, default: int) -> Choice:
        t0 = time.perf_counter()
        sizes = candidates(self.device, max_batch)
        trials = probe if isinstance(probe, Trials) else Trials.thrown_away(probe)
        memory = self.memory()
        costs = measure(trials, sizes, self.budget_s, _is_oom, self.clock, memory)
        work = {b: round(v / 2**20, 1) for b, v in memory.used.items()} if memory else {}
        self.spent_s += trials.wasted_s
        now = datetime.now(UTC).isoformat(timespec="seconds")
        log.info("%s: calibrated %s in %.1f s (%d units of the call kept, %.1f s thrown away): %s", self.feature,
                 input_key, time.perf_counter() - t0, trials.done, trials.wasted_s,
                 ", ".join(f"{k}: {v * 1e3:.2f} ms" + (f" {work[k]:.0f} MiB" if k in work else "") for k, v in costs.items()))
        stopped_by_memory = memory is not None and len(costs) < len(sizes) and not memory.allows(sizes[len(costs)])
        if len(costs) < min(MIN_CANDIDATES, len(sizes)) and not stopped_by_memory:
            log.warning("%s: calibration of %s cut short by its %.0f s budget after %d size(s) (a loaded machine?): "
                        "batch %d, the default, not cached", self.feature, input_key, self.budget_s, len(costs), default)
            return Choice(self.feature, input_key, min(default, sizes[-1]), "default", unit, None, costs, dev, now, work)
        b = pick(costs, tolerance(self.device))
        choice = Choice(self.feature, input_key, b, "calibrated", unit, costs[b], costs, dev, now, work)
        self._write(key, {"batch": b, "per_unit_s": costs[b], "costs": {str(k): v for k, v in costs.items()},
                          "measured_at": now, "unit": unit, "work_mib": {str(k): v for k, v in work.items()}})
        return choice

    def _entry(self, key: str) -> _Entry | None:
        """The cache's entry for `key` if it is whole; a damaged one (a flipped byte that keeps the JSON valid:
        `"bat#h"`, `"1&"`, a cost of 0) is said once and measured again, its entry then replaced: the cache is a
        shortcut, nothing in it may fail a pair."""
        raw = self._read().get(key)
        if raw is None:
            return None
        try:
            return _Entry.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            log.warning("%s: calibration cache %s: entry %s is damaged (%s: %s); measuring it again", self.feature,
                        self.path, key, ".".join(map(str, first["loc"])) or "entry", first["msg"])
            return None

    def _read(self) -> dict[str, Any]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):  # absent or damaged: measure again (the cache is only a shortcut)
            return {}

    def _write(self, key: str, value: dict[str, Any]) -> None:
        """Read-modify-replace: a concurrent writer may lose an entry, which is then measured again."""
        assert self.path is not None
        try:
            data = self._read()
            data[key] = value
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True), durable=False)  # a cache: see atomicio
        except OSError as e:  # a read-only home: the choice still holds for this run
            log.warning("calibration cache %s not written: %s", self.path, e)


def _is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, torch.cuda.OutOfMemoryError)


def resolve(calibrator: Calibrator | None, pinned: int | str | None, default: int, model: str, input_key: str,
            unit: str, probe: Trials | Callable[[int], Any], max_batch: int | None = None) -> int:
    """An extractor's batch size: the config's pinned value as is; else measured by the actor's calibrator;
    else (no calibrator: a direct call; or calibration off) the extractor's fixed default. An actor's
    calibrator keeps every choice for the run report."""
    if calibrator is None:
        return pinned if isinstance(pinned, int) else default
    if isinstance(pinned, int) or calibrator.path is None:
        if input_key not in calibrator.choices:
            batch, source = (pinned, "pinned") if isinstance(pinned, int) else (default, "default")
            calibrator.choices[input_key] = Choice(calibrator.feature, input_key, batch, source, unit)
        return calibrator.choices[input_key].batch
    return calibrator.batch(model, input_key, unit, probe, max_batch, default)
