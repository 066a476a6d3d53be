"""bench.simulate replays the H100 run's costs (tests/data/h100-run-report.json: that run's report, its
`stages` and cluster only; ../shared/gpu-run has the rest) through the real policies: it must reproduce what the
fixed policy did on that node, and the balanced policy must land near the resource bound. A policy change that
serialises a big machine again fails here, on CPU, without a GPU."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.simulate import Costs, simulate
from pipeline.config import load_config

REPORT = Path(__file__).parents[1] / "data" / "h100-run-report.json"


@pytest.fixture(scope="module")
def costs() -> Costs:
    return Costs.from_report(json.loads(REPORT.read_text()))


def test_the_costs_are_the_reports(costs: Costs) -> None:
    # the per-clip figures: decode 1.55 + 0.07 CPU-s, acoustic 1.68, MTCNN 0.19, DenseNet 0.08
    assert costs.decode_s * costs.decode_cores == pytest.approx(1.61, abs=0.02)
    assert costs.model_s["acoustic"] == pytest.approx(1.676, abs=0.01)
    assert costs.model_s["faces"] == pytest.approx(0.191, abs=0.005)
    assert costs.model_s["frames"] == pytest.approx(0.081, abs=0.005)
    assert costs.units["faces"] == pytest.approx(60.0)
    assert 28 < costs.actors_start_s < 34  # models loaded ~32 s into the run


def test_the_fixed_policy_reproduces_the_h100_run(costs: Costs) -> None:
    """What ran there: 168 clips in the first 400 s (0.42 clips/s), max_inflight_items = items_per_batch = 8."""
    config = load_config("socialiq", {"scheduler": "fixed", "max_inflight_items": 8, "items_per_batch": 8})
    out = simulate(costs, config, cpus=16, gpus=1, clips=500, until=400)
    assert out["until"]["clips_per_s"] == pytest.approx(0.42, rel=0.2)
    assert out["wall_over_bound"] > 5  # ~12x off its resource bound, as measured


def test_the_balanced_policy_is_bound_by_the_hardware(costs: Costs) -> None:
    out = simulate(costs, load_config("socialiq"), cpus=16, gpus=1, clips=1250)
    assert out["wall_over_bound"] <= 1.15
    steady = out["utilisation"]["steady"]["busy"]
    assert out["utilisation"]["binding"] == "cpu" and steady["cpu"] >= 0.95
    # every acoustic actor worked: the pool is not one actor with seven idle beside it
    assert steady["actors acoustic"] > 0.3


def test_more_cores_move_the_bound_to_the_gpu_actor(costs: Costs) -> None:
    """64 cores: MTCNN's one actor (0.19 s a clip) binds, and the run follows it."""
    out = simulate(costs, load_config("socialiq"), cpus=64, gpus=1, clips=1250)
    assert max(out["bound"], key=out["bound"].get) == "actors faces"
    assert out["wall_over_bound"] <= 1.2
    assert out["utilisation"]["binding"] == "actors faces"


def test_calls_sharing_a_gpu_slow_each_other_down(costs: Costs) -> None:
    """With the GPU busy for all of every GPU call, more actors on it cannot beat the GPU's own work: the wall
    follows the `gpu` bound, not the (smaller) per-pool bounds that pretend each actor has a GPU of its own."""
    config = load_config("socialiq", {"actors_per_gpu": {"faces": 3, "frames": 2}})
    alone = simulate(costs, config, cpus=64, gpus=1, clips=300)
    shared = Costs.from_report(json.loads(REPORT.read_text()))
    shared.spread_gpu_busy(busy_s=1e9, items=1, gpu_features=["faces", "frames", "qa", "transcript"])
    assert all(f == 1.0 for f in shared.gpu_fraction.values())
    out = simulate(shared, config, cpus=64, gpus=1, clips=300)
    gpu_work = 300 * sum(shared.model_s[f] for f in ("faces", "frames", "qa", "transcript"))
    assert out["bound"]["gpu"] == pytest.approx(gpu_work, abs=0.1)
    assert out["wall_s"] >= gpu_work > alone["wall_s"] + 20


