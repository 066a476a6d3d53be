"""bench.simulate held against real runs on this machine (issue 52): fed the report of a small extraction and the
CPU other users took during a bigger one, it predicts the bigger one's extraction window (first decode to last
commit), 4 clips of 8 s from 3 of 4 s, within 20 %. Two real runs (frames on DenseNet161 with random weights,
acoustic), one local Ray for both: ~37 s on 2 quiet cores. `make test` runs it alone, after the parallel suite
(Makefile): beside other work its runs slow down unevenly, and the model takes other users as an average.

Before them each of Ray's worker processes imports what a decode task needs (`warm_workers`): a fresh Ray's first
decode otherwise waits 2-3 s for that after the actors began loading, a start the big run does not have (a whole
1-clip run before them did the same, for ten times the cost). The small run has 3 clips, one more than the acoustic actors (2 on 2
cores), so that a call after an actor's first one tells its cost apart from the first one's warm-up (with 2 clips
every acoustic call was a first one: the later ones predicted at twice what they took).

The prediction takes the costs from the small run's report only (`Costs.from_report`: each CPU call's work at
full speed, its CPU seconds over its threads, fitted per stage as per call, per unit and an actor's first-call
warm-up; its clips' sizes; each feature's actor start as CPU work, `Costs.fit_starts`, fitted on the small run as
loaded then, so that it slows with what runs beside it), and from the big run's report only the machine it ran on: the cores other users kept busy meanwhile (its machine's busy
core-seconds less its process tree's, `utilisation.run.whole`), given to `simulate` as `others_cores`. A
machine with another job on it is a machine with fewer free cores; the big run's own calls are not used.

DenseNet runs on one torch thread (`model_threads = 1`): a call of two threads beside other users' busy threads
spends 5-7x its CPU seconds (its threads spin waiting on each other: 12 frames 15-22 CPU-s against 2.8-3.4 quiet),
which the simulator does not model; a call of one keeps its CPU seconds under load (docs/scale.md).
docs/scale.md has the pairs measured."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.simulate import Costs, report_threads, simulate, window_s
from pipeline.config import RunConfig
from pipeline.run import run_extract
from testing.scale_raw import make_raw

pytestmark = [pytest.mark.slow, pytest.mark.prediction]
ROOT = str(Path(__file__).parents[2])
# calls of up to 8 frames (frames_per_batch 8: two 4-s clips, or one 8-s clip) and forwards of 4 frames: several
# calls a run, so that a call's cost comes apart from the first one's warm-up, and one forward shape in both runs
# (a new shape warms up again)
CONFIG = {"dataset": "socialiq", "layout": "siq2", "frames_per_batch": 8, "model_threads": 1, "features": {
    "frames": {"extractor": "densenet161", "weights": "random", "batch_size": 4}, "acoustic": {"extractor": "covarep"}}}
SMALL, BIG = (3, 4), (4, 8)  # clips, seconds each: both multiples of the forwards' 4 frames


def warm_workers(ray, cpus: int) -> None:
    """Each of Ray's worker processes (one a CPU) imports the decode tasks' modules, as a run before would."""
    @ray.remote(num_cpus=1)
    def imports() -> int:
        import av  # noqa: F401  (the decoders; imported on a decode's first use)

        import pipeline.actors  # noqa: F401
        return os.getpid()

    ray.get([imports.remote() for _ in range(cpus)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, int]:
    import ray

    from pipeline import cluster

    cache = tmp_path_factory.mktemp("clips")
    raws = [make_raw(cache, n, s, sizes=[(320, 180)], fps=["30"]) for n, s in (SMALL, BIG)]
    cpus = cluster.usable_cpus()
    ray.shutdown()
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "SIQ_CALIBRATE": "0"}})
    try:
        warm_workers(ray, cpus)
        reports = []
        for raw, name in zip(raws, ("small", "big"), strict=True):
            out = tmp_path_factory.mktemp(name) / "s.zarr"
            report = run_extract("socialiq", raw, out, RunConfig.model_validate(CONFIG))
            assert report.exit_code == 0, report.summary()
            reports.append(json.loads(next((out / "_runs").glob("*.json")).read_text()))
    finally:
        ray.shutdown()
    return reports[0], reports[1], cpus


def others_cores(report: dict) -> float:
    """Cores other users kept busy during a run: the machine's busy core-seconds less the run's own, over its
    window (pipeline/cpuload.py's samples in `utilisation.run.whole`)."""
    run = report["utilisation"]["run"]
    return max(0.0, run["whole"]["machine_cpu_s"] - run["whole"]["run_cpu_s"]) / run["seconds"]


def predict(report: dict, cpus: int, others: float, contended: bool = False) -> float:
    """The big run's window from the small run's report (its calls' CPU seconds, its clips at the big run's length,
    the big run's clips) on this machine with `others` cores taken by other users. `contended`: the model before
    (each call's wall-clock seconds as measured, the machine as loaded during the small run, whatever the big
    run's), printed beside it."""
    config = RunConfig.model_validate(CONFIG)
    costs = Costs.from_report(report, uncontended=not contended, gpu_features=set(),
                              threads=report_threads(report, config))
    if not contended:  # the actors' start as work, fitted on the small run as loaded then (its own other users)
        costs.fit_starts(config, cpus, SMALL[0])
    costs.scale_to(float(BIG[1]), {s.name: s.extractor.input_kind for s in config.specs()})
    return simulate(costs, config, cpus=cpus, gpus=0, clips=BIG[0], others_cores=0.0 if contended else others)["window_s"]


def test_the_small_run_predicts_the_big_one(runs: tuple[dict, dict, int]) -> None:
    small, big, cpus = runs
    if "whole" not in big["utilisation"]["run"]:
        pytest.skip("no CPU samples in the run report (pipeline/cpuload.py reads /proc): other users unknown")
    others = others_cores(big)
    measured, predicted = window_s(big), predict(small, cpus, others)
    old = predict(small, cpus, others, contended=True)
    line = (f"window of the big run: measured {measured:.1f} s, predicted {predicted:.1f} s "
            f"({100 * (predicted / measured - 1):+.0f} %; the contended model {old:.1f} s, "
            f"{100 * (old / measured - 1):+.0f} %; the small run's {window_s(small):.1f} s; other users "
            f"{others_cores(small):.2f} cores in the small run, {others:.2f} in the big one)")
    print("\n" + line)
    assert predicted == pytest.approx(measured, rel=0.2), line
