"""Which (feature, item) pairs need computing: missing, stale (fingerprint differs), damaged or forced."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import numpy as np

from store import layout
from store.backends import Backend, join, open_backend
from store.index import Index, gc_paused
from store.integrity import ItemCheck, part_problems
from store.layout import Header, PartRecord, Record
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


def make_plan(store_path: Path, wanted: list[Wanted], force: bool = False, verify: bool = False,
              indexes: Callable[[str], Index] | None = None) -> Plan:
    """From the features' indexes: `indexes` (feature -> its index) where the caller holds them already (a
    run's writer, which read each log once), else a snapshot of the store, of which only each item's part and
    whether its fingerprint is the wanted one are kept (`_Current`). A damaged item (its part checked once;
    with `verify` in full) counts as missing, so it is recomputed; each is listed in `Plan.damaged`."""
    if force or not open_backend(store_path).exists(layout.META):
        return Plan(todo=list(wanted), skipped=[])
    with gc_paused():  # see _decide
        todo, skipped, damaged = _decide(store_path, wanted, verify, indexes)
    return Plan(todo=todo, skipped=skipped, damaged=damaged)


def _decide(store_path: Path, wanted: list[Wanted], verify: bool, indexes: Callable[[str], Index] | None,
            ) -> tuple[list[Wanted], list[Wanted], list[ItemCheck]]:
    """(todo, skipped, damaged). Called with the collector paused: what it keeps of the indexes (a million
    items for a million) is freed by reference counts when it returns, so no collection ever walks it, nor
    the caller's wanted pairs while they are made."""
    store = Store(store_path) if indexes is None else None
    backend = open_backend(store_path)
    by_feature: dict[str, list[Wanted]] = defaultdict(list)
    for w in wanted:
        by_feature[w.feature].append(w)
    found: dict[str, list[bool]] = {}  # feature -> for each of its wanted pairs, whether it is up to date
    damaged: list[ItemCheck] = []
    try:
        for feature, ws in sorted(by_feature.items()):
            if not backend.children(feature):
                found[feature] = [False] * len(ws)
                continue
            if store is None:
                state = indexes(feature)
                problems = part_problems(backend, feature, state.parts, full=verify)
                found[feature] = _from_entries(backend, feature, state, problems, ws, damaged)
                continue
            got = _Current.scan(store, feature, ws, verify, damaged)
            if got is None:
                state = store.index(feature)
                got = _from_entries(backend, feature, state, store.part_problems(feature, full=verify), ws, damaged)
            found[feature] = got if isinstance(got, list) else got.up_to_date()
    finally:
        if store is not None:
            store.close()
    todo, skipped = [], []
    each = {f: iter(v) for f, v in found.items()}
    for w in wanted:
        (skipped if next(each[w.feature]) else todo).append(w)
    return todo, skipped, damaged


class _Current:
    """A feature's index as planning reads it, for its wanted pairs in their order: the number of the part
    holding each one's current rows when its stored fingerprint is the wanted one, else -1 - that number
    (None: not stored). Nothing else of an entry is kept (attributes, spec, rows), the part numbers are
    shared by a part's items, and each index row costs one lookup of its item among the wanted ones."""

    def __init__(self, wanted: list[Wanted]) -> None:
        self.wanted = wanted
        self.at = dict(zip(map(attrgetter("item"), wanted), range(len(wanted)), strict=True))  # the last pair of an item wins
        self.twice: dict[str, list[int]] = {}  # an item wanted more than once: each pair's position
        if len(self.at) < len(wanted):
            for j, w in enumerate(wanted):
                self.twice.setdefault(w.item, []).append(j)
            self.twice = {item: js for item, js in self.twice.items() if len(js) > 1}
        self.part_of: list[int | None] = [None] * len(wanted)
        self.unwanted: dict[str, int] = {}  # current items not wanted: only their parts, for `damaged`
        self.parts: list[str] = []
        self.records: dict[str, PartRecord] = {}
        self.bad: set[int] = set()

    @classmethod
    def scan(cls, store: Store, feature: str, wanted: list[Wanted], verify: bool,
             damaged: list[ItemCheck]) -> _Current | None:
        """From the store's snapshot of the feature's index, its parts checked once each; None when the
        index is missing or damaged (the caller then plans from the index rebuilt from the parts)."""
        cur = cls(wanted)
        if not store.scan_index(feature, cur._visit):
            return None
        problems = store.part_problems(feature, verify, records=cur.records)
        if problems:
            cur.bad = {k for k, p in enumerate(cur.parts) if p in problems}
            held = [*((w.item, k) for w, k in zip(wanted, cur.part_of, strict=True) if k is not None),
                    *cur.unwanted.items()]
            hit = sorted({(item, cur.parts[k if k >= 0 else -1 - k]) for item, k in held
                          if (k if k >= 0 else -1 - k) in cur.bad})
            _report(store.backend, feature, hit, problems, damaged)
        return cur

    def _visit(self, rec: Record) -> None:
        if isinstance(rec, Header):
            return
        part = rec.part
        k, other = len(self.parts), -1 - len(self.parts)
        self.parts.append(part)
        self.records[part] = PartRecord(part, rec.seq, rec.files, rec.arrays)
        at, wanted, part_of = self.at, self.wanted, self.part_of
        for item, fp in rec.fingerprints():
            j = at.get(item)
            if j is None:
                self.unwanted[item] = k
            else:  # a later part supersedes: the last one written wins, as in the index
                part_of[j] = k if wanted[j].fingerprint == fp else other
                if self.twice and item in self.twice:
                    for j in self.twice[item]:
                        part_of[j] = k if wanted[j].fingerprint == fp else other

    def up_to_date(self) -> list[bool]:
        """Per wanted pair: stored, with the wanted fingerprint, in an undamaged part."""
        bad = self.bad
        return [k is not None and k >= 0 and k not in bad for k in self.part_of]


def _from_entries(backend: Backend, feature: str, state: Index, problems: dict[str, str], wanted: list[Wanted],
                  damaged: list[ItemCheck]) -> list[bool]:
    """`_Current.up_to_date` from a whole index (a writer's, or `Store.index`: rebuilt from the parts when
    the log is missing or damaged) and its parts' problems."""
    bad = {state.part_id[p] for p in problems if p in state.part_id}
    if bad:
        hit = np.flatnonzero(np.isin(state.part, list(bad))).tolist()
        _report(backend, feature, sorted((state.ids[k], state.part_names[state.part[k]]) for k in hit), problems,
                damaged)
    return [(k := state.pos.get(w.item)) is not None and state.part.item(k) not in bad
            and state.fingerprint(k) == w.fingerprint for w in wanted]


def _report(backend: Backend, feature: str, hit: list[tuple[str, str]], problems: dict[str, str],
            damaged: list[ItemCheck]) -> None:
    """The current items of damaged parts go to `damaged` (sorted by item), their parts logged."""
    damaged.extend(ItemCheck(feature, item, backend.describe(join(feature, layout.PARTS, part)), problems[part])
                   for item, part in hit)
    for part in sorted({part for _, part in hit}):
        log.warning("%s: damaged part, recomputing its items (%s)", backend.describe(join(feature, layout.PARTS, part)),
                    problems[part])
