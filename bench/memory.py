"""Memory and CPU of a process tree, sampled from /proc (Linux): Ray spreads work over many processes.

RSS counts a shared page (Ray's object store, shared libraries) once in every process that maps it, so the
tree's summed RSS overstates what the tree holds; PSS shares each page among its mappers and sums to the real
figure; USS (private pages only) is what killing a process would free. PSS/USS come from
/proc/<pid>/smaps_rollup, readable for one's own processes, at ~25 ms per GiB of RSS: `TreeSampler` reads them only
when the tree's RSS reaches a new high (by 128 MiB) and every 10th sample, RSS every sample.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _parents() -> dict[int, int]:
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        out[int(stat.parent.name)] = int(text.rsplit(")", 1)[1].split()[1])
    return out


def tree_pids(root: int) -> list[int]:
    parents = _parents()
    found, frontier = [], {root}
    while frontier:
        found += sorted(p for p in frontier if p in parents)
        frontier = {c for c, p in parents.items() if p in frontier}
    return found


def _tree_rss_bytes(root: int) -> int:
    return sum((proc_memory(p) or {}).get("rss", 0) for p in tree_pids(root))


def proc_memory(pid: int, smaps: bool = False) -> dict[str, Any] | None:
    """rss (and pss, uss with `smaps`) in bytes, cpu_s (user + system), and the process title; None when gone."""
    base = Path(f"/proc/{pid}")
    try:
        stat = (base / "stat").read_text().rsplit(")", 1)[1].split()
        status = dict(line.split(":", 1) for line in (base / "status").read_text().splitlines() if ":" in line)
        title = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        out = {"pid": pid, "rss": int(status.get("VmRSS", "0 kB").split()[0]) * 1024,
               "cpu_s": (int(stat[11]) + int(stat[12])) * TICK_S, "name": title[:120] or status["Name"].strip(),
               "cmdline": title}
        if smaps:
            rollup = dict(re.findall(r"^(\w+):\s+(\d+) kB", (base / "smaps_rollup").read_text(), re.M))
            out["pss"] = int(rollup.get("Pss", 0)) * 1024
            out["uss"] = (int(rollup.get("Private_Clean", 0)) + int(rollup.get("Private_Dirty", 0))) * 1024
        return out
    except (OSError, ValueError, IndexError, KeyError):
        return None


def _raylet_address(procs: list[dict[str, Any]]) -> tuple[str, int] | None:
    """(ip, node manager port) of the raylet among `procs`, from its command line and its session's log."""
    for p in procs:
        ip = re.search(r"--node_ip_address=(\S+)", p["cmdline"])
        sock = re.search(r"--raylet_socket_name=(\S+)", p["cmdline"])
        if "raylet" in p["name"].split()[0] and ip and sock:
            log = Path(sock.group(1)).parent.parent / "logs" / "raylet.out"
            port = re.search(r"NodeManager server started, listening on port (\d+)", log.read_text()) if log.exists() else None
            if port:
                if (Path.home() / ".ray" / "auth_token").is_file():  # a local ray.init turns token auth on then
                    os.environ.setdefault("RAY_AUTH_MODE", "token")
                return ip.group(1), int(port.group(1))
    return None


