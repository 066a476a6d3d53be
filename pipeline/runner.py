"""The Ray side of an extraction: starts Ray and the model actors, carries out what the scheduling policy
(pipeline/schedule.py) decides, turns results into (feature, item) pairs and hands finished ones to the
background committer (pipeline/committer.py). A failing item is recorded (file, stage, error) and the run goes on."""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manifests.records import MediaItem, QAItem
from pipeline import actors, cluster, decode, raystart, report, stages, stop, supervise
from pipeline import kinds as input_kinds
from pipeline.committer import Committer
from pipeline.config import FeatureSpec, RunConfig
from pipeline.progress import Progress
from pipeline.report import RunReport, shorter_record
from pipeline.schedule import CPU, CUDA, Call, Decode, FixedScheduler, Pool, Scheduler, Unit, Worker
from store.partial import partial_record
from store.writer import StoreWriter

log = logging.getLogger("siqfeat")


@dataclass
class _Pair:
    """An open (feature, item): rows of its segments as they come back."""

    segments: int = 1
    rows: dict[int, Any] = field(default_factory=dict)
    seconds: float = 0.0



class Runner:
    """One run's Ray work: the loop that carries out the scheduling policy's decisions."""

    def __init__(self, config: RunConfig, specs: list[FeatureSpec], writer: StoreWriter, report: RunReport) -> None:
        self.config, self.specs, self.writer, self.report = config, {s.name: s for s in specs}, writer, report
        self.fingerprints: dict[tuple[str, str], str] = {}
        self.sources: dict[tuple[str, str], dict[str, Any]] = {}
        self.stages = stages.StageStats()
        self.committer: Committer | None = None
        self.pending: dict[tuple[str, str], tuple[float, dict[str, Any] | None]] = {}  # handed to the committer

    def start_ray(self) -> None:
        stop.stage("starting Ray")
        address = os.environ.get("RAY_ADDRESS")
        self.ray = ray = raystart.start(address)  # retried once; RayFailed when it does not come up
        raystart.check()
        resources = ray.cluster_resources()
        self.gpus, self.cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
        log.info("Ray: %d CPU, %d GPU%s", self.cpus, self.gpus, f" at {address}" if address else " (local)")
        self.report.cluster = cluster.describe(ray, address)

    def start_actors(self, features: set[str]) -> None:
        """Start every model actor and the policy's books; actors load their models while the first items
        decode (`readying`: nothing is sent to an actor before its `ready` is back)."""
        from extractors.calibrate import run_cache_file

        remote = self.ray.remote(actors.ExtractorWorker)
        calibration = run_cache_file()  # the driver's environment decides, not the (maybe older) workers'
        self.new_actor: dict[str, Any] = {}
        self.readying: dict[Any, tuple[str, Worker]] = {}  # ready() ref -> (feature, worker)
        self.ready_at: dict[str, float] = {}
        self.restarts: dict[str, int] = {}  # feature -> actors started again after none of its pool could start
        pools: dict[str, Pool] = {}
        self.slots = self.node_cpus()
        plan = actor_plan(self.specs, features, self.config, self.cpus, self.gpus)
        for feat, p in plan.items():
            spec = self.specs[feat]
            self.new_actor[feat] = functools.partial(  # also used to replace an actor whose process died
                self._start_actor, remote, p.options, feat, spec.config, p.device, p.threads, calibration)
            pools[feat] = Pool(feat, spec.extractor.input_kind, p.device, p.per_call, p.depth, p.holds_cores)
            for _ in range(p.actors):
                self.add_worker(pools[feat])
            log.info("%s: %d %s actor(s) for %s%s", feat, p.actors, p.device, spec.config.extractor,
                     f", {p.threads} thread(s) each" if p.threads else "")
        policy = FixedScheduler if self.config.scheduler == "fixed" else Scheduler
        slots = self.slots
        self.sched = policy(pools, slots, max_bytes=self.max_inflight_bytes(), batch_bytes=self.config.batch_bytes,
                            max_items=self.config.max_inflight_items)
        log.info("scheduler: %s; %s CPU slot(s) on %d node(s), decoded data at most %.1f GiB",
                 policy.name, f"{sum(slots.values()):g}", len(slots), self.sched.max_bytes / 2**30)

    def add_worker(self, pool: Pool) -> Worker:
        # a CPU feature's actors are placed by the policy's books: each on the node with the most cores per actor
        # of that feature so far (a GPU actor goes where Ray finds its GPU, known once it is ready)
        node = None
        if pool.device == CPU and pool.holds_cores and len(self.slots) > 1:
            node = min(self.slots, key=lambda n: sum(w.node == n for w in pool.workers) / self.slots[n])
        worker = Worker(self.new_actor[pool.feature](node=node), node=node)
        pool.workers.append(worker)
        if node is not None:
            cluster.count_work(self.report.cluster, node, f"{pool.feature} actor")
        self.readying[worker.handle.ready.remote()] = (pool.feature, worker)
        return worker

    def _start_actor(self, remote: Any, options: dict[str, Any], *args: Any, node: str | None = None) -> Any:
        options = {**options, "max_restarts": 1, "max_task_retries": 1}
        if node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
        return remote.options(**options).remote(*args)

    def node_cpus(self) -> dict[str | None, float]:
        """node -> the CPU cores Ray has there: the policy's slots."""
        nodes = {n: float(info["resources"].get("CPU", 0.0)) for n, info in self.report.cluster.get("nodes", {}).items()}
        nodes = {n: c for n, c in nodes.items() if c > 0}
        return nodes or {None: float(self.cpus)}

    def max_inflight_bytes(self) -> int:
        """The config's bound, and never more than a quarter of the object store Ray has: decoded inputs live
        there until their features are done, and Ray spills to disk past its size."""
        store_bytes = self.report.cluster.get("resources", {}).get("object_store_memory")
        bound = self.config.max_inflight_bytes
        return int(min(bound, store_bytes / 4)) if store_bytes else bound

    def get_sliced(self, refs: list[Any]) -> list[Any]:
        """ray.get in waits of a second, a signal checked between them (models may take a while to load)."""
        while len(self.ray.wait(refs, num_returns=len(refs), timeout=1.0)[0]) < len(refs):
            raystart.check()
        return self.ray.get(refs)

    def run(self, todo: dict[str, list[str]], items: dict[str, MediaItem], questions: dict[str, list[QAItem]]) -> None:
        self.progress = Progress(sum(len(f) for f in todo.values()))  # its first line before the models load
        self.start_actors({f for feats in todo.values() for f in feats})
        self.todo, self.items, self.questions = todo, items, questions
        # made once: each ray.remote() is a new function for Ray to export
        self.decode_task, self.segment_task = self.ray.remote(actors.decode_item), self.ray.remote(actors.decode_segment)
        for item_id in sorted(todo):
            self.sched.add(item_id, todo[item_id])
        self.decoding: dict[Any, tuple[Decode, list[Any]]] = {}  # meta ref -> the decode, its value refs
        self.running: dict[Any, Call] = {}  # result ref -> the call
        self.meta: dict[str, dict[str, Any]] = {}  # item -> decode meta, while any of its pairs is open
        self.pairs: dict[tuple[str, str], _Pair] = {}  # open (feature, item) pairs
        total = self.progress.total
        self.committer = Committer(self.writer, self.config.commit_batch_items, self.config.commit_batch_bytes,
                                   self.config.commit_batch_s)
        stop.stage("extraction")
        supervise.note(self.report, "extraction")
        try:
            self.loop(total)
            self.report.batches = self.batches()
        finally:  # also when a signal stops the run: the open batches are committed, the stage figures reported
            with stop.deferred(raise_after=False):
                self.committed(self.committer.close())
            self.progress.close()
            self.report.stages = self.stages.summary()
            workers = {f: len(p.workers) for f, p in self.sched.pools.items()}
            self.report.utilisation = report.utilisation(self.stages.calls, self.cpus, workers, self.sched.name)
            self.report.utilisation["actors_ready_s"] = self.ready_at

    def loop(self, total: int) -> None:
        self.schedule()
        while (self.decoding or self.running or not self.sched.idle) and self.committer.store_error is None:
            raystart.check()  # a signal during the last second: stop here, between two Ray calls
            refs = [*self.decoding, *self.running, *self.readying]
            ready, _ = self.ray.wait(refs, num_returns=1, timeout=1.0)
            if ready:  # everything else that is done by now too: one pass of the policy for all of it
                ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                if ref in self.decoding:
                    self.decoded(ref, *self.decoding.pop(ref))
                elif ref in self.running:
                    self.extracted(ref, self.running.pop(ref))
                else:
                    self.actor_ready(ref, *self.readying.pop(ref))
            if self.committed(self.committer.drain()):
                supervise.note(self.report, "extraction", force=False)
            self.progress.tick()
            self.schedule()

    def schedule(self) -> None:
        """Send what the policy decides now: calls first (they free decoded data and cores), then decodes."""
        for call in self.sched.next_calls():
            ref = call.worker.handle.__call__.remote([u.item for u in call.take], *[u.ref for u in call.take])
            self.running[ref] = call
        for job in self.sched.next_decodes():
            self.submit(job)

    def submit(self, job: Decode) -> None:
        config, item = self.config, self.items[job.item]
        opts: dict[str, Any] = {"num_cpus": 1, "max_retries": config.decode_retries, "retry_exceptions": [OSError]}
        if job.node is not None and len(self.sched.slots) > 1:  # where the policy counted its cores
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(job.node, soft=True)
        if job.segment:
            if not self.open_feats(job.item, "frames"):  # its pairs failed already
                self.sched.decoded(job.item, job.segment, {}, {})
                return
            ref, frames = self.segment_task.options(num_returns=2, **opts).remote(item, job.segment,
                                                                                 config.batch_bytes)
            self.decoding[ref] = (job, [frames])
            return
        refs = self.decode_task.options(num_returns=1 + len(job.kinds), **opts).remote(
            item, list(job.kinds), self.questions.get(job.item, []), config.audio_rate_hz, config.batch_bytes)
        self.decoding[refs[0]] = (job, refs[1:])
        for feat in self.todo[job.item]:
            self.pairs[feat, job.item] = _Pair()

    def actor_ready(self, ref: Any, feat: str, worker: Worker) -> None:
        pool = self.sched.pools[feat]
        try:
            where = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            raystart.check()  # Ctrl-C at a terminal reaches Ray's processes too: then this is the stop, not a fault
            pool.workers.remove(worker)
            log.warning("%s: a model actor did not start (%s)", feat, _ray_error(e))
            if pool.workers:  # the others take its share
                return
            if self.restarts.get(feat, 0) < 1:  # once more, as Ray restarts an actor that died once
                self.restarts[feat] = self.restarts.get(feat, 0) + 1
                self.add_worker(pool)
                return
            raise RuntimeError(f"{feat}: no model actor could start: {_ray_error(e)}") from e
        placed, worker.node, worker.ready = worker.node, where.get("node"), True
        self.ready_at[feat] = time.time()  # the last of a feature's actors to load: when its pool was whole
        gpus = where.get("gpus") or []
        worker.gpu = f"{(worker.node or 'local')[:8]}:{','.join(map(str, gpus))}" if gpus else None
        if placed is None:  # counted where it was placed otherwise
            cluster.count_work(self.report.cluster, worker.node, f"{feat} actor")

    def batches(self) -> dict[str, list[dict[str, Any]]]:
        """Each model actor's batch sizes and per-unit cost (`ExtractorWorker.batches`); a dead actor's are lost."""
        out: dict[str, list[dict[str, Any]]] = {}
        for feat, pool in self.sched.pools.items():
            for ref in [w.handle.batches.remote() for w in pool.workers]:
                try:
                    out.setdefault(feat, []).append(self.ray.get(ref))
                except self.ray.exceptions.RayError:
                    continue
        return out

    def open_feats(self, item_id: str, kind: str) -> list[str]:
        """The item's features of this input kind whose pair is still open."""
        return [f for f in self.todo[item_id]
                if (f, item_id) in self.pairs and self.specs[f].extractor.input_kind == kind]

    def decoded(self, ref: Any, job: Decode, refs: list[Any]) -> None:
        """A decode task finished: its inputs wait for their features' actors (or their pairs fail)."""
        ray, item_id, segment, kinds = self.ray, job.item, job.segment, list(job.kinds)
        item = self.items[item_id]
        try:
            m = ray.get(ref)
            cluster.count_work(self.report.cluster, m.get("node"), "decode")
            for call in m.get("calls", ()):
                self.stages.add(call)
        except ray.exceptions.RayError as e:  # the decode worker died (e.g. out of memory) on every retry
            m = {"failures": {kind: actors.failure(item_id, f"decode:{kind}", input_kinds.source(item, kind),
                                                   _ray_error(e)) for kind in kinds}}
        if segment == 0:
            self.meta[item_id] = m
        elif item_id in self.meta:  # a later segment: its decode time and damaged seconds add to the item's
            whole = self.meta[item_id]
            for key in ("seconds", "missing"):
                for kind, value in m.get(key, {}).items():
                    whole[key][kind] = whole[key].get(kind, 0 if key == "seconds" else []) + value
        units: dict[str, Unit] = {}
        for kind, value_ref in zip(kinds, refs, strict=True):
            for feat in self.open_feats(item_id, kind):
                if kind in m["failures"]:
                    self.finish(feat, item_id, failed=m["failures"][kind])
                    continue
                if segment == 0:
                    self.pairs[feat, item_id].segments = m["segments"].get(kind, 1)
                units[feat] = Unit(item_id, value_ref, m["sizes"][kind], m["bytes"][kind], segment, kind=kind)
        held = {kind: m.get("bytes", {}).get(kind, 0) for kind in kinds if kind not in m["failures"]}
        self.sched.decoded(item_id, segment, units, held)
        if segment == 0 and m.get("segments", {}).get("frames", 1) > 1 and self.open_feats(item_id, "frames"):
            self.sched.add_segments(item_id, range(1, m["segments"]["frames"]))

    def extracted(self, ref: Any, call: Call) -> None:
        feat = call.pool.feature
        results = self.results(ref, call)
        self.sched.call_done(call)  # also for a call whose actor died: its core is free again
        for unit, (item_id, rows, fail, secs) in results:
            self.sched.release(item_id, unit.part, unit.kind, 1)
            pair = self.pairs.get((feat, item_id))
            if pair is None:  # failed already (another segment)
                continue
            if fail:
                if not fail.get("file"):
                    fail["file"] = _str(input_kinds.source(self.items[item_id], self.specs[feat].extractor.input_kind))
                self.finish(feat, item_id, failed=fail)
                continue
            pair.rows[unit.part], pair.seconds = rows, pair.seconds + secs
            if len(pair.rows) == pair.segments:
                self.finish(feat, item_id)

    def finish(self, feat: str, item_id: str, failed: dict[str, Any] | None = None) -> None:
        """Close a (feature, item) pair: commit its rows (joined from its segments) or record its failure."""
        pair = self.pairs.pop((feat, item_id))
        if failed is None:
            kind = self.specs[feat].extractor.input_kind
            path = input_kinds.source(self.items[item_id], kind)
            try:
                rows = self.specs[feat].extractor.join([pair.rows[k] for k in sorted(pair.rows)],
                                                       self.specs[feat].config)
            except Exception as e:
                failed = actors.failure(item_id, f"extract:{feat}", path, e)
            else:
                if pair.segments > 1 and not len(rows.intervals):  # as decoding it in one piece would have said
                    failed = actors.failure(item_id, f"decode:{kind}", path, decode.InputError(
                        f"{path}: no frame could be decoded in any of its {pair.segments} segments"))
            if failed is None:
                self.commit(feat, self.items[item_id], rows, self.meta[item_id], pair.seconds)
        if failed is not None:
            self.fail(feat, failed)
            self.progress.failed()
        else:
            self.progress.handed()
        if not any((f, item_id) in self.pairs for f in self.todo[item_id]):
            self.meta.pop(item_id, None)

    def results(self, ref: Any, call: Call) -> list[tuple[Unit, tuple[str, Any, Any, float]]]:
        """The call's per-item results. If the worker process died (segfault, out of
        memory) even after Ray's restart and retry, the actor is replaced, and the call's items go back to the
        queue to run alone on an idle actor: only the item that kills a worker when alone fails."""
        feat, take = call.pool.feature, list(call.take)
        try:
            results, record = self.ray.get(ref)
            if call.worker.gpu:
                record["gpu"] = call.worker.gpu
            self.stages.add(record)
            return list(zip(take, results, strict=True))
        except self.ray.exceptions.RayError as e:
            raystart.check()  # a signal to the process group kills the actors too: stop, start nothing new
            if isinstance(e, self.ray.exceptions.RayActorError) and call.worker in call.pool.workers:
                call.pool.workers.remove(call.worker)
                self.add_worker(call.pool)
                log.warning("%s: a model worker died (%s); started a new one", feat, _ray_error(e))
            if not take[0].solo:  # not yet run alone: the killer may be a batch-mate or another call on that actor
                self.sched.requeue(feat, take)
                return []
            item_id = take[0].item
            return [(take[0], (item_id, None, actors.failure(item_id, f"extract:{feat}", None, _ray_error(e)), 0.0))]

    def fail(self, feat: str, record: dict[str, Any]) -> None:
        self.report.counts[feat]["failed"] += 1
        self.report.failures.append({**record, "feature": feat})
        log.warning("%s/%s failed at %s: %s", feat, record["item"], record["stage"], record["error"])

    def commit(self, feat: str, item: MediaItem, rows: Any, meta: dict[str, Any], secs: float) -> None:
        """Hand the pair to the committer; it counts as done once its batch is in the store (`committed`)."""
        spec = self.specs[feat]
        attrs = {
            "fingerprint": self.fingerprints[feat, item.id], "spec_hash": spec.spec_hash,
            "source": self.sources[feat, item.id], "duration_s": meta.get("durations", {}).get(spec.extractor.input_kind),
            "extract_seconds": round(secs, 4), "decode_seconds": round(meta["seconds"][spec.extractor.input_kind], 4),
        }
        if spec.extractor.input_kind in meta.get("missing", {}):  # damaged input: the seconds without rows
            attrs["missing_s"] = sorted(meta["missing"][spec.extractor.input_kind])  # segments come in any order
        file = _str(input_kinds.source(item, spec.extractor.input_kind))
        partial = partial_record(feat, item.id, {**attrs, "source": {"path": file}}, attrs["duration_s"])
        shorter = None
        if spec.extractor.input_kind in meta.get("shorter", {}):  # by design, not damage: a note, not PARTIAL
            attrs["streams_end_s"] = meta["shorter"][spec.extractor.input_kind]
            shorter = shorter_record(feat, item.id, file, spec.extractor.input_kind, attrs["duration_s"],
                                     attrs["streams_end_s"])
        self.pending[feat, item.id] = (secs, partial, shorter)
        self.committer.put(feat, item.id, rows, attrs)

    def committed(self, outcomes: list[Any]) -> int:
        """Count the pairs whose batch is in the store (done, partial) or failed to get there; how many."""
        for o in outcomes:
            secs, partial, shorter = self.pending.pop((o.feature, o.item), (0.0, None, None))
            self.stages.add(o.record)
            if o.error is not None:
                self.fail(o.feature, actors.failure(o.item, f"write:{o.feature}", self.writer.path, o.error))
                self.progress.failed(handed=True)
                continue
            self.report.counts[o.feature]["done"] += 1
            self.progress.stored()
            if partial is not None:
                self.report.partial.append(partial)
            if shorter is not None:
                self.report.shorter.append(shorter)
            self.report.model_seconds[o.feature] = self.report.model_seconds.get(o.feature, 0.0) + secs
        if self.committer.store_error is not None and self.report.store_error is None:
            self.report.store_error = str(self.committer.store_error)
        return len(outcomes)



