"""Replay a run report's per-unit costs through the real scheduling policy: a projection of a whole dataset on a
node (or cluster) of a given size, without Ray or models.

    python -m bench.simulate --costs ../shared/gpu-run/h100-run-report.json --cpus 16 --gpus 1 --clips 1250
    python -m bench.simulate --costs REPORT --cpus 16 --gpus 1 --clips 500 --until 400 --policy fixed

The policy objects are pipeline/schedule.py's and the actors are laid out by pipeline/runner.py's `actor_plan`,
exactly as a run does; only Ray and the models are replaced, by a discrete-event model of them:

- each clip costs what the report measured per unit (frames, audio seconds, words, questions), at the report's
  average units per item (`--seconds`: clips of another length); a decode task costs the sum of its kinds. A CPU
  call (decode, a CPU feature) costs its CPU seconds at one core, not its wall-clock seconds, which hold the
  contention of the run that measured it (`--contended`: the wall-clock seconds, as before); a GPU call its
  measured seconds;
- the CPUs are shared: every running decode task and model call uses the cores the report measured for its stage
  (`cpu_s / worker_s`), and when they ask for more than the node has, all of them slow down in proportion;
- Ray's own CPU accounting is modelled where the policy relies on it: under the fixed policy CPU actors hold one
  Ray CPU each for the whole run, and decode tasks queue for the Ray CPUs left (what serialised the H100 run);
- a GPU is shared by its actors' calls: the part of a call that needs the GPU's engines (`gpu_fraction` of its
  time, from `--gpu-busy-s`: the GPU-busy seconds nvidia-smi measured during the report's run, spread over the GPU
  stages in proportion to their actor seconds) slows every call on that GPU down when their fractions add up to
  more than one GPU; without `--gpu-busy-s` GPU calls never slow each other down (the H100 run's GPU was 3.5 %
  busy, so that is close for its costs, and optimistic once more work moves onto the GPU);
- `--cost STAGE=SECONDS[,cores=C][,gpu=G]` replaces one stage's measured cost per clip (e.g. a decoder or an
  extractor moved onto the GPU, measured elsewhere): `decode:frames`, `decode:audio`, `model:<feature>`;
- start-up: Ray comes up after `--ray-start-s`, each feature's actors are ready when the report measured them
  (`utilisation.ray_start_s`, `actors_ready_s`; a report without them: Ray at its first decode, at most 7 s, and
  every actor at its first model call; `--actors-start-s` sets one instant for all; bench/actor_start.py
  measures what an actor's start is made of); the fixed runner decoded nothing before its actors were ready,
  the balanced one decodes while they load (as far as `max_inflight_bytes` lets it: about 20 clips of frames,
  docs/scale.md);
- the CPU the run's processes used outside the timed calls (the report's `utilisation.run.whole`, or
  `--outside-cores`) asks for its cores beside the calls for the whole run (shared with them);
- the driver's commits are one server (the committer thread), `commit:*` seconds per pair;
- a report with its calls (`stages[*].per_call`, pipeline/stages.py) gives each stage's call as a cost per call
  plus per unit and an actor's first call's warm-up (`Fit`), and the run's own clips at their own sizes in turn
  instead of one average clip (`Costs.from_report`); `--warm` gives a report without calls a warm-up, and
  `--others-cores` the node simulated other users;
- `--fit-starts`: each feature's actor start as CPU work of one core (`Costs.fit_starts`), fitted on the report's
  own run and then sharing the cores with the rest, instead of ready at the instants measured.

It prints the projected wall time, each resource's busy fraction (pipeline/report.py's `utilisation`, computed
from the simulated call records exactly as from a real run's), and the resource bound: the largest of the
CPU work over the cores, each GPU feature's actor work over its actors, and the driver's commits.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline import report as run_report
from pipeline.config import RunConfig, load_config
from pipeline.runner import actor_plan, device_queue
from pipeline.schedule import CUDA, Call, FixedScheduler, Pool, Scheduler, Unit, Worker

AUDIO_RATE_HZ = 16_000
# a decoded frame as the H100 run's clips had it: half 640x360, half 1280x720, RGB (docs/scale.md)
FRAME_BYTES = (640 * 360 + 1280 * 720) * 3 // 2
RAY_START_S = 7.0  # Ray's start where a report does not say (reports before `utilisation["ray_start_s"]`)


@dataclass
class Costs:
    """Per-item costs read from a run report's `stages`."""

    decode_s: float  # one decode task (every kind of an item)
    decode_cores: float
    model_s: dict[str, float]  # feature -> actor seconds per item
    model_cores: dict[str, float]
    units: dict[str, float]  # feature -> units per item (frames for the frame features)
    commit_s: dict[str, float]  # feature -> driver seconds per pair
    audio_s: float  # seconds of audio per item
    ray_start_s: float
    actors_start_s: float
    decodes: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind -> (seconds, cores) per item
    # feature -> seconds from the run's start until its actors were ready (measured; else all at actors_start_s)
    ready_s: dict[str, float] = field(default_factory=dict)
    # cores the run's processes kept busy outside the timed calls (Ray, the driver, workers between calls: the
    # report's `whole` CPU less its calls'), asked for beside the calls for the whole extraction
    outside_cores: float = 0.0
    clip_s: float = 0.0  # the report's seconds of media per clip (its audio's), what `scale_to` scales from
    gpu_fraction: dict[str, float] = field(default_factory=dict)  # feature -> share of a call that needs the GPU
    nvdec: Nvdec | None = None  # frames decoded on the GPU's video engines (`--nvdec`)
    # From the report's calls (`stages[*].per_call`, reports since issue 52), where it has them: stage -> a call's
    # cost at full speed (`Fit`: per call, per unit, an actor's first call's warm-up), the run's own clips' sizes
    # (input kind -> units, one dict a clip, cycled), the cores a stage's call asks for, and the cores other users
    # of the report's machine kept busy (what its run could not have)
    fits: dict[str, Fit] = field(default_factory=dict)
    clips: list[dict[str, float]] = field(default_factory=list)
    stage_cores: dict[str, float] = field(default_factory=dict)
    others_cores: float = 0.0
    # seconds from Ray up to the first decode task's start (the driver reading manifests, a fresh Ray's first
    # worker processes): measured where the report has Ray's start, else none
    decode_after_ray_s: float = 0.0
    # An actor's start as CPU work sharing the cores (`fit_starts`): seconds from the run's start until the
    # runner began loading the actors (measured: `utilisation.actors_start_s`), and feature -> one actor's start
    # at full speed (one core); empty: each feature's actors ready at `ready_s` as measured, whatever else runs
    load_from_s: float | None = None
    start_work: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_report(cls, report: dict[str, Any], uncontended: bool = True,
                    gpu_features: set[str] | None = None, threads: dict[str, float] | None = None) -> Costs:
        """`uncontended`: a CPU stage's calls cost their CPU seconds at the cores they use alone (at least one:
        a decode task or an acoustic call is one thread), not their wall-clock seconds, which hold the
        contention of the run that measured them (other users', and the run's own cores oversubscribed); the
        simulation applies the target node's own contention. GPU calls keep their measured seconds (mostly the
        device's and their host thread's, not the CPU's). False: every stage at its measured seconds.
        `gpu_features`: the features whose actors ran on a GPU in the report's run (None: every model feature
        when the report's cluster had a GPU, none when it had not). `threads`: feature -> the cores one of its
        calls asks for in the report's run (a CPU-run model's torch threads; 1 where not given).

        A report with its calls (`per_call`) and its CPU as the machine saw it (`utilisation.run.whole`) gives
        more (`Fit`, `call_work`): each CPU call's work at full speed (its CPU seconds over the cores it asks
        for), fitted per stage as a cost per call, per unit and an actor's first call's warm-up; the run's own
        clips, each at its own size; the cores the run's processes kept busy outside calls in its steady part
        (the start's imports and loads are in the start as measured); the cores other users kept busy
        (`others_cores`: what a projection onto the same machine as loaded then gives `simulate`)."""
        st = report["stages"]
        util = report.get("utilisation") or {}
        had_gpu = (report.get("cluster") or {}).get("resources", {}).get("GPU", 0) > 0
        gpu_feats = gpu_features if gpu_features is not None else (
            {k.partition(":")[2] for k in st if k.startswith("model:")} if had_gpu else set())

        def seconds(v: dict[str, Any], cpu_stage: bool = True) -> tuple[float, float]:
            """(seconds, cores) of the stage's calls together."""
            worker, cpu = v["worker_s"], v["cpu_s"]
            cores = cpu / worker if worker else 1.0
            if not uncontended or not cpu_stage or cores >= 1.0 or cpu <= 0:
                return worker, cores
            return cpu, 1.0  # run alone, a one-thread call keeps its core busy: its CPU seconds are its time

        decodes = [v for k, v in st.items() if k.startswith("decode:")]
        items = max(v["items"] for v in decodes)
        kinds = {}
        for k, v in st.items():
            if k.startswith("decode:"):
                secs, cores = seconds(v)
                kinds[k.partition(":")[2]] = (secs / items, cores)
        decode_s = sum(s for s, _ in kinds.values())
        decode_cores = sum(s * c for s, c in kinds.values()) / decode_s if decode_s else 1.0
        model_s, model_cores, units, commit_s = {}, {}, {}, {}
        for stage, v in st.items():
            kind, _, feat = stage.partition(":")
            if kind == "model":
                secs, cores = seconds(v, cpu_stage=feat not in gpu_feats)
                model_s[feat] = secs / v["items"]
                model_cores[feat] = cores
                units[feat] = v["units"] / v["items"]
            elif kind == "commit":
                commit_s[feat] = v["busy_s"] / v["items"]
        audio = st.get("decode:audio")
        start = _run_start(report)
        first_decode = min(v["first_start_s"] for v in decodes) - start if start else 0.0
        first_model = min(v["first_start_s"] for k, v in st.items() if k.startswith("model:")) - start if start else 0.0
        # Ray's start as measured (from the run's start until Ray was up); a report of before it was measured:
        # the first decode's start, at most 7 s (under the fixed policy that was after the models had loaded)
        ray = util.get("ray_start_s")
        ray_start = ray[1] - start if ray and start else min(RAY_START_S, first_decode)
        ready = {f: t - start for f, t in (util.get("actors_ready_s") or {}).items() if start and f in model_s}
        actors_start = max(ready.values()) if ready else max(first_decode, first_model)
        run = util.get("run") or {}
        whole, span = run.get("whole"), run.get("seconds") or 0.0
        outside = max(0.0, whole["run_cpu_s"] - whole["calls_cpu_s"]) / span if whole and span else 0.0
        audio_s = audio["units"] / audio["items"] if audio else 0.0
        costs = cls(decode_s, decode_cores, model_s, model_cores, units, commit_s, audio_s,
                    ray_start_s=max(0.0, ray_start), actors_start_s=max(ray_start, actors_start), decodes=kinds,
                    ready_s={f: max(ray_start, t) for f, t in ready.items()}, outside_cores=outside, clip_s=audio_s)
        if ray and start:
            costs.decode_after_ray_s = max(0.0, first_decode - costs.ray_start_s)
        if start and isinstance(util.get("actors_start_s"), (int, float)):
            costs.load_from_s = max(costs.ray_start_s, util["actors_start_s"] - start)
        if all("per_call" in v for v in st.values()) and (whole and span or not uncontended):
            costs._from_calls(report, gpu_feats, threads or {}, uncontended)
        return costs

    def _from_calls(self, report: dict[str, Any], gpu_feats: set[str], threads: dict[str, float],
                    uncontended: bool) -> None:
        """The per-call model (`from_report`): fits, clips, the cores each stage asks for, the report machine's
        other users; the averages (`decodes`, `model_s`) follow the fits so that the bound agrees. Not
        `uncontended`: each call's wall-clock seconds as measured and the cores it used then, the run's CPU
        outside calls in them already: the report's machine as loaded then."""
        st = report["stages"]
        cores = {}
        for stage in st:
            kind, _, feat = stage.partition(":")
            v = st[stage]
            if kind not in ("decode", "model"):
                continue
            if not uncontended or feat in gpu_feats:
                cores[stage] = v["cpu_s"] / v["worker_s"] if v["worker_s"] and v["cpu_s"] > 0 else 1.0
            else:  # one thread a decode (PyAV's, the audio resampler's); a model call its actor's torch threads
                cores[stage] = 1.0 if kind == "decode" else float(threads.get(feat, 1.0))
        if uncontended:
            run = report["utilisation"]["run"]
            whole = run["whole"]
            self.others_cores = max(0.0, whole["machine_cpu_s"] - whole["run_cpu_s"]) / run["seconds"]
            steady = (report["utilisation"].get("steady") or {}).get("whole")
            if steady:  # outside calls in the steady part: the start's imports and loads are in the measured start
                self.outside_cores = max(0.0, steady["run_cpu_s"] - steady["calls_cpu_s"]) / report["utilisation"][
                    "steady"]["seconds"]
        else:
            self.outside_cores = 0.0  # in the calls' seconds as measured, with the other users'
        work = call_work(st, cores, cpu_stages={s for s in cores if s.partition(":")[2] not in gpu_feats},
                         wall=not uncontended)
        self.stage_cores = cores
        items = max(v["items"] for k, v in st.items() if k.startswith("decode:"))
        for stage, calls in work.items():
            fit = Fit.of(calls)
            self.fits[stage] = fit
            kind, _, feat = stage.partition(":")
            total = sum(w for w, _, _ in calls)
            if kind == "decode":
                self.decodes[feat] = (total / items, 1.0)
            elif kind == "model":
                self.model_s[feat], self.model_cores[feat] = total / st[stage]["items"], cores[stage]
        self.decode_s = sum(s for s, _ in self.decodes.values())
        self.decode_cores = 1.0
        # the run's clips, each kind's units in the order the decode tasks ran (a clip's kinds decode together)
        per_kind = {k.partition(":")[2]: [r[3] for r in v["per_call"]["rows"]]
                    for k, v in st.items() if k.startswith("decode:") and v["per_call"]["of"] == v["calls"]}
        n = min((len(u) for u in per_kind.values()), default=0)
        self.clips = [{k: u[i] for k, u in per_kind.items()} for i in range(n)]

    def fit_starts(self, config: RunConfig, cpus: int, clips: int, gpus: int = 0, others_cores: float | None = None,
                   rounds: int = 12) -> None:
        """Each feature's actor start as CPU work (`start_work`), fitted on the report's own run: the work that,
        sharing the cores with what else ran meanwhile (decode tasks, the other features' starts and calls,
        the report machine's other users: `others_cores`, default the report's), makes the simulated run's
        actors ready when the report measured them. A start on a machine with more to do (more clips decoding,
        other users) then takes longer, as measured here (ready 9-11 s in runs of 2 clips, 18-21 s in runs of
        4). `cpus`, `gpus`, `clips`: the report's run (its clips at their own sizes: before `scale_to`).
        tests/bench/test_simulate_real.py predicts a bigger run with it (docs/scale.md has the pairs)."""
        if self.load_from_s is None or not self.ready_s:
            raise ValueError("the report has no actors' start (utilisation.actors_start_s, actors_ready_s)")
        others = self.others_cores if others_cores is None else others_cores
        want = {f: max(0.05, t - self.load_from_s) for f, t in self.ready_s.items()}
        self.start_work = {f: d / 2 for f, d in want.items()}
        for _ in range(rounds):  # a start's duration grows with its work: a few multiplicative steps converge
            sim = Simulation(self, config, cpus, gpus, clips, others_cores=others)
            sim.run()
            got = {f: sim.ready_at[f] - self.load_from_s for f in want}
            self.start_work = {f: w * want[f] / max(1e-6, got[f]) for f, w in self.start_work.items()}

    def clip(self, index: int) -> dict[str, float]:
        """Input kind -> units of the simulated clip `index`: the run's own clips in turn."""
        return self.clips[index % len(self.clips)] if self.clips else {}

    def scale_to(self, seconds: float, input_kinds: dict[str, str]) -> None:
        """Clips of `seconds` of media instead of the report's (`--seconds`): what grows with a clip's length (its
        frames, audio and words: their decodes and the features reading them) in proportion; a clip's questions
        do not. `input_kinds`: feature -> its input kind."""
        if not self.clip_s:
            raise ValueError("--seconds: the report has no audio to tell its clips' length")
        r = seconds / self.clip_s
        for kind, (secs, cores) in list(self.decodes.items()):
            if kind != "qa":
                self.decodes[kind] = (secs * r, cores)
        self.decode_s = sum(s for s, _ in self.decodes.values())
        self.decode_cores = sum(s * c for s, c in self.decodes.values()) / self.decode_s if self.decode_s else 1.0
        for feat, kind in input_kinds.items():
            if feat in self.model_s and kind != "qa":
                self.model_s[feat] *= r
                self.units[feat] *= r
        self.audio_s, self.clip_s = self.audio_s * r, seconds
        self.clips = [{k: u if k == "qa" else u * r for k, u in c.items()} for c in self.clips]

    def routed_decode(self) -> tuple[float, float]:
        """(seconds, CPU-s) of the decode task of a clip routed to the video engines: its frames' CPU decode
        replaced by the demuxing plan (`Nvdec.plan_s`); the other kinds decode as before."""
        frames_s, frames_cores = self.decodes["frames"]
        return (self.decode_s - frames_s + self.nvdec.plan_s,
                self.decode_s * self.decode_cores - frames_s * frames_cores + self.nvdec.plan_s)

    def spread_gpu_busy(self, busy_s: float, items: float, gpu_features: list[str]) -> None:
        """`busy_s` GPU-busy seconds measured over `items` clips, spread over the GPU features' calls in
        proportion to their actor seconds: each call then needs the GPU for that share of its time."""
        actor_s = sum(self.model_s[f] for f in gpu_features) * items
        for f in gpu_features:
            self.gpu_fraction[f] = min(1.0, busy_s / actor_s) if actor_s else 0.0

    def warm_up(self, stage: str, seconds: float) -> None:
        """`--warm`: an actor's first call of `model:<feature>` costs `seconds` more (a report without its
        calls measured none): the stage's other costs as they were."""
        kind, _, feat = stage.partition(":")
        if kind != "model" or feat not in self.model_s:
            raise ValueError(f"--warm {stage}: not a model stage of the report (model:<feature>)")
        fit = self.fits.get(stage) or Fit(0.0, self.model_s[feat] / max(1e-9, self.units[feat]))
        self.fits[stage] = Fit(fit.per_call, fit.per_unit, seconds)

    def override(self, stage: str, seconds: float, cores: float | None = None, gpu: float | None = None) -> None:
        """One stage's cost per clip replaced (`--cost`): seconds of its worker, the cores it keeps busy, the
        share of its time it needs the GPU."""
        kind, _, name = stage.partition(":")
        self.fits.pop(stage, None)  # the per-call model gives way to the cost given (a decode's kinds to averages)
        if kind == "decode":
            old = self.decodes.get(name, (0.0, 1.0))
            self.decodes[name] = (seconds, old[1] if cores is None else cores)
            total = sum(s for s, _ in self.decodes.values())
            self.decode_s = total
            self.decode_cores = sum(s * c for s, c in self.decodes.values()) / total if total else 1.0
        elif kind == "model" and name in self.model_s:
            self.model_s[name] = seconds
            if cores is not None:
                self.model_cores[name] = cores
            if gpu is not None:
                self.gpu_fraction[name] = gpu
        else:
            raise ValueError(f"--cost {stage}: not a stage of the report (decode:<kind> or model:<feature>)")


