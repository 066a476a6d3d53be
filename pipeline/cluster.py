"""An existing Ray cluster (RAY_ADDRESS): its token authentication, and a record of what a run used.

Since Ray 2.52 a cluster may require a token on every RPC (`RAY_AUTH_MODE=token`). A local `ray.init()`
creates one in ~/.ray/auth_token (Ray 2.59+), and `ray start --head` turns token authentication on by
itself whenever such a token exists. A driver given an explicit address never does: it fails after
~20 s of InvalidAuthToken warnings. `prepare_auth` closes that gap; an explicit RAY_AUTH_MODE is kept."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("siqfeat")

TOKEN_HINT = ("set RAY_AUTH_MODE=token and give this driver the cluster's token "
              "(in ~/.ray/auth_token, or RAY_AUTH_TOKEN_PATH=<file>, or RAY_AUTH_TOKEN)")


class ClusterError(ValueError):
    """RAY_ADDRESS names a cluster this driver cannot use; the message says in one line what to set."""


def token_source() -> str | None:
    """Where Ray would read a token from, in Ray's own order of precedence; None when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return os.environ["RAY_AUTH_TOKEN_PATH"]  # Ray itself says so if that file cannot be read
    default = Path.home() / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def prepare_auth(address: str) -> None:
    """Turn token authentication on for this driver when the cluster at `address` requires it."""
    if os.environ.get("RAY_AUTH_MODE") or address == "auto":  # explicit choice, or Ray's own detection
        return
    source = token_source()
    if address.startswith("ray://"):
        # A Ray Client driver runs no Ray process that the cluster calls back: a token the cluster
        # does not check costs nothing, so send it whenever there is one.
        if source:
            _enable_token(address, source)
        return
    if not _gcs_wants_token(address):
        return
    if source is None:
        raise ClusterError(f"the Ray cluster at {address} requires a token: {TOKEN_HINT}")
    _enable_token(address, source)


def _gcs_wants_token(address: str) -> bool:
    """Ask the cluster's GCS once without a token (~0.5 s): only token clusters refuse."""
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    try:
        GcsClient(address=address)
    except AuthenticationError:
        return True
    except Exception as e:  # unreachable, or not a Ray GCS: ray.init would wait as long again, then fail
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ClusterError(f"no Ray cluster answers at {address} (RAY_ADDRESS): {first}") from e
    return False


def _enable_token(address: str, source: str) -> None:
    from ray._raylet import Config

    os.environ["RAY_AUTH_MODE"] = "token"
    Config.initialize("")  # Ray caches its config from the environment; this is how Ray itself refreshes it
    log.info("Ray cluster at %s: token authentication with the token from %s (RAY_AUTH_MODE=token)",
             address, source)


def describe(ray: Any, address: str | None) -> dict[str, Any]:
    """The cluster a run used, for the run report: address, alive nodes with their resources, totals.
    `work` (node id -> decode tasks and model actors placed there) is filled in as the run goes."""
    nodes = {n["NodeID"]: {"ip": n["NodeManagerAddress"], "resources": _resources(n["Resources"])}
             for n in ray.nodes() if n["Alive"]}
    return {"address": address or "local", "nodes": nodes, "resources": _resources(ray.cluster_resources()),
            "work": {}}


def remove_raw_copies(ray: Any, run_id: str, timeout_s: float = 60.0) -> int:
    """As a run whose raw data is in a bucket ends: every alive node removes the run's folder of raw copies
    (objectio/cache.py), one small task pinned to each node, so nothing of the run is left on a node. A node
    that does not answer in time keeps its folder (bounded; its temporary folder's own cleaning removes it),
    said in one line. The bytes removed."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from objectio.cache import remove_run

    try:
        task = ray.remote(num_cpus=0, max_retries=0)(remove_run)
        refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                .remote(run_id) for n in ray.nodes() if n["Alive"]]
        done, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - Ray itself failing as the run ends: that run's error is the one to see
        log.warning("could not remove this run's copies of raw objects on its nodes (siq-raw-*-%s in their "
                    "temporary folder): %s", run_id, str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        return 0
    removed = 0
    for ref in done:
        try:
            removed += ray.get(ref)
        except Exception as e:  # noqa: BLE001 - a node gone meanwhile: its folder went with it or stays bounded
            late.append(ref)
            log.debug("removing the run's raw copies: %s", e)
    if late:
        log.warning("%d node(s) did not remove this run's copies of raw objects (siq-raw-*-%s in their temporary "
                    "folder) in %.0f s", len(late), run_id, timeout_s)
    log.info("removed this run's copies of raw objects from %d node(s): %.1f MB", len(refs) - len(late), removed / 1e6)
    return removed


def count_work(cluster: dict[str, Any], node_id: str | None, what: str) -> None:
    counts = cluster["work"].setdefault(node_id or "unknown", {})
    counts[what] = counts.get(what, 0) + 1


def summary_line(cluster: dict[str, Any]) -> str:
    r = cluster["resources"]
    work = "; ".join(f"{node[:8]}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                     for node, c in sorted(cluster["work"].items()))
    return (f"  Ray {cluster['address']}: {len(cluster['nodes'])} node(s), {r.get('CPU', 0):g} CPU, "
            f"{r.get('GPU', 0):g} GPU" + (f"; work per node: {work}" if work else ""))


def _resources(resources: dict[str, float]) -> dict[str, float]:
    """Ray's resource totals without its per-node marker entries ("node:<ip>")."""
    return {k: float(v) for k, v in sorted(resources.items()) if not k.startswith("node:")}


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The cores this process may use: its affinity mask (`taskset`, `docker --cpuset-cpus`), bounded by its
    cgroup's CPU quota (`docker --cpus`, a Kubernetes limit: cgroup v2 `cpu.max` on the process's cgroup and
    its ancestors, v1 `cpu.cfs_quota_us`), rounded down, at least 1. `os.cpu_count()` is the host's: in a
    container with a 16-CPU quota on a 128-core host a run planned 128 slots and actors."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cores = min(cores, int(quota))
    return max(1, cores)


def _cgroup_quota(root: Path, proc_cgroup: Path) -> float | None:
    """The tightest CPU quota (in cores) on the way from this process's cgroup up to the root, None without one."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    quotas = []
    for line in lines:
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "":  # v2: one hierarchy; `cpu.max` is "max 100000" or "200000 100000"
            dirs, files = _up(root, path), [("cpu.max", None)]
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy
            base = next((root / d for d in (controllers, "cpu,cpuacct", "cpu") if (root / d).is_dir()), root / "cpu")
            dirs, files = _up(base, path), [("cpu.cfs_quota_us", "cpu.cfs_period_us")]
        else:
            continue
        for d in dirs:
            for quota_file, period_file in files:
                q = _read_quota(d, quota_file, period_file)
                if q is not None:
                    quotas.append(q)
    if not quotas:  # no /proc/self/cgroup to follow (or a cgroup namespace hides the path): the root's own files
        for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
            q = _read_quota(root, quota_file, period_file)
            if q is not None:
                quotas.append(q)
    return min(quotas, default=None)


def _up(base: Path, path: str) -> list[Path]:
    parts = [p for p in path.strip("/").split("/") if p]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read_quota(folder: Path, quota_file: str, period_file: str | None) -> float | None:
    try:
        if period_file is None:
            quota, period = folder.joinpath(quota_file).read_text().split()[:2]
        else:
            quota, period = (folder.joinpath(f).read_text().strip() for f in (quota_file, period_file))
        if quota in ("max", "-1") or float(period) <= 0:
            return None
        return float(quota) / float(period)
    except (OSError, ValueError):
        return None
