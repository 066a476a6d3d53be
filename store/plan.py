"""Which (feature, item) pairs need computing: missing, stale (fingerprint differs), damaged or forced."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

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
    its part folder and listed in `Plan.damaged`."""
    if force or not (store_path / "zarr.json").exists():
        return Plan(todo=list(wanted), skipped=[])
    store = Store(store_path)
    stored: dict[str, dict[str, str]] = {}
    damaged: list[ItemCheck] = []
    for feature in sorted({w.feature for w in wanted}):
        stored[feature] = {}
        if not (store_path / feature).is_dir():
            continue
        entries = store.index(feature).entries
        for c in store.check(feature, full=verify):
            if c.ok:
                stored[feature][c.item] = entries[c.item].fingerprint
            else:
                damaged.append(c)
        for path, problem in sorted({(c.path, c.problem) for c in damaged if c.feature == feature}):
            log.warning("%s: damaged part, recomputing its items (%s)", path, problem)
    store.close()
    todo, skipped = [], []
    for w in wanted:
        (skipped if stored[w.feature].get(w.item) == w.fingerprint else todo).append(w)
    return Plan(todo=todo, skipped=skipped, damaged=damaged)
