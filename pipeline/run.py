"""`make extract`: plan what is missing or stale, then a Ray DAG of CPU decode tasks feeding model
actors (GPU when Ray sees GPUs), with bounded in-flight work; finished (feature, item) pairs go to a
background committer that writes them to the store in atomic batches (pipeline/committer.py). A failing
item is recorded (file, stage, error) and the run goes on."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from manifests.records import ManifestNote, MediaItem, QAItem
from pipeline import actors, cluster, decode, exitcodes, inputs, picture, raystart, stages, stop
from pipeline.committer import Committer
from pipeline.config import FeatureSpec, RunConfig
from pipeline.sources import choose_items, load_items, manifest_summary
from store import layout
from store.plan import Wanted, make_plan
from store.reader import Store
from store.writer import StoreError, StoreWriter

log = logging.getLogger("siqfeat")
PROGRESS_LOG_S = 15.0  # seconds between progress lines when no terminal shows the bar


@dataclass
class RunReport:
    run_id: str
    dataset: str
    store: str
    counts: dict[str, dict[str, int]]  # feature -> done / skipped / failed / n/a
    failures: list[dict[str, Any]] = field(default_factory=list)
    filtered: dict[str, dict[str, float]] = field(default_factory=dict)  # feature -> item -> ratio
    seconds: float = 0.0
    model_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cluster: dict[str, Any] = field(default_factory=dict)  # the Ray cluster used: address, nodes, resources, work
    manifest: list[dict[str, Any]] = field(default_factory=list)  # ManifestNote records: inputs not taken as they were
    damaged: list[dict[str, Any]] = field(default_factory=list)  # items found damaged: path, problem, recomputed
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage -> busy/worker seconds, units (stages.py)
    batches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # feature -> per actor: batch choices, cost
    # pairs committed with seconds that did not decode (damaged data, a truncated file): feature, item, file,
    # missing_s (the spans), missing_total_s, duration_s
    partial: list[dict[str, Any]] = field(default_factory=list)
    not_saved: str | None = None  # why <store>/_runs/<run id>.json could not be written (disk full, …)
    store_error: str | None = None  # the store could not be written (disk full): the run stopped there
    stopped: dict[str, Any] | None = None  # a signal stopped the run: signal, signum, during, not_computed
    planned: dict[str, int] = field(default_factory=dict)  # feature -> pairs the plan gave to compute
    ray_failed: dict[str, Any] | None = None  # Ray did not start or died (pipeline/raystart.py): what, hint, during…

    @property
    def exit_code(self) -> int:
        """128 + the signal when one stopped the run; STORE when the store could not be written; FAILURES
        when any pair failed; DAMAGED when damaged items were left as they are; STORE when only the report
        could not be saved."""
        if self.stopped:
            return 128 + int(self.stopped["signum"])
        if self.ray_failed:
            return exitcodes.RAY
        if self.store_error:
            return exitcodes.STORE
        if any(c["failed"] for c in self.counts.values()):
            return exitcodes.FAILURES
        if any(not d["recomputed"] for d in self.damaged):
            return exitcodes.DAMAGED
        return exitcodes.STORE if self.not_saved else exitcodes.OK

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def summary(self) -> str:
        lines = [f"{self.dataset}: {self.store} ({self.seconds:.1f} s)"]
        lines += self.notes
        if self.cluster:
            lines.append(cluster.summary_line(self.cluster))
        lines += manifest_summary(self.manifest)
        lines += batch_lines(self.batches)
        partial = {feat: sum(p["feature"] == feat for p in self.partial) for feat in self.counts}
        lines.append(f"  {'feature':<12}{'done':>6}{'partial':>9}{'skipped':>9}{'failed':>8}{'n/a':>6}")
        for feat, c in self.counts.items():
            lines.append(f"  {feat:<12}{c['done']:>6}{partial[feat]:>9}{c['skipped']:>9}{c['failed']:>8}{c['n/a']:>6}")
        for d in self.damaged:
            lines.append(f"  DAMAGED {d['feature']}/{d['item']} ({d['path']}): {d['problem']}; "
                         + ("recomputed" if d["recomputed"] else "not in this run, left as it is"))
        for f in self.failures:  # one line per (feature, item): features sharing a decode failure each say so
            lines.append(f"  FAILED {f['feature']}/{f['item']} [{f['stage']}] {f['file'] or ''}: {f['error']}")
        for p in self.partial:  # done, but with seconds that have no rows
            of = f" of {p['duration_s']:.2f}" if p["duration_s"] is not None else ""
            lines.append(f"  PARTIAL {p['feature']}/{p['item']} {p['file'] or ''}: {p['missing_total_s']:.2f}{of} s "
                         f"did not decode ({_spans(p['missing_s'])})")
        for feat, items in self.filtered.items():
            for item, ratio in sorted(items.items()):
                lines.append(f"  filtered by {feat} policy: {item} (face_ratio {ratio:.2f})")
        if self.store_error:
            lines.append(f"  STOPPED: {self.store_error}")
        if self.not_saved:
            lines.append(f"  run report NOT saved: {self.not_saved}")
        failed = sum(c["failed"] for c in self.counts.values())
        if self.stopped:
            s = self.stopped
            left = f"; {s['not_computed']} planned pair(s) not computed" if s.get("not_computed") is not None else ""
            lines.append(f"  STOPPED by {s['signal']} during {s['during']}: committed pairs are kept{left}; "
                         f"the next run computes what is missing: exit code {self.exit_code}")
        elif self.ray_failed:
            lines.append(raystart.summary_line(self.ray_failed, self.exit_code))
        elif failed:
            lines.append(f"  completed with {failed} failed (feature, item) pair(s): exit code {self.exit_code}")
        elif self.exit_code:
            lines.append(f"  completed with problems: exit code {self.exit_code}")
        return "\n".join(lines)


def batch_lines(batches: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per feature: the batch sizes its actors used and where they came from, and the measured cost."""
    lines = []
    for feat, workers in sorted(batches.items()):
        chosen = sorted({(c["input"], c["batch"], c["source"]) for w in workers for c in w["choices"]})
        if not chosen:
            continue
        units = sum(w["units"] for w in workers)
        cost = sum(w["model_s"] for w in workers) / units if units else None
        unit = next(c["unit"] for w in workers for c in w["choices"])
        lines.append(f"  batch {feat}: " + ", ".join(f"{b} ({source}, {inp})" for inp, b, source in chosen)
                     + (f"; {cost * 1e3:.1f} ms per {unit} in this run" if cost else ""))
    return lines