def machine_cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class TreeSampler(threading.Thread):
    """Samples a process tree every `interval_s` until `stop()`: summed RSS/PSS/USS with the processes at the
    peak, the tree's CPU seconds, the machine's CPU busy fraction, the GPU's utilisation (nvidia-smi, where
    present) and Ray's object store use (asked of the raylet in the tree, see `_object_store_bytes`)."""

    def __init__(self, root: int, interval_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.root, self.interval_s = root, interval_s
        self.done = threading.Event()
        self.samples = self.smaps_samples = 0
        self.smaps_high = 0
        self.peak: dict[str, Any] = {"pss": 0, "rss": 0, "uss": 0}  # the sample with the highest PSS
        self.max = {"rss": 0, "pss": 0, "uss": 0}  # each figure's own maximum
        self.peak_processes: list[dict[str, Any]] = []
        self.cpu_s: dict[int, float] = {}
        self.gpu_util: list[float] = []
        self.gpu_mem_peak: float | None = None
        self.store_peak: int | None = None
        self.store_error: str | None = None
        self._raylet: Any = None  # () -> the raylet's GetNodeStats reply
        self.machine0 = machine_cpu_ticks()
        self.t0 = time.time()

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.machine1, self.t1 = machine_cpu_ticks(), time.time()

    def run(self) -> None:
        while not self.done.is_set():
            self._sample()
            self.done.wait(self.interval_s)

    def _sample(self) -> None:
        procs = [p for p in (proc_memory(pid) for pid in tree_pids(self.root)) if p]
        self.samples += 1
        for p in procs:
            self.cpu_s[p["pid"]] = max(self.cpu_s.get(p["pid"], 0.0), p["cpu_s"])
        rss = sum(p["rss"] for p in procs)
        # smaps_rollup costs ~25 ms per GiB of RSS: read it when RSS is 128 MiB above the last such read's high,
        # and every 10th sample
        if rss > self.smaps_high + 2**27 or self.samples % 10 == 1:
            self.smaps_high = max(self.smaps_high, rss)
            procs = [p for p in (proc_memory(p["pid"], smaps=True) for p in procs) if p]
            totals = {k: sum(p[k] for p in procs) for k in ("rss", "pss", "uss")}
            self.smaps_samples += 1
            if totals["pss"] > self.peak["pss"]:
                self.peak = {**totals, "at_s": round(time.time() - self.t0, 1), "processes": len(procs)}
                self.peak_processes = sorted(procs, key=lambda p: -p["pss"])
            self.max = {k: max(v, totals[k]) for k, v in self.max.items()}
        self.max["rss"] = max(self.max["rss"], rss)
        self._gpu()
        self._object_store(procs)

    def _gpu(self) -> None:
        if shutil.which("nvidia-smi") is None:
            return
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout.split("\n")[0].split(",")
            self.gpu_util.append(float(out[0]))
            self.gpu_mem_peak = max(self.gpu_mem_peak or 0.0, float(out[1]))
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            pass

    def _object_store(self, procs: list[dict[str, Any]]) -> None:
        """Bytes in the object store now: the raylet's store stats (what `ray memory --stats-only` shows), asked
        of the tree's raylet over a plain gRPC channel. Not through the GCS: Ray's GCS client ends its process
        when the GCS it talks to has been gone for 60 s, which it is once the run ends."""
        try:
            if self._raylet is None:
                address = _raylet_address(procs)
                if address is None:
                    return
                from ray._private.grpc_utils import init_grpc_channel
                from ray.core.generated import node_manager_pb2, node_manager_pb2_grpc

                # one channel for the whole run (ray._private.internal_api.node_stats opens one per call)
                stub = node_manager_pb2_grpc.NodeManagerServiceStub(init_grpc_channel(f"{address[0]}:{address[1]}"))
                request = node_manager_pb2.GetNodeStatsRequest(include_memory_info=False)
                self._raylet = lambda: stub.GetNodeStats(request, timeout=5)
            used = self._raylet().store_stats.object_store_bytes_used
            self.store_peak = max(self.store_peak or 0, int(used))
        except Exception as e:  # the raylet is starting or gone; the figure stays what was seen
            self.store_error = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"

    def result(self) -> dict[str, Any]:
        wall = self.t1 - self.t0
        busy = self.machine1[0] - self.machine0[0]
        total = self.machine1[1] - self.machine0[1]
        tree_cpu = sum(self.cpu_s.values())
        cores = os.cpu_count() or 1
        return {
            "samples": self.samples, "pss_samples": self.smaps_samples, "interval_s": self.interval_s, "wall_s": round(wall, 2), "cores": cores,
            "peak_pss_bytes": self.max["pss"], "peak_rss_bytes": self.max["rss"],
            "peak_uss_bytes": self.max["uss"], "rss_at_peak_pss_bytes": self.peak["rss"],
            "peak_at_s": self.peak.get("at_s"), "processes_at_peak": [
                {"pid": p["pid"], "name": p["name"], "pss": p["pss"], "rss": p["rss"], "uss": p["uss"]}
                for p in self.peak_processes],
            "tree_cpu_s": round(tree_cpu, 2),
            "tree_cpu_utilisation": round(tree_cpu / (wall * cores), 4) if wall > 0 else None,
            "machine_cpu_utilisation": round(busy / total, 4) if total else None,
            "gpu_utilisation_mean": round(sum(self.gpu_util) / len(self.gpu_util), 1) if self.gpu_util else None,
            "gpu_memory_peak_mib": self.gpu_mem_peak,
            "object_store_peak_bytes": self.store_peak,
            "object_store_error": self.store_error if self.store_peak is None else None,
        }


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
