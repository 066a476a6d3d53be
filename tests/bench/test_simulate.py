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


@pytest.mark.parametrize("cpus", [1, 2, 3, 4])
def test_the_fixed_policy_leaves_decode_tasks_a_ray_cpu_on_a_small_node(costs: Costs, cpus: int) -> None:
    """Under the fixed policy every actor held a whole Ray CPU: on 2 CPUs + 1 GPU its 5 actors (4 GPU features
    and acoustic) asked for 5 of 2, so Ray could place neither them all nor one decode task, and the run (and the
    simulation, which then finished nothing at the start's 32 s) stood still. Every clip is done, after the
    start, and at least one Ray CPU is left to the decode tasks."""
    from bench.simulate import Simulation
    from pipeline.runner import actor_plan

    config = load_config("socialiq", {"scheduler": "fixed"})
    specs = {s.name: s for s in config.specs()}
    plan = actor_plan(specs, set(specs), config, cpus=cpus, gpus=1)
    held = sum(p.options.get("num_cpus", 0) * p.actors for f, p in plan.items() if p.host in (None, f))
    assert held <= cpus - 1
    sim = Simulation(costs, config, cpus, 1, 12)
    wall = sim.run()
    assert len(sim.done_at) == 12 and wall > costs.actors_start_s + 12 * costs.decode_s / cpus


def test_a_policy_that_stalls_is_an_error_not_a_short_run(costs: Costs, monkeypatch) -> None:
    """A simulation where nothing runs and nothing will start, with clips not done, raises: it does not return
    the last event's time as the run's wall (what hid the fixed policy's stall on a small node)."""
    from bench import simulate as sim_mod

    monkeypatch.setattr(sim_mod.Simulation, "_decode_slots", lambda self: 0)
    with pytest.raises(RuntimeError, match=r"stalled: 0 of 5 clips done"):
        simulate(costs, load_config("socialiq"), cpus=16, gpus=1, clips=5)


def test_a_call_s_work_is_its_cpu_seconds_over_the_cores_it_asks_for() -> None:
    """`call_work`: a one-thread decode that waited half its 10 s for a core did 5 s of work; a two-thread model
    call with 6 CPU-s in 9 s did 3 s; one with 4 CPU-s in 1 s (more threads than it asked for) its 1 s."""
    from bench.simulate import call_work

    def stage(*calls: tuple[float, float, float]) -> dict:
        return {"first_start_s": 0.0, "per_call": {"fields": ["start_s", "seconds", "cpu_s", "units", "items", "first"],
                                                   "rows": [[0.0, d, c, u, 1, 0] for d, c, u in calls]}}

    st = {"decode:audio": stage((10.0, 5.0, 8.0), (4.0, 4.0, 8.0)), "model:frames": stage((9.0, 6.0, 8.0), (1.0, 4.0, 8.0)),
          "model:faces": stage((2.0, 1.0, 8.0))}
    work = call_work(st, {"decode:audio": 1.0, "model:frames": 2.0, "model:faces": 1.0},
                     cpu_stages={"decode:audio", "model:frames"})
    assert [w for w, _, _ in work["decode:audio"]] == pytest.approx([5.0, 4.0])
    assert [w for w, _, _ in work["model:frames"]] == pytest.approx([3.0, 1.0])
    assert "model:faces" not in work  # a GPU stage keeps its measured seconds


def test_a_stage_s_cost_comes_apart_per_call_per_unit_and_warm_up() -> None:
    """`Fit.of`: calls costing 0.5 + 0.25 a unit, an actor's first call 3 s more: all three come back; calls of
    one size give no cost per call (it cannot be told from the per-unit one), only their mean per unit."""
    from bench.simulate import Fit

    calls = [(0.5 + 0.25 * u + (3.0 if first else 0.0), u, first)
             for u, first in [(8, True), (12, True), (8, False), (4, False), (12, False), (16, False)]]
    fit = Fit.of(calls)
    assert (fit.per_call, fit.per_unit, fit.warm) == pytest.approx((0.5, 0.25, 3.0))
    assert fit.seconds(10, first=True) == pytest.approx(6.0)
    same = Fit.of([(4.0, 8, False), (4.4, 8, False)])
    assert (same.per_call, same.warm) == (0.0, 0.0) and same.per_unit == pytest.approx(8.4 / 16)