@dataclass(frozen=True)
class ActorPlan:
    """How one feature's model actors are started and fed."""

    options: dict[str, Any]  # Ray options: resources, placement
    actors: int
    device: str
    threads: int | None  # torch threads (a CPU run of a GPU-kind model)
    per_call: int  # batching count a call takes at most (frames, or items)
    depth: int  # calls in flight per actor
    holds_cores: bool  # the policy counts its calls against the node's CPU slots


def actor_plan(specs: dict[str, FeatureSpec], features: set[str], config: RunConfig, cpus: int,
               gpus: int) -> dict[str, ActorPlan]:
    """feature -> how its model actors run.

    With GPUs: `actors_per_gpu` actors of each GPU feature per GPU (default 1), all of them sharing each GPU
    in equal fractions, taking batches of `frames_per_batch` frames (`items_per_batch` items) two calls deep.
    On a CPU-only machine the GPU features' actors split the cores between them (`model_threads` each, default
    cores ÷ such features: more threads than cores made every stage slower, docs/design.md) beside the slots.
    CPU features (acoustic): under the balanced policy as many actors as cores (`cpu_actors`), spread over
    the nodes, holding no Ray CPU of their own: the policy gives a call a core only when it runs, one item a
    call, so a pool never queues work on one actor while another idles, and decode tasks get the cores the
    pool is not using. Under the fixed policy, `cpu_actors` (default half the cores) of 1 Ray CPU each.
    Acoustic with `backend = "torch"` (device auto or cuda) is a GPU feature where there are GPUs (its CPU share,
    WORLD's F0, runs in the actor: `actors_per_gpu` sets how many share a GPU), a CPU feature elsewhere."""
    gpu_feats = sorted(f for f in features if specs[f].extractor.wants_gpu(specs[f].config))
    # without GPUs, a feature that takes one only by its config's choice (covarep's torch backend) is laid out as
    # the CPU feature it then is; the models share the cores
    models = [f for f in gpu_feats if specs[f].extractor.uses_gpu]
    per_gpu = {f: config.actors_per_gpu.get(f, 1) for f in gpu_feats}
    threads = config.model_threads or max(1, cpus // max(1, len(models)))
    fixed = config.scheduler == "fixed"
    plan = {}
    for feat in sorted(features):
        batching = input_kinds.KINDS[specs[feat].extractor.input_kind].batch_unit
        per_call = config.frames_per_batch if batching == "frames" else config.items_per_batch
        if feat in gpu_feats and gpus:
            opts = {"num_gpus": 1 / sum(per_gpu.values()), "num_cpus": 1 if fixed else 0}
            plan[feat] = ActorPlan(opts, gpus * per_gpu[feat], CUDA, None, per_call, 2, True)
        elif feat in models:
            plan[feat] = ActorPlan({"num_cpus": 0}, 1, CPU, threads, per_call, 2, False)
        elif fixed:
            plan[feat] = ActorPlan({"num_cpus": 1}, config.cpu_actors or max(1, cpus // 2), CPU, 1, per_call, 2, True)
        else:
            plan[feat] = ActorPlan({"num_cpus": 0, "scheduling_strategy": "SPREAD"}, config.cpu_actors or max(1, cpus),
                                   CPU, 1, 1, 1, True)
    return plan


class WorkerLost(RuntimeError):
    """A Ray worker process died while handling this item, on every retry."""


def _ray_error(e: BaseException) -> WorkerLost:
    """Ray's errors carry pages of traceback; the failure record keeps the class and the first line."""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return WorkerLost(f"{type(e).__name__}: {first}")


def _str(path: Path | None) -> str | None:
    return str(path) if path is not None else None


