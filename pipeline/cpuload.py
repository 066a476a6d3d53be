"""The CPU a run used as the machine sees it, beside what its timed calls counted (issue 52).

The run report's `cpu` busy fraction counts the decode tasks' and model calls' own CPU time: not Ray's own
processes (raylet, GCS, agents, task submission, the object store), the driver, the committer, or a worker
between calls. On the 2-core test machine the run's process tree used 1.3x what its calls counted, and on the
H100 node the machine's busy core-seconds were 22 % above them. `Sampler` reads, once a second from /proc (Linux;
elsewhere it records nothing), the CPU seconds of this process and all its descendants (the driver, and a local
Ray's processes, which are its children) and the whole machine's busy core-seconds (every user's), so the report
can put both beside the calls (`report.utilisation`'s `whole`) and the simulator can model the CPU spent outside
calls from the difference.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PROC = Path("/proc")
EVERY_S = 1.0
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s(proc: Path = PROC) -> tuple[float, int] | None:
    """(busy core-seconds since boot, cores) of the whole machine: /proc/stat's first line less idle and
    iowait; None where there is no /proc."""
    try:
        lines = (proc / "stat").read_text().splitlines()
    except OSError:
        return None
    fields = [int(x) for x in lines[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    busy = sum(fields[:8]) - fields[3] - fields[4]
    cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return busy / _TICK, cores


def tree_cpu_s(root: int, proc: Path = PROC) -> dict[int, float]:
    """pid -> CPU seconds (user + system) of `root` and each of its descendants alive now."""
    parent, cpu = {}, {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        rest = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces and parentheses
        pid = int(entry.name)
        parent[pid] = int(rest[1])
        cpu[pid] = (int(rest[11]) + int(rest[12])) / _TICK
    mine, frontier = {root}, [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while frontier:
        for kid in children.get(frontier.pop(), ()):
            if kid not in mine:
                mine.add(kid)
                frontier.append(kid)
    return {pid: cpu[pid] for pid in mine if pid in cpu}


class Sampler:
    """A daemon thread sampling (time, the run's tree CPU-s, the machine's busy core-s) every `every` seconds.
    A process of the tree that ended keeps the last CPU seconds seen of it (at most `every` of its time lost)."""

    def __init__(self, root: int | None = None, every: float = EVERY_S, proc: Path = PROC) -> None:
        self.root, self.every, self.proc = root or os.getpid(), every, proc
        self.samples: list[tuple[float, float, float]] = []
        self.cores = 0
        self._seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        if machine_busy_s(self.proc) is None:
            return self
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        machine = machine_busy_s(self.proc)
        if machine is None:
            return
        for pid, secs in tree_cpu_s(self.root, self.proc).items():
            self._seen[pid] = max(secs, self._seen.get(pid, 0.0))
        self.cores = machine[1]
        self.samples.append((time.time(), sum(self._seen.values()), machine[0]))

    def stop(self) -> list[tuple[float, float, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5 * self.every)
            self._thread = None
            self.sample()
        return self.samples


def between(samples: list[tuple[float, float, float]], t0: float, t1: float) -> tuple[float, float] | None:
    """(the tree's CPU-s, the machine's busy core-s) from `t0` to `t1`, the cumulative figures interpolated between
    samples; None when the samples do not cover the window (fewer than two)."""
    if len(samples) < 2 or t1 <= t0:
        return None

    def at(t: float, k: int) -> float:
        if t <= samples[0][0]:
            return samples[0][k]
        for (a, *va), (b, *vb) in zip(samples, samples[1:], strict=False):
            if t <= b:
                f = (t - a) / (b - a) if b > a else 1.0
                return va[k - 1] + f * (vb[k - 1] - va[k - 1])
        return samples[-1][k]

    return at(t1, 1) - at(t0, 1), at(t1, 2) - at(t0, 2)