@dataclass
class Nvdec:
    """Frames decoded by the GPU's video engines (`--nvdec`; `frames_decoder`, docs/design.md): the scheduler's
    own routing (`Scheduler._on_device`, bound `gpu_decode_queue`) sends a clip there or to a CPU decode task. A
    clip sent there costs `plan_s` CPU-s of demuxing in its decode task instead of the CPU decode, and `seconds`
    of one engine in the first call of the shared frames actor that takes it (with `cores` of host CPU meanwhile:
    torchcodec feeding packets); the engines of a GPU are shared by the calls decoding on it."""

    seconds: float
    plan_s: float = 0.06
    cores: float = 0.25
    engines: int = 7  # video engines per GPU (H100: 7 NVDEC)


@dataclass
class Fit:
    """A stage's call at full speed (its cores all its own): `per_call + per_unit * units`, and `warm` more for
    an actor's first call of the stage (the model's first forward: oneDNN's kernels chosen, caches filled)."""

    per_call: float
    per_unit: float
    warm: float = 0.0

    @classmethod
    def of(cls, calls: list[tuple[float, float, bool]]) -> Fit:
        """From (work, units, first) per call: least squares over the calls after each actor's first, which
        give the warm-up as what they cost beyond the fit; calls all of one size give no cost per call."""
        rest = [(w, u) for w, u, first in calls if not first] or [(w, u) for w, u, _ in calls]
        n, su, sw = len(rest), sum(u for _, u in rest), sum(w for w, _ in rest)
        var = sum((u - su / n) ** 2 for _, u in rest)
        if var > 1e-9 * max(1.0, su * su):
            b = sum((u - su / n) * (w - sw / n) for w, u in rest) / var
            a = sw / n - b * su / n
        else:
            a, b = 0.0, 0.0
        if a < 0 or b < 0 or var <= 1e-9 * max(1.0, su * su):
            a, b = (0.0, sw / su) if su > 0 else (sw / n, 0.0)
        firsts = [w - (a + b * u) for w, u, first in calls if first]
        warm = max(0.0, sum(firsts) / len(firsts)) if firsts and len(rest) < len(calls) else 0.0
        return cls(a, b, warm)

    def seconds(self, units: float, first: bool = False) -> float:
        return self.per_call + self.per_unit * units + (self.warm if first else 0.0)