def test_a_stage_moved_elsewhere_takes_its_new_cost(costs: Costs) -> None:
    moved = Costs.from_report(json.loads(REPORT.read_text()))
    moved.override("decode:frames", 0.1, cores=1.0)
    assert moved.decode_s == pytest.approx(0.1 + costs.decodes["audio"][0] + costs.decodes["qa"][0]
                                           + costs.decodes["transcript"][0], rel=1e-6)
    moved.override("model:acoustic", 0.2)
    out = simulate(moved, load_config("socialiq"), cpus=16, gpus=1, clips=600)
    base = simulate(costs, load_config("socialiq"), cpus=16, gpus=1, clips=600)
    assert out["bound"]["cpu"] < 0.4 * base["bound"]["cpu"]
    with pytest.raises(ValueError, match="not a stage"):
        moved.override("model:nonesuch", 1.0)


def test_acoustic_on_the_gpu_is_a_gpu_actor_at_the_cost_given(costs: Costs) -> None:
    """`--set features.acoustic.backend='"torch"'` lays acoustic out as GPU actors (actor_plan, `wants_gpu`),
    `--cost` gives the stage that backend's per-clip cost; its CPU share stays in the CPU bound."""
    config = load_config("socialiq", {"features.acoustic.backend": "torch", "actors_per_gpu": {"acoustic": 16}})
    assert config.features["acoustic"].backend == "torch" and config.features["frames"].extractor == "densenet161"
    gpu = Costs.from_report(json.loads(REPORT.read_text()))
    gpu.override("model:acoustic", 0.8, cores=0.95, gpu=0.04)
    out = simulate(gpu, config, cpus=16, gpus=1, clips=200)
    assert out["bound"]["actors acoustic"] == pytest.approx(200 * 0.8 / 16)
    cpu = simulate(costs, load_config("socialiq"), cpus=16, gpus=1, clips=200)
    assert "actors acoustic" not in cpu["bound"]
    moved = 200 * (costs.model_s["acoustic"] * costs.model_cores["acoustic"] - 0.8 * 0.95) / 16
    assert cpu["bound"]["cpu"] - out["bound"]["cpu"] == pytest.approx(moved, abs=0.1)


def test_frames_decoded_on_the_gpu_follow_the_run_s_routing(costs: Costs) -> None:
    """`--nvdec`: the scheduler's own routing sends a clip to the shared frames actors' video engines while few
    routed clips wait to be decoded there, else to a CPU decode task; a routed clip costs the CPU only its plan."""
    from bench.simulate import Nvdec

    nv = Costs.from_report(json.loads(REPORT.read_text()))
    nv.nvdec = Nvdec(0.7, engines=7)
    every = simulate(nv, load_config("socialiq", {"actors_per_gpu": {"faces": 7}, "gpu_decode_queue": 10**6}),
                     cpus=16, gpus=1, clips=200)
    assert every["bound"]["nvdec"] == pytest.approx(200 * 0.7 / 7)  # every clip on the engines, once each
    frames_cpu = costs.decodes["frames"][0] * costs.decodes["frames"][1]
    plain = simulate(costs, load_config("socialiq", {"actors_per_gpu": {"faces": 7}}), cpus=16, gpus=1, clips=200)
    assert "nvdec" not in plain["bound"]  # without --nvdec the report's CPU decoder, as measured
    moved = 200 * (frames_cpu - 0.06 - 0.7 * 0.25) / 16
    assert plain["bound"]["cpu"] - every["bound"]["cpu"] == pytest.approx(moved, rel=0.05)
    few = simulate(nv, load_config("socialiq", {"actors_per_gpu": {"faces": 7}, "gpu_decode_queue": 2}),
                   cpus=16, gpus=1, clips=200)
    assert 0 < few["bound"]["nvdec"] < every["bound"]["nvdec"]  # the overflow went to the CPU
    assert few["bound"]["cpu"] > every["bound"]["cpu"]


def test_the_start_given_on_the_command_line_moves_the_run(capsys) -> None:
    """`--actors-start-s`: the model actors' start as measured elsewhere (bench/actor_start.py); the steady part of
    the run stays as it was, so the wall moves with it (a small run: the start is most of it)."""
    from bench.simulate import main

    def wall(*extra: str) -> float:
        main(["--costs", str(REPORT), "--cpus", "16", "--gpus", "1", "--clips", "40", "--json", *extra])
        return json.loads(capsys.readouterr().out)["wall_s"]

    measured = wall()
    assert wall("--actors-start-s", "22") == pytest.approx(measured - 10, abs=1.5)
    assert wall("--ray-start-s", "3", "--actors-start-s", "22") == pytest.approx(measured - 10, abs=1.5)
    with pytest.raises(SystemExit, match="before Ray is up"):
        main(["--costs", str(REPORT), "--clips", "4", "--ray-start-s", "8", "--actors-start-s", "5"])


