"""Peak resident memory of a process tree, sampled from /proc (Linux): Ray spreads work over many processes."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path


def _tree_rss_bytes(root: int) -> int:
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        pid = int(status.parent.name)
        parents[pid] = int(fields.get("PPid", "0"))
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
    total, frontier = 0, {root}
    while frontier:
        total += sum(rss.get(p, 0) for p in frontier)
        frontier = {c for c, p in parents.items() if p in frontier}
    return total


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, int]:
    """→ (wall seconds, peak RSS of the whole tree in bytes, exit code)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while proc.poll() is None:
            peak = max(peak, _tree_rss_bytes(proc.pid))
            time.sleep(0.25)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    code = proc.wait()
    thread.join()
    return time.perf_counter() - t0, peak, code
