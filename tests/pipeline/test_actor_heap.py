"""Model actors keep their working memory in the heap between calls (pipeline/actors.py, `keep_heap`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import re, sys
import numpy as np
from pipeline.actors import keep_heap
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) // 1024
set_ = sys.argv[1] == "1" and keep_heap()
base = rss()
for _ in range(3):  # a forward's activations: many alive at once, written, all freed at the end of the call
    acts = [np.ones(8 << 18, np.float32) for _ in range(8)]
    del acts
print(int(set_), rss() - base)
"""


def _retained(keep: bool) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if keep else "0"], cwd=REPO, capture_output=True,
                         text=True, check=True)
    got, mib = out.stdout.split()
    return int(got), int(mib)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_freed_working_memory_stays_in_the_heap_for_the_next_call() -> None:
    """64 MiB in 8 MiB blocks freed together: glibc's default thresholds (raised to the largest block freed: trim
    past twice that) give it back to the system, and the next call faults it in again; with the actor's
    thresholds it stays, ready for the next call."""
    was_set, kept = _retained(True)
    if not was_set:
        pytest.skip("not glibc: mallopt unavailable")
    _, dropped = _retained(False)
    assert kept >= 60 and dropped <= 20, (kept, dropped)


def test_the_model_actor_sets_the_thresholds(monkeypatch) -> None:
    from extractors.acoustic import CovarepConfig
    from pipeline import actors

    calls: list[bool] = []
    monkeypatch.setattr(actors, "keep_heap", lambda: calls.append(True) or True)
    actors.ExtractorWorker("acoustic", CovarepConfig(), "cpu")
    assert calls == [True]
