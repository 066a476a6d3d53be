"""Benchmarks that print figures (make bench, make bench-store, python -m bench.simulate, ...)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeats: int = 3, clock: Callable[[], float] = time.perf_counter) -> float:
    """Best of `repeats` runs of `fn` by `clock` (wall time; `time.process_time` for CPU-s): the machine is
    shared, and the best run is the least disturbed one."""
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return best