def call_work(stages: dict[str, dict[str, Any]], cores: dict[str, float],
              cpu_stages: set[str], wall: bool = False) -> dict[str, list[tuple[float, float, bool]]]:
    """stage -> (work, units, first) per call of `cpu_stages`: the call's seconds at full speed, its CPU seconds
    over the cores it asks for (`cores`: stage -> cores; at most its wall-clock seconds). Its own CPU seconds,
    not its wall-clock seconds times the run's average share: the other users of a shared machine come and go
    within a run (one run here had 1.3 cores of them on average, yet DenseNet's calls after the first ran at
    1.7 of their 2 cores). `wall`: its wall-clock seconds as they were (the report's machine as loaded then)."""
    out: dict[str, list[tuple[float, float, bool]]] = defaultdict(list)
    for stage, v in stages.items():
        if stage not in cpu_stages:
            continue
        for row in v["per_call"]["rows"]:
            r = dict(zip(v["per_call"]["fields"], row, strict=True))
            work = min(r["seconds"], r["cpu_s"] / cores[stage]) if r["cpu_s"] > 0 and not wall else r["seconds"]
            out[stage].append((work, r["units"], bool(r["first"])))
    return dict(out)


def _run_start(report: dict[str, Any]) -> float | None:
    """The run's start from its id (`20261127T105553Z-…`): the report keeps no start time of its own."""
    try:
        return datetime.strptime(report["run_id"][:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    except (KeyError, ValueError):
        return None


@dataclass(eq=False)
class _Task:
    """Something running that needs CPU: a decode task or a model call."""

    kind: str  # "decode", "call" or "start" (an actor loading)
    left: float  # seconds of work left at full speed
    cores: float
    started: float
    what: Any
    uses_cpu: bool = True
    gpu: str | None = None  # the GPU a model call runs on
    gpu_share: float = 0.0  # the share of its time it needs that GPU's kernels
    nvdec_share: float = 0.0  # the share of its time it decodes on that GPU's video engines


@dataclass(eq=False)
class _Actor:
    """A simulated Ray actor: its calls run one at a time, in the order sent."""

    queue: list[Call] = field(default_factory=list)
    running: _Task | None = None
    decoded: set[str] = field(default_factory=set)  # clips whose frames it decoded on its GPU (kept for their readers)
    called: set[str] = field(default_factory=set)  # the features it has had a call of (the first one warms up)


class Simulation:
    def __init__(self, costs: Costs, config: RunConfig, cpus: int, gpus: int, clips: int,
                 frame_bytes: int = FRAME_BYTES, others_cores: float = 0.0) -> None:
        self.costs, self.config, self.cpus, self.gpus, self.clips = costs, config, cpus, gpus, clips
        self.others_cores = others_cores  # cores other users keep busy on the node simulated
        self.frame_bytes = frame_bytes
        specs = {s.name: s for s in config.specs() if s.name in costs.model_s}
        self.specs = specs
        if costs.nvdec is None:  # the report's costs are the CPU decoder's: route nothing to the actors
            config = config.model_copy(update={"frames_decoder": "cpu"})
        plan = actor_plan(specs, set(specs), config, cpus, gpus)
        pools = {}
        reserved = 0.0
        hosts: dict[str, list[_Actor]] = {}  # a feature's actors (a hosted feature's pool shares its host's)
        for feat, p in sorted(plan.items(), key=lambda fp: fp[1].host not in (None, fp[0])):
            pool = Pool(feat, specs[feat].extractor.input_kind, p.device, p.per_call, p.depth, p.holds_cores,
                        decodes_frames=p.decode_device is not None)
            shared = p.host is not None and p.host != feat
            hosts[feat] = hosts[p.host] if shared else [_Actor() for _ in range(p.actors)]
            for k, actor in enumerate(hosts[feat]):
                gpu = f"sim:{k % max(1, gpus)}" if p.device == CUDA else None
                pool.workers.append(Worker(handle=actor, node="sim", gpu=gpu))
            pools[feat] = pool
            reserved += 0 if shared else p.options.get("num_cpus", 1) * p.actors
        self.ray_cpus = max(0.0, cpus - reserved)  # Ray CPUs left for decode tasks
        policy = FixedScheduler if config.scheduler == "fixed" else Scheduler
        self.sched = policy(pools, {"sim": float(cpus)}, max_bytes=config.max_inflight_bytes,
                            batch_bytes=config.batch_bytes, max_items=config.max_inflight_items,
                            device_queue=device_queue(plan, config))
        self.features = sorted(specs)
        for i in range(clips):
            self.sched.add(f"clip{i:05d}", list(self.features))
        self.now = 0.0
        self.running: list[_Task] = []
        self.ray_queue: list[Any] = []  # decode tasks waiting for a Ray CPU
        self.calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.left: dict[str, set[str]] = {}  # clip -> features not yet done
        self.done_at: list[float] = []
        self.commit_free = 0.0  # when the driver's committer is next free
        self.events: list[tuple[float, int, str]] = []  # timed events: actors ready, start of decoding
        self._seq = 0
        self.on_nvdec: set[str] = set()  # clips whose frames the video engines decode (`Nvdec`)
        self.ready_at: dict[str, float] = {}  # feature -> when its actors were all ready
        self.starting: dict[str, int] = {}  # feature -> its actors still loading (`Costs.start_work`)
        self.actors = hosts  # feature -> its actors (a hosted feature's are its host's)
        self.engine_s = 0.0  # the video engines' seconds the calls asked for

    # -- the model of Ray and the machine ------------------------------------------------------------------------
    def _speeds(self) -> list[float]:
        """Each running task's speed: the cores shared in proportion when asked for more than the node has,
        and each GPU likewise for the calls on it."""
        demand = sum(t.cores for t in self.running if t.uses_cpu)
        # other users' cores are not the run's; Ray's and the driver's own CPU (`outside_cores`) asks for its
        # cores beside the calls and is shared with them (on a loaded machine it gets no more than its share)
        free = max(0.1, self.cpus - self.others_cores)
        cpu = min(1.0, free / (demand + self.costs.outside_cores)) if demand > 0 else 1.0
        on_gpu: dict[str, float] = defaultdict(float)
        on_engines: dict[str, float] = defaultdict(float)
        engines = self.costs.nvdec.engines if self.costs.nvdec else 1
        for t in self.running:
            if t.gpu:
                on_gpu[t.gpu] += t.gpu_share
                on_engines[t.gpu] += t.nvdec_share / engines
        return [min(cpu if t.uses_cpu else 1.0,
                    1.0 / on_gpu[t.gpu] if t.gpu and on_gpu[t.gpu] > 1.0 else 1.0,
                    1.0 / on_engines[t.gpu] if t.gpu and on_engines[t.gpu] > 1.0 else 1.0)
                for t in self.running]

    def _advance(self, until: float) -> None:
        for t, speed in zip(self.running, self._speeds(), strict=True):
            t.left -= (until - self.now) * speed
        self.now = until

    def _next_finish(self) -> float:
        return min((self.now + max(0.0, t.left) / speed for t, speed in zip(self.running, self._speeds(), strict=True)),
                   default=math.inf)

    def _units(self, item: str) -> dict[str, float]:
        """Input kind -> units of a simulated clip (`clip00042`): the report's own clips in turn, where it has them."""
        return self.costs.clip(int(item.removeprefix("clip")))

    def _start_decode(self, job: Any) -> None:
        c = self.costs
        seconds, cores = c.decode_s, c.decode_cores
        units = self._units(job.item)
        if units and all(f"decode:{k}" in c.fits for k in units):
            seconds, cores = sum(c.fits[f"decode:{k}"].seconds(u) for k, u in units.items()), 1.0
        if job.on_device:
            self.on_nvdec.add(job.item)
            seconds, cpu_s = c.routed_decode()
            cores = cpu_s / seconds
        self.running.append(_Task("decode", seconds, cores, self.now, job))

    def _start_call(self, worker: Worker, call: Call) -> None:
        feat = call.pool.feature
        c = self.costs
        per_unit = c.model_s[feat] / max(1e-9, c.units[feat])
        seconds = sum(u.n if call.pool.kind == "frames" else c.units[feat] for u in call.take) * per_unit
        cores, gpu_s, nvdec_s = c.model_cores.get(feat, 1.0), 0.0, 0.0
        fit = c.fits.get(f"model:{feat}")
        if fit is not None:  # the per-call model: this call's clips at their own sizes, the warm-up
            units = sum(self._units(u.item).get(call.pool.kind, u.n if call.pool.kind == "frames" else c.units[feat])
                        for u in call.take)
            seconds = fit.seconds(units, first=feat not in worker.handle.called)
            cores = c.stage_cores.get(f"model:{feat}", cores)
        worker.handle.called.add(feat)
        if worker.gpu:
            gpu_s = seconds * c.gpu_fraction.get(feat, 0.0)
        if c.nvdec:  # the first call in an actor to take a clip sent there decodes it (pipeline/actors.py's cache)
            actor = worker.handle
            routed = {u.item for u in call.take if u.device} - actor.decoded
            actor.decoded |= routed
            nvdec_s = len(routed) * c.nvdec.seconds
            self.engine_s += nvdec_s
            cores = (seconds * cores + nvdec_s * c.nvdec.cores) / (seconds + nvdec_s) if seconds + nvdec_s else cores
            seconds += nvdec_s
        total = max(seconds, 1e-12)
        worker.handle.running = _Task("call", seconds, cores, self.now, (worker, call), gpu=worker.gpu,
                                      gpu_share=gpu_s / total, nvdec_share=nvdec_s / total)

    def _submit(self) -> None:
        self._send(self.sched.next_calls())
        for job in self.sched.next_decodes():
            self.ray_queue.append(job)
        while self.ray_queue and sum(t.kind == "decode" for t in self.running) < self._decode_slots():
            self._start_decode(self.ray_queue.pop(0))

    def _decode_slots(self) -> float:
        return self.ray_cpus if self.sched.name == "fixed" else self.cpus

    def _send(self, calls: list[Call]) -> None:
        for call in calls:
            actor = call.worker.handle
            actor.queue.append(call)
            if actor.running is None:
                self._run_next(actor)

    def _run_next(self, actor: _Actor) -> None:
        """The actor's next call (an actor shared by the frames features runs theirs one at a time, in order)."""
        if actor.queue:
            call = actor.queue.pop(0)
            self._start_call(call.worker, call)
            self.running.append(actor.running)
        else:
            actor.running = None

    def _finish(self, task: _Task) -> None:
        self.running.remove(task)
        end = self.now
        if task.kind == "start":
            feats = task.what
            self.starting[feats[0]] -= 1
            if not self.starting[feats[0]]:
                for f in feats:
                    self._ready(f)
            return
        if task.kind == "decode":
            job = task.what
            self.calls["decode:frames"].append(_record("decode:frames", task.started, end, task.cores, 1))
            units, nbytes = {}, {}
            clip = self._units(job.item)
            for feat in self.left.setdefault(job.item, set(self.features)):
                kind = self.specs[feat].extractor.input_kind
                frames = clip.get("frames", self.costs.units[feat])
                n = max(1, int(round(frames))) if kind == "frames" else 1
                b = int(frames * self.frame_bytes) if kind == "frames" else (
                    int(clip.get("audio", self.costs.audio_s) * AUDIO_RATE_HZ * 4) if kind == "audio" else 0)
                units[feat] = Unit(job.item, None, n, b, kind=kind, device=job.on_device and kind == "frames")
                nbytes[kind] = max(nbytes.get(kind, 0), b)
            self.sched.decoded(job.item, job.segment, units, nbytes)
            return
        worker, call = task.what
        feat = call.pool.feature
        rec = _record(f"model:{feat}", task.started, end, task.cores, len(call.take))
        if worker.gpu:
            rec["gpu"] = worker.gpu
        self.calls[rec["stage"]].append(rec)
        self.sched.call_done(call)
        for u in call.take:
            self.sched.release(u.item, u.part, u.kind, 1)
            self._commit(feat, u.item)
        self._run_next(worker.handle)

    def _commit(self, feat: str, item: str) -> None:
        start = max(self.now, self.commit_free)
        self.commit_free = start + self.costs.commit_s.get(feat, 0.0)
        self.calls[f"commit:{feat}"].append(_record(f"commit:{feat}", start, self.commit_free, 1.0, 1))
        left = self.left[item]
        left.discard(feat)
        if not left:
            self.done_at.append(self.commit_free)

    def _ready(self, feat: str) -> None:
        self.ready_at[feat] = self.now
        for w in self.sched.pools[feat].workers:
            w.ready = True

    def _load(self) -> None:
        """Every actor begins to load at once (the runner starts them all together): one task of one core each,
        `start_work` at full speed; a feature is ready when the last of its actors is (runner.py's `ready_at`),
        a feature hosted by another's actors when its host's are."""
        groups: dict[int, list[str]] = defaultdict(list)
        for feat in self.sched.pools:
            groups[id(self.actors[feat])].append(feat)
        for feats in groups.values():
            work = max(self.costs.start_work.get(f, 0.0) for f in feats)
            if work <= 0:
                for f in feats:
                    self._ready(f)
                continue
            self.starting[feats[0]] = len(self.actors[feats[0]])
            for _ in self.actors[feats[0]]:
                self.running.append(_Task("start", work, 1.0, self.now, feats))

    def _at(self, when: float, what: str) -> None:
        self._seq += 1
        heapq.heappush(self.events, (when, self._seq, what))

    def run(self) -> float:
        c = self.costs
        decode_from = c.actors_start_s if self.sched.name == "fixed" else c.ray_start_s + c.decode_after_ray_s
        self._at(decode_from, "decode")
        if c.start_work and c.load_from_s is not None:  # the actors load as CPU work beside the rest
            self._at(c.load_from_s, "load")
        else:
            for feat in self.sched.pools:  # each feature's actors when they were ready in the report's run
                self._at(c.ready_s.get(feat, c.actors_start_s), f"actors {feat}")
        decoding_allowed = False
        while True:
            t_event = self.events[0][0] if self.events else math.inf
            t_task = self._next_finish()
            if t_event == math.inf and t_task == math.inf:
                break
            if t_event <= t_task:
                self._advance(t_event)
                _, _, what = heapq.heappop(self.events)
                if what.startswith("actors "):
                    self._ready(what.removeprefix("actors "))
                elif what == "load":
                    self._load()
                else:
                    decoding_allowed = True
            else:
                self._advance(t_task)
                for task in [t for t in self.running if t.left <= 1e-9]:
                    self._finish(task)
            if decoding_allowed:
                self._submit()
            elif any(w.ready for p in self.sched.pools.values() for w in p.workers):
                self._send(self.sched.next_calls())
        if len(self.done_at) < self.clips:  # nothing runs and nothing can start: a real run would hang here
            raise RuntimeError(f"the {self.sched.name} policy stalled: {len(self.done_at)} of {self.clips} clips "
                               f"done at {self.now:.1f} s, nothing running and nothing it can start "
                               f"({self.cpus} CPU + {self.gpus} GPU, {self.ray_cpus:g} Ray CPUs for decode tasks)")
        return max(self.done_at, default=self.now)

    # -- what it prints ------------------------------------------------------------------------------------------
    def bound(self) -> dict[str, float]:
        c, n = self.costs, self.clips
        cpu = n * (c.decode_s * c.decode_cores + sum(c.model_s[f] * c.model_cores.get(f, 1.0) for f in self.features))
        if c.nvdec:  # the clips the run routed to the video engines: their CPU decode replaced by a plan
            routed_cpu_s = c.routed_decode()[1] - c.decode_s * c.decode_cores  # a routed clip's CPU-s less its CPU decode: negative, a saving
            cpu += len(self.on_nvdec) * routed_cpu_s + self.engine_s * c.nvdec.cores
        # the cores left by Ray and the driver, and by other users
        out = {"cpu": cpu / max(0.1, self.cpus - c.outside_cores - self.others_cores)}
        if c.nvdec:
            out["nvdec"] = self.engine_s / (c.nvdec.engines * max(1, self.gpus))
        gpu_s = 0.0
        for feat, pool in self.sched.pools.items():
            if pool.device == CUDA:
                out[f"actors {feat}"] = n * c.model_s[feat] / len(pool.workers)
                gpu_s += n * c.model_s[feat] * c.gpu_fraction.get(feat, 0.0)
        if gpu_s:
            out["gpu"] = gpu_s / max(1, self.gpus)
        out["driver"] = n * sum(c.commit_s.get(f, 0.0) for f in self.features)
        return out


def _record(stage: str, start: float, end: float, cores: float, items: int) -> dict[str, Any]:
    return {"stage": stage, "start_s": start, "end_s": end, "cpu_s": (end - start) * cores, "units": items,
            "items": items, "unit": "items"}


def window_s(report: dict[str, Any]) -> float:
    """A run report's extraction window: its first decode's start to its last commit's end."""
    st = report["stages"]
    return (max(v["last_end_s"] for k, v in st.items() if k.startswith("commit:"))
            - min(v["first_start_s"] for k, v in st.items() if k.startswith("decode:")))


def simulate(costs: Costs, config: RunConfig, cpus: int, gpus: int, clips: int,
             until: float | None = None, others_cores: float = 0.0) -> dict[str, Any]:
    """`others_cores`: the cores other users keep busy on the node simulated (0: the node is the run's)."""
    sim = Simulation(costs, config, cpus, gpus, clips, others_cores=others_cores)
    wall = sim.run()
    bound = sim.bound()
    workers = {f: len(p.workers) for f, p in sim.sched.pools.items()}
    util = run_report.utilisation(sim.calls, cpus, workers, sim.sched.name)
    out = {"policy": sim.sched.name, "clips": clips, "cpus": cpus, "gpus": gpus, "wall_s": round(wall, 1),
           "clips_per_s": round(clips / wall, 3), "bound_s": round(max(bound.values()), 1),
           "bound": {k: round(v, 1) for k, v in bound.items()}, "start_s": round(costs.ray_start_s, 1),
           "utilisation": util}
    out["wall_over_bound"] = round(wall / out["bound_s"], 3)
    # the extraction window as a run report has it: the first decode's start to the last commit's end
    first = min((c["start_s"] for c in sim.calls.get("decode:frames", [])), default=0.0)
    out["window_s"] = round(wall - first, 1)
    if until is not None:
        done = sum(t <= until for t in sim.done_at)
        out["until"] = {"seconds": until, "clips": done, "clips_per_s": round(done / until, 3)}
    return out


def report_threads(report: dict[str, Any], config: RunConfig) -> dict[str, float]:
    """feature -> the cores one call asked for in the report's run: its actors' torch threads as `actor_plan`
    laid them out for the report's CPUs and GPUs (1 where it sets none)."""
    st = report["stages"]
    specs = {s.name: s for s in config.specs() if f"model:{s.name}" in st}
    cpus = int((report.get("utilisation") or {}).get("cpus") or 1)
    gpus = int((report.get("cluster") or {}).get("resources", {}).get("GPU", 0))
    return {f: float(p.threads or 1) for f, p in actor_plan(specs, set(specs), config, cpus, gpus).items()}


def _cost(spec: str) -> tuple[str, float, float | None, float | None]:
    """`model:acoustic=0.3,cores=1,gpu=0.5` -> ("model:acoustic", 0.3, 1.0, 0.5)."""
    stage, _, rest = spec.partition("=")
    seconds, *opts = rest.split(",")
    named = dict(o.split("=", 1) for o in opts)
    unknown = set(named) - {"cores", "gpu"}
    if unknown or not stage or not seconds:
        raise SystemExit(f"--cost {spec}: expected STAGE=SECONDS[,cores=C][,gpu=G]")
    return stage, float(seconds), (float(named["cores"]) if "cores" in named else None), (
        float(named["gpu"]) if "gpu" in named else None)


def _nvdec(spec: str) -> Nvdec:
    """`0.7,plan=0.06,engines=7` -> Nvdec(0.7, plan_s=0.06, engines=7)."""
    seconds, *opts = spec.split(",")
    named = dict(o.split("=", 1) for o in opts if "=" in o)
    if set(named) - {"plan", "cores", "engines"} or len(named) != len(opts):
        raise SystemExit(f"--nvdec {spec}: expected SECONDS[,plan=S][,cores=C][,engines=N]")
    kw: dict[str, Any] = {"plan_s": float(named["plan"])} if "plan" in named else {}
    kw.update({k: float(v) for k, v in named.items() if k == "cores"})
    kw.update({k: int(v) for k, v in named.items() if k == "engines"})
    return Nvdec(float(seconds), **kw)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--costs", type=Path, required=True, help="a run report (<store>/_runs/<id>.json)")
    ap.add_argument("--cpus", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--clips", type=int, default=1250)
    ap.add_argument("--config", default="socialiq", help="preset or TOML: the features and the run settings")
    ap.add_argument("--policy", choices=["balanced", "fixed"], help="default: the config's `scheduler`")
    ap.add_argument("--until", type=float, help="also count the clips done by this many seconds")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a run setting, e.g. max_inflight_items=8 (JSON values)")
    ap.add_argument("--gpu-busy-s", type=float, metavar="SECONDS",
                    help="GPU-busy seconds measured during the report's run (nvidia-smi utilization.gpu summed over "
                         "1 s samples, /100): GPU calls then share each GPU (../shared/gpu-run: 14.2)")
    ap.add_argument("--cost", action="append", default=[], metavar="STAGE=SECONDS[,cores=C][,gpu=G]",
                    help="replace a stage's cost per clip, e.g. decode:frames=0.12 or model:acoustic=0.3,cores=1,gpu=0.5")
    ap.add_argument("--nvdec", metavar="SECONDS[,plan=S][,cores=C][,engines=N]",
                    help="frames decoded by the shared frames actors on the GPU's video engines, routed as a run "
                         "routes them (`frames_decoder`, `gpu_decode_queue`): SECONDS of one engine per clip; plan: "
                         "CPU-s of the demux-only decode task (0.06); cores: host CPU while an engine decodes "
                         "(0.25); engines: per GPU (H100: 7). Without it frames are decoded on the CPU as measured")
    ap.add_argument("--ray-start-s", type=float, metavar="SECONDS",
                    help="seconds from the run's start until Ray is up (default: the report's, at most 7)")
    ap.add_argument("--actors-start-s", type=float, metavar="SECONDS",
                    help="seconds from the run's start until the model actors are ready (default: the report's, its "
                         "first model call; bench/actor_start.py measures what an actor's start is made of)")
    ap.add_argument("--seconds", type=float, help="clips of this many seconds (default: the report's own)")
    ap.add_argument("--fit-starts", action="store_true",
                    help="each feature's actor start as CPU work fitted on the report's own run (Costs.fit_starts), "
                         "slowing with what runs beside it; default: ready when the report measured")
    ap.add_argument("--outside-cores", type=float, metavar="CORES",
                    help="cores the run's processes use outside the timed calls (Ray, the driver, workers between "
                         "calls), taken from the node's (default: the report's `whole` CPU less its calls', 0 "
                         "for a report without it)")
    ap.add_argument("--contended", action="store_true",
                    help="replay the report's wall-clock call seconds as they were (the old model: a loaded run's "
                         "contention replayed as cost); default: CPU calls cost their CPU seconds")
    ap.add_argument("--warm", action="append", default=[], metavar="model:FEATURE=SECONDS",
                    help="an actor's first call of the stage costs SECONDS more (its warm-up; a report with its "
                         "calls measures it)")
    ap.add_argument("--others-cores", type=float, default=0.0, metavar="CORES",
                    help="cores other users keep busy on the node simulated (default 0: the node is the run's)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    overrides: dict[str, Any] = {}
    for kv in args.set:
        key, _, value = kv.partition("=")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    if args.policy:
        overrides["scheduler"] = args.policy
    config = load_config(args.config if not Path(args.config).exists() else Path(args.config), overrides)
    report = json.loads(args.costs.read_text())
    had_gpu = (report.get("cluster") or {}).get("resources", {}).get("GPU", 0) > 0
    specs = {s.name: s for s in config.specs()}
    gpu_feats = {f for f, s in specs.items() if s.extractor.wants_gpu(s.config)} if had_gpu else set()
    costs = Costs.from_report(report, uncontended=not args.contended, gpu_features=gpu_feats,
                              threads=report_threads(report, config))
    if args.fit_starts:
        try:
            costs.fit_starts(config, int(report["utilisation"]["cpus"]),
                             max(v["items"] for k, v in report["stages"].items() if k.startswith("decode:")),
                             gpus=int((report.get("cluster") or {}).get("resources", {}).get("GPU", 0)))
        except (KeyError, ValueError) as e:
            raise SystemExit(f"--fit-starts: {args.costs}: {e}") from None
    if args.seconds is not None:
        costs.scale_to(args.seconds, {f: s.extractor.input_kind for f, s in specs.items()})
    if args.gpu_busy_s is not None:
        gpu_feats = [s.name for s in config.specs() if s.name in costs.model_s and s.extractor.wants_gpu(s.config)]
        items = max(v["items"] for k, v in report["stages"].items() if k.startswith("model:"))
        costs.spread_gpu_busy(args.gpu_busy_s, items, gpu_feats)
    for spec in args.cost:
        costs.override(*_cost(spec))
    for spec in args.warm:
        stage, _, secs = spec.partition("=")
        try:
            costs.warm_up(stage, float(secs))
        except ValueError as e:
            raise SystemExit(str(e)) from None
    if args.nvdec:
        costs.nvdec = _nvdec(args.nvdec)
    if args.outside_cores is not None:
        costs.outside_cores = args.outside_cores
    if args.ray_start_s is not None:
        costs.ray_start_s = args.ray_start_s
    if args.actors_start_s is not None:
        costs.actors_start_s, costs.ready_s = args.actors_start_s, {}
    if costs.actors_start_s < costs.ray_start_s:
        raise SystemExit(f"--actors-start-s {costs.actors_start_s:g}: before Ray is up ({costs.ray_start_s:g} s)")
    out = simulate(costs, config, args.cpus, args.gpus, args.clips, args.until, args.others_cores)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['policy']} policy, {args.clips} clips on {args.cpus} CPU + {args.gpus} GPU "
          f"(costs: {args.costs.name}):")
    print(f"  projected wall {out['wall_s']:.0f} s ({out['clips_per_s']:.2f} clips/s), including "
          f"{out['start_s']:.0f} s for Ray to start")
    print(f"  resource bound {out['bound_s']:.0f} s: " + ", ".join(f"{k} {v:.0f} s" for k, v in out["bound"].items()))
    print(f"  wall / bound: {out['wall_over_bound']:.2f}")
    for line in run_report.utilisation_lines(out["utilisation"]):
        print(line)
    if "until" in out:
        u = out["until"]
        print(f"  by {u['seconds']:.0f} s: {u['clips']} clips ({u['clips_per_s']:.2f} clips/s)")


if __name__ == "__main__":
    main()


