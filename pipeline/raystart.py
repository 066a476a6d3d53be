"""Ray for one run: started (once more, waiting longer, when it does not come up), watched while the run goes,
and shut down with every process it started.

Why each part exists (issue 35):
- On a loaded machine Ray's own start-up gives up after fixed waits ("The current node timed out during startup":
  30 s for the raylet to register, 30 s for the GCS to write its port). A second attempt waits longer; a run whose
  Ray never comes up ends with one line saying what failed and what to try, its report saved (exit code 7).
- A raylet or GCS that dies during the run (another job's `ray stop --force`, the out-of-memory killer, a lost head)
  is found within a second (`check`, called between Ray calls, after `pipeline.stop.check`): the run stops like
  one stopped by a signal (open batches committed, summary, report, exit code 7). Left alone, the run hangs on
  tasks no raylet will schedule, or Ray's core worker ends the process after 60 s without its GCS ("Failed to
  connect to GCS within 60 seconds": exit 1, no summary).
- `ray.shutdown()` leaves processes behind: the agents of a raylet that was killed, a model actor Ray was
  restarting, a worker that was still starting up. With a local Ray the driver is made the child subreaper of its
  own processes (Linux), so such orphans stay its children rather than init's, and `shutdown` ends whatever of
  the run's Ray is still alive after `ray.shutdown()`: every process a run starts ends with it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline import cluster, stop, supervise

log = logging.getLogger("siqfeat")

RETRY_WAIT_S = 120  # the second start-up attempt's wait for the raylet and the GCS (Ray's own: 30 s each)
REMOTE_PROBE_S = 5.0  # seconds between two checks of a cluster's GCS (a local Ray's processes: every call)
GCS_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"  # Ray's setting for its wait on the GCS at start-up
END_GRACE_S = 2.0  # a leftover process gets this long after SIGTERM before SIGKILL
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h

START_HINT = ("the machine may be too busy for Ray to start in time: run again when it is less loaded (nothing "
              "committed is recomputed); Ray's own logs are under /tmp/ray/session_latest/logs")
LOST_HINT = supervise.LOST_HINT  # defined below this module (supervise reads it; raystart imports supervise)
REMOTE_HINT = ("the cluster lost its head or this driver's node: check the cluster (`ray status`), then run again; "
               "only what is not committed is computed")


class RayFailed(BaseException):  # noqa: N818 - like Stopped: `except Exception` in the loop must let it by
    """Ray did not start, or this run's Ray died under it. `what` says which in one line, `hint` what to try."""

    def __init__(self, what: str, hint: str) -> None:
        self.what, self.hint = what, hint
        super().__init__(f"{what}: {hint}")


class _Session:
    """The run's Ray: for a local one, the processes `ray.init` started (watched, and ended by `shutdown`)."""

    def __init__(self, ray: Any, address: str | None) -> None:
        self.address, self.ray = address, ray
        self.node = node = getattr(ray._private.worker, "_global_node", None)
        # gcs_server and raylet: without either the run cannot go on; the rest (dashboard, log monitor) it can
        self.watched = {} if address or node is None else {
            name: info.process for name in ("gcs_server", "raylet")
            for info in node.all_processes.get(name, ())}
        self.started = [info.process for infos in (node.all_processes.values() if node and not address else ())
                        for info in infos]
        # a Ray Client driver (ray://) has no GCS connection of its own to ask: its one connection breaking is
        # Ray's own error
        self.probe = bool(address) and not address.startswith("ray://")
        self.next_probe, self.unanswered = time.monotonic() + REMOTE_PROBE_S, 0

    def current(self) -> bool:
        """Still the process's Ray (not shut down by someone else, nor replaced by another `ray.init`)."""
        return self.ray.is_initialized() and getattr(self.ray._private.worker, "_global_node", None) is self.node

    def check(self) -> None:
        for name, proc in self.watched.items():
            code = _ended(proc)
            if code is not None:
                how = supervise.how_ended(code)
                raise RayFailed(f"this run's Ray {name} (pid {proc.pid}) ended ({how})", LOST_HINT)
        if self.probe and time.monotonic() >= self.next_probe:
            self.next_probe = time.monotonic() + REMOTE_PROBE_S
            problem = _probe_cluster()
            self.unanswered = self.unanswered + 1 if problem else 0
            if self.unanswered >= 2:  # twice in a row: one slow answer is no lost cluster
                raise RayFailed(f"the Ray cluster at {self.address} {problem}", REMOTE_HINT)

    def processes(self) -> list[Any]:
        """What is alive of this run's local Ray: the processes `ray.init` started, their descendants, and Ray
        processes orphaned to this driver (it is their subreaper)."""
        import psutil

        roots = {p.pid for p in self.started}
        found: dict[int, Any] = {}
        try:
            children = psutil.Process().children()
        except psutil.Error:
            return []
        for child in children:
            if child.pid in roots or _is_ray_process(child):
                found[child.pid] = child
                try:
                    found.update((p.pid, p) for p in child.children(recursive=True))
                except psutil.Error:
                    continue
        return list(found.values())


