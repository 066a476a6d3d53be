"""What a run does on machines it could misread (issue 52): every documented `scheduler` builds its policy, a
driver's own Python error is not reported as Ray's failure, a GPU Ray advertises but CUDA cannot use ends the run
in one line, and the CPU count honours the cgroup quota and the affinity mask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline import exitcodes
from pipeline.config import RunConfig, load_config
from pipeline.report import RunReport
from pipeline.runner import Runner

REPO = Path(__file__).resolve().parents[2]


class _FakeActorClass:
    """`ray.remote(ExtractorWorker)` as far as `Runner.start_actors` uses it: nothing starts."""

    def options(self, **_: Any) -> _FakeActorClass:
        return self

    def remote(self, *_: Any) -> Any:
        return SimpleNamespace(ready=SimpleNamespace(remote=lambda: object()))


@pytest.mark.parametrize("policy", typing.get_args(RunConfig.model_fields["scheduler"].annotation))
def test_every_documented_scheduler_builds_its_policy(policy: str) -> None:
    """`scheduler = "fixed"` crashed every run: the runner gave `FixedScheduler` a keyword it did not take."""
    config = load_config("sample", {"scheduler": policy})
    specs = config.specs()
    report = RunReport("r", "sample", "-", {s.name: {} for s in specs})
    runner = Runner(config, specs, None, report)  # type: ignore[arg-type]
    runner.ray, runner.cpus, runner.gpus = SimpleNamespace(remote=lambda cls: _FakeActorClass()), 4, 0
    runner.start_actors({s.name for s in specs})
    assert runner.sched.name == policy
    assert set(runner.sched.pools) == {s.name for s in specs}


# `python -m pipeline extract` as the command line runs it (the parent forks the driver, pipeline/supervise.py),
# with the real `cli._extract` around a faked `run_extract`: it keeps its journal, starts a "raylet" and a "GCS"
# (sleeps), then raises a Python error, or first loses its raylet (SIGKILL) and then raises what Ray would.
# `raystart.shutdown` ends and reaps the "raylet" as the real one ends the run's Ray on the way out.
DRIVER = textwrap.dedent('''
    import os, subprocess, sys, time
    from pipeline import cli, raystart, run, supervise
    from pipeline.report import RunReport

    ray = {}

    def fake_run_extract(dataset, raw, out, config, **kw):
        ray["raylet"] = raylet = subprocess.Popen(["sleep", "60"])
        ray["gcs_server"] = gcs = subprocess.Popen(["sleep", "60"])
        print(f"DRIVER raylet={raylet.pid}", flush=True)
        report = RunReport("20261127T120000Z-abcdef", dataset, str(out),
                           {"qa": {"done": 0, "skipped": 0, "failed": 0, "n/a": 0}}, planned={"qa": 3})
        supervise.note_ray({"raylet": raylet.pid, "gcs_server": gcs.pid})
        supervise.note(report, "extraction")
        if os.environ["DRIVER_END"] == "ray":
            raylet.kill()
            raylet.wait()
            raise RuntimeError("Failed to connect to the raylet")
        raise RuntimeError("faces: no model actor could start: ActorDiedError: boom")

    def lost():
        raylet = ray["raylet"]
        return None if raylet.poll() is None else f"this run's Ray raylet (pid {raylet.pid}) ended"

    def shutdown():
        for p in ray.values():
            p.kill()
            p.wait()

    run.run_extract, raystart.lost, raystart.shutdown = fake_run_extract, lost, shutdown
    sys.exit(cli.main(sys.argv[1:], supervised=True))
''')


@pytest.mark.parametrize("end", ["traceback", "ray"])
def test_a_driver_s_python_error_is_not_reported_as_ray_s_failure(tmp_path: Path, end: str) -> None:
    """A Python error ends the driver after it ended its own Ray (cli.py): the parent found the raylet gone and
    said "RAY FAILED … something outside this run ended it", exit 7. Ray lost first stays Ray's failure."""
    (tmp_path / "cmd.py").write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(tmp_path / "cmd.py"), "extract", "--dataset", "socialiq", "--raw",
                           str(tmp_path / "raw"), "--out", str(tmp_path / "s.zarr")], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), "DRIVER_END": end}, capture_output=True,
                          text=True, timeout=120)
    text = proc.stdout + proc.stderr
    summary = proc.stdout.splitlines()[-1]
    report = json.loads(next((tmp_path / "s.zarr" / "_runs").glob("*.json")).read_text())
    if end == "traceback":
        assert proc.returncode == exitcodes.INTERNAL, text
        assert "RAY FAILED" not in text and report["ray_failed"] is None, text
        assert summary.startswith("  ENDED during extraction: the run's driver (pid ") and (
            "ended on RuntimeError: faces: no model actor could start: ActorDiedError: boom (exit code 1)"
            in summary), text
        assert "Traceback (most recent call last)" in proc.stderr  # the bug's own traceback is kept
    else:
        assert proc.returncode == exitcodes.RAY, text
        assert summary.startswith("  RAY FAILED during extraction: this run's Ray raylet (pid "), text


