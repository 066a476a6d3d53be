"""bench.simulate held against real runs on this machine (issue 52): fed the report of a small extraction, it
should predict the extraction window (first decode to last commit) of another, twice the clips and 1.5x their
length, within 20 %. Two real runs (frames on DenseNet161 with random weights, acoustic), one local Ray for both.
It does not yet (the xfail says why): the harness stays so that the model's next step is measured here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.simulate import Costs, simulate, window_s
from pipeline.config import RunConfig
from pipeline.run import run_extract
from testing.scale_raw import make_raw

# Two real runs take ~110 s of a 2-core suite for a check that does not hold yet, and whose measured window moves
# by up to 4x with the machine's load (a strict xfail could pass by chance): run it on purpose.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    os.environ.get("SIQ_TEST_PREDICTION") != "1",
    reason="the simulator's real-run prediction (issue 52) does not hold yet; SIQ_TEST_PREDICTION=1 runs it")]
ROOT = str(Path(__file__).parents[2])
CONFIG = {"dataset": "socialiq", "layout": "siq2", "features": {
    "frames": {"extractor": "densenet161", "weights": "random"}, "acoustic": {"extractor": "covarep"}}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, int]:
    import ray

    from pipeline import cluster

    cache = tmp_path_factory.mktemp("clips")
    small = make_raw(cache, 3, 8, sizes=[(320, 180)], fps=["30"])
    big = make_raw(cache, 6, 12, sizes=[(320, 180)], fps=["30"])
    cpus = cluster.usable_cpus()
    ray.shutdown()
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path, "SIQ_CALIBRATE": "0"}})
    try:
        reports = []
        for raw, name in ((small, "small"), (big, "big")):
            out = tmp_path_factory.mktemp(name) / "s.zarr"
            report = run_extract("socialiq", raw, out, RunConfig.model_validate(CONFIG))
            assert report.exit_code == 0, report.summary()
            reports.append(json.loads(next((out / "_runs").glob("*.json")).read_text()))
    finally:
        ray.shutdown()
    return reports[0], reports[1], cpus


def _predict(report: dict, cpus: int, contended: bool) -> float:
    costs = Costs.from_report(report, uncontended=not contended, gpu_features=set())
    config = RunConfig.model_validate(CONFIG)
    costs.scale_to(12.0, {s.name: s.extractor.input_kind for s in config.specs()})
    return simulate(costs, config, cpus=cpus, gpus=0, clips=6)["window_s"]


@pytest.mark.xfail(strict=False, reason=(
    "not yet: a small run's model calls are mostly their fixed per-call and first-call (warm-up) cost, which the "
    "simulator spreads per unit (DenseNet 0.41 s a frame in one 3-clip run, 0.13 in the 6-clip one), and the "
    "actors' start dominates a window this small: predicted 44 s against 16 s measured in one pair of runs and "
    "67 s in another (the old model 45 s). Per-call overhead and warm-up must come apart in the report"))
def test_the_small_run_predicts_the_big_one(runs: tuple[dict, dict, int]) -> None:
    small, big, cpus = runs
    measured = window_s(big)
    predicted = _predict(small, cpus, contended=False)
    print(f"window of the big run: measured {measured:.1f} s, predicted {predicted:.1f} s "
          f"(the old model: {_predict(small, cpus, contended=True):.1f} s)")
    assert predicted == pytest.approx(measured, rel=0.2)
