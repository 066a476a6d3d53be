"""The Ray side of an extraction: starts Ray and the model actors, carries out what the scheduling policy
(pipeline/schedule.py) decides, turns results into (feature, item) pairs and hands finished ones to the
background committer (pipeline/committer.py). A failing item is recorded (file, stage, error) and the run goes on."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manifests.records import MediaItem, QAItem
from media import decode, nvdec
from media import kinds as input_kinds
from media.kinds import Decoded
from pipeline import actors, cluster, cpuload, ownparts, raystart, report, stages, stop, supervise
from pipeline.actors import DecodeReport, Extracted, Failure
from pipeline.committer import Committer, StoreStopped
from pipeline.config import FeatureSpec, RunConfig
from pipeline.progress import Progress
from pipeline.report import RunReport, late_record, shorter_record, streams_record
from pipeline.schedule import CPU, CUDA, Call, Decode, FixedScheduler, Pool, Scheduler, Unit, Worker
from store import StoreWriter, WrittenRows, partial_record
from store import fingerprint as store_fingerprint

log = logging.getLogger("siqfeat")


@dataclass
class _Pair:
    """An open (feature, item): rows of its segments as they come back."""

    segments: int = 1
    rows: dict[int, Any] = field(default_factory=dict)
    seconds: float = 0.0
    decoders: set[str] = field(default_factory=set)  # what decoded its frames (media/nvdec.py), per segment



class Runner:
    """One run's Ray work: the loop that carries out the scheduling policy's decisions."""

    def __init__(self, config: RunConfig, specs: list[FeatureSpec], writer: StoreWriter, report: RunReport,
                 identities: dict[tuple[str, str], Identity] | None = None) -> None:
        """`identities`: each planned (feature, item) pair's, as pipeline/run.py planned it."""
        self.config, self.specs, self.writer, self.report = config, {s.name: s for s in specs}, writer, report
        self.identities = identities if identities is not None else {}
        self.stages = stages.StageStats()
        self.committer: Committer | None = None
        self.pending: dict[tuple[str, str], tuple[float, dict[str, Any] | None]] = {}  # handed to the committer
        self.progress: Progress | None = None  # up before Ray starts: the bar says so meanwhile
        # measured for bench.simulate's start-up (the run report's utilisation); set when each happens
        self.sampler: cpuload.Sampler | None = None  # the run's CPU as the machine sees it, from Ray's start
        self.ray_start: tuple[float, float] | None = None
        self.actors_started: float | None = None
        # Ray and what it has (`start_ray`)
        self.ray: Any = None
        self.gpus, self.cpus = 0, 1
        # the model actors and the policy's books (`start_actors`)
        self.new_actor: dict[str, Any] = {}  # feature -> starts one of its actors (also to replace one that died)
        self.readying: dict[Any, list[tuple[str, Worker]]] = {}  # ready() ref -> the (feature, worker)s it serves
        self.ready_at: dict[str, float] = {}
        self.restarts: dict[str, int] = {}  # feature -> actors started again after none of its pool could start
        self.pools: dict[str, Pool] = {}
        self.slots: dict[str | None, float] = {}  # node -> its CPU cores: the policy's slots
        self.hosted: dict[str, str] = {}  # features whose actors another's host (frames decoded there): guest -> host
        self.frames_device: str | None = None  # where the actors decode frames plans, if they do
        # the policy (pipeline/schedule.py), made with the pools; until then one with none: nothing to schedule
        self.sched: Scheduler = Scheduler({}, {}, max_bytes=0, batch_bytes=0)
        # this run's work (`run`)
        self.todo: dict[str, list[str]] = {}  # item -> its features to compute
        self.items: dict[str, MediaItem] = {}
        self.questions: dict[str, list[QAItem]] = {}
        self.decode_task: Any = None  # the decode tasks, made once a run: each ray.remote() is a new function to export
        self.segment_task: Any = None
        self.decoding: dict[Any, tuple[Decode, list[Any]]] = {}  # DecodeReport ref -> the decode, its value refs
        self.running: dict[Any, Call] = {}  # result ref -> the call
        self.inputs: dict[str, dict[str, Decoded]] = {}  # item -> kind -> its input's record, while a pair is open
        self.pairs: dict[tuple[str, str], _Pair] = {}  # open (feature, item) pairs

    def start_ray(self) -> None:
        stop.stage("starting Ray")
        if self.progress is not None:
            self.progress.phase("starting Ray")
        address = os.environ.get("RAY_ADDRESS")
        # from before Ray starts: its start's CPU is the run's too (a local Ray's processes are this one's children)
        self.sampler = cpuload.Sampler().start()
        started = time.time()
        self.ray = ray = raystart.start(address)  # retried once; RayFailed when it does not come up
        self.ray_start = (started, time.time())  # measured, for bench.simulate (`utilisation["ray_start_s"]`)
        raystart.check()
        resources = ray.cluster_resources()
        self.gpus, self.cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
        log.info("Ray: %d CPU, %d GPU%s", self.cpus, self.gpus, f" at {address}" if address else " (local)")
        self.report.cluster = cluster.describe(ray, address)

    def stop_sampling(self) -> list[tuple[float, float, float]]:
        """End the CPU sampler's thread (pipeline/cpuload.py); its samples."""
        return self.sampler.stop() if self.sampler is not None else []

    def start_actors(self, features: set[str]) -> None:
        """Start every model actor and the policy's books; actors load their models while the first items
        decode (`readying`: nothing is sent to an actor before its `ready` is back)."""
        from extractors.calibrate import run_cache_file

        self.actors_started = time.time()
        remote = self.ray.remote(actors.ExtractorWorker)
        calibration = run_cache_file()  # the driver's environment decides, not the (maybe older) workers'
        self.slots = self.node_cpus()
        if self.progress is not None:
            self.progress.phase("loading models")
        plan = actor_plan(self.specs, features, self.config, self.cpus, self.gpus)
        self.hosted = {f: p.host for f, p in plan.items() if p.host is not None and p.host != f}
        self.frames_device = next((p.decode_device for p in plan.values() if p.decode_device), None)
        for feat, p in plan.items():
            spec = self.specs[feat]
            guests = {g: self.specs[g].config for g, h in self.hosted.items() if h == feat}
            self.new_actor[feat] = functools.partial(  # also used to replace an actor whose process died
                self._start_actor, remote, p.options, feat, spec.config, p.device, p.threads, calibration,
                guests or None)
            self.pools[feat] = Pool(feat, spec.extractor.input_kind, p.device, p.per_call, p.depth, p.holds_cores,
                                    decodes_frames=p.decode_device is not None)
            log.info("%s: %d %s actor(s) for %s%s%s", feat, p.actors, p.device, spec.config.extractor,
                     f", {p.threads} thread(s) each" if p.threads else "",
                     f", in {p.host}'s actors" if feat in self.hosted else "")
        for feat, p in plan.items():
            for _ in range(p.actors if feat not in self.hosted else 0):
                self.add_worker(self.pools[feat])
        if self.frames_device:
            log.info("frames: decoded by the model actors on %s (%s), routed by a queue of %s", self.frames_device,
                     ", ".join(sorted(f for f, p in plan.items() if p.decode_device)), device_queue(plan, self.config))
        policy = FixedScheduler if self.config.scheduler == "fixed" else Scheduler
        slots = self.slots
        self.sched = policy(self.pools, slots, max_bytes=self.max_inflight_bytes(),
                            batch_bytes=self.config.batch_bytes, max_items=self.config.max_inflight_items,
                            device_queue=device_queue(plan, self.config))
        log.info("scheduler: %s; %s CPU slot(s) on %d node(s), decoded data at most %.1f GiB",
                 policy.name, f"{sum(slots.values()):g}", len(slots), self.sched.max_bytes / 2**30)

    def add_worker(self, pool: Pool) -> Worker:
        """A new actor for `pool`, and for the pools of the features it hosts with it (`hosted`)."""
        # a CPU feature's actors are placed by the policy's books: each on the node with the most cores per actor
        # of that feature so far (a GPU actor goes where Ray finds its GPU, known once it is ready)
        host = self.pools[self.hosted.get(pool.feature, pool.feature)]
        node = None
        if host.device == CPU and host.holds_cores and len(self.slots) > 1:
            node = min(self.slots, key=lambda n: sum(w.node == n for w in host.workers) / self.slots[n])
        handle = self.new_actor[host.feature](node=node)
        pairs = []
        for p in [host, *(self.pools[g] for g, h in self.hosted.items() if h == host.feature)]:
            worker = Worker(handle, node=node)
            p.workers.append(worker)
            pairs.append((p.feature, worker))
            if node is not None:
                cluster.count_work(self.report.cluster, node, f"{p.feature} actor")
        self.readying[handle.ready.remote()] = pairs
        return next(w for f, w in pairs if f == pool.feature)

    def drop_actor(self, worker: Worker) -> None:
        """Take an actor out of every pool it serves (a host's actor serves its guests' pools too)."""
        for p in self.pools.values():
            p.workers[:] = [w for w in p.workers if w.handle is not worker.handle]

    def _start_actor(self, remote: Any, options: dict[str, Any], *args: Any, node: str | None = None) -> Any:
        """(`args`: `actors.ExtractorWorker`'s: feature, config, device, threads, calibration, cohosted)"""
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
        if self.progress is None:  # its first line before the models load
            self.progress = Progress(sum(len(f) for f in todo.values()))
        self.start_actors({f for feats in todo.values() for f in feats})
        self.todo, self.items, self.questions = todo, items, questions
        self.decode_task, self.segment_task = self.ray.remote(actors.decode_item), self.ray.remote(actors.decode_segment)
        for item_id in sorted(todo):
            self.sched.add(item_id, todo[item_id])
        self.received("clips", len(todo))
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
            samples = self.stop_sampling()
            self.report.utilisation = report.utilisation(self.stages.calls, self.cpus, workers, self.sched.name,
                                                         samples, self.sampler.cores if self.sampler else 0)
            if self.report.utilisation:
                self.report.utilisation["over_time"] = report.utilisation_over_time(self.stages.calls, self.cpus,
                                                                                   workers)
            self.report.utilisation["actors_ready_s"] = self.ready_at
            # when each feature's first actor began to load, and Ray's start: bench.simulate's start-up, measured
            self.report.utilisation["actors_start_s"] = self.actors_started
            self.report.utilisation["ray_start_s"] = self.ray_start

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
                    self.actor_ready(ref, self.readying.pop(ref))
            if self.committed(self.committer.drain()):
                supervise.note(self.report, "extraction", force=False)
            self.progress.tick()
            self.schedule()

    def schedule(self) -> None:
        """Send what the policy decides now: calls first (they free decoded data and cores), then decodes."""
        for call in self.sched.next_calls():
            ref = call.worker.handle.__call__.remote([u.item for u in call.take], *[u.ref for u in call.take],
                                                     feature=call.pool.feature, store=self.store_target(call))
            self.running[ref] = call
        for job in self.sched.next_decodes():
            self.submit(job)

    def store_target(self, call: Call) -> ownparts.StoreTarget | None:
        """On object storage, the call's items whose rows its actor writes to the store itself (those whole in
        this call: a long video's segments are joined here); None where every row comes here."""
        if self.writer is None or not ownparts.actors_write(self.config.worker_parts, self.writer.path):
            return None  # (no writer: bench/engine.py's runner, whose commits store nothing)
        feat = call.pool.feature
        pairs = [(u.item, self.pairs.get((feat, u.item))) for u in call.take if u.part == 0]
        whole = frozenset(item for item, pair in pairs if pair is not None and pair.segments == 1)
        return ownparts.StoreTarget(str(self.writer.path), whole) if whole else None

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
            ref, frames = self.segment_task.options(num_returns=2, **opts).remote(
                item, job.segment, config.batch_bytes, self.on_device(job), config.tracks)
            self.decoding[ref] = (job, [frames])
            return
        refs = self.decode_task.options(num_returns=1 + len(job.kinds), **opts).remote(
            item, list(job.kinds), self.questions.get(job.item, []), config.audio_rate_hz, config.batch_bytes,
            self.on_device(job), config.tracks, config.limits)
        self.decoding[refs[0]] = (job, refs[1:])
        for feat in self.todo[job.item]:
            self.pairs[feat, job.item] = _Pair()

    def on_device(self, job: Decode) -> tuple[str, tuple[str, ...]] | None:
        """What a decode task is told of a video routed to the actors' decoder: their device and the features
        that read the frames (the actor keeps them until all have)."""
        if not job.on_device or self.frames_device is None:
            return None
        return self.frames_device, tuple(f for f in self.todo[job.item] if self.pools[f].decodes_frames)

    def actor_ready(self, ref: Any, pairs: list[tuple[str, Worker]]) -> None:
        """One actor is ready (or failed to start): for its own feature and any it hosts."""
        try:
            where = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            raystart.check()  # Ctrl-C at a terminal reaches Ray's processes too: then this is the stop, not a fault
            if (gpu := _GPU_UNUSABLE.search(str(e))) is not None:  # no other actor there could use it either
                raise actors.GpuUnusable(f"{pairs[0][0]}: {gpu.group(1)}") from None
            feat, worker = pairs[0]
            pool = self.sched.pools[feat]
            self.drop_actor(worker)
            log.warning("%s: a model actor did not start (%s)", feat, _ray_error(e))
            if pool.workers:  # the others take its share
                return
            if self.restarts.get(feat, 0) < 1:  # once more, as Ray restarts an actor that died once
                self.restarts[feat] = self.restarts.get(feat, 0) + 1
                self.add_worker(pool)
                return
            raise RuntimeError(f"{feat}: no model actor could start: {_ray_error(e)}") from e
        for feat, worker in pairs:
            placed, worker.node, worker.ready = worker.node, where.get("node"), True
            self.ready_at[feat] = time.time()  # the last of a feature's actors to load: when its pool was whole
            gpus = where.get("gpus") or []
            worker.gpu = f"{(worker.node or 'local')[:8]}:{','.join(map(str, gpus))}" if gpus else None
            if placed is None:  # counted where it was placed otherwise
                cluster.count_work(self.report.cluster, worker.node, f"{feat} actor")
        if not self.readying:
            self.progress.phase("extracting")

    def batches(self) -> dict[str, list[dict[str, Any]]]:
        """Each model actor's batch sizes and per-unit cost (`ExtractorWorker.batches`); a dead actor's are lost."""
        out: dict[str, list[dict[str, Any]]] = {}
        for feat, pool in self.sched.pools.items():
            for ref in [w.handle.batches.remote(feat) for w in pool.workers]:
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
            got: DecodeReport = ray.get(ref)
            self.received("decode records", got)
            cluster.count_work(self.report.cluster, got.node, "decode")
            for call in got.calls:
                self.stages.add(call)
        except ray.exceptions.RayError as e:  # the decode worker died (e.g. out of memory) on every retry
            got = DecodeReport(item_id, {kind: Failure.of(item_id, f"decode:{kind}", input_kinds.source(item, kind),
                                                          _ray_error(e)) for kind in kinds})
        decoded = {kind: d for kind, d in got.inputs.items() if isinstance(d, Decoded)}
        if segment == 0:
            self.inputs[item_id] = decoded
        elif item_id in self.inputs:  # a later segment: its decode time and damaged seconds add to the item's
            whole = self.inputs[item_id]
            for kind, d in decoded.items():
                if kind in whole:
                    whole[kind] = whole[kind].then(d)
        frames = decoded.get("frames")
        if segment == 0 and frames is not None and frames.cpu_reason:  # a file the actors' decoder cannot show so
            self.report.cpu_decoded.append({"item": item_id, "file": _str(item.video),
                                            "reason": frames.cpu_reason, "where": "decode task"})
        units: dict[str, Unit] = {}
        for kind, value_ref in zip(kinds, refs, strict=True):
            result = got.inputs[kind]
            for feat in self.open_feats(item_id, kind):
                if isinstance(result, Failure):
                    self.finish(feat, item_id, failed=result)
                    continue
                if segment == 0:
                    self.pairs[feat, item_id].segments = result.segments
                units[feat] = Unit(item_id, value_ref, result.units, result.bytes, segment, kind=kind,
                                   device=kind == "frames" and result.on_device)
        self.sched.decoded(item_id, segment, units, {kind: d.bytes for kind, d in decoded.items()})
        if segment == 0 and frames is not None and frames.segments > 1 and self.open_feats(item_id, "frames"):
            self.sched.add_segments(item_id, range(1, frames.segments))

    def extracted(self, ref: Any, call: Call) -> None:
        feat = call.pool.feature
        results = self.results(ref, call)
        self.sched.call_done(call)  # also for a call whose actor died: its core is free again
        for unit, r in results:
            item_id = r.item
            self.sched.release(item_id, unit.part, unit.kind, 1)
            pair = self.pairs.get((feat, item_id))
            if pair is None:  # failed already (another segment)
                continue
            if r.failure is not None:
                fail = r.failure
                if not fail.file:  # (the actor knows the item, not its file)
                    path = input_kinds.source(self.items[item_id], self.specs[feat].extractor.input_kind)
                    fail = dataclasses.replace(fail, file=_str(path))
                self.finish(feat, item_id, failed=fail)
                continue
            pair.rows[unit.part], pair.seconds = r.rows, pair.seconds + r.seconds
            self.note_decoder(feat, item_id, r.decoded, pair)
            if len(pair.rows) == pair.segments:
                self.finish(feat, item_id)

    def note_decoder(self, feat: str, item_id: str, decoded: Decoded | None, pair: _Pair) -> None:
        """Who decoded a segment's frames: the model actor (`decoded`, from a plan) or else a CPU decode task. The
        decoder goes to the pair (its fingerprint and attributes, `commit`), a CPU fallback's reason to the run
        report (once per file)."""
        if self.specs[feat].extractor.input_kind != "frames" or self.items[item_id].image is not None:
            return
        pair.decoders.add((decoded.decoder if decoded is not None else None) or nvdec.CPU)
        if decoded is not None and decoded.cpu_reason and not any(c["item"] == item_id
                                                                  for c in self.report.cpu_decoded):
            self.report.cpu_decoded.append({"item": item_id, "file": _str(self.items[item_id].video),
                                            "reason": decoded.cpu_reason, "where": "model actor"})

    def finish(self, feat: str, item_id: str, failed: Failure | None = None) -> None:
        """Close a (feature, item) pair: commit its rows (joined from its segments) or record its failure."""
        pair = self.pairs.pop((feat, item_id))
        if failed is None:
            kind = self.specs[feat].extractor.input_kind
            path = input_kinds.source(self.items[item_id], kind)
            try:
                rows = pair.rows[0] if isinstance(pair.rows.get(0), WrittenRows) else \
                    self.specs[feat].extractor.join([pair.rows[k] for k in sorted(pair.rows)], self.specs[feat].config)
            except Exception as e:
                failed = Failure.of(item_id, f"extract:{feat}", path, e)
            else:
                if pair.segments > 1 and not len(rows.intervals):  # as decoding it in one piece would have said
                    failed = Failure.of(item_id, f"decode:{kind}", path, decode.InputError(
                        f"{path}: no frame could be decoded in any of its {pair.segments} segments"))
            if failed is None:
                self.commit(feat, self.items[item_id], rows, self.inputs[item_id][kind], pair.seconds,
                            "+".join(sorted(pair.decoders)) or None)
        if failed is not None:
            self.fail(feat, failed)
            self.progress.failed()
        else:
            self.progress.handed()
        if not any((f, item_id) in self.pairs for f in self.todo[item_id]):
            self.inputs.pop(item_id, None)

    def received(self, what: str, value: Any) -> None:
        """Count what the driver got from Ray (`report.driver_received`): bytes as serialized, or a number."""
        got = self.report.driver_received
        got[what] = got.get(what, 0) + (value if isinstance(value, int) else ownparts.wire_bytes(value))

    def results(self, ref: Any, call: Call) -> list[tuple[Unit, Extracted]]:
        """The call's per-item results. If the worker process died (segfault, out of
        memory) even after Ray's restart and retry, the actor is replaced, and the call's items go back to the
        queue to run alone on an idle actor: only the item that kills a worker when alone fails."""
        feat, take = call.pool.feature, list(call.take)
        try:
            results, record = self.ray.get(ref)
            self.received("model results", (results, record))
            self.received("pairs written by actors", sum(isinstance(r.rows, WrittenRows) for r in results))
            decoding = record.pop("device_decode", None)  # the frames the actor decoded first, on its device
            self.report.add_retries(record.pop("storage_retries", {}))  # its uploads' (ownparts.store_results)
            for r in (record, decoding):
                if r is not None and call.worker.gpu:
                    r["gpu"] = call.worker.gpu
            self.stages.add(record)
            self.stages.add(decoding)
            return list(zip(take, results, strict=True))
        except self.ray.exceptions.RayError as e:
            raystart.check()  # a signal to the process group kills the actors too: stop, start nothing new
            if isinstance(e, self.ray.exceptions.RayActorError) and call.worker in call.pool.workers:
                self.drop_actor(call.worker)
                self.add_worker(call.pool)
                log.warning("%s: a model worker died (%s); started a new one", feat, _ray_error(e))
            if not take[0].solo:  # not yet run alone: the killer may be a batch-mate or another call on that actor
                self.sched.requeue(feat, take)
                return []
            item_id = take[0].item
            return [(take[0], Extracted(item_id, None, Failure.of(item_id, f"extract:{feat}", None, _ray_error(e)),
                                        0.0))]

    def fail(self, feat: str, failure: Failure) -> None:
        self.report.counts[feat]["failed"] += 1
        self.report.failures.append(failure.record(feat))
        log.warning("%s/%s failed at %s: %s", feat, failure.item, failure.stage, failure.error)

    def commit(self, feat: str, item: MediaItem, rows: Any, decoded: Decoded, secs: float,
               decoder: str | None = None) -> None:
        """Hand the pair to the committer; it counts as done once its batch is in the store (`committed`).
        `decoded`: its input's record (the decode task's, its segments' added); `decoder`: what decoded its
        frames, where not the CPU path: in its identity (fingerprint, `source`)."""
        spec, kind = self.specs[feat], decoded.kind
        identity = self.identities[feat, item.id].decoded_by(decoder)
        if decoder is not None:
            self.report.frames_decoders.setdefault(feat, {}).setdefault(decoder, 0)
            self.report.frames_decoders[feat][decoder] += 1
        attrs = {
            "fingerprint": identity.fingerprint, "spec_hash": spec.spec_hash,
            "source": identity.source, "duration_s": decoded.duration_s,
            "extract_seconds": round(secs, 4), "decode_seconds": round(decoded.seconds, 4),
        }
        if decoder not in (None, nvdec.CPU):  # (the CPU path's items say nothing, as before this path)
            attrs["decoder"] = decoder
        if decoded.missing_s:  # damaged input: the seconds without rows (segments come in any order)
            attrs["missing_s"] = [list(span) for span in sorted(decoded.missing_s)]
        file = _str(input_kinds.source(item, kind))
        partial = partial_record(feat, item.id, {**attrs, "source": {"path": file}}, attrs["duration_s"])
        notes = []
        if decoded.streams_end_s is not None:  # by design, not damage: a note, not PARTIAL
            attrs["streams_end_s"] = decoded.streams_end_s
            notes.append(("shorter", shorter_record(feat, item.id, file, kind, attrs["duration_s"],
                                                    attrs["streams_end_s"])))
        if decoded.stream_start_s is not None:  # a late start: a note, not PARTIAL
            attrs["stream_start_s"] = decoded.stream_start_s
            notes.append(("late", late_record(feat, item.id, file, kind, attrs["stream_start_s"])))
        if decoded.streams is not None:  # one of several streams: said once per (item, stream) in the report
            attrs["streams"] = decoded.streams
            notes.append(("streams", streams_record(item.id, file, kind, attrs["streams"])))
        self.pending[feat, item.id] = (secs, partial, notes)
        self.committer.put(feat, item.id, rows, attrs)

    def committed(self, outcomes: list[Any]) -> int:
        """Count the pairs whose batch is in the store (done, partial) or failed to get there; how many."""
        for o in outcomes:
            secs, partial, notes = self.pending.pop((o.feature, o.item), (0.0, None, []))
            self.stages.add(o.record)
            if isinstance(o.error, StoreStopped):  # never tried: not computed, the next run does it
                self.progress.failed(handed=True)
                continue
            if o.error is not None:  # its own commit failed: named with its own feature's folder
                self.fail(o.feature, Failure.of(o.item, f"write:{o.feature}",  # (a path, or a bucket's URL)
                                                f"{str(self.writer.path).rstrip('/')}/{o.feature}", o.error))
                self.progress.failed(handed=True)
                continue
            self.report.counts[o.feature]["done"] += 1
            self.progress.stored()
            if partial is not None:
                self.report.partial.append(partial)
            for what, note in notes:
                listed = getattr(self.report, what)
                if what != "streams" or note not in listed:  # (several features read one stream)
                    listed.append(note)
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
    host: str | None = None  # the feature whose actors run this one too (frames features decoding on the device)
    decode_device: str | None = None  # its actors decode frames plans there (media/nvdec.py)


