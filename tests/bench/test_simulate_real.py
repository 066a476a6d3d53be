"""bench.simulate held against real runs on this machine (issue 52): fed the report of a small extraction, it
predicts the extraction window (first decode to last commit) of another, twice the clips and 1.5x their length,
within 20 %. Two real runs (frames on DenseNet161 with random weights, acoustic), one local Ray for both.

Both runs follow a smaller one in the same Ray (a fresh Ray's first run starts its worker processes and fills
the OS's caches: a start neither measured run has). The prediction takes everything from the small run's report
(`Costs.from_report(..., uncontended=False)`): each stage's cost per call, per unit and an actor's first-call
warm-up, fitted on its calls' wall-clock seconds (`per_call`); its clips' sizes; the start as measured. This
machine is shared (8 other processes here), so the projection is onto it as it was loaded during the small run:
the wall-clock seconds carry that load, and a CPU-seconds model (the default, for another node) cannot, as the
other users' threads slow a 2-thread DenseNet call by more than the cores they use (its CPU-s per frame moved
0.24-0.82 within one run). Other users' load moves a window 2-4x within minutes here at the same cores used (one
big run took 107 s against 46 s a minute before): the assertion holds on a quiet machine only (other users under
`QUIET_CORES` in both runs, from the reports' own CPU samples), and the test skips with its figures otherwise.
docs/scale.md has the pairs measured."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.simulate import Costs, simulate, window_s
from pipeline.config import RunConfig
from pipeline.run import run_extract
from testing.scale_raw import make_raw

pytestmark = [pytest.mark.slow, pytest.mark.prediction]
ROOT = str(Path(__file__).parents[2])
# calls of one clip each (frames_per_batch 8) and forwards of 4 frames: several calls a run, so that a call's
# cost comes apart from the first one's warm-up, and one forward shape in both runs (a new shape warms up again)
CONFIG = {"dataset": "socialiq", "layout": "siq2", "frames_per_batch": 8, "features": {
    "frames": {"extractor": "densenet161", "weights": "random", "batch_size": 4}, "acoustic": {"extractor": "covarep"}}}
SMALL, BIG = (2, 8), (4, 12)  # clips, seconds each
QUIET_CORES = 0.25  # other users' cores (the machine's CPU less the run's) under which the machine is the run's
WARM = (1, 4)  # a run before both: a fresh Ray's first run starts its workers and fills the OS's caches


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, int]:
    import ray

    from pipeline import cluster

    cache = tmp_path_factory.mktemp("clips")
    raws = [make_raw(cache, n, s, sizes=[(320, 180)], fps=["30"]) for n, s in (WARM, SMALL, BIG)]
    cpus = cluster.usable_cpus()
    ray.shutdown()
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "SIQ_CALIBRATE": "0"}})
    try:
        reports = []
        for raw, name in zip(raws, ("warm", "small", "big"), strict=True):
            out = tmp_path_factory.mktemp(name) / "s.zarr"
            report = run_extract("socialiq", raw, out, RunConfig.model_validate(CONFIG))
            assert report.exit_code == 0, report.summary()
            reports.append(json.loads(next((out / "_runs").glob("*.json")).read_text()))
    finally:
        ray.shutdown()
    return reports[1], reports[2], cpus


def others_cores(report: dict) -> float:
    """Cores other users kept busy during a run: the machine's busy core-seconds less the run's own, over its
    window (pipeline/cpuload.py's samples in `utilisation.run.whole`)."""
    run = report["utilisation"]["run"]
    return max(0.0, run["whole"]["machine_cpu_s"] - run["whole"]["run_cpu_s"]) / run["seconds"]


def predict(report: dict, cpus: int) -> float:
    """The big run's window from the small run's report: its calls' wall-clock seconds as measured (this
    machine as loaded then), its clips at the big run's length, the big run's clips."""
    config = RunConfig.model_validate(CONFIG)
    costs = Costs.from_report(report, uncontended=False, gpu_features=set())
    costs.scale_to(float(BIG[1]), {s.name: s.extractor.input_kind for s in config.specs()})
    return simulate(costs, config, cpus=cpus, gpus=0, clips=BIG[0])["window_s"]


def test_the_small_run_predicts_the_big_one(runs: tuple[dict, dict, int]) -> None:
    small, big, cpus = runs
    measured, predicted = window_s(big), predict(small, cpus)
    line = (f"window of the big run: measured {measured:.1f} s, predicted {predicted:.1f} s "
            f"({100 * (predicted / measured - 1):+.0f} %; the small run's {window_s(small):.1f} s; other users "
            f"{others_cores(small):.2f} cores in the small run, {others_cores(big):.2f} in the big one)")
    print("\n" + line)
    if max(others_cores(small), others_cores(big)) > QUIET_CORES:
        # other users' threads slow DenseNet's 2-thread calls by 2-4x from one minute to the next at the same
        # cores used (docs/scale.md: -50 % to +17 % under load): what is measured then is the machine, not the model
        pytest.skip(f"the machine was not quiet (other users above {QUIET_CORES} cores): {line}")
    assert predicted == pytest.approx(measured, rel=0.2)