def _cgroup(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp_path / "self.cgroup").write_text(proc)
    return root, tmp_path / "self.cgroup"


@pytest.mark.parametrize(("proc", "files", "cores"), [
    # cgroup v2, `docker --cpus 2.5` on the container's cgroup, none on its parent: 2 cores
    ("0::/docker/abc\n", {"docker/abc/cpu.max": "250000 100000\n", "docker/cpu.max": "max 100000\n"}, 2),
    # a tighter quota on an ancestor binds (a Kubernetes pod's limit above its container's)
    ("0::/pod/ctr\n", {"pod/ctr/cpu.max": "800000 100000\n", "pod/cpu.max": "300000 100000\n"}, 3),
    # inside a cgroup namespace the path is "/": the root's own file
    ("0::/\n", {"cpu.max": "400000 100000\n"}, 4),
    # cgroup v1 (hybrid: the cpu controller in its own hierarchy)
    ("4:memory:/x\n2:cpu,cpuacct:/x\n0::/\n", {"cpu,cpuacct/x/cpu.cfs_quota_us": "150000\n",
                                                "cpu,cpuacct/x/cpu.cfs_period_us": "100000\n"}, 1),
    ("1:cpu:/\n0::/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 6),  # no quota
    ("0::/\n", {"cpu.max": "max 100000\n"}, 6),
])
def test_the_cpu_count_honours_the_cgroup_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: str,
                                                files: dict[str, str], cores: int) -> None:
    from pipeline import cluster

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(6)))  # taskset -c 0-5 on a bigger host
    assert cluster.usable_cpus(*_cgroup(tmp_path, proc, files)) == cores


def test_the_local_ray_gets_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ray.init(num_cpus=os.cpu_count())` advertised the host's cores; the policy plans slots and actors from
    Ray's count. Here: a 64-core host, this process pinned to 3 of them."""
    from pipeline import raystart

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    got: dict[str, Any] = {}
    raystart._init(SimpleNamespace(init=lambda **kw: got.update(kw)), None, {})
    assert got["num_cpus"] == 3


@pytest.mark.slow
def test_a_gpu_ray_advertises_but_cuda_cannot_use_ends_the_run_in_one_line(tiny_root: Path, tmp_path: Path) -> None:
    """A logical `--num-gpus=1` on this CPU-only machine: every GPU actor failed ("Found no NVIDIA driver"), was
    started once more, and the run ended in `RuntimeError: frames: no model actor could start` with a traceback
    (exit 1). Now: `GpuUnusable` (a ValueError: the CLI prints its one line, exit 2) naming the node and CUDA's
    error, at the first actor."""
    import ray

    from pipeline.actors import GpuUnusable
    from pipeline.run import run_extract

    if __import__("torch").cuda.is_available():
        pytest.skip("this machine's GPU works: nothing to fake")
    ray.shutdown()
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "SIQ_CALIBRATE": "0"}})
    try:
        config = RunConfig.model_validate({"layout": "siq2", "features": {
            "frames": {"extractor": "densenet161", "weights": "random"}}})
        with pytest.raises(GpuUnusable) as got:
            run_extract("tiny", tiny_root, tmp_path / "s.zarr", config, only=["frames"])
    finally:
        ray.shutdown()
    message = str(got.value)
    assert "\n" not in message and issubclass(GpuUnusable, ValueError)  # cli: one line, exit code 2
    assert message.startswith("frames: node ") and "Ray advertises GPU 0 but CUDA cannot use it: " in message
    assert "NVIDIA driver" in message or "CUDA" in message, message
