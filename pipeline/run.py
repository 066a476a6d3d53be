"""`make extract`: plan what is missing or stale, then a Ray DAG of CPU decode tasks feeding model
actors (GPU when Ray sees GPUs), with bounded in-flight work, and one atomic store commit per
(feature, item). A failing item is recorded (file, stage, error) and the run goes on."""

from __future__ import annotations

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
from pipeline import actors, cluster, decode, exitcodes, inputs, stages
from pipeline.config import FeatureSpec, RunConfig
from pipeline.sources import load_items, manifest_summary
from store import layout
from store.plan import Wanted, make_plan
from store.reader import Store
from store.writer import StoreError, StoreWriter

log = logging.getLogger("siqfeat")


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
    not_saved: str | None = None  # why <store>/_runs/<run id>.json could not be written (disk full, …)

    @property
    def exit_code(self) -> int:
        """FAILURES when any pair failed; DAMAGED when damaged items were left as they are; STORE when
        only the report could not be saved."""
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
        lines.append(f"  {'feature':<12}{'done':>6}{'skipped':>9}{'failed':>8}{'n/a':>6}")
        for feat, c in self.counts.items():
            lines.append(f"  {feat:<12}{c['done']:>6}{c['skipped']:>9}{c['failed']:>8}{c['n/a']:>6}")
        for d in self.damaged:
            lines.append(f"  DAMAGED {d['feature']}/{d['item']} ({d['path']}): {d['problem']}; "
                         + ("recomputed" if d["recomputed"] else "not in this run, left as it is"))
        for f in self.failures:  # one line per (feature, item): features sharing a decode failure each say so
            lines.append(f"  FAILED {f['feature']}/{f['item']} [{f['stage']}] {f['file'] or ''}: {f['error']}")
        for feat, items in self.filtered.items():
            for item, ratio in sorted(items.items()):
                lines.append(f"  filtered by {feat} policy: {item} (face_ratio {ratio:.2f})")
        if self.not_saved:
            lines.append(f"  run report NOT saved: {self.not_saved}")
        failed = sum(c["failed"] for c in self.counts.values())
        if failed:
            lines.append(f"  completed with {failed} failed (feature, item) pair(s): exit code {self.exit_code}")
        elif self.exit_code:
            lines.append(f"  completed with problems: exit code {self.exit_code}")
        return "\n".join(lines)


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
    if kind == "audio":
        ident["rate_hz"] = config.audio_rate_hz
    if item.cut_from_source and kind in ("frames", "audio"):
        ident["cut"] = [item.clip_start_s, item.clip_end_s]
    if kind == "transcript":
        ident["clip"] = [item.clip_start_s, item.clip_end_s]
    return ident


def applicable(item: MediaItem, kind: str, questions: list[QAItem]) -> bool:
    return bool(questions) if kind == "qa" else decode.source_path(item, kind) is not None


