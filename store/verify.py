"""`python -m pipeline verify` / `make verify`: every part checked in full, every index (a damaged or deleted one
rebuilt from the parts), and every metadata file of the store. The store is walked on disk, so a feature or
root with damaged metadata is reported and its items are still checked through the index."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manifests.records import MediaItem, QAItem, one_line, read_jsonl_all
from store import layout, repair
from store.backends import is_url
from store.integrity import DamagedItem, ItemCheck, zarr_meta
from store.partial import partial_line, partial_record
from store.reader import Store

_REPAIR = {"root": "the store's own metadata: repair it by hand (its items are checked here regardless)",
           "feature": "`make extract` with this feature writes it anew from the run's spec",
           "manifest": "`make extract` writes it anew",
           "run": "a run's record only (`info` and `report` leave it out); delete it or restore it from a copy"}


@dataclass(frozen=True)
class VerifyReport:
    store: Path
    checks: list[ItemCheck]
    seconds: float
    metadata: list[tuple[Path, str]] = field(default_factory=list)  # (file, problem) per damaged metadata file
    rebuilt: list[repair.Rebuilt] = field(default_factory=list)
    adopted: list[repair.Adopted] = field(default_factory=list)  # parts on disk that no index line named
    # intact items committed with seconds that did not decode (`missing_s`): as committed, so not damage (the exit
    # code stays 0), but not whole either: feature, item, file, missing_s, missing_total_s, duration_s
    partial: list[dict[str, Any]] = field(default_factory=list)

    @property
    def damaged(self) -> list[ItemCheck]:
        return [c for c in self.checks if not c.ok]

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.metadata and not any(r.damage for r in [*self.rebuilt, *self.adopted])

    def summary(self) -> str:
        lines = [f"verify {self.store}: {len(self.checks)} item(s) in {self.seconds:.2f} s",
                 f"  {'feature':<12}{'ok':>6}{'partial':>9}{'damaged':>9}"]
        for feat in sorted({c.feature for c in self.checks}):
            mine = [c for c in self.checks if c.feature == feat]
            partial = sum(p["feature"] == feat for p in self.partial)
            lines.append(f"  {feat:<12}{sum(c.ok for c in mine) - partial:>6}{partial:>9}"
                         f"{sum(not c.ok for c in mine):>9}")
        lines += [r.line() for r in self.rebuilt]
        lines += [a.line() for a in self.adopted]
        lines += [f"  DAMAGED METADATA {path}: {problem}" for path, problem in self.metadata]
        for c in self.damaged:
            lines.append(f"  DAMAGED {c.feature}/{c.item} ({c.path}): {c.problem}")
        lines += [partial_line(p) for p in self.partial]
        if self.damaged:
            lines.append(f"  {len(self.damaged)} damaged item(s): `make extract EXTRACT_ARGS=--verify` on this store recomputes them")
        return "\n".join(map(one_line, lines))


def _metadata(path: Path, features: list[str]) -> list[tuple[Path, str]]:
    problems = []
    for meta_path, which in [(path / layout.META, "root"), *((path / f / layout.META, "feature") for f in features)]:
        try:
            meta = zarr_meta(meta_path, layout.META, "group")
            if which == "root" and meta.get("attributes", {}).get("schema") is None:
                raise DamagedItem(f"{layout.META} has no schema attribute")
        except DamagedItem as e:
            problems.append((meta_path, f"{e}; {_REPAIR[which]}"))
    problems += _run_reports(path)
    for name, kind in (("items.jsonl", MediaItem), ("qa.jsonl", QAItem)):
        file = layout.manifest_dir(path) / name
        try:
            if file.exists():
                read_jsonl_all(file, kind)  # a file that does not validate: the error names its line
        except (OSError, ValueError) as e:
            problems.append((file, f"unreadable ({' '.join(str(e).split())[:300]}); {_REPAIR['manifest']}"))
    return problems


def _run_reports(path: Path) -> list[tuple[Path, str]]:
    """Run reports (`_runs/<run id>.json`, written whole) that do not parse as one: only damage does that."""
    problems = []
    for file in sorted(layout.runs_dir(path).glob("*.json")):
        try:
            rep = json.loads(file.read_bytes())
            why = None if isinstance(rep, dict) and isinstance(rep.get("counts"), dict) and "run_id" in rep else \
                "not a run report (an object with run_id and counts)"
        except (OSError, ValueError) as e:
            why = f"unreadable ({' '.join(str(e).split())[:200]})"
        if why is not None:
            problems.append((file, f"{why}; {_REPAIR['run']}"))
    return problems


def _is_store(path: Path) -> bool:
    return any((path / name).exists() for name in (layout.META, layout.LOCK, layout.MANIFESTS, layout.RUNS))


def verify_store(path: Path | str, features: list[str] | None = None) -> VerifyReport:
    t0 = time.perf_counter()
    if is_url(path):
        return _verify_objects(str(path), features, t0)
    path = Path(path)
    if not _is_store(path):
        raise FileNotFoundError(f"{path}: not a feature store (no zarr.json); run `make extract` first")
    store = Store(path, damaged_root=True)
    present = [f for f in store._feature_dirs() if (path / f / layout.META).exists()
               or (path / f / layout.INDEX).exists() or (path / f / layout.PARTS).exists()]
    unknown = set(features or []) - set(present)
    if unknown:
        raise ValueError(f"{path}: no feature(s) {sorted(unknown)}; present: {present}")
    chosen = features or present
    metadata = _metadata(path, chosen)
    rebuilt, adopted = _repair_indexes(path, chosen, store) if store.root is not None else ([], [])
    if rebuilt or adopted:
        store.close()
        store = Store(path, damaged_root=True)  # the repaired indexes
    try:
        checks = [c for f in chosen for c in store.check(f, full=True)]
        partial = [p for c in checks if c.ok and (p := _partial(store, c)) is not None]
    finally:
        store.close()
    return VerifyReport(path, checks, time.perf_counter() - t0, metadata, rebuilt, adopted, partial)


def _verify_objects(url: str, features: list[str] | None, t0: float) -> VerifyReport:
    """`verify_store` of a store on object storage: every item checked in full (each file's size and SHA-256
    against its index record), a missing or damaged index written anew from the parts and parts no record
    names adopted (`_repair_indexes`, as locally), each reported."""
    store = Store(url)
    present = store.features()
    unknown = set(features or []) - set(present)
    if unknown:
        raise ValueError(f"{url}: no feature(s) {sorted(unknown)}; present: {present}")
    chosen = features or present
    rebuilt, adopted = _repair_indexes(url, chosen, store)
    if rebuilt or adopted:
        store.close()
        store = Store(url)  # the repaired indexes
    try:
        checks = [c for f in chosen for c in store.check(f, full=True)]
        partial = [p for c in checks if c.ok and (p := _partial(store, c)) is not None]
    finally:
        store.close()
    return VerifyReport(url, checks, time.perf_counter() - t0, [], rebuilt, adopted, partial)  # type: ignore[arg-type]


def _partial(store: Store, check: ItemCheck) -> dict[str, Any] | None:
    entry = store.index(check.feature).entries[check.item]
    return partial_record(check.feature, check.item, entry.attrs(), entry.duration_s)  # attrs: checked to parse


def _repair_indexes(path: Path | str, features: list[str], store: Store,
                    ) -> tuple[list[repair.Rebuilt], list[repair.Adopted]]:
    """Rebuild each damaged or missing index from its parts and adopt the parts no index line names, holding
    the store's write lock (which is not taken when nothing needs repair)."""
    def needs_repair(feature: str) -> bool:
        state, why, _ = repair.load(store.backend, feature)
        return why is not None or (state is not None and bool(repair.unindexed(store.backend, feature, state)))

    todo = [f for f in features if needs_repair(f)]
    if not todo:
        return [], []
    from store.writer import StoreWriter

    reports: list[repair.Rebuilt | repair.Adopted] = []
    with StoreWriter(path, str(store.attrs.get("dataset", ""))) as w:
        for f in todo:
            repair.open_index(w.backend, f, reports)
    return ([r for r in reports if isinstance(r, repair.Rebuilt)], [r for r in reports if isinstance(r, repair.Adopted)])