def device_queue(plan: dict[str, ActorPlan], config: RunConfig) -> float:
    """The routing bound of `Scheduler._on_device`: every video under "gpu", none without decoding actors,
    else `gpu_decode_queue` or 2 per frames-decoding actor."""
    decoding = [p.actors for p in plan.values() if p.decode_device]
    if not decoding:
        return 0
    if config.frames_decoder == "gpu":
        return math.inf
    return config.gpu_decode_queue if config.gpu_decode_queue is not None else 2 * max(decoding)


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
    return _frames_on_device(_leave_decodes_a_cpu(plan, cpus) if fixed else plan, specs, config)


def _leave_decodes_a_cpu(plan: dict[str, ActorPlan], cpus: int) -> dict[str, ActorPlan]:
    """Under the fixed policy the actors hold their Ray CPUs for the whole run and decode tasks get what is left:
    on a small node (2 CPUs + 1 GPU: 4 GPU actors and 1 acoustic, a CPU each) nothing was left, Ray could place
    neither every actor nor any decode task, and the run stood still. Where the actors ask for more than all but
    one of the node's CPUs, their holds shrink in proportion (Ray takes fractions of a CPU to 4 decimals)."""
    held = sum(p.options.get("num_cpus", 0) * p.actors for p in plan.values())
    room = max(0, cpus - 1)
    if held <= room:
        return plan
    share = math.floor(room / held * 1e4) / 1e4
    return {f: dataclasses.replace(p, options={**p.options, "num_cpus": p.options.get("num_cpus", 0) * share})
            for f, p in plan.items()}