def _spans(spans: list[list[float]], most: int = 3) -> str:
    """Missing spans as `a-b s`, neighbouring ones (consecutive seconds) joined, at most `most` of them."""
    joined: list[list[float]] = []
    for a, b in sorted(spans):
        if joined and a <= joined[-1][1] + 1e-6:
            joined[-1][1] = max(joined[-1][1], b)
        else:
            joined.append([a, b])
    text = ", ".join(f"{a:g}-{b:g} s" for a, b in joined[:most])
    return text + (f" and {len(joined) - most} more" if len(joined) > most else "")


def source_identity(item: MediaItem, kind: str, questions: list[QAItem], config: RunConfig) -> dict[str, Any]:
    """The declared identity of what an input kind is decoded from: it enters the fingerprint."""
    if kind == "qa":
        return {"qa": layout.sha256_of([q.model_dump(mode="json", exclude={"split"}) for q in questions])}
    if kind in inputs.TEXT_KINDS:  # the item's own texts, not the whole annotations file
        return {"path": str(item.annotations), kind: layout.sha256_of(inputs.text_identity(item, kind))}
    path = decode.source_path(item, kind)
    ident: dict[str, Any] = {"path": str(path)}
    if path is not None and path.exists():
        ident.update(layout.file_identity(path))
    if kind in ("frames", "audio"):
        ident["decode"] = decode.DECODE_VERSION if item.image is None else f"image-{inputs.IMAGE_DECODE_VERSION}"
    if kind == "frames":  # the pictures as displayed and their record (pipeline/picture.py)
        ident["picture"] = picture.PICTURE_VERSION
    if kind == "audio":
        ident["rate_hz"] = config.audio_rate_hz
    if item.cut_from_source and kind in ("frames", "audio"):
        ident["cut"] = [item.clip_start_s, item.clip_end_s]
    if kind == "transcript":
        ident["clip"] = [item.clip_start_s, item.clip_end_s]
    return ident