_session: _Session | None = None
# The local Ray `start` started in this process: (its node, `objectio.paths.settings_key()` when it started, the
# SIQ_* settings its runtime env gave the workers). Its workers inherited the driver's environment then; a later
# run in this process reuses that Ray (a start costs seconds), unless those settings changed since: then its
# workers would read another endpoint or stale credentials, or another weights folder or cache bound (a notebook
# that sets SIQ_WEIGHTS_DIR after a first run), so it is started again.
_ours: tuple[Any, str, dict[str, str]] | None = None


def _siq_settings() -> dict[str, str]:
    """The SIQ_* variables `runtime_env` gives the workers (not secrets: paths and sizes)."""
    return {k: v for k, v in os.environ.items() if k.startswith("SIQ_")}


def runtime_env(address: str | None) -> dict[str, Any]:
    """What the workers get from the driver: offline model hubs, the SIQ_* settings, and on a cluster the code."""
    # OMP_WAIT_POLICY=PASSIVE (unless the user set it): an OpenMP thread waiting for its peers sleeps instead of
    # spinning. A node's cores are shared by decode tasks and several actors; a model's spinning threads then
    # burn the cores the others wait for (a 2-thread DenseNet161 call of 12 frames beside other work: 4.5-14
    # CPU-s and 3-23 s by default, 3.9-4.4 CPU-s and 3.4-6.8 s passive, on 2 cores at load 5)
    env: dict[str, Any] = {"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
                                        **_siq_settings()}}
    if address:
        import importlib

        # paths, not module objects: a Ray Client (ray://) driver must pickle its runtime env; every package of
        # the project's own that a worker may import goes (a worker on another node has none of them)
        env["py_modules"] = [str(Path(importlib.import_module(m).__file__).parent) for m in RUN_PACKAGES]
    return env


# The project's packages a run's workers import: pipeline and every layer below it in pyproject.toml's layer
# contract (tests/pipeline/test_raystart.py holds the two equal: a package added to the layers and not here
# would be missing on a node that gets the code from the driver only)
RUN_PACKAGES = ("pipeline", "reading", "store", "media", "extractors", "manifests", "rows", "atomicio", "objectio")


def start(address: str | None) -> Any:
    """`ray.init` for a run (a local Ray, or the cluster at `address`); a second attempt waits longer. Returns
    the `ray` module; `RayFailed` when Ray did not come up twice, `cluster.ClusterError` for an unusable address.
    A Ray already initialized in this process (a test's, an earlier run's) is used as it is, except a local one an
    earlier run started under other object-storage settings (AWS_ENDPOINT_URL, credentials) or other SIQ_*
    settings: that one is started again, so the workers have the settings the driver has now."""
    global _session, _ours
    import ray

    from objectio.paths import settings_key

    changed = _changed_since(_ours, settings_key()) if not address and ray.is_initialized() else None
    if changed and _ours is not None and _ours[0] is _node(ray):
        log.info("%s changed since this process started its Ray: starting it again, so that its workers have them",
                 changed)
        if _session is None or _session.node is not _ours[0]:
            _session = _Session(ray, None)  # for `shutdown` to end its processes
        shutdown()
    if not ray.is_initialized():
        if not sys.stderr.isatty():  # a log file or a pipe: the workers' lines without Ray's colour codes
            os.environ.setdefault("RAY_COLOR_PREFIX", "0")
        env = runtime_env(address)
        if address:
            cluster.prepare_auth(address)
        for attempt in (1, 2):
            before = _child_pids()
            try:
                with _longer_waits(attempt == 2):
                    _init(ray, address, env)
                break
            except Exception as e:  # Ray raises plain Exception, ConnectionError, RuntimeError, TimeoutError…
                first = _first_line(e)
                _clean_failed_start(ray, before)
                if attempt == 2:
                    where = f"at {address}" if address else "on this machine"
                    raise RayFailed(f"Ray did not start {where}, twice (the second time waiting up to "
                                    f"{RETRY_WAIT_S} s): {first}", START_HINT) from e
                log.warning("Ray did not start (%s): trying once more, waiting up to %d s", first, RETRY_WAIT_S)
        stop.reinstall()  # ray.init sets its own SIGTERM handler
        _ours = None if address or _node(ray) is None else (_node(ray), settings_key(), _siq_settings())
    _session = _Session(ray, address)
    supervise.note_ray({name: proc.pid for name, proc in _session.watched.items()})
    return ray


