"""`python -m pipeline info STORE`: what a store holds, what failed, what is partial, filtered, stale or damaged.

Everything comes from the store itself: per feature its group attributes (extractor, version, weights), its
index (items, rows, parts, the per-item attributes: `missing_s` makes an item partial, `face_ratio` tells why
a policy such as the faces one filtered it), the quick part check every read makes (damaged items), and the run reports in
`_runs/` (failed pairs: a failure is not in the index, so the latest run that asked for the feature says which
of its pairs failed and why). `--config` also recomputes each item's fingerprint as `make extract` with that
config would (media/kinds/: each input kind's `identity`, the raw file's name, size and mtime), so an item whose source
changed or whose feature's config changed is listed as stale.

Exit codes (pipeline/exitcodes.py): 0 nothing wrong (partial, filtered and stale items are facts, not
errors), 3 (FAILURES) some pair failed in the latest run that asked for its feature and is not in the store
since, 4 (DAMAGED) a stored item is damaged (its part fails its check; `verify` says more and rebuilds
indexes), or a feature's zarr.json or a manifest does not read (store.integrity.DamagedMetadata), 2 not a store.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from extractors.base import Extractor, get_extractor
from manifests.records import one_line
from pipeline import exitcodes
from pipeline.report import failed_line
from store import INTERVALS, RUNS, Store, open_store, partial_record, spans_text
from store import fingerprint as store_fingerprint


@dataclass
class FeatureInfo:
    name: str
    extractor: str
    version: str
    weights: str
    spec_hash: str
    rate_hz: float | None
    dim: int
    items: int  # current, good items a reader lists (`Store.items`: filtered and stale ones left out)
    rows: int  # rows of every current item (filtered and stale included: they are stored)
    bytes: int  # data files of the parts that hold a current row
    parts: int  # parts that hold a current row
    superseded_rows: int  # rows of replaced versions, until `compact` reclaims them
    partial: list[dict[str, Any]] = field(default_factory=list)  # item, file, missing_s, missing_total_s, duration_s
    failed: list[dict[str, Any]] = field(default_factory=list)  # item, stage, file, error, run_id
    filtered: list[dict[str, Any]] = field(default_factory=list)  # item, reason
    stale: list[dict[str, Any]] = field(default_factory=list)  # item, reason
    damaged: list[dict[str, Any]] = field(default_factory=list)  # item, part, problem
    # items whose stream ends before the file's other streams (by design, not damage): item, duration_s,
    # streams_end_s
    shorter: list[dict[str, Any]] = field(default_factory=list)
    late: list[dict[str, Any]] = field(default_factory=list)  # items whose video starts late: item, stream_start_s


@dataclass
class RunInfo:
    run_id: str
    started: str | None  # ISO time from the run id (UTC)
    seconds: float
    done: int
    skipped: int
    failed: int
    partial: int
    pairs_per_s: float | None  # pairs computed per second of the whole run
    # what bounded the run, as its summary says: the resource busiest in its steady part (the report's
    # `utilisation`); in a report without one, the stage busy longest (pipeline/stages.py)
    binding_stage: str | None
    stopped: str | None


@dataclass
class StoreInfo:
    path: str
    dataset: str
    schema: str
    package_version: str
    media_items: int
    questions: int
    splits: dict[str, int]
    features: list[FeatureInfo]
    runs: list[RunInfo]
    config: str | None = None  # the config the fingerprints were checked against, if any
    # feature -> why its zarr.json does not read (the feature cannot be in the table: its items are not counted)
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if any(f.failed for f in self.features):
            return exitcodes.FAILURES
        if any(f.damaged for f in self.features) or self.unreadable:
            return exitcodes.DAMAGED
        return exitcodes.OK

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exit_code": self.exit_code}

    def summary(self) -> str:
        lines = [f"{self.path}: {self.dataset} store ({self.schema}, written by siqfeat {self.package_version}); "
                 f"{self.media_items} items, {self.questions} questions"
                 + (f" ({', '.join(f'{k} {v}' for k, v in sorted(self.splits.items()))})" if self.splits else "")]
        lines += self._run_lines()
        shown = {f.name: f"{f.weights} (!)" if f.weights == "random" else f.weights for f in self.features}
        ww = max([len("weights"), *map(len, shown.values())]) + 2
        nw = max([len("feature"), *(len(f.name) for f in self.features)]) + 2
        ew = max([len("extractor"), *(len(f.extractor) for f in self.features)]) + 2
        vw = max([len("version"), *(len(f.version) for f in self.features)]) + 2
        rates = {f.name: f"{f.rate_hz:g} Hz" if f.rate_hz else "per unit" for f in self.features}
        rw = max([len("rate"), *map(len, rates.values())]) + 2
        head = (f"  {'feature':<{nw}}{'extractor':<{ew}}{'version':<{vw}}{'weights':<{ww}}{'dim':>6}  {'rate':<{rw}}"
                f"{'items':>7}{'rows':>10}{'MB':>9}{'parts':>7}{'partial':>9}{'failed':>8}{'filtered':>10}{'stale':>7}"
                f"{'damaged':>9}")
        lines.append(head)
        for f in self.features:
            weights = shown[f.name]
            lines.append(f"  {f.name:<{nw}}{f.extractor:<{ew}}{f.version:<{vw}}{weights:<{ww}}{f.dim:>6}  "
                         f"{rates[f.name]:<{rw}}{f.items:>7}{f.rows:>10}{f.bytes / 1e6:>9.1f}{f.parts:>7}"
                         f"{len(f.partial):>9}{len(f.failed):>8}{len(f.filtered):>10}{len(f.stale):>7}"
                         f"{len(f.damaged):>9}")
        if any(not f.rate_hz for f in self.features):
            lines.append("  (per unit: a row per word, text or question part, not at a fixed rate)")
        if any(f.weights == "random" for f in self.features):
            lines.append("  (!) random weights: these features are for testing the pipeline, not for models")
        for name, why in sorted(self.unreadable.items()):
            lines.append(f"  DAMAGED METADATA {name}: {why}; the feature is not in this table "
                         "(`make extract` with it writes its metadata anew)")
        for f in self.features:
            for d in f.damaged:
                lines.append(f"  DAMAGED {f.name}/{d['item']} ({d['part']}): {d['problem']}")
            for x in f.failed:
                lines.append(f"{failed_line(f.name, x)} (run {x['run_id']})")
            for p in f.partial:
                lines.append(f"  PARTIAL {f.name}/{p['item']}: {p['missing_total_s']:g} s missing "
                             f"({spans_text(p['missing_s'])})")
            for x in f.shorter:
                own = f"{x['duration_s']:g}" if x["duration_s"] is not None else "?"
                lines.append(f"  shorter stream {f.name}/{x['item']}: ends at {own} s, the file's other streams at "
                             f"{x['streams_end_s']:g} s (not damage)")
            for x in f.late:
                lines.append(f"  late start {f.name}/{x['item']}: starts at {x['stream_start_s']:g} s (not damage)")
            for x in f.filtered:
                lines.append(f"  FILTERED {f.name}/{x['item']}: {x['reason']}")
            for x in f.stale:
                lines.append(f"  STALE {f.name}/{x['item']}: {x['reason']}")
            if f.superseded_rows:
                lines.append(f"  {f.name}: {f.superseded_rows} superseded row(s) still stored; "
                             f"`python -m pipeline compact {self.path}` reclaims them")
        if self.exit_code == exitcodes.FAILURES:
            failed = [x for f in self.features for x in f.failed]
            inputs = sum(_input_failure(x) for x in failed)
            if inputs:
                lines.append(f"  failed pairs: {inputs} on their input file (unreadable, damaged or missing: the "
                             "error says which), which a retry meets again: replace or repair those files first; "
                             f"`make extract` then computes what is missing; exit code {self.exit_code}")
            if inputs < len(failed):
                lines.append(f"  failed pairs: {len(failed) - inputs} in the extraction (a worker lost, a model "
                             f"error): `make extract` again retries them; exit code {self.exit_code}")
        elif self.exit_code == exitcodes.DAMAGED:
            lines.append(f"  damaged items or metadata: `python -m pipeline verify {self.path}` checks every byte, "
                         f"`make extract` recomputes them; exit code {self.exit_code}")
        return "\n".join(map(one_line, lines))


    def _run_lines(self) -> list[str]:
        """The last run that computed something (what made the data), and the latest run when it is another
        (a run with nothing to do would otherwise hide it)."""
        if not self.runs:
            return [f"  no run report in {RUNS}/"]
        latest = self.runs[-1]
        computed = next((r for r in reversed(self.runs) if r.done), None)
        lines = [_run_line("last run that computed data" if computed is not latest else "last run", r)
                 for r in ([computed] if computed is not None else [])]
        if computed is not latest:
            lines.append(_run_line("latest run", latest) + ("" if computed else " (no run computed anything)"))
        lines[-1] += f"; {len(self.runs)} run report(s) in {RUNS}/"
        return lines


def _run_line(label: str, r: RunInfo) -> str:
    return (f"  {label} {r.run_id} ({r.started or '?'}): {r.seconds:.1f} s, {r.done} done, {r.failed} failed, "
            f"{r.skipped} skipped" + (f", STOPPED by {r.stopped}" if r.stopped else ""))


def _input_failure(failure: dict[str, Any]) -> bool:
    """A failure of the pair's input itself (its file cannot be read as it is, or its metadata): a retry meets
    it again. The others (a worker lost, a model's error) may pass on a retry."""
    stage = str(failure.get("stage") or "")
    return stage.startswith(("decode", "manifest")) and not str(failure.get("error") or "").startswith("WorkerLost")


def read_runs(store: Store) -> list[dict[str, Any]]:
    """The run reports, oldest first (run ids start with their UTC time). One that does not parse is skipped:
    a report is written whole (StoreWriter.write_run_report), so only damage makes one unreadable."""
    return [rep for rep in store.run_reports() if isinstance(rep.get("counts"), dict)]


def run_started(run_id: str) -> str | None:
    try:
        return datetime.strptime(run_id[:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).isoformat()
    except ValueError:
        return None


def run_info(rep: dict[str, Any]) -> RunInfo:
    counts = rep.get("counts", {})
    total = {k: sum(int(c.get(k, 0)) for c in counts.values()) for k in ("done", "skipped", "failed")}
    seconds = float(rep.get("seconds") or 0.0)
    stages = rep.get("stages") or {}
    binding = (rep.get("utilisation") or {}).get("binding") or (
        max(stages, key=lambda s: stages[s].get("busy_s") or 0.0) if stages else None)
    stopped = rep.get("stopped")
    return RunInfo(str(rep.get("run_id", "?")), run_started(str(rep.get("run_id", ""))), seconds, total["done"],
                   total["skipped"], total["failed"], len(rep.get("partial") or []),
                   round(total["done"] / seconds, 3) if seconds > 0 and total["done"] else None, binding,
                   stopped.get("signal") if isinstance(stopped, dict) else None)


def extractor_of(feature_attrs: dict[str, Any]) -> type[Extractor]:
    """The extractor class that made a feature, for what only it knows (why its policy filtered an item, which
    per-item numbers matter); the base class for a feature no registered extractor made (a view, a test's)."""
    try:
        return get_extractor(str(feature_attrs.get("extractor")))
    except KeyError:
        return Extractor


def _failed(runs: list[dict[str, Any]], feature: str, current: set[str]) -> list[dict[str, Any]]:
    """The failures of the latest run that asked for `feature`, less the pairs in the store since (a later
    run with `--features` elsewhere cannot have computed them, so this is the feature's latest word)."""
    for rep in reversed(runs):
        if feature in rep.get("counts", {}):
            return [{"item": f["item"], "stage": f.get("stage"), "file": f.get("file"), "error": f.get("error"),
                     "run_id": rep.get("run_id")}
                    for f in rep.get("failures") or [] if f.get("feature") == feature and f["item"] not in current]
    return []


def _wanted_fingerprints(store: Store, config_ref: str) -> dict[str, tuple[str, dict[str, str]]]:
    """feature -> (the spec hash, item -> fingerprint) that `make extract --config config_ref` would want."""
    from media import kinds
    from pipeline.config import load_config

    config = load_config(config_ref)
    media = store.media_items()
    questions: dict[str, list] = {}
    for q in store.qa_items():
        questions.setdefault(q.item_id, []).append(q)
    out = {}
    for spec in config.specs():
        kind = spec.extractor.input_kind
        fps = {}
        for item in media:
            qs = questions.get(item.id, [])
            if kinds.applicable(item, kind, qs):
                source = kinds.identity(item, kind, qs, config.audio_rate_hz, config.tracks)
                fps[item.id] = store_fingerprint(spec.spec_hash, {k: v for k, v in source.items() if k != "path"})
        out[spec.name] = (spec.spec_hash, fps)
    return out


def feature_info(store: Store, name: str, runs: list[dict[str, Any]],
                 wanted: tuple[str, dict[str, str]] | None = None) -> FeatureInfo:
    fa = store.feature_attrs(name)
    state = store.index(name)
    spec = str(fa.get("spec_hash", ""))
    problems = store.part_problems(name, only=state.live_parts())
    entries = list(state.entries.values())
    info = FeatureInfo(name, str(fa.get("extractor", "?")), str(fa.get("version", "?")), str(fa.get("weights", "?")),
                       spec, fa.get("rate_hz"), len(fa.get("columns") or []), 0, 0, 0, 0, 0)
    live = {e.part for e in entries}
    info.parts = len(live)
    info.bytes = sum(int(size) for p in live for size, *_ in state.parts[p].files.values())
    info.rows = sum(e.n_rows for e in entries)
    info.superseded_rows = sum(_part_rows(rec) for rec in state.parts.values()) - info.rows
    current = set()
    for e in sorted(entries):
        problem = problems.get(e.part)
        if problem is not None:
            info.damaged.append({"item": e.item, "part": str(store.part_location(name, e.part)), "problem": problem})
            continue
        attrs = e.attrs()
        if e.spec_hash != spec:
            info.stale.append({"item": e.item, "reason": f"made with spec {e.spec_hash}, the feature's is {spec}"})
        elif wanted is not None and e.item in wanted[1] and wanted[1][e.item] != e.fingerprint:
            why = "the config differs" if wanted[0] != e.spec_hash else "its source file changed (name, size or mtime) or is not where the manifest says"
            info.stale.append({"item": e.item, "reason": f"fingerprint differs from what the config would give: {why}"})
        else:
            current.add(e.item)
        if e.filtered:
            info.filtered.append({"item": e.item, "reason": extractor_of(fa).filter_reason(attrs)})
        elif e.spec_hash == spec:
            info.items += 1
        if (partial := partial_record(name, e.item, attrs, e.duration_s)) is not None:
            info.partial.append({k: v for k, v in partial.items() if k != "feature"})
        if attrs.get("streams_end_s") is not None:
            info.shorter.append({"item": e.item, "duration_s": e.duration_s, "streams_end_s": attrs["streams_end_s"]})
        if attrs.get("stream_start_s") is not None:
            info.late.append({"item": e.item, "stream_start_s": attrs["stream_start_s"]})
    info.failed = _failed(runs, name, set(state.entries) - {d["item"] for d in info.damaged})
    return info


def _part_rows(rec: Any) -> int:
    shape = (rec.arrays.get(INTERVALS) or {}).get("shape")
    return int(shape[0]) if shape else 0


def store_info(path: Path | str, config: str | None = None) -> StoreInfo:
    store = open_store(path)
    runs = read_runs(store)
    wanted = _wanted_fingerprints(store, config) if config else {}
    media, qa = store.media_items(), store.qa_items()
    splits: dict[str, int] = {}
    for m in media:
        split = getattr(m, "split", None)
        if split:
            splits[split] = splits.get(split, 0) + 1
    features = [feature_info(store, f, runs, wanted.get(f) if config else None) for f in store.features()]
    return StoreInfo(str(store.path), str(store.attrs.get("dataset", "?")), str(store.attrs.get("schema", "?")),
                     str(store.attrs.get("package_version", "?")), len(media), len(qa), splits, features,
                     [run_info(r) for r in runs], config, store.unreadable_features())


def item_info(path: Path | str, item: str) -> dict[str, Any]:
    """One item across features: its manifest record and, per feature, what the store holds for it."""
    store = open_store(path)
    media = {m.id: m for m in store.media_items()}
    record = media.get(item)
    runs = read_runs(store)
    out: dict[str, Any] = {"item": item, "record": record.model_dump(mode="json") if record else None,
                           "questions": sum(q.item_id == item for q in store.qa_items()), "features": {}}
    for name in store.features():
        state = store.index(name)
        e = state.entries.get(item)
        if e is None:
            fail = next((f for f in _failed(runs, name, set()) if f["item"] == item), None)
            out["features"][name] = {"status": "failed", **fail} if fail else {"status": "absent"}
            continue
        problem = store.part_problem(name, e.part)
        attrs = e.attrs()
        status = ("damaged" if problem else "stale" if e.spec_hash != store.feature_attrs(name).get("spec_hash")
                  else "filtered" if e.filtered else "partial" if attrs.get("missing_s") else "ok")
        out["features"][name] = {"status": status, "rows": e.n_rows, "duration_s": e.duration_s,
                                 "part": e.part, "problem": problem, "attrs": attrs,
                                 "extractor": store.feature_attrs(name).get("extractor")}
    if record is None and not any(v["status"] != "absent" for v in out["features"].values()):
        known = sorted(media)
        near = difflib.get_close_matches(item, known, n=1)
        raise KeyError(f"{store.path}: no item {item!r}; {len(known)} items, "
                       + (f"did you mean {near[0]!r}?" if near else f"e.g. {', '.join(known[:5])}"))
    return out


def item_summary(info: dict[str, Any]) -> str:
    lines = [f"{info['item']}: {info['questions']} question(s)"]
    rec = info.get("record") or {}
    for key in ("split", "video", "audio", "transcript", "image"):
        if rec.get(key):
            lines.append(f"  {key}: {rec[key]}")
    for name, f in info["features"].items():
        if f["status"] in ("absent", "failed"):
            extra = f" [{f['stage']}] {f.get('file') or ''}: {f['error']}" if f["status"] == "failed" else ""
            lines.append(f"  {name:<12}{f['status']}{extra}")
            continue
        a = f["attrs"]
        dur = f"{f['duration_s']:.2f} s" if isinstance(f["duration_s"], float) and math.isfinite(f["duration_s"]) else "-"
        detail = []
        if a.get("missing_s"):
            detail.append(f"missing {spans_text(a['missing_s'])}")
        for key in extractor_of(f).item_measures:
            if a.get(key) is not None:
                detail.append(f"{key} {float(a[key]):.2f}")
        if f["problem"]:
            detail.append(f["problem"])
        lines.append(f"  {name:<12}{f['status']:<10}{f['rows']:>7} rows  {dur:>9}  "
                     f"fingerprint {str(a.get('fingerprint', ''))[:12]}" + (f"  ({'; '.join(detail)})" if detail else ""))
    return "\n".join(map(one_line, lines))