def test_each_clip_costs_its_own_size_and_each_actor_s_first_call_warms_up() -> None:
    """The per-call model: clips of 30 and 90 s (the report's own, in turn) decode and extract at their own
    sizes, not at the average's; the acoustic actor's first call costs its warm-up more, its later ones not."""
    from bench.simulate import Fit, Simulation

    costs = Costs.from_report(json.loads(REPORT.read_text()))
    costs.clips = [{"frames": 30.0, "audio": 30.0, "qa": 6.0, "transcript": 80.0},
                   {"frames": 90.0, "audio": 90.0, "qa": 6.0, "transcript": 240.0}]
    costs.fits = {"decode:frames": Fit(0.0, 0.02), "decode:audio": Fit(0.0, 0.001), "decode:qa": Fit(0.0, 0.0),
                  "decode:transcript": Fit(0.0, 0.0), "model:acoustic": Fit(0.1, 0.03, warm=2.0)}
    config = load_config("socialiq", {"cpu_actors": 1})
    sim = Simulation(costs, config, 16, 1, 4)
    sim.run()
    decodes = sorted(round(c["end_s"] - c["start_s"], 3) for c in sim.calls["decode:frames"])
    assert decodes == pytest.approx([0.63, 0.63, 1.89, 1.89])
    acoustic = sorted(round(c["end_s"] - c["start_s"], 3) for c in sim.calls["model:acoustic"])
    # 0.1 + 0.03 a second: 1.0 s for a 30 s clip, 2.8 s for a 90 s one; the first (a 30 s clip) 2 s more
    assert acoustic == pytest.approx([1.0, 2.8, 2.8, 3.0])


def test_the_actors_start_as_work_that_slows_with_what_runs_beside_it() -> None:
    """`fit_starts`: each feature's actor start as CPU work, fitted so that the report's own run has its actors
    ready when it measured them; with more clips decoding beside them, or other users, they are ready later
    (the fixed instants, the default, cannot move)."""
    report = json.loads(REPORT.read_text())
    start = datetime.strptime(report["run_id"][:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    report["utilisation"] = {"ray_start_s": [start + 1, start + 10.0], "actors_start_s": start + 10.0,
                             "actors_ready_s": {"faces": start + 30.0, "frames": start + 28.0, "qa": start + 25.0,
                                                "transcript": start + 25.0, "acoustic": start + 20.0}}
    config = load_config("socialiq")
    costs = Costs.from_report(report)
    costs.decode_after_ray_s = 0.0  # decoding from Ray's start, beside the loading actors (the H100 run's was later)
    costs.fit_starts(config, cpus=4, gpus=1, clips=2)
    assert set(costs.start_work) == set(costs.ready_s) and all(w > 0 for w in costs.start_work.values())

    def ready(clips: int, others: float = 0.0) -> dict[str, float]:
        from bench.simulate import Simulation
        sim = Simulation(costs, config, 4, 1, clips, others_cores=others)
        sim.run()
        return sim.ready_at

    same = ready(2)
    for feat, t in costs.ready_s.items():
        assert same[feat] == pytest.approx(t, rel=0.05)
    busier, loaded = ready(40), ready(2, others=2.0)
    assert all(busier[f] >= same[f] - 1e-6 for f in same) and any(busier[f] > 1.05 * same[f] for f in same)
    assert all(loaded[f] > 1.2 * same[f] for f in same)


def test_ray_s_own_cpu_shares_the_cores_with_the_calls() -> None:
    """The run's CPU outside its calls (Ray, the driver) asks for its cores beside the calls, not off the top: on
    a node where other users leave one core, 0.9 of them outside calls leaves a decode task about half of it
    (taken off the top it left 0.1 of a core: a 2-core machine's run predicted at 164 s took 88 s)."""
    from bench.simulate import Simulation, _Task

    costs = Costs.from_report(json.loads(REPORT.read_text()))
    costs.outside_cores = 0.9
    sim = Simulation(costs, load_config("socialiq"), cpus=2, gpus=1, clips=1, others_cores=1.0)
    sim.running = [_Task("decode", 1.0, 1.0, 0.0, None)]
    assert sim._speeds() == [pytest.approx(1 / 1.9)]
    sim.running.append(_Task("decode", 1.0, 1.0, 0.0, None))
    assert sim._speeds() == [pytest.approx(1 / 2.9)] * 2
    costs.outside_cores = 0.0  # nothing outside calls: the decode task has the core left to itself
    assert sim._speeds() == [pytest.approx(0.5)] * 2