def _changed_since(ours: tuple[Any, str, dict[str, str]] | None, storage_key: str) -> str | None:
    """What of the workers' settings differs now from when this process started its Ray (None: nothing, or no
    Ray of ours): the object-storage settings (named by kind only: they hold secrets), the SIQ_* ones by name."""
    if ours is None:
        return None
    siq = _siq_settings()
    what = ["the object-storage settings (AWS_*, GOOGLE_*, AZURE_* variables)"] if ours[1] != storage_key else []
    if names := sorted(k for k in ours[2].keys() | siq.keys() if ours[2].get(k) != siq.get(k)):
        what.append(f"the SIQ_* settings ({', '.join(names)})")
    return " and ".join(what) or None


def _node(ray: Any) -> Any:
    """The process's Ray node (None when there is none, or it is a cluster's)."""
    return getattr(ray._private.worker, "_global_node", None)


def _init(ray: Any, address: str | None, env: dict[str, Any]) -> None:
    if address:
        ray.init(address=address, runtime_env=env, logging_level=logging.WARNING)
    else:
        # "local", not None: with None Ray joins whatever `ray start` left recorded on this machine
        # the cores this process may use (cgroup quota, affinity), not the host's: the policy plans its slots and
        # actors from what Ray advertises
        ray.init(address="local", num_cpus=cluster.usable_cpus(), include_dashboard=False, runtime_env=env,
                 logging_level=logging.WARNING, log_to_driver=True)


