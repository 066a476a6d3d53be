"""`python -m pipeline compact STORE` and the end of every run: the current rows of the parts chosen
(`to_rewrite`) copied as stored into full parts through the writer's one commit path (a `Rewrite`); a part
that fails its full check is never copied (docs/design.md, "Supersession and compaction")."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rows import FeatureRows
from store import index, layout
from store.backends import join, open_backend
from store.integrity import check_part_at, part_problems
from store.writer import Rewrite, StoreWriter

log = logging.getLogger(__name__)
PART_ITEMS = 2048  # items per compacted part
PART_BYTES = 256 << 20  # and at most about this many bytes
GARBAGE_SHARE = 0.25  # a part with this share of its rows superseded is rewritten at the end of a run


@dataclass(frozen=True)
class Compacted:
    feature: str
    parts_before: int
    parts_after: int
    rows_dropped: int
    bytes_before: int
    bytes_after: int

    def line(self) -> str:
        return (f"  compacted {self.feature}: {self.parts_before} -> {self.parts_after} part(s), "
                f"{self.rows_dropped} superseded row(s) dropped, {self.bytes_before / 1e6:.1f} -> "
                f"{self.bytes_after / 1e6:.1f} MB")


def _rows_in(record: index.PartRecord) -> int:
    shape = record.arrays.get(layout.FEATURES, {}).get("shape") or [0]
    return int(shape[0])


def _bytes(records: Iterable[index.PartRecord]) -> int:
    return sum(int(size) for rec in records for size, _ in rec.files.values())


def to_rewrite(state: index.Index, force: bool, damaged: set[str] = frozenset(), merge_small: bool = True) -> set[str]:
    """The parts a compaction rewrites; none when rewriting would change nothing. At the end of a run, the parts
    not worth keeping: a quarter of their rows superseded or none current, and the small ones (under half of
    `PART_ITEMS` and of `PART_BYTES`) when two or more can be merged. `force` (`python -m pipeline compact`):
    every part, where some row is superseded, some part holds no current item, or the parts that are not
    `damaged` (kept as they are) are more than the rows need. `merge_small=False`: the small ones are left as they
    are (a run whose model actors wrote their own parts does not read them all back on its driver to merge them)."""
    usage = state.usage()
    wasteful = {p for p, r in state.parts.items()
                if usage[p][0] == 0 or (_rows_in(r) and (_rows_in(r) - usage[p][1]) / _rows_in(r) >= GARBAGE_SHARE)}
    if force:
        items = sum(n for n, _ in usage.values())
        ideal = max(1, -(-items // PART_ITEMS), -(-_bytes(state.parts.values()) // PART_BYTES))
        superseded = any(_rows_in(r) > usage[p][1] for p, r in state.parts.items())
        return set(state.parts) if superseded or wasteful or len(state.parts) - len(damaged) > ideal else set()
    small = {p for p, r in state.parts.items() if usage[p][0] < PART_ITEMS // 2 and _bytes([r]) < PART_BYTES // 2}
    if not merge_small:
        small = set()
    if not wasteful and len(small) < 2:  # one small part alone: nothing to merge it with
        return set()
    return wasteful | small


def _signature(record: index.PartRecord) -> tuple:
    return tuple(sorted((k, v.get("dtype"), tuple((v.get("shape") or [0])[1:])) for k, v in record.arrays.items()))


def _load(store: Path | str, feature: str, part: str, names: list[str]) -> dict[str, np.ndarray]:
    import zarr

    group = zarr.open_group(open_backend(store).zarr_store(read_only=True), path=join(feature, layout.PARTS, part),
                            mode="r")
    return {n: group[n][...] for n in names}


def _rows_of(e: index.Entry, arrays: dict[str, np.ndarray]) -> FeatureRows:
    def take(name: str) -> np.ndarray:
        start, n = (e.spans or {}).get(name) or (e.row0, e.n_rows)
        return arrays[name][start:start + n]

    extras = {k: take(k) for k in arrays if k not in (layout.FEATURES, layout.INTERVALS)}
    return FeatureRows(take(layout.FEATURES), take(layout.INTERVALS), extras, {})


def _damaged(store: Path, feature: str, state: index.Index, names: set[str]) -> set[str]:
    """Those of `names` that differ from their record (full check: hashes). They are never copied: rewriting
    them would give damaged rows fresh hashes. They stay as they are, so verify and `extract --verify` still
    find them."""
    bad = set()
    for name in sorted(names):
        record = state.parts[name]
        problem = check_part_at(open_backend(store), join(feature, layout.PARTS, name), record, full=True)
        if problem is not None:
            log.warning("%s: damaged part kept as it is, not compacted (%s)", f"{store}/{feature}/{layout.PARTS}/{name}",
                        problem)
            bad.add(name)
    return bad


def _batches(store: Path, feature: str, state: index.Index,
             old: frozenset[str]) -> list[list[tuple[str, FeatureRows, dict[str, Any]]]]:
    """The current rows of the `old` parts, grouped by array signature, in commit order, cut into parts of
    PART_ITEMS / PART_BYTES."""
    groups: dict[tuple, list[tuple[str, FeatureRows, dict[str, Any]]]] = {}
    for part, entries in state.entries_of(old).items():
        if not entries:  # every item superseded: nothing to copy
            continue
        record = state.parts[part]
        arrays = _load(store, feature, part, list(record.arrays))
        for e in sorted(entries, key=lambda e: e.row0):
            groups.setdefault(_signature(record), []).append((e.item, _rows_of(e, arrays), e.attrs()))
    out = []
    for members in groups.values():
        batch, size = [], 0
        for m in members:
            nbytes = m[1].features.nbytes + sum(np.asarray(v).nbytes for v in m[1].extras.values())
            if batch and (len(batch) >= PART_ITEMS or size + nbytes > PART_BYTES):
                out.append(batch)
                batch, size = [], 0
            batch.append(m)
            size += nbytes
        if batch:
            out.append(batch)
    return out


def compact_feature(writer: StoreWriter, feature: str, force: bool = True, merge_small: bool = True,
                    ) -> Compacted | None:
    """Rewrite the feature's parts (all of them when `force`, else those `to_rewrite` picks) into fresh
    parts through the writer's one commit path (`Rewrite`); None when there is nothing to rewrite."""
    store = writer.path
    state = writer.index(feature)
    chosen = to_rewrite(state, force, set(part_problems(store, feature, state.parts)) if force else set(), merge_small)
    if not chosen:
        return None
    before, rows_before = _bytes(state.parts.values()), sum(_rows_in(r) for r in state.parts.values())
    old = frozenset(chosen - _damaged(store, feature, state, chosen))
    new = writer.commit_op(feature, Rewrite(old, _batches(store, feature, state, old)))
    dropped = rows_before - sum(_rows_in(r) for r in new.parts.values())
    result = Compacted(feature, len(state.parts), len(new.parts), dropped, before, _bytes(new.parts.values()))
    log.debug("%s", result.line().strip())  # the caller prints the lines (CLI) or puts them in the run summary
    return result


def compact_store(path: Path | str, features: list[str] | None = None, force: bool = True,
                  writer: StoreWriter | None = None, merge_small: bool = True) -> list[Compacted]:
    """Compact the store's features (all by default); `force=False`: only where worthwhile (`merge_small`: see
    `to_rewrite`). Uses the given writer (a run's, which holds the lock), else opens one."""
    own = writer is None
    if writer is None:
        from store.reader import Store

        writer = StoreWriter(path, str(Store(path).attrs.get("dataset", "")))
    try:
        names = features or [f for f in writer.backend.children() if writer.backend.exists(join(f, layout.INDEX))]
        return [c for f in names if (c := compact_feature(writer, f, force, merge_small)) is not None]
    finally:
        if own:
            writer.close()