def applicable(item: MediaItem, kind: str, questions: list[QAItem]) -> bool:
    return bool(questions) if kind == "qa" else decode.source_path(item, kind) is not None


@dataclass(frozen=True)
class _Unit:
    """One decoded input (an item's, or a segment of a long video's) waiting for a model call."""

    item: str
    ref: Any  # its object ref: the data stays in the object store until an actor reads it
    n: int  # batching count: frames, or 1 for other inputs
    nbytes: int
    part: int = 0  # segment
    solo: bool = False  # run alone: its batch crashed a worker


@dataclass
class _Pair:
    """An open (feature, item): rows of its segments as they come back."""

    segments: int = 1
    rows: dict[int, Any] = field(default_factory=dict)
    seconds: float = 0.0


class _Runner:
    """The scheduling loop; one per run."""

    def __init__(self, config: RunConfig, specs: list[FeatureSpec], writer: StoreWriter, report: RunReport) -> None:
        self.config, self.specs, self.writer, self.report = config, {s.name: s for s in specs}, writer, report
        self.fingerprints: dict[tuple[str, str], str] = {}
        self.sources: dict[tuple[str, str], dict[str, Any]] = {}
        self.stages = stages.StageStats()
        self.committer: Committer | None = None
        self.pending: dict[tuple[str, str], tuple[float, dict[str, Any] | None]] = {}  # handed to the committer
        self.closed = 0  # pairs finished (handed to the committer or failed); a disabled tqdm counts nothing

    def start_ray(self) -> None:
        stop.stage("starting Ray")
        address = os.environ.get("RAY_ADDRESS")
        self.ray = ray = raystart.start(address)  # retried once; RayFailed when it does not come up
        stop.check()
        resources = ray.cluster_resources()
        self.gpus, self.cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
        log.info("Ray: %d CPU, %d GPU%s", self.cpus, self.gpus, f" at {address}" if address else " (local)")
        self.report.cluster = cluster.describe(ray, address)

    def start_actors(self, features: set[str]) -> None:
        from extractors.calibrate import run_cache_file

        remote = self.ray.remote(actors.ExtractorWorker)
        calibration = run_cache_file()  # the driver's environment decides, not the (maybe older) workers'
        self.new_actor: dict[str, Any] = {}
        self.actors: dict[str, list[Any]] = {}
        for feat, (opts, n, device, threads) in actor_plan(self.specs, features, self.config, self.cpus,
                                                          self.gpus).items():
            spec = self.specs[feat]
            self.new_actor[feat] = functools.partial(  # also used to replace an actor whose process died
                remote.options(**opts, max_restarts=1, max_task_retries=1).remote, feat, spec.config, device, threads,
                calibration)
            self.actors[feat] = [self.new_actor[feat]() for _ in range(n)]
            log.info("%s: %d %s actor(s) for %s%s", feat, n, device, spec.config.extractor,
                     f", {threads} thread(s) each" if threads else "")
        placed = self.get_sliced([a.ready.remote() for group in self.actors.values() for a in group])
        feats = [feat for feat, group in self.actors.items() for _ in group]
        for feat, node in zip(feats, placed, strict=True):
            cluster.count_work(self.report.cluster, node, f"{feat} actor")

    def get_sliced(self, refs: list[Any]) -> list[Any]:
        """ray.get in waits of a second, a signal checked between them (models may take a while to load)."""
        while len(self.ray.wait(refs, num_returns=len(refs), timeout=1.0)[0]) < len(refs):
            stop.check()
        return self.ray.get(refs)

    def run(self, todo: dict[str, list[str]], items: dict[str, MediaItem], questions: dict[str, list[QAItem]]) -> None:
        from tqdm import tqdm

        self.start_actors({f for feats in todo.values() for f in feats})
        self.todo, self.items, self.questions = todo, items, questions
        # made once: each ray.remote() is a new function for Ray to export
        self.decode_task, self.segment_task = self.ray.remote(actors.decode_item), self.ray.remote(actors.decode_segment)
        self.queue = deque(sorted(todo))  # items not yet decoding
        self.later: deque[tuple[str, int]] = deque()  # (item, segment) of long videos still to decode
        self.decoding: dict[Any, tuple[str, int, list[str], list[Any]]] = {}  # meta ref -> item, segment, kinds, refs
        self.waiting: dict[str, list[_Unit]] = defaultdict(list)  # feature -> decoded inputs for its actors
        self.running: dict[Any, tuple[str, Any, list[_Unit]]] = {}  # result ref -> (feature, actor, batch)
        self.busy: dict[Any, int] = defaultdict(int)
        self.holds: dict[tuple[str, int], int] = {}  # (item, segment) -> feature results outstanding
        self.held_bytes: dict[tuple[str, int], int] = {}  # (item, segment) -> bytes of its decoded objects
        self.meta: dict[str, dict[str, Any]] = {}  # item -> decode meta, while any of its pairs is open
        self.pairs: dict[tuple[str, str], _Pair] = {}  # open (feature, item) pairs
        total = sum(len(f) for f in todo.values())
        self.bar = tqdm(total=total, desc="extracting", unit="pair", disable=None)
        self.last_log = (time.perf_counter(), 0)
        self.committer = Committer(self.writer, self.config.commit_batch_items, self.config.commit_batch_bytes,
                                   self.config.commit_batch_s)
        stop.stage("extraction")
        try:
            self.loop(total)
            self.report.batches = self.batches()
        finally:  # also when a signal stops the run: the open batches are committed, the stage figures reported
            with stop.deferred(raise_after=False):
                self.committed(self.committer.close())
            self.bar.close()
            self.report.stages = self.stages.summary()

    def loop(self, total: int) -> None:
        self.submit()
        while (self.decoding or self.running or any(self.waiting.values())) and self.committer.store_error is None:
            stop.check()  # a signal during the last second: stop here, between two Ray calls
            refs = list(self.decoding) + list(self.running)
            ready, _ = self.ray.wait(refs, num_returns=1, timeout=1.0) if refs else ([], [])
            for ref in ready:
                if ref in self.decoding:
                    self.decoded(ref, *self.decoding.pop(ref))
                else:
                    self.extracted(ref, *self.running.pop(ref))
            self.committed(self.committer.drain())
            self.progress(total)
            self.submit()
            self.dispatch(flush=not self.decoding)  # nothing more is coming soon: run partial batches

    def batches(self) -> dict[str, list[dict[str, Any]]]:
        """Each model actor's batch sizes and per-unit cost (`ExtractorWorker.batches`); a dead actor's are lost."""
        out: dict[str, list[dict[str, Any]]] = {}
        for feat, group in self.actors.items():
            for ref in [a.batches.remote() for a in group]:
                try:
                    out.setdefault(feat, []).append(self.ray.get(ref))
                except self.ray.exceptions.RayError:
                    continue
        return out

    def progress(self, total: int) -> None:
        """A log line every `PROGRESS_LOG_S` for non-interactive runs (cluster jobs, CI), where tqdm is silent.
        Pairs handed to the committer count as finished; `done` counts those whose batch is in the store."""
        now = time.perf_counter()
        if self.bar.disable and now - self.last_log[0] >= PROGRESS_LOG_S and self.closed != self.last_log[1]:
            c = self.report.counts
            log.info("progress: %d/%d pairs (%s)", self.closed, total,
                     ", ".join(f"{f} {c[f]['done']} stored + {c[f]['failed']} failed" for f in sorted(c)))
            self.last_log = (now, self.closed)

    def submit(self) -> None:
        """Start decode tasks while decoded data alive stays under `max_inflight_items` objects and
        `max_inflight_bytes`; later segments of videos already started come first."""
        config = self.config
        while (self.later or self.queue) and len(self.decoding) + len(self.holds) < config.max_inflight_items \
                and sum(self.held_bytes.values()) < config.max_inflight_bytes:
            if self.later:
                item_id, segment = self.later.popleft()
                if not self.open_feats(item_id, "frames"):
                    continue  # its pairs failed already
                ref, frames = self.segment_task.options(
                    num_cpus=1, num_returns=2, max_retries=config.decode_retries, retry_exceptions=[OSError],
                ).remote(self.items[item_id], segment, config.batch_bytes)
                self.decoding[ref] = (item_id, segment, ["frames"], [frames])
                continue
            item_id = self.queue.popleft()
            kinds = sorted({self.specs[f].extractor.input_kind for f in self.todo[item_id]})
            refs = self.decode_task.options(
                num_cpus=1, num_returns=1 + len(kinds), max_retries=config.decode_retries, retry_exceptions=[OSError],
            ).remote(self.items[item_id], kinds, self.questions.get(item_id, []), config.audio_rate_hz,
                     config.batch_bytes)
            self.decoding[refs[0]] = (item_id, 0, kinds, refs[1:])
            for feat in self.todo[item_id]:
                self.pairs[feat, item_id] = _Pair()

    def open_feats(self, item_id: str, kind: str) -> list[str]:
        """The item's features of this input kind whose pair is still open."""
        return [f for f in self.todo[item_id]
                if (f, item_id) in self.pairs and self.specs[f].extractor.input_kind == kind]

    def decoded(self, ref: Any, item_id: str, segment: int, kinds: list[str], refs: list[Any]) -> None:
        """A decode task finished: its inputs wait for their features' actors (or their pairs fail)."""
        ray, item = self.ray, self.items[item_id]
        try:
            m = ray.get(ref)
            cluster.count_work(self.report.cluster, m.get("node"), "decode")
            for call in m.get("calls", ()):
                self.stages.add(call)
        except ray.exceptions.RayError as e:  # the decode worker died (e.g. out of memory) on every retry
            m = {"failures": {kind: actors.failure(item_id, f"decode:{kind}", decode.source_path(item, kind),
                                                   _ray_error(e)) for kind in kinds}}
        if segment == 0:
            self.meta[item_id] = m
        elif item_id in self.meta:  # a later segment: its decode time and damaged seconds add to the item's
            whole = self.meta[item_id]
            for key in ("seconds", "missing"):
                for kind, value in m.get(key, {}).items():
                    whole[key][kind] = whole[key].get(kind, 0 if key == "seconds" else []) + value
        key = (item_id, segment)
        self.holds[key], self.held_bytes[key] = 0, sum(m.get("bytes", {}).values())
        for kind, value_ref in zip(kinds, refs, strict=True):
            for feat in self.open_feats(item_id, kind):
                if kind in m["failures"]:
                    self.finish(feat, item_id, failed=m["failures"][kind])
                    continue
                if segment == 0:
                    self.pairs[feat, item_id].segments = m["segments"].get(kind, 1)
                self.waiting[feat].append(_Unit(item_id, value_ref, m["sizes"][kind], m["bytes"][kind], segment))
                self.holds[key] += 1
        if segment == 0 and m.get("segments", {}).get("frames", 1) > 1 and self.open_feats(item_id, "frames"):
            self.later.extend((item_id, k) for k in range(1, m["segments"]["frames"]))
        self.release(key, 0)

    def dispatch(self, flush: bool) -> None:
        """Send waiting inputs to the least busy actor (two calls queued at most) in batches of up to
        `frames_per_batch` frames (`items_per_batch` items for other inputs) and `batch_bytes` bytes; one
        input bigger than that runs alone."""
        max_bytes = self.config.batch_bytes
        for feat, batch in self.waiting.items():
            threshold = (self.config.frames_per_batch if self.specs[feat].extractor.input_kind == "frames"
                         else self.config.items_per_batch)
            while batch and (flush or batch[0].solo or sum(u.n for u in batch) >= threshold
                             or sum(u.nbytes for u in batch) >= max_bytes):
                actor = min(self.actors[feat], key=lambda a: self.busy[a])
                solo = batch[0].solo  # a suspect runs alone on an idle worker: if it kills it, nothing else dies
                if self.busy[actor] >= 2 or (solo and self.busy[actor]):
                    break
                take = [batch.pop(0)]
                n, size = take[0].n, take[0].nbytes
                while (batch and not solo and not batch[0].solo and n + batch[0].n <= threshold
                       and size + batch[0].nbytes <= max_bytes):
                    take.append(batch.pop(0))
                    n, size = n + take[-1].n, size + take[-1].nbytes
                ref = actor.__call__.remote([u.item for u in take], *[u.ref for u in take])
                self.running[ref] = (feat, actor, take)
                self.busy[actor] += 2 if solo else 1

    def extracted(self, ref: Any, feat: str, actor: Any, take: list[_Unit]) -> None:
        self.busy[actor] -= 2 if take[0].solo else 1
        for unit, (item_id, rows, fail, secs) in self.results(ref, feat, actor, take):
            self.release((item_id, unit.part), 1)
            pair = self.pairs.get((feat, item_id))
            if pair is None:  # failed already (another segment)
                continue
            if fail:
                if not fail.get("file"):
                    fail["file"] = _str(decode.source_path(self.items[item_id], self.specs[feat].extractor.input_kind))
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
            path = decode.source_path(self.items[item_id], kind)
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
        self.closed += 1
        self.bar.update(1)
        if not any((f, item_id) in self.pairs for f in self.todo[item_id]):
            self.meta.pop(item_id, None)

    def release(self, key: tuple[str, int], n: int) -> None:
        """`n` feature results of a decoded (item, segment) are in: when none is outstanding, its objects go."""
        self.holds[key] -= n
        if self.holds[key] <= 0:
            del self.holds[key], self.held_bytes[key]

    def results(self, ref: Any, feat: str, actor: Any, take: list[_Unit]) -> list[tuple[_Unit, tuple[str, Any, Any, float]]]:
        """The batch's per-item results. If the worker process died (segfault, out of memory) even after
        Ray's restart and retry, the actor is replaced, and the batch's items go back to the queue to run
        alone on an idle actor: only the item that kills a worker when alone fails."""
        try:
            results, call = self.ray.get(ref)
            self.stages.add(call)
            return list(zip(take, results, strict=True))
        except self.ray.exceptions.RayError as e:
            if isinstance(e, self.ray.exceptions.RayActorError) and actor in self.actors[feat]:
                self.actors[feat].remove(actor)
                self.actors[feat].append(self.new_actor[feat]())
                log.warning("%s: a model worker died (%s); started a new one", feat, _ray_error(e))
            if not take[0].solo:  # not yet run alone: the killer may be a batch-mate or another call on that actor
                self.waiting[feat][:0] = [dataclasses.replace(u, solo=True) for u in take]
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
        partial = None
        if attrs.get("missing_s"):
            spans = attrs["missing_s"]
            partial = {"feature": feat, "item": item.id, "file": _str(decode.source_path(item, spec.extractor.input_kind)),
                       "missing_s": spans, "missing_total_s": round(sum(b - a for a, b in spans), 6),
                       "duration_s": attrs["duration_s"]}
        self.pending[feat, item.id] = (secs, partial)
        self.committer.put(feat, item.id, rows, attrs)

    def committed(self, outcomes: list[Any]) -> None:
        """Count the pairs whose batch is in the store (done, partial) or failed to get there."""
        for o in outcomes:
            secs, partial = self.pending.pop((o.feature, o.item), (0.0, None))
            self.stages.add(o.record)
            if o.error is not None:
                self.fail(o.feature, actors.failure(o.item, f"write:{o.feature}", self.writer.path, o.error))
                continue
            self.report.counts[o.feature]["done"] += 1
            if partial is not None:
                self.report.partial.append(partial)
            self.report.model_seconds[o.feature] = self.report.model_seconds.get(o.feature, 0.0) + secs
        if self.committer.store_error is not None and self.report.store_error is None:
            self.report.store_error = str(self.committer.store_error)


