"""Which (feature, item) pairs need computing: missing, stale (fingerprint differs) or forced."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from store.reader import Store


@dataclass(frozen=True)
class Wanted:
    feature: str
    item: str
    fingerprint: str


@dataclass(frozen=True)
class Plan:
    todo: list[Wanted]
    skipped: list[Wanted]  # already in the store with the same fingerprint

    def count(self, which: str) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for w in getattr(self, which):
            counts[w.feature] += 1
        return dict(counts)


def make_plan(store_path: Path, wanted: list[Wanted], force: bool = False) -> Plan:
    if force or not (store_path / "zarr.json").exists():
        return Plan(todo=list(wanted), skipped=[])
    store = Store(store_path)
    stored = {f: store.stored_fingerprints(f) for f in {w.feature for w in wanted}}
    todo, skipped = [], []
    for w in wanted:
        (skipped if stored[w.feature].get(w.item) == w.fingerprint else todo).append(w)
    return Plan(todo=todo, skipped=skipped)