class _Runner:
    """The scheduling loop; one per run."""

    def __init__(self, config: RunConfig, specs: list[FeatureSpec], writer: StoreWriter, report: RunReport) -> None:
        self.config, self.specs, self.writer, self.report = config, {s.name: s for s in specs}, writer, report
        self.fingerprints: dict[tuple[str, str], str] = {}
        self.sources: dict[tuple[str, str], dict[str, Any]] = {}
        self.stages = stages.StageStats()

    def start_ray(self) -> None:
        import ray

        env = {"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                            **{k: v for k, v in os.environ.items() if k.startswith("SIQ_")}}}
        address = os.environ.get("RAY_ADDRESS")
        if not ray.is_initialized():
            if address:
                import extractors
                import manifests
                import pipeline
                import store

                # paths, not module objects: a Ray Client (ray://) driver must pickle its runtime env
                env["py_modules"] = [str(Path(m.__file__).parent) for m in (extractors, manifests, pipeline, store)]
                cluster.prepare_auth(address)
                ray.init(address=address, runtime_env=env, logging_level=logging.WARNING)
            else:
                # "local", not None: with None Ray joins whatever `ray start` left recorded on this machine
                ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, runtime_env=env,
                         logging_level=logging.WARNING, log_to_driver=True)
        self.ray = ray
        resources = ray.cluster_resources()
        self.gpus, self.cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
        log.info("Ray: %d CPU, %d GPU%s", self.cpus, self.gpus, f" at {address}" if address else " (local)")
        self.report.cluster = cluster.describe(ray, address)

    def start_actors(self, features: set[str]) -> None:
        remote = self.ray.remote(actors.ExtractorWorker)
        self.new_actor: dict[str, Any] = {}
        gpu_feats = [f for f in features if self.specs[f].extractor.uses_gpu]
        self.actors: dict[str, list[Any]] = {}
        for feat in sorted(features):
            spec = self.specs[feat]
            if feat in gpu_feats and self.gpus:
                opts, n, device, threads = {"num_gpus": 1 / len(gpu_feats), "num_cpus": 1}, self.gpus, "cuda", None
            elif feat in gpu_feats:  # CPU-only machine: one actor, threads shared with decoding
                opts, n, device, threads = {"num_cpus": 0}, 1, "cpu", self.cpus
            else:
                n = self.config.cpu_actors or max(1, self.cpus // 2)
                opts, device, threads = {"num_cpus": 1}, "cpu", 1
            self.new_actor[feat] = functools.partial(  # also used to replace an actor whose process died
                remote.options(**opts, max_restarts=1, max_task_retries=1).remote, feat, spec.config, device, threads)
            self.actors[feat] = [self.new_actor[feat]() for _ in range(n)]
            log.info("%s: %d %s actor(s) for %s", feat, n, device, spec.config.extractor)
        placed = self.ray.get([a.ready.remote() for group in self.actors.values() for a in group])
        feats = [feat for feat, group in self.actors.items() for _ in group]
        for feat, node in zip(feats, placed, strict=True):
            cluster.count_work(self.report.cluster, node, f"{feat} actor")

    def run(self, todo: dict[str, list[str]], items: dict[str, MediaItem], questions: dict[str, list[QAItem]]) -> None:
        from tqdm import tqdm

        ray = self.ray
        self.start_actors({f for feats in todo.values() for f in feats})
        decode_task = ray.remote(actors.decode_item)
        queue = deque(sorted(todo))
        decoding: dict[Any, tuple[str, list[str], list[Any]]] = {}
        # feature -> [(item, input ref, batching size, solo)]; solo: run alone (its batch crashed a worker)
        waiting: dict[str, list[tuple[str, Any, int, bool]]] = defaultdict(list)
        running: dict[Any, tuple[str, Any, list[tuple[str, Any, int, bool]]]] = {}  # result ref -> (feature, actor, batch)
        busy: dict[Any, int] = defaultdict(int)
        holds: dict[str, int] = {}  # item -> feature results outstanding (decoded data alive)
        meta: dict[str, dict[str, Any]] = {}
        total = sum(len(f) for f in todo.values())
        bar = tqdm(total=total, desc="extracting", unit="pair", disable=None)
        last_log = [time.perf_counter(), 0]

        def progress() -> None:
            """A log line every 15 s for non-interactive runs (cluster jobs, CI), where tqdm is silent."""
            now = time.perf_counter()
            if bar.disable and now - last_log[0] >= 15 and bar.n != last_log[1]:
                c = self.report.counts
                log.info("progress: %d/%d pairs (%s)", bar.n, total,
                         ", ".join(f"{f} {c[f]['done']}+{c[f]['failed']} failed" for f in sorted(c)))
                last_log[:] = [now, bar.n]

        def submit() -> None:
            while queue and len(decoding) + len(holds) < self.config.max_inflight_items:
                item_id = queue.popleft()
                kinds = sorted({self.specs[f].extractor.input_kind for f in todo[item_id]})
                refs = decode_task.options(
                    num_cpus=1, num_returns=1 + len(kinds), max_retries=self.config.decode_retries,
                    retry_exceptions=[OSError],
                ).remote(items[item_id], kinds, questions.get(item_id, []), self.config.audio_rate_hz)
                decoding[refs[0]] = (item_id, kinds, refs[1:])

        def dispatch(flush: bool) -> None:
            for feat, batch in waiting.items():
                threshold = (self.config.frames_per_batch if self.specs[feat].extractor.input_kind == "frames"
                             else self.config.items_per_batch)
                while batch and (flush or batch[0][3] or sum(w[2] for w in batch) >= threshold):
                    actor = min(self.actors[feat], key=lambda a: busy[a])
                    solo = batch[0][3]  # a suspect runs alone on an idle worker: if it kills it, nothing else dies
                    if busy[actor] >= 2 or (solo and busy[actor]):
                        break
                    take = [batch.pop(0)]
                    size = take[0][2]
                    while batch and not take[0][3] and not batch[0][3] and size < threshold:
                        take.append(batch.pop(0))
                        size += take[-1][2]
                    ref = actor.__call__.remote([w[0] for w in take], *[w[1] for w in take])
                    running[ref] = (feat, actor, take)
                    busy[actor] += 2 if solo else 1

        def release(item_id: str) -> None:
            holds[item_id] -= 1
            if holds[item_id] == 0:
                del holds[item_id]

        submit()
        while decoding or running or any(waiting.values()):
            refs = list(decoding) + list(running)
            ready, _ = ray.wait(refs, num_returns=1, timeout=1.0) if refs else ([], [])
            for ref in ready:
                if ref in decoding:
                    item_id, kinds, refs = decoding.pop(ref)
                    try:
                        m = meta[item_id] = ray.get(ref)
                        cluster.count_work(self.report.cluster, m.get("node"), "decode")
                        for call in m.get("calls", ()):
                            self.stages.add(call)
                    except ray.exceptions.RayError as e:  # the decode worker died (e.g. out of memory) on every retry
                        for feat in todo[item_id]:
                            kind = self.specs[feat].extractor.input_kind
                            self.fail(feat, actors.failure(item_id, f"decode:{kind}",
                                                           decode.source_path(items[item_id], kind), _ray_error(e)))
                            bar.update(1)
                        continue
                    holds[item_id] = 0
                    for feat in todo[item_id]:
                        kind = self.specs[feat].extractor.input_kind
                        if kind in m["failures"]:
                            self.fail(feat, m["failures"][kind])
                            bar.update(1)
                        else:
                            waiting[feat].append((item_id, refs[kinds.index(kind)], m["sizes"][kind], False))
                            holds[item_id] += 1
                    if holds[item_id] == 0:
                        del holds[item_id]
                else:
                    feat, actor, take = running.pop(ref)
                    busy[actor] -= 2 if take[0][3] else 1
                    for item_id, rows, fail, secs in self.results(ref, feat, actor, take, waiting[feat]):
                        if fail:
                            if not fail.get("file"):
                                fail["file"] = _str(decode.source_path(items[item_id], self.specs[feat].extractor.input_kind))
                            self.fail(feat, fail)
                        else:
                            self.commit(feat, items[item_id], rows, meta[item_id], secs)
                        release(item_id)
                        bar.update(1)
            progress()
            submit()
            dispatch(flush=not decoding)  # nothing more is coming soon: run partial batches
        bar.close()
        self.report.stages = self.stages.summary()

    def results(self, ref: Any, feat: str, actor: Any, take: list[tuple[str, Any, int, bool]],
                waiting: list[tuple[str, Any, int, bool]]) -> list[tuple[str, Any, Any, float]]:
        """The batch's per-item results. If the worker process died (segfault, out of memory) even after
        Ray's restart and retry, the actor is replaced, and the batch's items go back to the queue to run
        alone on an idle actor: only the item that kills a worker when alone fails."""
        try:
            results, call = self.ray.get(ref)
            self.stages.add(call)
            return results
        except self.ray.exceptions.RayError as e:
            if isinstance(e, self.ray.exceptions.RayActorError) and actor in self.actors[feat]:
                self.actors[feat].remove(actor)
                self.actors[feat].append(self.new_actor[feat]())
                log.warning("%s: a model worker died (%s); started a new one", feat, _ray_error(e))
            if not take[0][3]:  # not yet run alone: the killer may be a batch-mate or another call on that actor
                waiting[:0] = [(w[0], w[1], w[2], True) for w in take]
                return []
            return [(take[0][0], None, actors.failure(take[0][0], f"extract:{feat}", None, _ray_error(e)), 0.0)]

    def fail(self, feat: str, record: dict[str, Any]) -> None:
        self.report.counts[feat]["failed"] += 1
        self.report.failures.append({**record, "feature": feat})
        log.warning("%s/%s failed at %s: %s", feat, record["item"], record["stage"], record["error"])

    def commit(self, feat: str, item: MediaItem, rows: Any, meta: dict[str, Any], secs: float) -> None:
        spec = self.specs[feat]
        attrs = {
            "fingerprint": self.fingerprints[feat, item.id], "spec_hash": spec.spec_hash,
            "source": self.sources[feat, item.id], "duration_s": meta.get("durations", {}).get(spec.extractor.input_kind),
            "extract_seconds": round(secs, 4), "decode_seconds": round(meta["seconds"][spec.extractor.input_kind], 4),
        }
        if spec.extractor.input_kind in meta.get("missing", {}):  # damaged input: the seconds without rows
            attrs["missing_s"] = meta["missing"][spec.extractor.input_kind]
        started = stages.clock()
        try:
            self.writer.commit(feat, item.id, rows, attrs)
        except Exception as e:
            self.fail(feat, actors.failure(item.id, f"write:{feat}", self.writer.path, e))
            return
        self.stages.add(stages.call_record(f"commit:{feat}", started, 1, 1, "items"))
        self.report.counts[feat]["done"] += 1
        self.report.model_seconds[feat] = self.report.model_seconds.get(feat, 0.0) + secs


class WorkerLost(RuntimeError):
    """A Ray worker process died while handling this item, on every retry."""


def _ray_error(e: BaseException) -> WorkerLost:
    """Ray's errors carry pages of traceback; the failure record keeps the class and the first line."""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return WorkerLost(f"{type(e).__name__}: {first}")


def _str(path: Path | None) -> str | None:
    return str(path) if path is not None else None


def run_extract(dataset: str, raw: Path, out: Path, config: RunConfig, *, only: list[str] | None = None,
                force: bool = False, limit: int | None = None, verify: bool = False) -> RunReport:
    """`verify`: check every stored item's content hashes (not only metadata and file sizes) before
    planning, so items with changed bytes are recomputed too."""
    t0 = time.perf_counter()
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    raw = Path(os.path.abspath(raw))  # workers may run elsewhere (another cwd, a cluster): no relative paths
    all_items, qa, notes = load_items(dataset, raw, config)
    items = all_items[:limit] if limit else all_items
    questions: dict[str, list[QAItem]] = defaultdict(list)
    for q in qa:
        questions[q.item_id].append(q)
    specs = config.specs(only)
    report = RunReport(run_id, dataset, str(out), {s.name: dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)
                                                   for s in specs})
    _manifest_failures(report, notes)
    log.info("%s: %d items, %d questions from %s", dataset, len(items), len(qa), raw)
    writer = StoreWriter(out, dataset)  # holds the store's write lock until the run ends
    try:
        return _extract(writer, config, specs, report, items, all_items, qa, questions, force, t0, verify)
    finally:
        writer.close()


def _manifest_failures(report: RunReport, notes: list[ManifestNote]) -> None:
    """Keep the manifest's notes; an item whose metadata failed is a failure of each feature asked for."""
    report.manifest = [n.model_dump(mode="json") for n in notes]
    for n in notes:
        if n.kind == "failed":
            for feat in report.counts:
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
    plan = make_plan(out, wanted, force=force, verify=verify)
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
        runner.start_ray()
        runner.run(dict(todo), {i.id: i for i in items}, questions)
    report.filtered = _filtered(out, specs)
    report.seconds = time.perf_counter() - t0
    try:
        writer.write_run_report(run_id, report.as_dict())
    except StoreError as e:  # the summary still reaches the user (and the exit code says so)
        log.error("%s", e)
        report.not_saved = str(e)
    return report


def _filtered(out: Path, specs: list[FeatureSpec]) -> dict[str, dict[str, float]]:
    store = Store(out)
    result = {}
    for spec in specs:
        hidden = set(store.items(spec.name, include_filtered=True)) - set(store.items(spec.name))
        if hidden:
            result[spec.name] = {i: float(store.item_attrs(spec.name, i).get("face_ratio", float("nan")))
                                 for i in hidden}
    return result
