"""Snapshot reads (docs/design.md, "Snapshots" and "Reads"): a `Store` pins each feature's index log, leased so
that a compaction keeps the parts it names, and reads only that prefix, so an item never mixes two versions.
One read path: positions in the index's columns, each part checked once per handle, rows from one part cache."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import weakref
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.array import AsyncArray
from zarr.storage import StorePath, WrapperStore

from manifests.records import MediaItem, QAItem, parse_jsonl_all
from store import index, integrity, layout, parts
from store.backends import Backend, Pinned, join, location, open_backend
from store.index import Index, attrs_of
from store.integrity import DamagedItem, DamagedMetadata, DamagedPart, ItemCheck, damaged_item
from store.rowview import RowView

log = logging.getLogger(__name__)


def _default_cache_bytes() -> int:
    """An eighth of the machine's memory, at most 4 GiB (SIQ_STORE_CACHE_BYTES overrides): a feature whose
    slab fits is read at memory speed after its first epoch; one that does not is read item by item."""
    if os.environ.get("SIQ_STORE_CACHE_BYTES"):
        return int(os.environ["SIQ_STORE_CACHE_BYTES"])
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return int(min(4 << 30, max(256 << 20, total // 8)))


PART_CACHE_BYTES = _default_cache_bytes()
_METAS_KEPT = 256  # parts whose arrays' metadata a reader keeps from their quick checks (`Store._metas`)
# A (feature, array) whose parts are all up to this size gets a slab (parts read whole): for random access, a
# larger part would cost a big read for one item (a part's tokens, ~64 MiB: 0.5 s a read)
WHOLE_ARRAY_BYTES = 16 << 20
_STRING_BYTES = 64  # what a string costs in a slab, for its bound (numpy's StringDType: 16 B + the text)


@dataclass
class _Array:
    """What reads of one (feature, array) of a snapshot need, made once per handle: each item's first row and
    row count in it, and its slab where it has one (the part cache): its parts' arrays one after another in
    one allocation, filled part by part as they are read and never evicted, so that a batched read of random
    items is one `take` from it, over memory the kernel can back with huge pages (numpy asks for them on large
    allocations), and views handed out stay valid."""

    row0: np.ndarray  # item position -> first row in its part's array
    n: np.ndarray  # item position -> rows
    data: np.ndarray | None = None  # the slab
    offsets: np.ndarray | None = None  # part number -> its first row in `data`; one more at the end
    loaded: np.ndarray | None = None  # part number -> its rows are in `data`
    nbytes: int = 0  # what the whole slab takes of the cache's bytes; taken (then 0) as its first part loads


def _guarded(ref: weakref.ref, where: tuple[str, str, str], get: Callable[[Any], Any], key: Any) -> Any:
    """A read of a part's array through zarr (`RowView`'s guard), with what zarr does not check: a chunk that
    fails its checksum raises DamagedPart (zarr's own error names no part), and a chunk file missing at the
    read (zarr would read one as zeros: `_Committed`) SnapshotGone or DamagedPart. `ref`: the store,
    weakly (it caches the view: a cycle would keep a dropped store, and its lease, alive until the next
    cyclic collection)."""
    store = ref()
    if store is None or store._closed:  # its lease is gone: the part may be too
        raise RuntimeError("this store handle is closed: open the store again")
    try:
        return get(key)
    except (IndexError, TypeError, MemoryError):  # the caller's key, or the machine: not the part
        raise
    except _Missing as e:
        feature, part, _ = where
        store._gone(feature, store._part_at(feature, part))
        raise DamagedPart(store._part_at(feature, part),
                          f"{e.args[0][len(_part_key(feature, part)) + 1:]} is missing") from None
    except Exception as e:
        raise store._unreadable(*where, e) from None


class _Missing(FileNotFoundError):
    """A file a part's record names is not there (its key the argument)."""


class _Committed(WrapperStore):
    """zarr's store for the reader's part arrays, with the check zarr lacks: a file that the part's record names
    (a key in `committed`) and that is not there raises `_Missing`, where zarr would read a missing chunk as
    its fill value (zeros). A chunk gone during a read (a compaction removing the part, damage) is so caught
    in the request that finds it gone, instead of by asking for the array's files again after each read (in
    a bucket a listing per read). Chunks that no record names are read as zarr reads them: all fill value,
    never written."""

    def __init__(self, store: Any, committed: set[str]) -> None:
        super().__init__(store)
        self._committed = committed

    def _with_store(self, store: Any) -> _Committed:
        return _Committed(store, self._committed)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        got = await self._store.get(key, prototype, byte_range)
        if got is None and key in self._committed:
            raise _Missing(key)
        return got

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
        key_ranges = list(key_ranges)
        got = await self._store.get_partial_values(prototype, key_ranges)
        for (key, _), value in zip(key_ranges, got, strict=True):
            if value is None and key in self._committed:
                raise _Missing(key)
        return got


class SnapshotGone(RuntimeError):
    """This handle's snapshot was compacted away: the parts it pinned no longer exist."""


@dataclass(frozen=True)
class ItemFeature:
    """One feature of one item. `features` and `extras` are the item's rows in the part cache where its
    part is there, else lazy row views: slicing loads only what is asked."""

    feature: str
    item: str
    features: RowView | np.ndarray
    intervals: np.ndarray  # (N, 2) float64 seconds [start, end)
    extras: dict[str, RowView | np.ndarray]
    attrs: dict[str, Any]
    columns: list[str]


def _first_error(e: BaseException) -> str:
    """One line of a manifest's read error: the file's line and the first field that failed, not pydantic's
    four-line report."""
    cause = e.__cause__ if e.__cause__ is not None else e
    at = re.match(r".*?:(\d+): ", str(e))  # records.read_jsonl's "<file>:<line>: …"
    line = at.group(1) if at else None
    if hasattr(cause, "errors"):
        first = cause.errors()[0]
        where = ".".join(map(str, first.get("loc", ()))) or "record"
        text = f"{where}: {first.get('msg', '')}"
    else:
        text = " ".join(str(cause).split())[:200]
    return f"line {line}: {text}" if line else text


class Store:
    def __init__(self, path: Path | str, part_cache_bytes: int = PART_CACHE_BYTES,
                 whole_array_bytes: int = WHOLE_ARRAY_BYTES, damaged_root: bool = False) -> None:
        """`path`: a folder, or an object-storage URL (s3://bucket/prefix, gs://, az://). `damaged_root`: open
        even when the store's own zarr.json is unreadable (verify: the items are still checked through the
        indexes); feature attributes are then unavailable."""
        # a path stays a Path (callers join it); a URL stays its text, and every read goes through the backend
        self.path: Any = location(path)
        self.backend: Backend = open_backend(self.path)
        self._zarr = self.backend.zarr_store(read_only=True)
        self.root, self.attrs = None, {}
        try:
            if not self.backend.exists(layout.META):
                raise FileNotFoundError(f"{self.path}: not a feature store (no {layout.META}); run `make extract` first")
            try:
                # zarr_format: the store is Zarr v3 (its zarr.json is there); unsaid, zarr also asks a bucket for
                # v2's .zgroup, .zattrs and .zmetadata, three requests more per open
                self.root = zarr.open_group(self._zarr, mode="r", zarr_format=3)
            except (ValueError, TypeError, KeyError) as e:  # invalid JSON is a ValueError
                raise ValueError(f"{self._at(layout.META)}: the store's metadata is unreadable "
                                 f"({type(e).__name__}: {e})") from None
            self.attrs = dict(self.root.attrs)
            layout.check_schema(self.path, {"schema": None, **self.attrs})
        except (FileNotFoundError, ValueError) as e:
            if not damaged_root or "version-1 store" in str(e):
                raise
        self._reported: set[tuple[str, str]] = set()
        self._feature_attrs: dict[str, dict[str, Any]] = {}
        self._states: dict[str, Index] = {}
        self._part_checks: dict[tuple[str, str], str | None] = {}
        # (feature, part) -> its arrays' zarr.json as its quick check read them, for the last _METAS_KEPT parts
        # checked: a part's arrays are opened from them, not asked for again (in a bucket a request each)
        self._metas: dict[tuple[str, str], dict[str, bytes]] = {}
        self._committed: set[str] = set()  # keys of the files of the part arrays opened, as their records name them
        self._parts_zarr = _Committed(self._zarr, self._committed)
        self._ok: dict[str, np.ndarray] = {}  # feature -> part number -> passed its quick check (cached)
        self._notes: dict[str, set[str]] = {}  # feature -> parts a read found damaged (`_note`)
        self._arrays: dict[tuple[str, str], _Array] = {}  # the part cache: slabs (`_array`), their loaded bytes
        # feature -> part number -> (features slab, the part's offset in it, intervals slab, its offset), once the
        # part has passed its check, holds no array but these two, and both are in their slabs (`read`'s first branch)
        self._ready: dict[str, list[tuple[np.ndarray, int, np.ndarray, int] | None]] = {}
        self._cache_bytes, self._reserved = 0, 0  # the slabs' loaded bytes, and all they may hold
        self.part_cache_bytes, self.whole_array_bytes = part_cache_bytes, whole_array_bytes
        self._lazy: dict[tuple[str, str, str], Any] = {}  # part arrays of (feature, array)s without a slab, opened
        self._manifests: dict[str, list[Any]] = {}  # file name -> its records (`_manifest`)
        self._closed = False
        self._pins = self._pin()

    # ---- the snapshot ----

    def _at(self, key: str) -> Any:
        """Where a key of the store is, for messages and callers (the backend's `describe`)."""
        return self.backend.describe(key)

    def _pin(self) -> dict[str, Pinned]:
        """feature -> its index log held as it is now (locally: open and leased): the snapshot this handle reads."""
        pins = {}
        for name in self._feature_dirs():
            pin = self.backend.pin_log(join(name, layout.INDEX))
            if pin is not None:
                pins[name] = pin
        return pins

    def close(self) -> None:
        """Release the handle's leases: a compaction may then remove the parts only it still read."""
        for pin in getattr(self, "_pins", {}).values():
            pin.close()
        self._pins = {}
        self._closed = True

    def __del__(self) -> None:
        self.close()

    def _feature_dirs(self) -> list[str]:
        """The names at the store's top that may be features (what has no index log pins nothing)."""
        return [n for n in self.backend.children() if not n.startswith(".") and n not in layout.RESERVED
                and n != layout.META]

    def index(self, feature: str) -> Index:
        """The feature's index as of this handle's snapshot, in columns (parsed once). A damaged index (a
        bad line before the end) or a missing one is rebuilt in memory from the parts, with a warning:
        `python -m pipeline verify` rebuilds it on disk."""
        if feature not in self._states:
            if feature.startswith(".") or "/" in feature or feature not in self._feature_dirs():
                raise KeyError(f"{self.path}: no feature {feature!r}; present: {self.features()}")
            pin = self._pins.get(feature)
            try:
                if pin is None:
                    raise layout.IndexDamaged(f"{self._at(join(feature, layout.INDEX))}: missing")
                cols = index.parse(pin.read(), self._at(join(feature, layout.INDEX)))
                newer = self._newer_parts(feature, cols.last_seq, cols.parts, pin)
                if newer:
                    raise layout.IndexDamaged(
                        f"{self._at(join(feature, layout.INDEX))}: {len(newer)} part(s) committed after its last "
                        f"line ({', '.join(newer[:3])}{', …' if len(newer) > 3 else ''}) and no run writing: its "
                        "lines were cut off or deleted, so it would serve their items' older rows or none")
            except layout.IndexDamaged as e:
                cols = self._from_parts(feature, str(e))
            self._states[feature] = cols
            self._ok[feature] = np.zeros(len(cols.part_names), bool)
        return self._states[feature]

    def _newer_parts(self, feature: str, last: int, known: Container[str], pin: Pinned) -> list[str]:
        """Whole parts (their own zarr.json there) newer than the snapshot's last line (by the seq their names
        begin with) that no later line can name: the log is still the pinned one, as long (`Pinned.unchanged`),
        and no writer holds the store's lock (`Backend.lock_held`). A part a running writer has placed is not
        committed until its line is published, and a tree still being uploaded has no zarr.json yet; a killed
        writer's placed part reads as the index's damage here, as it is adopted by the next writer."""
        newer = [n for n in parts.part_names(self.backend, feature)
                 if n.split("-", 1)[0].isdigit() and int(n.split("-", 1)[0]) > last and n not in known]
        if not newer:
            return []
        whole = self.backend.get_many([join(_part_key(feature, n), layout.META) for n in newer])
        newer = [n for n in newer if whole[join(_part_key(feature, n), layout.META)] is not None]
        if not newer or not pin.unchanged() or self.backend.lock_held(layout.LOCK):
            return []  # the log moved on since this snapshot, or a run is committing: not this snapshot's damage
        return newer

    def scan_index(self, feature: str, visit: Callable[[layout.Record], None]) -> bool:
        """Hand this snapshot's index records of the feature to `visit` (layout.fold) without making its
        entries: for a reader that keeps only part of each (planning). False, having visited nothing or only
        a prefix, when the index is missing or damaged (a line out of order, parts newer than its last line:
        see `index`): `index(feature)` then rebuilds it from the parts."""
        pin = self._pins.get(feature)
        if pin is None or feature.startswith(".") or "/" in feature:
            return False
        order, seen = index.LogOrder(), set()

        def checked(rec: layout.Record) -> None:
            if order.see(rec) is not None:
                raise layout.IndexDamaged(order.problem)
            if isinstance(rec, layout.PartLine):
                seen.add(rec.part)
            visit(rec)

        try:
            layout.fold(pin.read(), self._at(join(feature, layout.INDEX)), checked)
        except layout.IndexDamaged:
            return False
        return not self._newer_parts(feature, order.prev, seen, pin)

    def _from_parts(self, feature: str, why: str) -> Index:
        found, unreadable = parts.records_on_disk(self.backend, feature)
        if found or unreadable:
            log.warning("%s; reading this feature's items from its parts (`python -m pipeline verify %s` "
                        "rebuilds the index)", why, self.path)
        cols = index.of_records(found)
        cols.rebuilt = True
        return cols

    # ---- features and items ----

    def features(self) -> list[str]:
        """Features whose group metadata reads (one with damaged metadata is logged and left out)."""
        groups = self._groups()
        unreadable = self._unreadable_groups(groups)
        for why in unreadable.values():
            log.warning("%s (feature left out)", why)
        return [name for name in groups if name not in unreadable]

    def _groups(self) -> list[str]:
        """The folders at the store's top with a group's zarr.json (not _manifests, _runs: plain folders)."""
        return [name for name in self._feature_dirs() if self.backend.exists(join(name, layout.META))]

    def unreadable_features(self) -> dict[str, str]:
        """Feature folders whose group metadata (zarr.json) does not read -> why, naming the file."""
        return self._unreadable_groups(self._groups())

    def _unreadable_groups(self, groups: list[str]) -> dict[str, str]:
        out = {}
        for name in groups:
            try:
                self._feature_group(name)
            except (ValueError, KeyError) as e:
                out[name] = str(e)
        return out

    def feature_attrs(self, feature: str) -> dict[str, Any]:
        return dict(self._feature_group(feature))

    def _feature_group(self, feature: str) -> dict[str, Any]:
        if feature not in self._feature_attrs:
            if feature.startswith(".") or "/" in feature or not self.backend.exists(join(feature, layout.META)):
                raise KeyError(f"{self.path}: no feature {feature!r}; present: {self.features()}")
            try:
                if self.root is None:
                    raise ValueError("the store's own zarr.json is unreadable")
                self._feature_attrs[feature] = dict(self.root[feature].attrs)
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{self._at(join(feature, layout.META))}: feature metadata unreadable "
                                 f"({type(e).__name__}: {e})") from None
        return self._feature_attrs[feature]

    def part_problem(self, feature: str, part: str, full: bool = False,
                     record: layout.PartRecord | None = None, sizes: dict[str, int | None] | None = None,
                     metas: dict[str, bytes | None] | None = None) -> str | None:
        """The part's check (store/integrity.py; quick ones cached for this handle); `record`: the part's
        index record, when the caller read the index itself (`scan_index`); `sizes`, `metas`: its files' sizes
        and its arrays' zarr.json, when the caller asked for many parts' at once (`part_problems`)."""
        key = (feature, part)
        if full or key not in self._part_checks:
            record = record or self.index(feature).parts[part]
            metas = integrity.read_ahead(self.backend, feature, {part: record})[1].get(part, {}) if metas is None \
                else metas
            found = integrity.part_problem(self.backend, feature, part, record, full, self._noted(feature), sizes,
                                           metas)
            if found is None:  # the arrays' metadata as checked: what `_load` opens them from
                self._metas[key] = metas
                while len(self._metas) > _METAS_KEPT:
                    self._metas.pop(next(iter(self._metas)))
            if found is not None and "is missing" in found:  # removed by a compaction, or being removed
                self._gone(feature, self._part_at(feature, part))
            if full:
                return found
            self._part_checks[key] = found
        return self._part_checks[key]

    def part_problems(self, feature: str, full: bool = False, only: list[str] | None = None,
                      records: dict[str, layout.PartRecord] | None = None) -> dict[str, str]:
        """part -> its problem, for the feature's parts that fail their check (`only`: these parts, else all);
        each part checked once, whatever the number of its items. `records`: the parts to check and their
        records, when the caller read the index itself (`scan_index`). What the checks read is asked for at
        once (`integrity.read_ahead`)."""
        records = self.index(feature).parts if records is None else records
        names = list(records if only is None else only)
        todo = {p: records[p] for p in names if full or (feature, p) not in self._part_checks}
        sizes, metas = integrity.read_ahead(self.backend, feature, todo) if len(todo) > 1 else ({}, {})
        return {p: q for p in names
                if (q := self.part_problem(feature, p, full, records[p], sizes.get(p), metas.get(p))) is not None}

    def check(self, feature: str, full: bool = False) -> list[ItemCheck]:
        """Every current item of a feature, checked by its part against what the writer recorded at commit
        (store/integrity.py: `full` also compares content hashes). Never raises for one bad part."""
        cols = self.index(feature)
        problems = self.part_problems(feature, full)
        folders = [self._part_at(feature, p) for p in cols.part_names]  # one Path per part
        out = []
        for k in sorted(range(len(cols)), key=cols.ids.__getitem__):
            part = cols.part_names[cols.part[k]]
            problem = problems.get(part)
            if problem is None and full and (bad := attrs_of(cols.attrs_json(k))[1]) is not None:
                problem = f"index line {self._line_of(feature, part)}: its attributes do not parse ({bad})"
            out.append(ItemCheck(feature, cols.ids[k], folders[cols.part[k]], problem))
        return out

    def _current(self, feature: str, include_stale: bool) -> np.ndarray:
        """Positions of the feature's items whose part passes the quick check (the others are logged with
        their part, once per handle) and, unless `include_stale`, made with the feature's current spec."""
        cols = self.index(feature)
        keep = np.ones(len(cols), bool)
        for part, problem in self.part_problems(feature, only=cols.live_parts()).items():
            keep &= cols.part != cols.part_id[part]
            if (part, problem) not in self._reported:
                self._reported.add((part, problem))
                log.warning("%s: damaged part, its items left out (%s)", self._part_at(feature, part), problem)
        if not include_stale:
            spec = self._feature_group(feature).get("spec_hash")
            keep &= cols.spec == (cols.specs.index(spec) if spec in cols.specs else -1)
        return keep

    def items(self, feature: str, include_filtered: bool = False, include_stale: bool = False) -> list[str]:
        """Complete items of a feature. Items made with an older spec (config, version, weights) are
        stale and left out unless asked for; so are items a policy filtered (faces: too few faces) and
        damaged items (logged with their part; `python -m pipeline verify` lists them)."""
        keep = self._current(feature, include_stale) & (True if include_filtered else ~self.index(feature).filtered)
        return sorted(self._names(feature, keep))

    def filtered(self, feature: str) -> list[str]:
        """The complete, current items of a feature that a policy filtered (faces: too few faces)."""
        return sorted(self._names(feature, self._current(feature, False) & self.index(feature).filtered))

    def _names(self, feature: str, keep: np.ndarray) -> list[str]:
        ids = self.index(feature).ids
        return ids if keep.all() else [ids[k] for k in np.flatnonzero(keep).tolist()]

    # ---- reading rows: positions, part checks, one part cache ----

    def _where(self, feature: str, items: list[str] | tuple[str, ...]) -> tuple[Index, np.ndarray, np.ndarray]:
        """(the columns, the items' positions, their parts' numbers), after each part's quick check: an
        unknown item raises KeyError, an item of a damaged part DamagedItem naming its part."""
        cols = self.index(feature)
        try:
            k = cols.positions(items)
        except KeyError as e:
            raise KeyError(f"{self.path}: feature {feature!r} has no item {e.args[0]!r}") from None
        pid = cols.part[k]
        ok = self._ok[feature]
        if not ok[pid].all():
            for p in np.unique(pid[~ok[pid]]).tolist():
                self._check(feature, p, [items[i] for i in np.flatnonzero(pid == p).tolist()])
        return cols, k, pid

    def _one(self, feature: str, item: str) -> tuple[Index, int, int]:
        """`_where` of one item, in plain Python (a single read's numpy calls on one-element arrays would
        cost more than the rest of the read)."""
        cols = self.index(feature)
        k = cols.pos.get(item)
        if k is None:
            raise KeyError(f"{self.path}: feature {feature!r} has no item {item!r}")
        pid = int(cols.part[k])
        if not self._ok[feature][pid]:
            self._check(feature, pid, [item])
        return cols, k, pid

    def _check(self, feature: str, pid: int, items: list[str]) -> None:
        """Part number `pid`'s quick check, cached: DamagedItem naming it and `items` (read from it)."""
        problem = self.part_problem(feature, self._states[feature].part_names[pid])
        if problem is not None:
            raise self._damaged(feature, pid, sorted(set(items)), problem)
        self._ok[feature][pid] = True

    def _damaged(self, feature: str, pid: int, items: list[str], problem: str) -> DamagedItem:
        folder = self._part_at(feature, self.index(feature).part_names[pid])
        return damaged_item(folder, ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else ""),
                            problem)

    def read(self, feature: str, item: str) -> ItemFeature:
        """One item of this handle's snapshot, after its part's quick check: a damaged part raises
        DamagedItem naming its folder instead of reading back zeros for a missing chunk."""
        cols = self._states.get(feature) or self.index(feature)
        k = cols.pos.get(item)
        ready = self._ready.get(feature) if k is not None else None
        if ready is not None and (got := ready[pid := cols.part.item(k)]) is not None:
            # the same rows as below, without its per-array lookups, which at a million items had made single
            # reads 0.78x those of f8c0ce5 (its own table for this case; docs/design.md, "Reads")
            features, f0, intervals, i0 = got
            row0, n = cols.row0.item(k), cols.n_rows.item(k)
            return ItemFeature(feature=feature, item=item, features=features[f0 + row0:f0 + row0 + n],
                               intervals=intervals[i0 + row0:i0 + row0 + n], extras={},
                               attrs=self._attrs(feature, item, cols.attrs_json(k), cols.part_names[pid]),
                               columns=list(self._feature_group(feature).get("columns", [])))
        cols, k, pid = self._one(feature, item)
        tails = cols.tails(pid)
        try:
            intervals = self._view(feature, cols, item, k, pid, layout.INTERVALS)
            if type(intervals) is not np.ndarray or intervals.dtype != np.float64:  # a slice of the slab as it is
                intervals = np.asarray(intervals[...], dtype=np.float64)
        except DamagedPart as e:
            raise damaged_item(e.folder, item, e.problem) from None
        extras = {name: self._view(feature, cols, item, k, pid, name) for name in tails
                  if name not in (layout.FEATURES, layout.INTERVALS)} if len(tails) > 2 else {}
        features = self._view(feature, cols, item, k, pid, layout.FEATURES)
        if not extras:  # a part with extras never takes the first branch: no lookups for it here either
            f, i = self._arrays[feature, layout.FEATURES], self._arrays[feature, layout.INTERVALS]
            if (f.loaded is not None and i.loaded is not None and f.loaded[pid] and i.loaded[pid]
                    and i.data.dtype == np.float64):
                self._ready.setdefault(feature, [None] * len(cols.part_names))[pid] = (
                    f.data, f.offsets.item(pid), i.data, i.offsets.item(pid))
        return ItemFeature(feature=feature, item=item, features=features, intervals=intervals, extras=extras,
                           attrs=self._attrs(feature, item, cols.attrs_json(k), cols.part_names[pid]),
                           columns=list(self._feature_group(feature).get("columns", [])))

    def _view(self, feature: str, cols: Index, item: str, k: int, pid: int, name: str) -> RowView | np.ndarray:
        """The item's rows of array `name`: a slice of the slab when its part is there, else a lazy view of
        them (the part loaded into its slab, or read through zarr, on first use)."""
        a = self._arrays.get((feature, name)) or self._array(feature, name)
        if a.loaded is not None and a.loaded[pid]:
            start = a.offsets.item(pid) + a.row0.item(k)
            return a.data[start:start + a.n.item(k)]
        return RowView(functools.partial(self._part, feature, pid, name), a.row0.item(k), a.n.item(k),
                       cols.tails(pid)[name], item)

    def arrays(self, feature: str, item: str, names: list[str]) -> list[Any]:
        """The item's rows of the named arrays (`features`, `intervals` or extras), after its part's quick
        check: slices of the slabs (not copies) where the arrays have one. The cheap
        path of `read` for a reader that knows what it wants (no attributes parsed)."""
        cols, k, pid = self._one(feature, item)
        return [self._view(feature, cols, item, k, pid, name)[...] for name in names]

    def item_attrs(self, feature: str, item: str) -> dict[str, Any]:
        cols, k, pid = self._one(feature, item)
        return self._attrs(feature, item, cols.attrs_json(k), cols.part_names[pid])

    def rows(self, feature: str, name: str, picks: list[tuple[str, int]]) -> np.ndarray:
        """Rows of many items at once: `picks` = (item, row within the item), stacked in the order of
        `picks` (the batched read path of the datasets): one `take` from the array's slab where it has one,
        else one zarr gather per part. An unknown item, a damaged part or a row out of range raises as a
        read of that item would (KeyError, DamagedItem, IndexError)."""
        if not picks:
            return np.zeros((0,), np.float32)
        items, rows = zip(*picks, strict=True)
        cols, k, pid = self._where(feature, items)
        a = self._array(feature, name)
        r = np.array(rows, np.int64)
        out = (r < 0) | (r >= a.n[k])
        if out.any():
            i = int(np.argmax(out))
            raise IndexError(f"{feature}/{items[i]}: row {rows[i]} out of range for {a.n[k[i]]} rows")
        at = a.row0[k] + r
        try:
            for p in np.unique(pid[~a.loaded[pid]]).tolist() if a.loaded is not None else ():
                if not self._slab_load(feature, name, a, p):
                    break
            if a.loaded is None:
                return self._gather(feature, name, pid, at)
            return a.data.take(a.offsets[pid] + at, axis=0)
        except DamagedPart as e:
            bad = cols.part_id[str(e.folder).rstrip("/").rsplit("/", 1)[-1]]  # a Path or a URL: its last name
            raise self._damaged(feature, bad, sorted({items[i] for i in np.flatnonzero(pid == bad)}), e.problem) from None

    def _gather(self, feature: str, name: str, pid: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Rows `at` of parts `pid` of an array without a slab: one zarr gather per part."""
        out = None
        for p in np.unique(pid).tolist():
            mine = np.flatnonzero(pid == p)
            got = np.asarray(self._part(feature, p, name)[at[mine]])
            if out is None:
                out = np.empty((len(pid), *got.shape[1:]), got.dtype)
            out[mine] = got
        return out

    @property
    def cached_bytes(self) -> int:
        """Bytes of part arrays this handle holds in its part cache (the slabs' loaded rows)."""
        return self._cache_bytes

    def part_array(self, feature: str, part: str, name: str) -> Any:
        """A part's array (no check: the caller checks `part_problem`): its rows in the slab, else the lazy
        zarr array."""
        return self._part(feature, self.index(feature).part_id[part], name)

    def _part(self, feature: str, pid: int, name: str) -> Any:
        """Part number `pid`'s array `name`: its rows in the slab, loaded on first use, else read through zarr
        item by item (one small read per item, not a whole part)."""
        a = self._array(feature, name)
        if a.loaded is not None and (a.loaded[pid] or self._slab_load(feature, name, a, pid)):
            return a.data[a.offsets[pid]:a.offsets[pid + 1]]
        key = (feature, self._states[feature].part_names[pid], name)
        if key not in self._lazy:
            self._lazy[key] = self._load(feature, key[1], name, whole=False)
        return self._lazy[key]

    def _array(self, feature: str, name: str) -> _Array:
        """The (feature, array)'s `_Array`, made on first use; with a slab when every part holds the array
        with one numeric or string dtype and row shape and none is larger than `whole_array_bytes`."""
        key = (feature, name)
        if key not in self._arrays:
            cols = self.index(feature)
            a = self._arrays[key] = _Array(*cols.rows_of(name))
            recs = [cols.parts[p].arrays.get(name) or {} for p in cols.part_names]
            shapes = [r.get("shape") for r in recs]
            kinds = {(r.get("dtype"), tuple(sh[1:])) for r, sh in zip(recs, shapes, strict=True) if sh}
            if recs and all(shapes) and len(kinds) == 1:
                dtype_name, tail = kinds.pop()
                try:  # zarr's "string" is what it reads strings back as: numpy's StringDType
                    dtype = (np.dtypes.StringDType() if dtype_name == "string" else np.dtype(dtype_name) if dtype_name
                             else np.dtype(object))  # none recorded (np.dtype(None) would be float64)
                except (TypeError, ValueError):  # a dtype numpy does not name: read through zarr
                    dtype = np.dtype(object)
                sizes = np.array([sh[0] for sh in shapes], np.int64)
                row_bytes = int(np.prod(tail, dtype=np.int64)) * (_STRING_BYTES if dtype.kind == "T" else dtype.itemsize)
                if dtype.kind in "biufT" and int(sizes.max()) * row_bytes <= self.whole_array_bytes:
                    a.nbytes = int(sizes.sum()) * row_bytes
                    a.offsets = np.concatenate([[0], np.cumsum(sizes)])
                    a.data, a.loaded = np.empty((int(a.offsets[-1]), *tail), dtype), np.zeros(len(sizes), bool)
        return self._arrays[key]

    def _slab_load(self, feature: str, name: str, slab: _Array, pid: int) -> bool:
        """Copy a part's array into the slab. The slab's first part takes its bytes from what the cache has
        left (the slabs together never hold more than `part_cache_bytes`); where they are not there, the
        slab is dropped (False): the array is read through zarr item by item from then on."""
        if self._reserved + slab.nbytes > self.part_cache_bytes:
            slab.data = slab.offsets = slab.loaded = None
            return False
        self._reserved, slab.nbytes = self._reserved + slab.nbytes, 0
        part = self._states[feature].part_names[pid]
        value = self._load(feature, part, name, whole=True)
        a, b = int(slab.offsets[pid]), int(slab.offsets[pid + 1])
        if value.shape != slab.data[a:b].shape:
            raise DamagedPart(self._part_at(feature, part),
                              f"{name} has shape {value.shape}, committed as {slab.data[a:b].shape}")
        slab.data[a:b] = value
        slab.loaded[pid] = True
        self._cache_bytes += slab.data[a:b].nbytes
        return True

    def _load(self, feature: str, part: str, name: str, whole: bool) -> Any:
        """A part's array through zarr: whole (a numpy array) or lazy. A missing or unusable array raises
        DamagedItem (or SnapshotGone when a compaction removed its part)."""
        folder, key = self._part_at(feature, part), join(_part_key(feature, part), name)
        record = self.index(feature).parts.get(part)
        self._committed.update(join(_part_key(feature, part), rel) for rel in (record.files if record else ())
                               if rel.startswith(f"{name}/"))
        meta = self._metas.get((feature, part), {}).get(name)
        try:
            if meta is not None:  # as its quick check read it
                arr = zarr.Array(AsyncArray(metadata=json.loads(meta), store_path=StorePath(self._parts_zarr, key)))
            else:
                # zarr_format: parts are Zarr v3 (the quick check holds them to it); unsaid, zarr also asks for
                # v2's .zarray and .zattrs, two requests more per array in a bucket
                arr = zarr.open_array(self._parts_zarr, path=key, mode="r", zarr_format=3)
            if not whole:
                return RowView(arr, 0, arr.shape[0], arr.shape[1:],
                               guard=functools.partial(_guarded, weakref.ref(self), (feature, part, name)))
            value = arr[...]
        except FileNotFoundError as e:
            self._gone(feature, folder)
            gone = e.args[0][len(_part_key(feature, part)) + 1:] if isinstance(e, _Missing) else name
            raise DamagedPart(folder, f"{gone} is missing") from None
        except MemoryError:
            raise
        except Exception as e:  # metadata that passed the quick check but zarr cannot use, a chunk failing its checksum
            raise self._unreadable(feature, part, name, e) from None
        return value

    def _unreadable(self, feature: str, part: str, name: str, e: Exception) -> DamagedPart:
        """The error for an array of a part that zarr could not read (SnapshotGone when a compaction removed
        the part meanwhile). A part whose bytes changed since commit (a chunk failing its checksum) is
        noted in the store, so that the next plan checks it in full and recomputes its items."""
        folder = self._part_at(feature, part)
        self._check_present(feature, part, name)
        problem = f"{name}: {type(e).__name__}: {e}"
        self._note(feature, part, problem)
        return DamagedPart(folder, problem)

    def _check_present(self, feature: str, part: str, name: str) -> None:
        """After a read of a part's array: every file of it recorded at commit is still there. zarr reads a
        missing chunk file as its fill value (zeros); a file gone by now was gone or going during the read,
        so what it returned cannot be trusted: SnapshotGone when a compaction removed the part, else
        DamagedPart."""
        record = self.index(feature).parts.get(part)
        folder, key = self._part_at(feature, part), _part_key(feature, part)
        rels = [rel for rel in (record.files if record is not None else ()) if rel.startswith(f"{name}/")]
        found = self.backend.sizes(key, rels) if rels else {}  # in a bucket one listing, not a request per file
        for rel in rels:
            if found[rel] is None:
                self._gone(feature, folder)
                raise DamagedPart(folder, f"{rel} is missing")

    def _note(self, feature: str, part: str, problem: str) -> None:
        """Best effort (a reader may not be able to write): `<feature>/damaged/<part>` holding the problem."""
        try:
            self.backend.put(join(feature, layout.NOTES, part), (problem[:2000] + "\n").encode())
        except (OSError, RuntimeError):  # read-only, or the object store refused (BackendError)
            return
        self._notes.setdefault(feature, set()).add(part)
        self._part_checks.pop((feature, part), None)
        cols = self._states.get(feature)
        if cols is not None and part in cols.part_id:  # checked again (in full) on its next read
            self._ok[feature][cols.part_id[part]] = False
            if feature in self._ready:
                self._ready[feature][cols.part_id[part]] = None

    def _noted(self, feature: str) -> set[str]:
        """Parts a read found damaged (`_note`): listed once per handle."""
        if feature not in self._notes:
            self._notes[feature] = integrity.noted_parts(self.backend, feature)
        return self._notes[feature]

    def _gone(self, feature: str, folder: Any) -> None:
        """A pinned part (or a file of it) that no longer exists while the index has a new generation: compacted
        away, or being removed (a handle without a lease): SnapshotGone, never DamagedItem."""
        key = join(feature, layout.INDEX)
        pin = self._pins.get(feature)
        try:
            now = index.generation_in(self.backend.read_log(key, 4096), self._at(key))
            # this handle's generation without loading its entries (a plan reads none)
            if feature in self._states or pin is None:
                mine = self.index(feature).generation
            else:
                mine = index.generation_in(pin.read(4096), self._at(key))
        except (OSError, ValueError, RuntimeError):
            return
        if now != mine:
            raise SnapshotGone(f"{self.path}: {feature} was compacted after this reader opened the store (its part "
                               f"{str(folder).rstrip('/').rsplit('/', 1)[-1]} is gone); open the store again") from None

    def _attrs(self, feature: str, item: str, text: str, part: str) -> dict[str, Any]:
        """An item's attributes from its index line. The line passed its checksum, so JSON that does not
        parse was written so (or the line was rewritten with a fresh checksum): DamagedItem naming the item
        and the line, found again here only on this error path."""
        value, problem = attrs_of(text)
        if value is not None:
            return value
        raise DamagedItem(f"{self._at(join(feature, layout.INDEX))}: line {self._line_of(feature, part)} (part {part}): "
                          f"damaged item {item} (its attributes do not parse: {problem}); "
                          "the next `make extract` recomputes it")

    def _line_of(self, feature: str, part: str) -> int | str:
        """The number of the line of this handle's index naming `part`: one line per part, in log order,
        after the header ('?' when the index was rebuilt from the parts in memory)."""
        cols = self.index(feature)
        return "?" if cols.rebuilt else cols.part_id[part] + 2

    # ---- manifests and runs ----

    def _manifest(self, name: str, kind: type) -> list[Any]:
        """A manifest's records, read once per handle (a copy of the list each time)."""
        if name not in self._manifests:
            key = join(layout.MANIFESTS, name)
            try:
                data = self.backend.get(key)
            except FileNotFoundError:
                data = None
            try:
                self._manifests[name] = [] if data is None else parse_jsonl_all(data, kind, self._at(key))
            except (OSError, ValueError) as e:
                raise DamagedMetadata(f"{self._at(key)}: damaged manifest ({_first_error(e)}); `python -m pipeline "
                                      f"verify {self.path}` lists it, `make extract` writes it anew") from None
        return list(self._manifests[name])

    def media_items(self) -> list[MediaItem]:
        return self._manifest("items.jsonl", MediaItem)

    def qa_items(self) -> list[QAItem]:
        return self._manifest("qa.jsonl", QAItem)

    def last_run(self) -> dict[str, Any] | None:
        runs = [n for n in self.backend.children(layout.RUNS) if n.endswith(".json")]
        return json.loads(self.backend.get(join(layout.RUNS, runs[-1]))) if runs else None

    def run_reports(self) -> list[dict[str, Any]]:
        """Every run report that reads as a JSON object, oldest first (run ids start with their UTC time)."""
        out = []
        for name in sorted(n for n in self.backend.children(layout.RUNS) if n.endswith(".json")):
            try:
                rep = json.loads(self.backend.get(join(layout.RUNS, name)))
            except (OSError, ValueError):
                continue
            if isinstance(rep, dict):
                out.append(rep)
        return out

    def part_location(self, feature: str, part: str) -> Any:
        """Where a part is, as messages name it (the backend's `describe` of its folder)."""
        return self._part_at(feature, part)

    def _part_at(self, feature: str, part: str) -> Any:
        """A part's folder as messages and checks name it (the backend's `describe`)."""
        return self.backend.describe(_part_key(feature, part))


def _part_key(feature: str, part: str) -> str:
    return join(feature, layout.PARTS, part)


def open_store(path: Path | str | Store, **options: Any) -> Store:
    """A snapshot reader of the store (`options`: `Store`'s cache sizes); a `Store` given is returned as it is,
    so that every reading function takes a path or an open store."""
    return path if isinstance(path, Store) else Store(path, **options)