def actor_plan(specs: dict[str, FeatureSpec], features: set[str], config: RunConfig, cpus: int,
               gpus: int) -> dict[str, tuple[dict[str, Any], int, str, int | None]]:
    """feature -> (Ray options, number of actors, device, torch threads) of its model actors.

    With GPUs: `actors_per_gpu` actors of each GPU feature per GPU (default 1), all of them sharing each GPU
    in equal fractions. On a CPU-only machine the GPU features' actors reserve no CPU (decode tasks keep
    theirs) and split the cores between them (`model_threads` each, default cores ÷ such features): more
    threads than cores made every stage slower (docs/design.md). CPU features: `cpu_actors` of 1 CPU."""
    gpu_feats = sorted(f for f in features if specs[f].extractor.uses_gpu)
    per_gpu = {f: config.actors_per_gpu.get(f, 1) for f in gpu_feats}
    threads = config.model_threads or max(1, cpus // max(1, len(gpu_feats)))
    plan = {}
    for feat in sorted(features):
        if feat in gpu_feats and gpus:
            plan[feat] = {"num_gpus": 1 / sum(per_gpu.values()), "num_cpus": 1}, gpus * per_gpu[feat], "cuda", None
        elif feat in gpu_feats:
            plan[feat] = {"num_cpus": 0}, 1, "cpu", threads
        else:
            plan[feat] = {"num_cpus": 1}, config.cpu_actors or max(1, cpus // 2), "cpu", 1
    return plan


class WorkerLost(RuntimeError):
    """A Ray worker process died while handling this item, on every retry."""


def _ray_error(e: BaseException) -> WorkerLost:
    """Ray's errors carry pages of traceback; the failure record keeps the class and the first line."""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return WorkerLost(f"{type(e).__name__}: {first}")


def _str(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def run_extract(dataset: str, raw: Path, out: Path, config: RunConfig, *, only: list[str] | None = None,
                force: bool = False, limit: int | None = None, verify: bool = False,
                split: str | None = None) -> RunReport:
    """`verify`: check every stored item's content hashes (not only metadata and file sizes) before
    planning, so items with changed bytes are recomputed too. `split`: only the items of that split (the
    releases' names too: dev is val); `limit`: then only the first N, in the manifest's order.
    Under `pipeline.stop.on_signals()` (the CLI) a SIGINT/SIGTERM returns the report of a stopped run."""
    t0 = time.perf_counter()
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    raw = Path(os.path.abspath(raw))  # workers may run elsewhere (another cwd, a cluster): no relative paths
    specs = config.specs(only)
    report = RunReport(run_id, dataset, str(out), {s.name: dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)
                                                   for s in specs})
    writer = None
    try:
        stop.stage("opening the store")
        # an existing store is locked first: a second run stops here, not after reading every manifest
        writer = StoreWriter(out, dataset) if out.is_dir() else None
        stop.stage("reading the manifests")
        all_items, qa, notes = load_items(dataset, raw, config)
        items = choose_items(all_items, split, limit, raw)
        questions: dict[str, list[QAItem]] = defaultdict(list)
        for q in qa:
            questions[q.item_id].append(q)
        _manifest_failures(report, notes, specs)
        log.info("%s: %d items, %d questions from %s", dataset, len(items), len(qa), raw)
        writer = writer or StoreWriter(out, dataset)  # holds the store's write lock until the run ends
        return _extract(writer, config, specs, report, items, all_items, qa, questions, force, t0, verify)
    except (stop.Stopped, raystart.RayFailed) as e:  # committed pairs kept, report saved, summary printed
        return stop.stopped_run(report, writer, out, e, t0)
    finally:
        if writer is not None:
            writer.close()


def _manifest_failures(report: RunReport, notes: list[ManifestNote], specs: list[FeatureSpec]) -> None:
    """Keep the manifest's notes; an item whose metadata failed is a failure of each feature asked for, a
    QA file that could not be read one of the features made from questions."""
    report.manifest = [n.model_dump(mode="json") for n in notes]
    qa_feats = [s.name for s in specs if s.extractor.input_kind == "qa"]
    for n in notes:
        if n.kind == "failed":
            for feat in qa_feats if n.what == "QA file" else report.counts:
                report.counts[feat]["failed"] += 1
                report.failures.append({"item": n.id, "stage": "manifest", "file": n.file,
                                        "error": f"{n.reason}: {n.detail}", "feature": feat})


def _extract(writer: StoreWriter, config: RunConfig, specs: list[FeatureSpec], report: RunReport,
             items: list[MediaItem], all_items: list[MediaItem], qa: list[QAItem],
             questions: dict[str, list[QAItem]], force: bool, t0: float, verify: bool = False) -> RunReport:
    out, run_id = writer.path, report.run_id
    writer.write_manifests(all_items, qa)  # the whole dataset's records, also when --limit runs a few
    runner = _Runner(config, specs, writer, report)
    wanted = []
    for spec in specs:
        writer.set_feature(spec.name, spec.store_attrs())
        kind = spec.extractor.input_kind
        for item in items:
            qs = questions.get(item.id, [])
            if not applicable(item, kind, qs):
                report.counts[spec.name]["n/a"] += 1
                continue
            source = source_identity(item, kind, qs, config)
            # the file's name, size and mtime identify it, not the path it was reached by: moving the
            # raw root or writing RAW relative instead of absolute recomputes nothing
            fp = layout.fingerprint(spec.spec_hash, {k: v for k, v in source.items() if k != "path"})
            runner.fingerprints[spec.name, item.id], runner.sources[spec.name, item.id] = fp, source
            wanted.append(Wanted(spec.name, item.id, fp))
    stop.stage("planning")
    plan = make_plan(out, wanted, force=force, verify=verify)
    report.planned = plan.count("todo")
    todo_pairs = {(w.feature, w.item) for w in plan.todo}
    report.damaged = [{"feature": c.feature, "item": c.item, "path": str(c.path), "problem": c.problem,
                       "recomputed": (c.feature, c.item) in todo_pairs} for c in plan.damaged]
    for feat, n in plan.count("skipped").items():
        report.counts[feat]["skipped"] = n
    todo: dict[str, list[str]] = defaultdict(list)
    for w in plan.todo:
        todo[w.item].append(w.feature)
    log.info("plan: %d (feature, item) pairs to compute, %d already up to date", len(plan.todo), len(plan.skipped))
    if not items:
        report.notes.append("  no items found")
    if items and all(i.video is None and i.audio is None and i.transcript is None and i.image is None for i in items):
        report.notes.append("  text-only dataset: no media expected; only text extractors run")
    if todo:
        with stop.deferred():  # a signal never raises inside a Ray call (pipeline/stop.py): checked each second
            runner.start_ray()
            runner.run(dict(todo), {i.id: i for i in items}, questions)
    _compact_if_worthwhile(writer, specs, report)
    report.filtered = _filtered(out, specs)
    report.seconds = time.perf_counter() - t0
    with stop.deferred(raise_after=False):  # the work is done: a signal now changes nothing
        try:
            writer.write_run_report(run_id, report.as_dict())
        except StoreError as e:  # the summary still reaches the user (and the exit code says so)
            log.error("%s", e)
            report.not_saved = str(e)
    return report


def _compact_if_worthwhile(writer: StoreWriter, specs: list[FeatureSpec], report: RunReport) -> None:
    """Reclaim superseded rows and merge small batches when it pays (store/compact.py); never fails the run."""
    from store.compact import compact_store

    if report.store_error:
        return
    try:
        report.notes += [c.line() for c in compact_store(writer.path, [s.name for s in specs], force=False,
                                                         writer=writer)]
    except (OSError, StoreError, ValueError) as e:
        log.warning("compaction skipped: %s", e)


def _filtered(out: Path, specs: list[FeatureSpec]) -> dict[str, dict[str, float]]:
    store = Store(out)
    result = {}
    for spec in specs:
        hidden = set(store.items(spec.name, include_filtered=True)) - set(store.items(spec.name))
        if hidden:
            result[spec.name] = {i: float(store.item_attrs(spec.name, i).get("face_ratio", float("nan")))
                                 for i in hidden}
    return result
