"""Per-stage timing of a run: each decode task and model call reports its wall-clock [start, end) and the units
it processed; the run report's `stages` sums them per stage.

Stages are `decode:<input kind>` (one record per item and kind, from the decode task), `model:<feature>` (one
record per actor call, a batch of items) and `commit:<feature>` (the driver's store write). Units are the input
kind's (media/kinds/ `unit`): frames (1 fps rows), audio_s (seconds of audio), words, questions, texts.

Per stage: `calls`, `items`, `units`, `worker_s` (the sum of the calls' durations: worker-seconds, what the
stage costs), `busy_s` (the union of the calls' intervals: how long at least one call of the stage ran, what
the stage adds to the wall time when nothing else overlaps it), `span_s` (first start to last end),
`units_per_busy_s` (the stage's throughput in this run) and `units_per_worker_s` (one worker's throughput,
the inverse of the per-unit cost), `cpu_s` (CPU seconds of the calls' processes, all threads: core-seconds) and
`cpu_s_per_unit`. Times are `time.time()` seconds, comparable across the processes of one
machine (and across nodes as far as their clocks agree).

`per_call` keeps the calls themselves (at most `PER_CALL_ROWS`, evenly chosen, an actor's first calls always),
for bench.simulate: a call's fixed cost apart from its per-unit cost, a model's first-call warm-up, each clip's
own size. Its `fields` name the columns of its `rows`: the call's start from the stage's first start, its
seconds, its CPU seconds, units, items, and 1 for an actor's first call of the stage (0 else).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

PER_CALL_ROWS = 2000  # a 1,250-clip run's decode tasks fit whole; a few tens of KB a stage in the report
PER_CALL_FIELDS = ["start_s", "seconds", "cpu_s", "units", "items", "first"]


def units_of(value: Any) -> float:
    """How much work an input is, in its kind's unit (each kind's `unit`, media/kinds/); 0 for a failed (None) input."""
    if value is None:
        return 0.0
    if hasattr(value, "n_frames"):  # frames still to be decoded by the model actor (media/nvdec.py FramesPlan)
        return float(value.n_frames)
    for attr in ("pixels", "words", "questions", "texts"):
        seq = getattr(value, attr, None)
        if seq is not None:
            return float(len(seq))
    return float(getattr(value, "duration_s", 1.0) or 0.0)


def clock() -> tuple[float, float]:
    """(wall-clock time.time(), this process's CPU seconds, all threads): what `call_record` starts from."""
    return time.time(), time.process_time()


def call_record(stage: str, started: tuple[float, float], units: float, items: int, unit: str) -> dict[str, Any]:
    """A finished call of `stage` that began at `started` (`clock()`) and ends now. `cpu_s` is the process's CPU
    time over the call: a decode task or an actor runs one call at a time, so that is the call's cost in
    core-seconds (plus Ray's own threads in that process, which idle meanwhile)."""
    wall, cpu = clock()
    return {"stage": stage, "start_s": started[0], "end_s": wall, "cpu_s": cpu - started[1], "units": units,
            "items": items, "unit": unit}


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + (cur_end - cur_start if cur_end is not None else 0.0)


class StageStats:
    """Collects call records; `summary()` gives the run report's `stages`."""

    def __init__(self) -> None:
        self.calls: dict[str, list[dict[str, Any]]] = {}

    def add(self, record: dict[str, Any] | None) -> None:
        if record:
            self.calls.setdefault(record["stage"], []).append(record)

    def summary(self) -> dict[str, dict[str, Any]]:
        out = {}
        for stage, calls in sorted(self.calls.items()):
            spans = [(c["start_s"], c["end_s"]) for c in calls]
            busy, worker = union_seconds(spans), sum(e - s for s, e in spans)
            units = sum(c["units"] for c in calls)
            cpu = sum(c.get("cpu_s", 0.0) for c in calls)
            out[stage] = {
                "unit": calls[0]["unit"], "calls": len(calls), "items": sum(c["items"] for c in calls),
                "units": round(units, 3), "busy_s": round(busy, 4), "worker_s": round(worker, 4),
                "first_start_s": min(s for s, _ in spans), "last_end_s": max(e for _, e in spans),
                "span_s": round(max(e for _, e in spans) - min(s for s, _ in spans), 4),
                "units_per_busy_s": round(units / busy, 4) if busy > 0 else None,
                "units_per_worker_s": round(units / worker, 4) if worker > 0 else None,
                "cpu_s": round(cpu, 4), "cpu_s_per_unit": cpu / units if units > 0 else None,
                "per_call": per_call_rows(calls),
            }
        return out


def per_call_rows(calls: list[dict[str, Any]], limit: int = PER_CALL_ROWS) -> dict[str, Any]:
    """The stage's calls as compact rows (`PER_CALL_FIELDS`) in the order they started: every first call, and
    evenly spaced others up to `limit` rows."""
    calls = sorted(calls, key=lambda c: c["start_s"])
    t0 = calls[0]["start_s"]
    firsts = [i for i, c in enumerate(calls) if c.get("first")]
    others = [i for i, c in enumerate(calls) if not c.get("first")]
    room = max(0, limit - len(firsts))
    if len(others) > room:
        others = [others[round(k * (len(others) - 1) / max(1, room - 1))] for k in range(room)] if room else []
    keep = sorted(set(firsts) | set(others))
    rows = [[round(calls[i]["start_s"] - t0, 3), round(calls[i]["end_s"] - calls[i]["start_s"], 4),
             round(calls[i].get("cpu_s", 0.0), 4), round(calls[i]["units"], 3), calls[i]["items"],
             1 if calls[i].get("first") else 0] for i in keep]
    return {"fields": PER_CALL_FIELDS, "rows": rows, "of": len(calls)}