def _frames_on_device(plan: dict[str, ActorPlan], specs: dict[str, FeatureSpec],
                      config: RunConfig) -> dict[str, ActorPlan]:
    """Where the frames features' actors decode the frames themselves (`frames_decoder`), those features share
    actors: the first hosts the others (its actors load every frames model, one GPU share for each), so a
    clip's frames are decoded once, on the device, for all of them (pipeline/actors.py `DeviceFramesCache`).
    "auto": where the frames models run on CUDA and torchcodec is installed; "gpu": also on a CPU-only machine
    (torchcodec's CPU decoder); never under the fixed policy (kept as it ran)."""
    frames = sorted(f for f in plan if specs[f].extractor.input_kind == "frames")
    if not frames or config.frames_decoder == "cpu" or config.scheduler == "fixed":
        return plan
    if not all(specs[f].extractor.uses_gpu for f in frames):
        return plan  # a frames feature on CPU actors of its own: the CPU decode tasks feed them all
    device = {plan[f].device for f in frames}
    if device == {CUDA} and (config.frames_decoder == "gpu" or nvdec.torchcodec_present()):
        where = "cuda"
    elif device == {CPU} and config.frames_decoder == "gpu":
        where = "cpu"
    else:
        return plan
    host = frames[0]
    actors_n = max(plan[f].actors for f in frames)  # (each hosts every frames model: the most any of them asks)
    options = dict(plan[host].options)
    if "num_gpus" in options:  # the GPU share the group's actors had, split over the shared ones
        options["num_gpus"] = sum(plan[f].options["num_gpus"] * plan[f].actors for f in frames) / actors_n
    out = dict(plan)
    for f in frames:
        out[f] = dataclasses.replace(plan[f], options=options, actors=actors_n, host=host, decode_device=where,
                                     holds_cores=plan[f].holds_cores and where != "cuda")
    return out


