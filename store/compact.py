"""`python -m pipeline compact --out STORE`: reclaim the space of superseded rows (docs/design.md, "Store").

A recomputed item's new rows go to a new part and its old rows stay where they were, unread. Compaction
rewrites a feature's current rows into fresh, full parts (every array copied as stored: the rows read back
bit-identical), publishes them as a new index generation (one atomic rename of the whole log), and then
removes the old parts. The old log is kept first as a hard link under `<feature>/retired/`: a reader
pins the log it opened with a shared flock (its lease, store/reader.py), so the old parts are removed only
when no reader holds the old log any more: right after the rename when none does, else by a later writer
(its next commit, compaction or verify: store/repair.py `release_retired`). A reader opened before the
compaction therefore reads its whole snapshot, lazily or not, until it is closed.

A kill before the rename leaves the old index and parts as they were, and the new parts unindexed: the next
writer adopts them (they hold the same rows, bit for bit, and supersede the old ones). A kill after it
leaves the old parts named by the retired log, removed by the next writer once no reader holds them. A
part that differs from its record (full check, hashes) is never copied: it stays as it is, with its
current items, so verify and `extract --verify` still find it.

Run at the end of `make extract` when worthwhile: at least a quarter of the stored rows are superseded, or
the feature holds more than four times the parts a compacted one would (many small age-triggered batches)
and at least `MIN_PARTS` of them.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rows import FeatureRows
from store import index, layout, parts, repair
from store.integrity import check_part
from store.writer import StoreWriter

log = logging.getLogger(__name__)
PART_ITEMS = 2048  # items per compacted part
PART_BYTES = 256 << 20  # and at most about this many bytes
MIN_PARTS = 16
GARBAGE_SHARE = 0.25


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


def _bytes(state: index.IndexState) -> int:
    return sum(int(size) for rec in state.parts.values() for size, _ in rec.files.values())


def worthwhile(state: index.IndexState) -> bool:
    stored = sum(_rows_in(r) for r in state.parts.values())
    live = sum(e.n_rows for e in state.entries.values())
    ideal = max(1, -(-len(state.entries) // PART_ITEMS), -(-_bytes(state) // PART_BYTES))
    garbage = stored > 0 and (stored - live) / stored >= GARBAGE_SHARE
    fragmented = len(state.parts) >= MIN_PARTS and len(state.parts) > 4 * ideal
    return bool(garbage or fragmented or (state.parts and not state.entries))


def _signature(record: index.PartRecord) -> tuple:
    return tuple(sorted((k, v.get("dtype"), tuple((v.get("shape") or [0])[1:])) for k, v in record.arrays.items()))


def _load(store: Path, feature: str, part: str, names: list[str]) -> dict[str, np.ndarray]:
    import zarr

    group = zarr.open_group(parts.part_dir(store, feature, part), mode="r")
    return {n: group[n][...] for n in names}


def _rows_of(e: index.Entry, arrays: dict[str, np.ndarray]) -> FeatureRows:
    def take(name: str) -> np.ndarray:
        start, n = (e.spans or {}).get(name) or (e.row0, e.n_rows)
        return arrays[name][start:start + n]

    extras = {k: take(k) for k in arrays if k not in (layout.FEATURES, layout.INTERVALS)}
    return FeatureRows(take(layout.FEATURES), take(layout.INTERVALS), extras, {})


def _damaged(store: Path, feature: str, state: index.IndexState) -> set[str]:
    """Parts that differ from their record (full check: hashes). They are never copied: rewriting them would
    give damaged rows fresh hashes. They stay as they are, so verify and `extract --verify` still find them."""
    bad = set()
    for name, record in state.parts.items():
        problem = check_part(parts.part_dir(store, feature, name), record, full=True)
        if problem is not None:
            log.warning("%s: damaged part kept as it is, not compacted (%s)", parts.part_dir(store, feature, name),
                        problem)
            bad.add(name)
    return bad


def _batches(store: Path, feature: str, state: index.IndexState,
             skip: set[str]) -> list[list[tuple[str, FeatureRows, dict[str, Any]]]]:
    """The current rows (but those in `skip` parts), grouped by array signature, in commit order, cut into parts
    of PART_ITEMS / PART_BYTES."""
    by_part: dict[str, list[index.Entry]] = {}
    for e in state.entries.values():
        if e.part not in skip:
            by_part.setdefault(e.part, []).append(e)
    groups: dict[tuple, list[tuple[str, FeatureRows, dict[str, Any]]]] = {}
    for part in sorted(by_part, key=lambda p: state.parts[p].seq):
        record = state.parts[part]
        arrays = _load(store, feature, part, list(record.arrays))
        for e in sorted(by_part[part], key=lambda e: e.row0):
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


def _record(record: index.PartRecord, state: index.IndexState) -> dict[str, Any]:
    """A kept part's index record as committed: every entry of the part (the later new parts supersede the
    ones that are no longer current there)."""
    rows = [index.entry_row(e.item, e.row0, e.n_rows, e.attrs()) for e in state.entries.values() if e.part == record.part]
    spans = {e.item: e.spans for e in state.entries.values() if e.part == record.part and e.spans}
    return index.part_record(record.part, record.seq, rows, record.files, record.arrays, spans)


def compact_feature(writer: StoreWriter, feature: str, force: bool = True) -> Compacted | None:
    """Rewrite one feature's current rows into fresh parts (see the module docstring); None when not
    worthwhile and not forced."""
    store = writer.path
    state = writer.index(feature)
    if not state.parts or not (force or worthwhile(state)):
        return None
    before = _bytes(state)
    damaged = _damaged(store, feature, state)
    kept = [_record(state.parts[p], state) for p in sorted(damaged, key=lambda p: state.parts[p].seq)]
    old = [p for p in state.parts if p not in damaged]
    records, seq = [], state.last_seq
    try:
        for batch in _batches(store, feature, state, damaged):
            seq += 1
            name = f"{seq:09d}-c{index.header()['generation'][:7]}"
            records.append(writer._write_part(feature, name, seq, batch))
    except BaseException:
        for rec in records:
            shutil.rmtree(parts.part_dir(store, feature, rec["part"]), ignore_errors=True)
        raise
    retired = repair.retire_current(store, feature)
    try:
        index.replace(store / feature / index.INDEX, [index.header(), *kept, *records])
    except BaseException:
        retired.unlink(missing_ok=True)
        raise
    new = index.load(store / feature / index.INDEX)
    writer._index[feature] = new
    repair.release_retired(store, feature, new)
    dropped = sum(_rows_in(state.parts[p]) for p in state.parts) - sum(_rows_in(new.parts[p]) for p in new.parts)
    result = Compacted(feature, len(old), len(new.parts), dropped, before, _bytes(new))
    log.debug("%s", result.line().strip())  # the caller prints the lines (CLI) or puts them in the run summary
    return result


def compact_store(path: Path | str, features: list[str] | None = None, force: bool = True,
                  writer: StoreWriter | None = None) -> list[Compacted]:
    """Compact the store's features (all by default); `force=False`: only where worthwhile. Uses the given
    writer (a run's, which holds the lock), else opens one."""
    own = writer is None
    if writer is None:
        from store.reader import Store

        writer = StoreWriter(path, str(Store(path).attrs.get("dataset", "")))
    try:
        names = features or sorted(p.parent.name for p in Path(writer.path).glob(f"*/{index.INDEX}"))
        return [c for f in names if (c := compact_feature(writer, f, force)) is not None]
    finally:
        if own:
            writer.close()