@contextmanager
def _longer_waits(longer: bool) -> Iterator[None]:
    """Ray's start-up waits, made `RETRY_WAIT_S` long. The GCS's has a setting; the raylet's 30 s is fixed in
    `Node.__init__`, which polls `ray._private.services.get_node` until then: that function is wrapped to keep
    asking for longer before it gives its RuntimeError (tests/pipeline/test_raystart.py checks Ray still does so)."""
    if not longer:
        yield
        return
    from ray._private import services

    real = services.get_node
    deadline = time.monotonic() + RETRY_WAIT_S

    def patient_get_node(*args: Any, **kwargs: Any) -> Any:
        while True:
            try:
                return real(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    user_set = GCS_WAIT_ENV in os.environ
    if not user_set:
        os.environ[GCS_WAIT_ENV] = str(RETRY_WAIT_S)
    services.get_node = patient_get_node
    try:
        yield
    finally:
        services.get_node = real
        if not user_set:
            os.environ.pop(GCS_WAIT_ENV, None)


def _clean_failed_start(ray: Any, before: set[int]) -> None:
    """A failed `ray.init` may leave a half-started node (a GCS, a raylet) running: end it before trying again,
    so the second attempt does not compete with the first's leftovers."""
    try:
        ray.shutdown()
    except Exception as e:  # noqa: BLE001 - cleaning up after a failure: report, go on
        log.debug("ray.shutdown after a failed start: %s", e)
    import psutil

    try:
        left = [p for p in psutil.Process().children() if p.pid not in before and _is_ray_process(p)]
        left += [d for p in left for d in _descendants(p)]
    except psutil.Error:
        return
    _end(left)


def check() -> None:
    """The run's checkpoint between two Ray calls: raise `stop.Stopped` if a signal came during a deferred block,
    `RayFailed` when this run's Ray is gone (its raylet or GCS ended; a cluster no longer answers). Cheap (a
    `poll()` of two child processes; a cluster is asked every `REMOTE_PROBE_S`)."""
    stop.check()
    if _session is not None and _session.current():
        _session.check()


def lost() -> str | None:
    """What ended this run's Ray, in `RayFailed`'s words, or None while it is alive (or there is none)."""
    if _session is None or not _session.current():
        return None
    try:
        _session.check()
    except RayFailed as e:
        return e.what
    return None


def shutdown() -> None:
    """`ray.shutdown()`, then end whatever of this run's local Ray is still alive (and reap it). On a cluster the
    job's actors end with the driver's connection (Ray's own rule for actors that are not detached; the run
    starts none that are)."""
    global _session
    ray = sys.modules.get("ray")
    session, _session = _session, None
    if ray is not None:
        local = session is not None and not session.address and session.current()
        tree = session.processes() if local else []
        ray.shutdown()  # also half started: safe either way
        if local:
            pids = {p.pid for p in tree}
            tree += [p for p in session.processes() if p.pid not in pids]  # orphaned by ray.shutdown itself
            _end(tree)
    _become_subreaper(False)


def kill_now() -> None:
    """SIGKILL every process of this run's local Ray, waiting for nothing (a second signal: the driver exits at
    once, and its Ray must not outlive it)."""
    if _session is not None and not _session.address:
        for p in _session.processes():
            try:
                p.kill()
            except Exception:  # noqa: BLE001, S112 - gone already, or not ours any more
                continue


def _end(procs: list[Any]) -> None:
    """SIGTERM, `END_GRACE_S`, SIGKILL; waiting on a process also reaps it when it is the driver's child."""
    import psutil

    alive = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                p.terminate()
            alive.append(p)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(alive, timeout=END_GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(alive, timeout=END_GRACE_S)
    if procs:
        log.debug("ended %d process(es) left of this run's Ray%s", len(procs),
                  f"; {len(alive)} would not end: " + ", ".join(str(p.pid) for p in alive) if alive else "")


def _descendants(p: Any) -> list[Any]:
    import psutil

    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []


def _is_ray_process(p: Any) -> bool:
    """A process of Ray's: its workers name themselves `ray::…`; its other processes run from Ray's package."""
    import psutil
    import ray

    package = str(Path(ray.__file__).parent)
    try:
        args = p.cmdline()
    except psutil.Error:
        return False
    return bool(args) and (args[0].startswith("ray::") or any(package in a for a in args))


def _child_pids() -> set[int]:
    import psutil

    try:
        return {p.pid for p in psutil.Process().children()}
    except psutil.Error:
        return set()


def adopt_orphans() -> None:
    """Make this process (the command line's driver) the child subreaper of everything it starts, until
    `shutdown`: a worker whose raylet died stays where `shutdown` finds it. Only for a process that is the run
    (the CLI): a library caller's process (a test runner) is left as it is."""
    _become_subreaper(True)


def _become_subreaper(on: bool) -> None:
    """Orphans of this process's descendants become its children, not init's (Linux; elsewhere nothing
    changes)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)
    except (OSError, AttributeError) as e:
        log.debug("prctl(PR_SET_CHILD_SUBREAPER): %s", e)


def _probe_cluster() -> str | None:
    """None when the cluster's GCS answers and this driver's node is alive, else what is wrong."""
    import ray

    try:
        nodes = ray._private.state.state.node_table()
    except Exception as e:  # noqa: BLE001 - whatever the GCS client raises, the cluster did not answer
        return f"does not answer ({_first_line(e)})"
    me = ray.get_runtime_context().get_node_id()
    if not any(n.get("NodeID") == me and n.get("Alive") for n in nodes):
        return "reports this driver's node as dead"
    return None


def _ended(proc: Any) -> int | None:
    """The exit code of a watched process that ended (negative: the signal), None while it runs. It is left
    unreaped (WNOWAIT): should Ray end the driver before the driver can report it (a dead raylet), the command
    line's parent inherits it and reads how it ended (pipeline/supervise.py); `shutdown` reaps it."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, AttributeError):  # not this process's child (or no waitid): as Popen sees it
        return proc.poll()
    if info is None:
        return None
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
