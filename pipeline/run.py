"""`make extract`: read the manifests, give each (feature, item) pair its fingerprint, plan what is missing or
stale (store/plan.py), run the rest on Ray (pipeline/runner.py, its policy in pipeline/schedule.py), then compact
what pays and save the run report (pipeline/report.py)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from manifests.records import ManifestNote, MediaItem, QAItem
from media import kinds, nvdec
from objectio import ObjectPath, raw_root
from objectio import cache as raw_cache
from pipeline import cluster, ownparts, raystart, stop, supervise
from pipeline.actors import Failure
from pipeline.config import FeatureSpec, RunConfig
from pipeline.progress import Progress
from pipeline.report import RunReport
from pipeline.runner import Identity, Runner
from pipeline.sources import choose_items, load_items
from store import (
    RUNS,
    StoreError,
    StoreWriter,
    Wanted,
    is_url,
    join,
    make_plan,
    open_backend,
    part_problems,
    retries,
    retries_since,
)

log = logging.getLogger("siqfeat")


def run_extract(dataset: str, raw: Path, out: Path | str, config: RunConfig, *, only: list[str] | None = None,
                force: bool = False, limit: int | None = None, verify: bool = False,
                split: str | None = None) -> RunReport:
    """`verify`: check every stored item's content hashes (not only metadata and file sizes) before
    planning, so items with changed bytes are recomputed too. `split`: only the items of that split (the
    releases' names too: dev is val); `limit`: then only the first N, in the manifest's order.
    Under `pipeline.stop.on_signals()` (the CLI) a SIGINT/SIGTERM returns the report of a stopped run."""
    t0 = time.perf_counter()
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    if is_url(raw):  # a bucket's prefix (--raw s3://...): listed once, its objects read where they are decoded
        raw = raw_root(str(raw))
    if isinstance(raw, ObjectPath):  # (the CLI lists it before calling): the copies in the run's own folder on
        # each node, removed as it ends, or in a kept `raw_cache`
        raw = raw.with_cache(raw_cache.spec(run_id, config.raw_cache, config.raw_cache_bytes))
    else:
        raw = Path(os.path.abspath(raw))  # workers may run elsewhere (another cwd, a cluster): no relative paths
    specs = config.specs(only)
    report = RunReport(run_id, dataset, str(out), {s.name: dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)
                                                   for s in specs})
    writer, retried = None, retries()
    try:
        stop.stage("opening the store")
        # an existing store is locked first: a second run stops here, not after reading every manifest
        writer = StoreWriter(out, dataset) if is_url(out) or Path(out).is_dir() else None
        stop.stage("reading the manifests")
        all_items, qa, notes = load_items(dataset, raw, config)
        items = choose_items(all_items, split, limit, raw)
        questions: dict[str, list[QAItem]] = defaultdict(list)
        for q in qa:
            questions[q.item_id].append(q)
        _manifest_failures(report, notes, specs)
        mark_repeated(report.manifest, out)
        if only:  # a feature with items failed on their metadata has work, failed: exit 3 says so
            check_applicable([s for s in specs if s.name in only and not report.counts[s.name]["failed"]], items,
                             questions)
        chosen_qs = sum(len(questions.get(i.id, ())) for i in items)
        log.info("%s: %d items, %d questions from %s%s", dataset, len(items), chosen_qs, raw,
                 f" (of {len(all_items)} items, {len(qa)} questions: --split/--limit)" if len(items) < len(all_items)
                 else "")
        writer = writer or StoreWriter(out, dataset)  # holds the store's write lock until the run ends
        return _extract(writer, config, specs, report, items, all_items, qa, questions, force, t0, verify, retried)
    except (stop.Stopped, raystart.RayFailed) as e:  # committed pairs kept, report saved, summary printed
        report.add_retries(retries_since(retried))  # (the actors' are in already)
        return stopped_run(report, writer, out, e, t0)
    finally:
        if writer is not None:
            writer.close()


def stopped_run(report: RunReport, writer: StoreWriter | None, out: Path, e: stop.Stopped | raystart.RayFailed,
                t0: float) -> RunReport:
    """A signal stopped the run, or its Ray failed (pipeline/raystart.py): Ray goes down (its tasks and actors
    with it), the report says what was done and is saved like any run's. Every commit is atomic: what is in the
    store is whole (the open batches were committed as the scheduling loop ended)."""
    with stop.deferred(raise_after=False):  # a second signal exits at once (stop.py), a late one is moot
        record = {"during": stop.current_stage(), "not_computed": supervise.not_computed(report)}
        if isinstance(e, raystart.RayFailed):
            log.error("%s: %s", e.what, e.hint)
            report.ray_failed = {"what": e.what, "hint": e.hint, **record}
        else:
            report.stopped = {"signal": e.name, "signum": e.signum, **record}
            parent = supervise.parent_gone()
            if parent is not None:  # the SIGTERM was the kernel's, on the parent's death: say what happened
                report.stopped["cause"] = supervise.PARENT_KILLED.format(pid=parent)
        report.seconds = time.perf_counter() - t0
        report.worker_kills = supervise.worker_kills()
        try:  # saved before Ray goes down: a Ray without its GCS may end this process while it shuts down
            writer = writer or StoreWriter(out, report.dataset)
            writer.write_run_report(report.run_id, report.as_dict())
        except (StoreError, ValueError, OSError) as err:
            log.error("%s", err)
            report.not_saved = str(err)
        finally:
            if writer is not None:
                writer.close()
        raystart.shutdown()  # nothing of Ray prints after this: the summary can be the last line
    return report


def _manifest_failures(report: RunReport, notes: list[ManifestNote], specs: list[FeatureSpec]) -> None:
    """Keep the manifest's notes; an item whose metadata failed is a failure of each feature asked for, a
    QA file that could not be read one of the features made from questions."""
    report.manifest = [n.model_dump(mode="json") for n in notes]
    qa_feats = [s.name for s in specs if s.extractor.input_kind == "qa"]
    for n in notes:
        if n.kind == "failed":
            for feat in qa_feats if n.what == "QA file" else report.counts:
                report.counts[feat]["failed"] += 1
                report.failures.append(Failure(n.id, "manifest", n.file, f"{n.reason}: {n.detail}").record(feat))


def check_applicable(asked: list[FeatureSpec], items: list[MediaItem], questions: dict[str, list[QAItem]]) -> None:
    """`--features F`: an F that no chosen item has the input of (a transcript feature on a release without
    transcripts) is asked-for work that cannot be done: a ValueError before the store is touched, not a run of
    n/a pairs that exits 0."""
    empty = [s for s in asked if not any(kinds.of(s.extractor.input_kind, i).applicable(i, questions.get(i.id, []))
                                         for i in items)]
    if empty:
        raise ValueError(f"--features {','.join(s.name for s in empty)}: none of the {len(items)} item(s) chosen has "
                         f"the input ({', '.join(sorted({s.extractor.input_kind for s in empty}))}): nothing to "
                         "extract")


def _note_key(note: dict[str, Any]) -> tuple:
    return note.get("kind"), note.get("what"), note.get("id"), note.get("reason")


def mark_repeated(notes: list[dict[str, Any]], out: Path | str) -> None:
    """Mark the manifest's notes and dropped inputs that the store's previous run report already listed
    (`repeated`): the summary says each once, not on every run over the same release (a failed item is a
    failure each run, and is never marked)."""
    backend = open_backend(out)  # a folder or a bucket: the run reports through the store's own storage
    for name in sorted((n for n in backend.children(RUNS) if n.endswith(".json")), reverse=True):
        try:
            previous = json.loads(backend.get(join(RUNS, name))).get("manifest")
        except (OSError, ValueError, AttributeError):
            continue
        if previous is None:  # not a run report of a run that read the manifests
            continue
        seen = {_note_key(n) for n in previous if isinstance(n, dict)}
        for n in notes:
            if n["kind"] != "failed" and _note_key(n) in seen:
                n["repeated"] = True
        return


def _extract(writer: StoreWriter, config: RunConfig, specs: list[FeatureSpec], report: RunReport,
             items: list[MediaItem], all_items: list[MediaItem], qa: list[QAItem],
             questions: dict[str, list[QAItem]], force: bool, t0: float, verify: bool = False,
             retried: dict[str, int] | None = None) -> RunReport:
    out, run_id = writer.path, report.run_id
    writer.write_manifests(all_items, qa)  # the whole dataset's records, also when --limit runs a few
    identities: dict[tuple[str, str], Identity] = {}
    wanted = []
    for spec in specs:
        writer.set_feature(spec.name, spec.store_attrs())
        for item in items:
            qs = questions.get(item.id, [])
            kind = kinds.of(spec.extractor.input_kind, item)
            if not kind.applicable(item, qs):
                report.counts[spec.name]["n/a"] += 1
                continue
            identity = identities[spec.name, item.id] = planned_identity(writer, spec, item, kind, qs, config)
            wanted.append(Wanted(spec.name, item.id, identity.fingerprint))
    stop.stage("planning")
    supervise.note(report, "planning")
    plan = make_plan(out, wanted, force=force, verify=verify, indexes=writer.index)  # each log read once a run
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
    supervise.note(report, "starting Ray" if todo else "compaction")
    if todo:
        runner = Runner(config, specs, writer, report, identities)
        # up before Ray starts: on a terminal the bar says "starting Ray", then "loading models"
        runner.progress = Progress(len(plan.todo), phase="starting Ray")
        try:
            with stop.deferred():  # a signal never raises inside a Ray call (pipeline/stop.py): checked each second
                try:
                    runner.start_ray()
                    try:
                        runner.run(dict(todo), {i.id: i for i in items}, questions)
                    finally:  # the run's copies of raw objects go with it (a kept `raw_cache` stays)
                        if config.raw_cache is None and runner.ray is not None and _in_bucket(items):
                            cluster.remove_raw_copies(runner.ray, report.run_id)
                finally:
                    runner.stop_sampling()  # (done already by a run that got to its report)
        finally:  # Ray failing to start, a signal: the bar goes before the summary's lines
            runner.progress.close()
    _compact_if_worthwhile(writer, specs, report, merge_small=not ownparts.actors_write(config.worker_parts, writer.path))
    report.filtered = _filtered(writer, specs)
    report.seconds = time.perf_counter() - t0
    report.worker_kills = supervise.worker_kills()  # Ray's own count, as the parent read it from its lines
    report.add_retries(retries_since(retried or {}))  # this run's, of this process's count, beside the actors'
    with stop.deferred(raise_after=False):  # the work is done: a signal now changes nothing
        try:
            writer.write_run_report(run_id, report.as_dict())
        except StoreError as e:  # the summary still reaches the user (and the exit code says so)
            log.error("%s", e)
            report.not_saved = str(e)
    return report


def _in_bucket(items: list[MediaItem]) -> bool:
    """Whether any of the items' files is an object (--raw s3://…): decoded from copies on the nodes."""
    return any(isinstance(f, ObjectPath) for i in items for f in (i.video, i.audio, i.transcript, i.image))


def planned_identity(writer: StoreWriter, spec: FeatureSpec, item: MediaItem, kind: kinds.Kind,
                     questions: list[QAItem], config: RunConfig) -> Identity:
    """The source identity of a (feature, item) pair, with the fingerprint the plan wants. The file's name, size and
    mtime identify it, not the path it was reached by: moving the raw root or writing RAW relative instead of
    absolute recomputes nothing. Frames a device decoder made (the identity names it, `Runner.commit`) are as
    current as the CPU path's for a run that may decode them so; under `frames_decoder = "cpu"` only the CPU
    path's are."""
    identity = Identity.of(spec.spec_hash, kind.identity(item, questions, config.audio_rate_hz, config.tracks))
    if kind.name == "frames" and config.frames_decoder != "cpu":  # (a still image's kind is "still")
        stored = writer.index(spec.name).entries.get(item.id)
        if stored is not None and stored.fingerprint in {
                identity.decoded_by(d).fingerprint for d in (nvdec.NVDEC, nvdec.TORCHCODEC_CPU)}:
            return dataclasses.replace(identity, fingerprint=stored.fingerprint)
    return identity


def _compact_if_worthwhile(writer: StoreWriter, specs: list[FeatureSpec], report: RunReport,
                           merge_small: bool = True) -> None:
    """Reclaim superseded rows and merge small batches when it pays (store/compact.py); never fails the run.
    `merge_small=False` where the model actors wrote their own parts (object storage): merging them would read
    every row back on the driver; `python -m pipeline compact` merges them when asked."""
    from store import compact_store

    if report.store_error:
        return
    try:
        done = compact_store(writer.path, [s.name for s in specs], force=False, writer=writer, merge_small=merge_small)
    except (OSError, StoreError, ValueError) as e:
        log.warning("compaction skipped: %s", e)
        return
    # merging this run's own commit batches is housekeeping (every first run does it): only reclaimed rows,
    # which were the user's data before, are worth a line in the summary
    report.notes += [c.line() for c in done if c.rows_dropped]
    for c in done:
        if not c.rows_dropped:
            log.debug("%s", c.line().strip())


def _filtered(writer: StoreWriter, specs: list[FeatureSpec]) -> dict[str, dict[str, str]]:
    """feature -> item -> why its extractor's policy filtered it (faces: the face ratio under the bound), from the
    writer's index (the log is not read again); items of damaged parts are left out, as a reader would."""
    result = {}
    for spec in specs:
        state = writer.index(spec.name)
        hidden = state.filtered_entries(spec.spec_hash)
        bad = part_problems(writer.path, spec.name, {e.part: state.parts[e.part] for e in hidden})
        got = {e.item: spec.extractor.filter_reason(e.attrs()) for e in hidden if e.part not in bad}
        if got:
            result[spec.name] = dict(sorted(got.items()))
    return result
