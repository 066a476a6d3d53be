"""Which (feature, item) pairs need computing: missing, stale (fingerprint differs), damaged or forced."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from store import parts
from store.index import Entry, gc_paused
from store.integrity import ItemCheck
from store.reader import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wanted:
    feature: str
    item: str
    fingerprint: str


@dataclass(frozen=True)
class Plan:
    todo: list[Wanted]
    skipped: list[Wanted]  # already in the store with the same fingerprint
    damaged: list[ItemCheck] = field(default_factory=list)  # items on disk that failed the check: recomputed if wanted

    def count(self, which: str) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for w in getattr(self, which):
            counts[w.feature] += 1
        return dict(counts)


def make_plan(store_path: Path, wanted: list[Wanted], force: bool = False, verify: bool = False) -> Plan:
    """From the features' indexes. A damaged item (its part has a missing or truncated file or unreadable
    metadata; with `verify` also changed bytes) counts as missing, so it is recomputed; each is logged with
    its part folder and listed in `Plan.damaged`. Integrity is checked per part, not per item: the work per
    wanted pair is one index lookup (a re-run over a million up-to-date items decides in microseconds each)."""
    if force or not (store_path / "zarr.json").exists():
        return Plan(todo=list(wanted), skipped=[])
    with gc_paused():  # see _decide
        todo, skipped, damaged = _decide(store_path, wanted, verify)
    return Plan(todo=todo, skipped=skipped, damaged=damaged)


def _decide(store_path: Path, wanted: list[Wanted], verify: bool) -> tuple[list[Wanted], list[Wanted], list[ItemCheck]]:
    """(todo, skipped, damaged). Called with the collector paused: the index entries it loads (a million for a
    million items) are freed by their reference counts when it returns, so no collection ever walks them,
    nor the caller's wanted pairs while they are made."""
    store = Store(store_path)
    stored: dict[str, tuple[dict[str, Entry], set[str]]] = {}  # feature -> (its entries, its damaged parts)
    damaged: list[ItemCheck] = []
    try:
        for feature in sorted({w.feature for w in wanted}):
            stored[feature] = _stored(store, feature, verify, damaged) if (store_path / feature).is_dir() else ({}, set())
    finally:
        store.close()
    todo, skipped = [], []
    for w in wanted:
        entries, bad = stored[w.feature]
        e = entries.get(w.item)
        (skipped if e is not None and e.fingerprint == w.fingerprint and e.part not in bad else todo).append(w)
    return todo, skipped, damaged


def _stored(store: Store, feature: str, verify: bool, damaged: list[ItemCheck]) -> tuple[dict[str, Entry], set[str]]:
    """A feature's current entries and its damaged parts, each part checked once; the items of damaged parts
    go to `damaged` (sorted by item), their parts logged."""
    state = store.index(feature)
    problems = store.part_problems(feature, full=verify)
    if problems:
        hit = sorted((e.item, e.part) for e in state.entries.values() if e.part in problems)
        damaged.extend(ItemCheck(feature, item, parts.part_dir(store.path, feature, part), problems[part], None)
                       for item, part in hit)
        for part in sorted({part for _, part in hit}):
            log.warning("%s: damaged part, recomputing its items (%s)", parts.part_dir(store.path, feature, part),
                        problems[part])
    return state.entries, set(problems)