def _loaded(report: dict, factor: float, stages: tuple[str, ...]) -> dict:
    """The same work measured on a loaded machine: each call of `stages` took `factor` times as long (its CPU
    seconds are the same: time-sharing stretches a call's wall, not its CPU)."""
    out = json.loads(json.dumps(report))
    for stage in stages:
        out["stages"][stage]["worker_s"] *= factor
    return out


def test_a_loaded_run_projects_the_uncontended_one() -> None:
    """Issue 52: a loaded run's wall-clock costs were replayed as uncontended costs (predicting another run
    within 20 % in 4 of 15 cases). The H100 run's CPU stages measured at half speed project what the run
    itself does; the old model (`contended`) projects it 1.6x slower."""
    report = json.loads(REPORT.read_text())
    cpu_stages = tuple(k for k in report["stages"] if k.startswith("decode:")) + ("model:acoustic",)
    loaded = _loaded(report, 2.0, cpu_stages)
    gpu = {"faces", "frames", "qa", "transcript"}
    config = load_config("socialiq")
    base = simulate(Costs.from_report(report, gpu_features=gpu), config, cpus=16, gpus=1, clips=600)
    got = simulate(Costs.from_report(loaded, gpu_features=gpu), config, cpus=16, gpus=1, clips=600)
    old = simulate(Costs.from_report(loaded, uncontended=False), config, cpus=16, gpus=1, clips=600)
    assert got["wall_s"] == pytest.approx(base["wall_s"], rel=0.02)
    assert old["wall_s"] > 1.6 * base["wall_s"]


def test_ray_and_the_actors_start_as_the_report_measured_them() -> None:
    """Ray's start was capped at 7 s (15-83 s on a loaded machine) and every actor was ready at one instant."""
    report = json.loads(REPORT.read_text())
    start = datetime.strptime(report["run_id"][:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    report["utilisation"] = {"ray_start_s": [start + 1, start + 40.0],
                             "actors_ready_s": {"faces": start + 55.0, "frames": start + 48.0, "qa": start + 50.0,
                                                "transcript": start + 50.0, "acoustic": start + 45.0}}
    costs = Costs.from_report(report)
    assert costs.ray_start_s == pytest.approx(40.0)
    assert costs.ready_s["frames"] == pytest.approx(48.0) and costs.actors_start_s == pytest.approx(55.0)
    out = simulate(costs, load_config("socialiq"), cpus=16, gpus=1, clips=40)
    assert out["start_s"] == pytest.approx(40.0)
    assert out["wall_s"] > 55.0 + 40 * costs.model_s["faces"]  # faces' one actor, ready at 55 s, does 40 clips


def test_longer_clips_cost_what_their_length_says() -> None:
    """`--seconds`: the H100 run's 60 s clips projected as 30 s clips: what grows with the length halves."""
    from pipeline.config import load_config as lc

    config = lc("socialiq")
    kinds = {s.name: s.extractor.input_kind for s in config.specs()}
    full = Costs.from_report(json.loads(REPORT.read_text()))
    half = Costs.from_report(json.loads(REPORT.read_text()))
    half.scale_to(full.clip_s / 2, kinds)
    assert half.model_s["acoustic"] == pytest.approx(full.model_s["acoustic"] / 2)
    assert half.units["frames"] == pytest.approx(full.units["frames"] / 2)
    assert half.model_s["qa"] == pytest.approx(full.model_s["qa"])  # six questions a clip, whatever its length
    assert half.decodes["frames"][0] == pytest.approx(full.decodes["frames"][0] / 2)
    a = simulate(full, config, cpus=16, gpus=1, clips=400)["bound"]["cpu"]
    b = simulate(half, config, cpus=16, gpus=1, clips=400)["bound"]["cpu"]
    assert b == pytest.approx(a / 2, rel=0.02)
