"""`python -m pipeline verify` / `make verify`: every part checked in full, every index (a damaged or deleted one
rebuilt from the parts), and every metadata file of the store. The store is walked through its backend (a
local folder and a bucket alike), so a feature or root with damaged metadata is reported and its items are still
checked through the index."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manifests.records import MediaItem, QAItem, one_line, parse_jsonl_all
from store import layout, repair
from store.backends import Backend, join, location, open_backend
from store.integrity import DamagedItem, ItemCheck, zarr_meta_at
from store.partial import partial_line, partial_record
from store.reader import Store

_REPAIR = {"root": "the store's own metadata: repair it by hand (its items are checked here regardless)",
           "feature": "`make extract` with this feature writes it anew from the run's spec",
           "manifest": "`make extract` writes it anew",
           "run": "a run's record only (`info` and `report` leave it out); delete it or restore it from a copy"}


@dataclass(frozen=True)
class VerifyReport:
    store: Path | str  # as given: a folder's Path, or a URL
    checks: list[ItemCheck]
    seconds: float
    # (file, problem) per damaged metadata file; the file as the backend describes it (a Path, or a URL)
    metadata: list[tuple[Any, str]] = field(default_factory=list)
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


def _metadata(backend: Backend, features: list[str]) -> list[tuple[Any, str]]:
    problems = []
    for key, which in [(layout.META, "root"), *((join(f, layout.META), "feature") for f in features)]:
        try:
            meta = zarr_meta_at(backend, key, layout.META, "group")
            if which == "root" and meta.get("attributes", {}).get("schema") is None:
                raise DamagedItem(f"{layout.META} has no schema attribute")
        except DamagedItem as e:
            problems.append((backend.describe(key), f"{e}; {_REPAIR[which]}"))
    problems += _run_reports(backend)
    for name, kind in (("items.jsonl", MediaItem), ("qa.jsonl", QAItem)):
        key = join(layout.MANIFESTS, name)
        try:
            parse_jsonl_all(backend.get(key), kind, backend.describe(key))  # an error names the line
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            problems.append((backend.describe(key), f"unreadable ({' '.join(str(e).split())[:300]}); "
                                                    f"{_REPAIR['manifest']}"))
    return problems


def _run_reports(backend: Backend) -> list[tuple[Any, str]]:
    """Run reports (`_runs/<run id>.json`, written whole) that do not parse as one: only damage does that."""
    problems = []
    for name in backend.children(layout.RUNS):
        if not name.endswith(".json"):
            continue
        key = join(layout.RUNS, name)
        try:
            rep = json.loads(backend.get(key))
            why = None if isinstance(rep, dict) and isinstance(rep.get("counts"), dict) and "run_id" in rep else \
                "not a run report (an object with run_id and counts)"
        except (OSError, ValueError) as e:  # a folder of that name too (no such object)
            why = f"unreadable ({' '.join(str(e).split())[:200]})"
        if why is not None:
            problems.append((backend.describe(key), f"{why}; {_REPAIR['run']}"))
    return problems


def _is_store(backend: Backend) -> bool:
    """Anything of a store at its root (its zarr.json may be the damage verify is to report)."""
    return backend.exists(layout.META) or backend.exists(layout.LOCK) or \
        any(backend.children(name) for name in (layout.MANIFESTS, layout.RUNS))


def _feature_there(backend: Backend, feature: str) -> bool:
    """A feature's group metadata, index log or parts are there (any one of them may be damaged or gone)."""
    return backend.exists(join(feature, layout.META)) or backend.exists(join(feature, layout.INDEX)) or \
        bool(backend.children(join(feature, layout.PARTS)))


def verify_store(path: Path | str, features: list[str] | None = None) -> VerifyReport:
    """One walk over the backend contract (store/backends/base.py), a local folder and a bucket alike."""
    t0 = time.perf_counter()
    where = location(path)  # as given: a Path, or a URL's text (the report names it)
    backend = open_backend(where)
    if not _is_store(backend):
        raise FileNotFoundError(f"{where}: not a feature store (no {layout.META}); run `make extract` first")
    store = Store(where, damaged_root=True)
    present = [f for f in store._feature_dirs() if _feature_there(backend, f)]
    unknown = set(features or []) - set(present)
    if unknown:
        raise ValueError(f"{where}: no feature(s) {sorted(unknown)}; present: {present}")
    chosen = features or present
    metadata = _metadata(backend, chosen)
    rebuilt, adopted = _repair_indexes(where, chosen, store) if store.root is not None else ([], [])
    if rebuilt or adopted:
        store.close()
        store = Store(where, damaged_root=True)  # the repaired indexes
    try:
        checks = [c for f in chosen for c in store.check(f, full=True)]
        partial = [p for c in checks if c.ok and (p := _partial(store, c)) is not None]
    finally:
        store.close()
    return VerifyReport(where, checks, time.perf_counter() - t0, metadata, rebuilt, adopted, partial)


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