@dataclass(frozen=True)
class Identity:
    """A (feature, item) pair's source identity (`Kind.identity`) and its fingerprint, made once when the run is
    planned (pipeline/run.py) and stored with its rows; the fingerprint hashes the file's name, size and mtime (an
    object's in a bucket: its size and ETag), not the path or URL it was reached by."""

    spec_hash: str
    source: dict[str, Any]
    fingerprint: str

    @classmethod
    def of(cls, spec_hash: str, source: dict[str, Any]) -> Identity:
        return cls(spec_hash, source, store_fingerprint(spec_hash, {k: v for k, v in source.items() if k != "path"}))

    def decoded_by(self, decoder: str | None) -> Identity:
        """The identity of frames a device decoder made (`decoder` in the source): other pictures than the CPU
        path's, so another fingerprint; the CPU path's (or no decoder) is this one."""
        return self if decoder in (None, nvdec.CPU) else Identity.of(self.spec_hash, {**self.source, "decoder": decoder})


class WorkerLost(RuntimeError):
    """A Ray worker process died while handling this item, on every retry."""


# the line an actor's `actors.GpuUnusable` leaves in the RayError of its creation task
_GPU_UNUSABLE = re.compile(r"GpuUnusable: (.+)")


def _ray_error(e: BaseException) -> WorkerLost:
    """Ray's errors carry pages of traceback; the failure record keeps the class and the first line."""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return WorkerLost(f"{type(e).__name__}: {first}")


def _str(path: Path | None) -> str | None:
    return str(path) if path is not None else None


