"""Which engine carries an extraction: our runner (pipeline/runner.py with pipeline/schedule.py's policies) or Ray
Data's streaming executor (`map` tasks feeding `map_batches` actor pools, `concurrency=(min, max)`, fractional
`num_gpus`, backpressure by object-store memory), measured on the same work.

    python -m bench.engine --costs ../shared/gpu-run/h100-run-report.json --clips 200 --scale 0.25
    (Ray Data needs pyarrow: `.venv/bin/pip install pyarrow`; without it only our engines run)

The work is the H100 run's per-clip costs (bench.simulate's `Costs`), times `--scale`, as sleeps: a decode
task per clip, four GPU-kind features on one GPU (DenseNet, MTCNN, the two BERTs) and one CPU feature (acoustic).
Ray runs locally with the logical resources of that node (`--cpus 16 --gpus 1`) whatever this machine has:
sleeping stages need no cores, so what is measured is each engine's scheduling, not this machine's speed.
Printed: the wall time of each engine from its first decode to its last result, and the resource bound of the
scaled work (the largest of the core-seconds over the cores and each GPU actor's seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.simulate import Costs
from testing import waiting  # noqa: F401  (registers the sleeping extractors, here and in the workers)

PAYLOAD = 64 * 1024  # bytes a decoded clip carries through the object store (both engines alike)
FEATURES = {"frames": "frames", "faces": "frames", "transcript": "transcript", "qa": "qa", "acoustic": "audio"}


def fake_decode(item_id: str, kinds: list[str], seconds: float, frames: int) -> list[Any]:
    """What `actors.decode_item` returns, after `seconds`: its report and one payload per kind."""
    from media.kinds import Decoded
    from pipeline import stages
    from pipeline.actors import DecodeReport

    started = stages.clock()
    time.sleep(seconds)
    values = [np.zeros(PAYLOAD // len(kinds), np.uint8) for _ in kinds]
    inputs = {k: Decoded(k, frames if k == "frames" else 1, int(v.nbytes), seconds)
              for k, v in zip(kinds, values, strict=True)}
    call = stages.call_record("decode:frames", started, frames, 1, "frames")
    return [DecodeReport(item_id, inputs, None, (call,)), *values]


def ours(costs: Costs, scale: float, clips: int, policy: str, cpu_actors: int | None = None,
         features: dict[str, str] = FEATURES) -> tuple[float, list[float]]:
    """Our runner, with its policy, on the scaled work: when the first decode started, and when each clip's last
    feature reached the driver."""
    from manifests.records import MediaItem
    from pipeline.config import RunConfig
    from pipeline.report import RunReport
    from pipeline.runner import Runner

    feats = {f: {"extractor": f"wait_{k}_{'cpu' if f == 'acoustic' else 'gpu'}", "seconds": costs.model_s[f] * scale}
             for f, k in features.items()}
    config = RunConfig.model_validate({"features": feats, "scheduler": policy, "cpu_actors": cpu_actors})
    if policy == "fixed":
        config = config.model_copy(update={"max_inflight_items": 8, "items_per_batch": 8})
    specs = config.specs()
    report = RunReport("bench", "bench", "-", {s.name: dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)
                                               for s in specs})
    decode_s, frames = costs.decode_s * scale, int(round(costs.units["frames"]))

    class BenchRunner(Runner):
        def start_actors(self, features: set[str]) -> None:
            # every actor loaded before the first decode: an actor's start here (a worker process importing the
            # project) takes a second or more on a small machine, and Ray Data's sleeping actors import nothing
            super().start_actors(features)
            refs = list(self.readying)
            self.get_sliced(refs)
            for ref in refs:  # Runner.actor_ready takes the ready() ref and its (feature, worker) pairs
                self.actor_ready(ref, self.readying.pop(ref))

        def submit(self, job: Any) -> None:  # a sleeping decode in place of decode_item
            refs = self.fake.options(num_cpus=1, num_returns=1 + len(job.kinds)).remote(
                job.item, list(job.kinds), decode_s, frames)
            self.decoding[refs[0]] = (job, refs[1:])
            for feat in self.todo[job.item]:
                self.pairs[feat, job.item] = _Pair()

        def commit(self, feat: str, item: Any, rows: Any, decoded: Any, secs: float, decoder: str | None = None) -> None:
            self.report.counts[feat]["done"] += 1  # nothing written: both engines end at the driver
            left[item.id] -= 1
            if not left[item.id]:
                done.append(time.time())

    from pipeline.runner import _Pair

    left, done = dict.fromkeys((f"c{i:05d}" for i in range(clips)), len(features)), []
    runner = BenchRunner(config, specs, None, report)  # type: ignore[arg-type]
    runner.start_ray()
    runner.fake = runner.ray.remote(fake_decode)
    items = {f"c{i:05d}": MediaItem(id=f"c{i:05d}", dataset="bench") for i in range(clips)}
    try:
        runner.run({i: list(features) for i in items}, items, {})
    finally:  # its actors hold their logical CPUs and GPU share until they end: the next engine in this Ray needs them
        for worker in {id(w.handle): w for pool in runner.sched.pools.values() for w in pool.workers}.values():
            runner.ray.kill(worker.handle)
    return min(v["first_start_s"] for k, v in report.stages.items() if k.startswith("decode:")), sorted(done)


def ray_data(costs: Costs, scale: float, clips: int, cpus: int, gpus: int,
             features: dict[str, str] = FEATURES) -> tuple[float, list[float]]:
    """Ray Data's streaming executor on the same work: a `map` of decodes, then one `map_batches` actor pool per
    feature, GPU features at a quarter GPU each, acoustic on an autoscaling pool of up to one actor per core."""
    import ray

    decode_s, frames = costs.decode_s * scale, int(round(costs.units["frames"]))

    def decode(row: dict[str, Any]) -> dict[str, Any]:
        time.sleep(decode_s)
        return {"id": row["id"], "payload": np.zeros(PAYLOAD, np.uint8), "t0": time.time()}

    class Stage:
        def __init__(self, seconds: float) -> None:
            self.seconds = seconds

        def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            time.sleep(self.seconds * len(batch["id"]))
            return batch

    gpu_feats = [f for f in features if f != "acoustic"]
    ds = ray.data.range(clips, override_num_blocks=clips).map(decode, num_cpus=1)
    for f in gpu_feats:
        per_call = max(1, 256 // frames) if features[f] == "frames" else 8
        ds = ds.map_batches(Stage, fn_constructor_kwargs={"seconds": costs.model_s[f] * scale}, concurrency=gpus,
                            num_gpus=1 / len(gpu_feats), num_cpus=0, batch_size=per_call)
    if "acoustic" in features:
        ds = ds.map_batches(Stage, fn_constructor_kwargs={"seconds": costs.model_s["acoustic"] * scale},
                            concurrency=(1, cpus), num_cpus=1, batch_size=1)
    first, done = None, []
    for batch in ds.iter_batches(batch_size=None):
        first = min(batch["t0"]) if first is None else min(first, min(batch["t0"]))
        done += [time.time()] * len(batch["id"])
    assert len(done) == clips, len(done)
    return first - decode_s, done


def bound(costs: Costs, scale: float, clips: int, cpus: int, features: dict[str, str] = FEATURES) -> float:
    cpu = clips * scale * (costs.decode_s + sum(costs.model_s[f] for f in features)) / cpus
    return max(cpu, clips * scale * max((costs.model_s[f] for f in features if f != "acoustic"), default=0.0))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--costs", type=Path, default=Path(__file__).parents[1] / "tests/data/h100-run-report.json")
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--scale", type=float, default=0.25, help="seconds of sleep per second of the measured costs")
    ap.add_argument("--cpus", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--engines", default="balanced,fixed,ray-data")
    ap.add_argument("--features", default=",".join(FEATURES), help="which of the five features run (fewer: fewer "
                    "actors to start, for a quick check that the engines run)")
    ap.add_argument("--one-ray", action="store_true", help="the engines one after another in one Ray (quicker; "
                    "the default starts a Ray of its own for each, so that none finds another's workers)")
    ap.add_argument("--cpu-actors", type=int, help="acoustic actors (`cpu_actors`; default: the policy's). The "
                    "fixed policy gives each a Ray CPU, and each GPU actor one: a small --cpus needs fewer")
    args = ap.parse_args(argv)
    import ray

    costs = Costs.from_report(json.loads(args.costs.read_text()))
    unknown = set(args.features.split(",")) - set(FEATURES)
    if unknown:
        ap.error(f"--features: {', '.join(sorted(unknown))} not one of {', '.join(FEATURES)}")
    features = {f: k for f, k in FEATURES.items() if f in args.features.split(",")}
    here = str(Path(__file__).parents[1])
    b = bound(costs, args.scale, args.clips, args.cpus, features)
    print(f"{args.clips} clips, costs x {args.scale} as sleeps, {args.cpus} CPU + {args.gpus} GPU (logical): "
          f"resource bound {b:.1f} s")
    results = {}
    for engine in args.engines.split(","):
        if not (args.one_ray and ray.is_initialized()):
            ray.shutdown()
            ray.init(address="local", num_cpus=args.cpus, num_gpus=args.gpus, include_dashboard=False,
                     log_to_driver=False, runtime_env={"env_vars": {
                         "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p),
                         "SIQ_CALIBRATE": "0"}})
        try:
            if engine == "ray-data":  # noqa: SIM108
                try:
                    import pyarrow  # noqa: F401
                except ImportError:
                    print("  ray-data: skipped (Ray Data needs pyarrow: .venv/bin/pip install pyarrow)")
                    continue
                from ray.data import DataContext

                DataContext.get_current().enable_progress_bars = False
                start, done = ray_data(costs, args.scale, args.clips, args.cpus, args.gpus, features)
            else:
                start, done = ours(costs, args.scale, args.clips, engine, args.cpu_actors, features)
        finally:
            if not args.one_ray:
                ray.shutdown()
        wall = done[-1] - start
        # the last three quarters of the clips: each engine's pace once its actors are up
        quarter = len(done) // 4
        steady = (done[-1] - done[quarter]) / (len(done) - 1 - quarter) * args.clips if len(done) > 4 else wall
        results[engine] = {"wall_s": wall, "steady_s": steady}
        print(f"  {engine:>9}: {wall:6.1f} s first decode to last clip ({wall / b:.2f} x the bound); at its pace "
              f"after the first quarter, {steady:6.1f} s ({steady / b:.2f} x)", flush=True)
    ray.shutdown()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"bound_s": b, "wall_s": results}, f)
    print(f"  figures in {f.name}", file=sys.stderr)


if __name__ == "__main__":
    main()
