"""Lazy, snapshot reads: opening the store reads the root metadata and pins each feature's index.

A `Store` is a snapshot: at open it keeps each feature's index log open and notes its length, and it reads
only that prefix (store/index.py). Commits made later (a re-extraction, another run) are not seen by this
handle: an item reads the rows it had when the store was opened, never a mix of two versions. Open the
store again to see them. Parts are immutable, and the handle holds a lease on each index log it pinned (a shared
flock): a compaction keeps the parts an open handle's logs name until the handle is closed (store/compact.py),
so a snapshot reads whole, lazily or not, for as long as it is open. Where the filesystem refuses flock there
is no lease, and a read of a part a compaction removed says so in one line (`SnapshotGone`), never zeros.

Reads go through whole-part arrays cached in memory (up to `part_cache_bytes`, by default an eighth of the
machine's memory, at most 4 GiB; `SIQ_STORE_CACHE_BYTES` sets it): one zarr call loads an
array of a part (hundreds of items), and every item of it then reads from memory. Arrays larger than
`whole_array_bytes` (16 MiB by default; a materialised view's reader uses more) are read per item through
zarr, lazily.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from manifests.records import MediaItem, QAItem, read_jsonl_all
from store import index, layout, parts
from store.columns import Columns
from store.integrity import NOTES, DamagedItem, DamagedPart, ItemCheck, check_part, damaged_item
from store.rowview import RowView

log = logging.getLogger(__name__)


def _default_cache_bytes() -> int:
    """An eighth of the machine's memory, at most 4 GiB (SIQ_STORE_CACHE_BYTES overrides): a feature whose
    parts fit is read at memory speed after its first epoch; one that does not is read part by part."""
    if os.environ.get("SIQ_STORE_CACHE_BYTES"):
        return int(os.environ["SIQ_STORE_CACHE_BYTES"])
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 8 << 30
    return int(min(4 << 30, max(256 << 20, total // 8)))


PART_CACHE_BYTES = _default_cache_bytes()
# A part array up to this size is read whole and cached: for random access, a larger one would cost a big
# read per item while the cache holds only a few of them (a part's tokens, ~64 MiB: 0.5 s a read)
WHOLE_ARRAY_BYTES = 16 << 20
_FEW_HITS = 8  # a whole array evicted after fewer reads than this was not worth loading whole
_THRASH_LIMIT = 4  # after this many such evictions, a (feature, array) is read lazily


@dataclass
class Slab:
    """One (feature, array) of a snapshot in one allocation, the arrays of its parts one after another,
    filled part by part as they are read. A batched read of random items is then one `take` from it (no
    per-part work), over memory the kernel can back with huge pages (numpy asks for them on large
    allocations): TLB misses no longer grow with the feature's size. Never evicted part by part, so every
    view handed out stays valid; used only where the whole array fits in half the cache."""

    data: np.ndarray
    offsets: np.ndarray  # part number -> its first row in `data`; one more at the end
    loaded: np.ndarray  # part number -> its rows are in `data`
    ready: np.ndarray  # part number -> loaded and its part passed the quick check (the batched path's test)
    items: np.ndarray  # item position -> (first row in `data`, rows, part number): one row, one miss


class _SlabReads:
    """Single reads of a feature whose every current part holds exactly `features` and `intervals`, both in
    slabs (`Store._slab_reads`): item -> position through the columnar index (`ItemTable.find_one`), then
    its rows in each slab from the slab's item table, all arrays in huge pages. Through the index's dict,
    `Entry` and row objects, a read touched half a dozen objects spread over a million items' heap."""

    def __init__(self, cols: Columns, features: Slab, intervals: Slab) -> None:
        self.cols, self.features, self.intervals = cols, features, intervals
        self.f_items = memoryview(np.ascontiguousarray(features.items)).cast("B").cast("q")  # (start, n, part)
        self.i_items = memoryview(np.ascontiguousarray(intervals.items)).cast("B").cast("q")
        self.tail = tuple(features.data.shape[1:])
        self.slabs = ((layout.FEATURES, features), (layout.INTERVALS, intervals))


def _attrs_problem(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(an item's attributes, None) from their JSON, or (None, why they do not parse)."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as e:
        return None, f"{type(e).__name__}: {e}"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, None


class _LazyPart:
    """A part's array read through zarr item by item (too big to hold whole), with what zarr does not check:
    a chunk that fails its checksum raises DamagedPart (zarr's own error names no part), and a chunk file
    missing after the read (zarr reads one as zeros) raises SnapshotGone or DamagedPart (`_check_present`)."""

    def __init__(self, store: Store, feature: str, part: str, name: str, arr: Any) -> None:
        # a weak reference: the store caches this object, and a cycle would keep a dropped store, and the
        # lease it holds, alive until the next cyclic collection
        self._store, self._where, self._arr = weakref.ref(store), (feature, part, name), arr
        self.shape, self.dtype, self.ndim = arr.shape, arr.dtype, arr.ndim
        self.oindex = _LazyIndex(self, arr.oindex)

    def _read(self, get: Callable[[Any], Any], key: Any) -> Any:
        store = self._store()
        if store is None or store._closed:  # its lease is gone: the part may be too
            raise RuntimeError("this store handle is closed: open the store again")
        try:
            value = get(key)
        except (IndexError, TypeError, MemoryError):  # the caller's key, or the machine: not the part
            raise
        except Exception as e:
            raise store._unreadable(*self._where, e) from None
        store._check_present(*self._where)
        return value

    def __getitem__(self, key: Any) -> Any:
        return self._read(self._arr.__getitem__, key)

    def __len__(self) -> int:
        return int(self.shape[0])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = np.asarray(self[...])
        return out.astype(dtype) if dtype is not None else out


class _LazyIndex:
    def __init__(self, owner: _LazyPart, oindex: Any) -> None:
        self._owner, self._oindex = owner, oindex

    def __getitem__(self, key: Any) -> Any:
        return self._owner._read(self._oindex.__getitem__, key)


class SnapshotGone(RuntimeError):
    """This handle's snapshot was compacted away: the parts it pinned no longer exist."""


@dataclass(slots=True)
class _PartInfo:
    """What a single read needs of a part, looked up once per handle: its quick check, its arrays' names and
    row shapes, and the slab slices holding its arrays. At a million items a feature has ~2,000 parts, and
    the walk through the index's records, their nested dicts and the slab's part table, repeated on every
    read, missed the caches several times a read (single reads 1.5-1.7x the cost at 35,000)."""

    problem: str | None
    names: tuple[str, ...]
    tails: dict[str, tuple[int, ...] | None]
    bases: dict[str, np.ndarray]  # array name -> this part's rows in its slab (slabs are never evicted)


@dataclass(frozen=True)
class ItemFeature:
    """One feature of one item. `features` and `extras` are lazy row views: slicing loads only what is asked
    (from the part's cached arrays when they are in memory)."""

    feature: str
    item: str
    features: RowView
    intervals: np.ndarray  # (N, 2) float64 seconds [start, end)
    extras: dict[str, RowView]
    attrs: dict[str, Any]
    columns: list[str]


def _lease(path: Path) -> int | None:
    """The index log at `path`, opened and leased: a shared flock on the file, held until the handle closes,
    so that a compaction that renames a new log over it keeps the parts this log names (store/compact.py).
    The lock is taken on the file opened, then the path is checked to still name that file: a compaction
    that renamed a new one in between may already have found the old one unleased, so the new one is
    opened instead. Where flock is refused (a filesystem without it) the log is read without a lease, and a
    read of a part a compaction removed raises SnapshotGone."""
    for attempt in range(50):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # a writer is releasing this log's parts: it is a retired log by now
            os.close(fd)
            time.sleep(0.01 * min(attempt + 1, 10))
            continue
        except OSError:
            return fd
        try:
            now = os.stat(path)
        except FileNotFoundError:
            now = None
        here = os.fstat(fd)
        if now is not None and (now.st_ino, now.st_dev) == (here.st_ino, here.st_dev):
            return fd
        os.close(fd)
    raise OSError(f"{path}: could not open the current index log (it kept being replaced)")


class Store:
    def __init__(self, path: Path | str, part_cache_bytes: int = PART_CACHE_BYTES,
                 whole_array_bytes: int = WHOLE_ARRAY_BYTES, damaged_root: bool = False) -> None:
        """`damaged_root`: open even when the store's own zarr.json is unreadable (verify: the items are
        still checked through the indexes); feature attributes are then unavailable."""
        self.path = Path(path)
        self.root, self.attrs = None, {}
        try:
            if not (self.path / "zarr.json").exists():
                raise FileNotFoundError(f"{self.path}: not a feature store (no zarr.json); run `make extract` first")
            try:
                self.root = zarr.open_group(self.path, mode="r")
            except (ValueError, TypeError, KeyError) as e:  # invalid JSON is a ValueError
                raise ValueError(f"{self.path / 'zarr.json'}: the store's metadata is unreadable "
                                 f"({type(e).__name__}: {e})") from None
            self.attrs = dict(self.root.attrs)
            if self.attrs.get("schema") == layout.SCHEMA_V1:
                raise ValueError(layout.v1_refusal(self.path))
            if self.attrs.get("schema") != layout.SCHEMA:
                raise ValueError(f"{self.path}: schema {self.attrs.get('schema')!r}, this reader knows {layout.SCHEMA!r}")
        except (FileNotFoundError, ValueError) as e:
            if not damaged_root or "version-1 store" in str(e):
                raise
        self._reported: set[tuple[str, str]] = set()
        self._feature_attrs: dict[str, dict[str, Any]] = {}
        self._states: dict[str, index.IndexState] = {}
        self._part_checks: dict[tuple[str, str], str | None] = {}
        self._cache: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self._lazy: dict[tuple[str, str, str], Any] = {}  # opened zarr arrays too big to hold whole
        self._hits: dict[tuple[str, str, str], int] = {}  # reads served by each cached whole array
        self._thrash: dict[tuple[str, str], int] = {}  # (feature, array) -> whole arrays evicted nearly unused
        self._columns: dict[str, Columns] = {}
        self._infos: dict[str, dict[str, _PartInfo]] = {}  # feature -> part -> _PartInfo
        self._notes: dict[str, set[str]] = {}  # feature -> parts a read found damaged (`_note`)
        self._slab_readers: dict[str, _SlabReads | None] = {}
        self._single_reads: dict[str, int] = {}  # feature -> reads before its `_SlabReads` was made
        self._slabs: dict[tuple[str, str], Slab | None] = {}
        self._cache_bytes, self.part_cache_bytes, self.whole_array_bytes = 0, part_cache_bytes, whole_array_bytes
        self._closed = False
        self._pins = self._pin()

    # ---- the snapshot ----

    def _pin(self) -> dict[str, tuple[int, int]]:
        """feature -> (open index file, its length now): the snapshot this handle reads."""
        pins = {}
        for name in self._feature_dirs():
            fd = _lease(self.path / name / index.INDEX)
            if fd is not None:
                pins[name] = (fd, os.fstat(fd).st_size)
        return pins

    def close(self) -> None:
        """Release the handle's leases: a compaction may then remove the parts only it still read."""
        for fd, _ in getattr(self, "_pins", {}).values():
            os.close(fd)
        self._pins = {}
        self._closed = True

    def __del__(self) -> None:
        self.close()

    def _feature_dirs(self) -> list[str]:
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return []
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith(".")
                      and e.name not in layout.RESERVED)

    def index(self, feature: str) -> index.IndexState:
        """The feature's index as of this handle's snapshot (parsed once). A damaged index (a bad line
        before the end) or a missing one is rebuilt in memory from the parts, with a warning:
        `python -m pipeline verify` rebuilds it on disk."""
        if feature not in self._states:
            if feature.startswith(".") or "/" in feature or not (self.path / feature).is_dir():
                raise KeyError(f"{self.path}: no feature {feature!r}; present: {self.features()}")
            pin = self._pins.get(feature)
            try:
                if pin is None:
                    raise index.IndexDamaged(f"{self.path / feature / index.INDEX}: missing")
                self._states[feature] = index.read_pinned(pin[0], pin[1], self.path / feature / index.INDEX)
            except index.IndexDamaged as e:
                self._states[feature] = self._from_parts(feature, str(e))
        return self._states[feature]

    def scan_index(self, feature: str, visit: Callable[[dict[str, Any]], None]) -> bool:
        """Hand this snapshot's index records of the feature to `visit` (index.fold) without making its
        entries: for a reader that keeps only part of each (planning). False, having visited nothing or only
        a prefix, when the index is missing or damaged: `index(feature)` then rebuilds it from the parts."""
        pin = self._pins.get(feature)
        if pin is None or feature.startswith(".") or "/" in feature:
            return False
        try:
            index.fold(index.pinned_bytes(*pin), self.path / feature / index.INDEX, visit)
        except index.IndexDamaged:
            return False
        return True

    def _from_parts(self, feature: str, why: str) -> index.IndexState:
        from store.repair import part_names

        state = index.IndexState()
        if not part_names(self.path, feature):
            return state
        log.warning("%s; reading this feature's items from its parts (`python -m pipeline verify --out %s` "
                    "rebuilds the index)", why, self.path)
        found = []
        for name in part_names(self.path, feature):
            folder = parts.part_dir(self.path, feature, name)
            try:
                found.append(parts.record_from_part(folder))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        for rec in sorted(found, key=lambda r: (r["seq"], r["part"])):
            index.apply(state, rec)
        return state

    # ---- features and items ----

    def features(self) -> list[str]:
        """Features whose group metadata reads (one with damaged metadata is logged and left out)."""
        out = []
        for name in self._feature_dirs():
            if not (self.path / name / "zarr.json").exists():
                continue  # _manifests, _runs: plain folders
            try:
                self._feature_group(name)
            except (ValueError, KeyError) as e:
                log.warning("%s (feature left out)", e)
                continue
            out.append(name)
        return out

    def feature_attrs(self, feature: str) -> dict[str, Any]:
        return dict(self._feature_group(feature))

    def _feature_group(self, feature: str) -> dict[str, Any]:
        if feature not in self._feature_attrs:
            if feature.startswith(".") or "/" in feature or not (self.path / feature / "zarr.json").exists():
                raise KeyError(f"{self.path}: no feature {feature!r}; present: {self.features()}")
            try:
                if self.root is None:
                    raise ValueError("the store's own zarr.json is unreadable")
                self._feature_attrs[feature] = dict(self.root[feature].attrs)
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{self.path / feature / 'zarr.json'}: feature metadata unreadable "
                                 f"({type(e).__name__}: {e})") from None
        return self._feature_attrs[feature]

    def part_problem(self, feature: str, part: str, full: bool = False,
                     record: index.PartRecord | None = None) -> str | None:
        """The part's check (quick ones cached for this handle); `record`: the part's index record, when the
        caller read the index itself (`scan_index`)."""
        key = (feature, part)
        if full or key not in self._part_checks:
            record = record or self.index(feature).parts[part]
            folder = parts.part_dir(self.path, feature, part)
            noted = part in self._noted(feature)
            found = check_part(folder, record, full or noted)  # a part a read found damaged: checked in full
            if found is not None and "is missing" in found:  # removed by a compaction, or being removed
                self._gone(feature, folder)
            if noted and found is None:  # it reads as committed now (rewritten by hand, or a false alarm)
                with contextlib.suppress(OSError):
                    (self.path / feature / NOTES / part).unlink()
                self._noted(feature).discard(part)
            if full:
                return found
            self._part_checks[key] = found
        return self._part_checks[key]

    def part_problems(self, feature: str, full: bool = False, only: list[str] | None = None) -> dict[str, str]:
        """part -> its problem, for the feature's parts that fail their check (`only`: these parts, else all);
        each part checked once, whatever the number of its items."""
        names = self.index(feature).parts if only is None else only
        return {p: q for p in names if (q := self.part_problem(feature, p, full)) is not None}

    def check(self, feature: str, full: bool = False) -> list[ItemCheck]:
        """Every current item of a feature, checked by its part against what the writer recorded at commit
        (store/integrity.py: `full` also compares content hashes). Never raises for one bad part."""
        state = self.index(feature)
        problems = self.part_problems(feature, full)
        folders = {p: parts.part_dir(self.path, feature, p) for p in state.parts}  # one Path per part, not per item
        entries = state.entries
        own: dict[str, str] = {}  # item -> its attributes' problem (full: every item's JSON parsed)
        if full:
            for item, e in entries.items():
                if (problem := _attrs_problem(e.attrs_json)[1]) is not None:
                    own[item] = f"index line {self._line_of(feature, e.part)}: its attributes do not parse ({problem})"
        return [ItemCheck(feature, item, folders[part], problems.get(part) or own.get(item), None)
                for item, part in sorted((item, e.part) for item, e in entries.items())]

    def _good(self, feature: str) -> list[index.Entry]:
        """The feature's entries whose part passes the quick check; the others are logged with their part."""
        state = self.index(feature)
        bad = self.part_problems(feature, only=state.live_parts())
        if not bad:
            return list(state.entries.values())
        good = []
        for e in state.entries.values():
            problem = bad.get(e.part)
            if problem is None:
                good.append(e)
            elif (e.part, problem) not in self._reported:  # once per part per Store
                self._reported.add((e.part, problem))
                log.warning("%s: damaged part, its items left out (%s)",
                            parts.part_dir(self.path, feature, e.part), problem)
        return good

    def entries(self, feature: str, include_stale: bool = False) -> list[index.Entry]:
        """The index entries of the feature's good, current items (what datasets plan from)."""
        spec = self._feature_group(feature).get("spec_hash")
        return [e for e in self._good(feature) if include_stale or e.spec_hash == spec]

    def items(self, feature: str, include_filtered: bool = False, include_stale: bool = False) -> list[str]:
        """Complete items of a feature. Items made with an older spec (config, version, weights) are
        stale and left out unless asked for; so are items a policy filtered (faces: too few faces) and
        damaged items (logged with their part; `python -m pipeline verify` lists them)."""
        return sorted(e.item for e in self.entries(feature, include_stale) if include_filtered or not e.filtered)

    def filtered(self, feature: str) -> list[str]:
        """The complete, current items of a feature that a policy filtered (faces: too few faces)."""
        return sorted(e.item for e in self.entries(feature) if e.filtered)

    def _entry(self, feature: str, item: str) -> index.Entry:
        return self._entry_info(feature, item)[0]

    def _entry_info(self, feature: str, item: str) -> tuple[index.Entry, _PartInfo]:
        """The item's entry and its part's `_PartInfo`, after the part's quick check (DamagedItem)."""
        e = self.index(feature).entries.get(item)
        if e is None:
            raise KeyError(f"{self.path}: feature {feature!r} has no item {item!r}")
        info = self._info(feature, e.part)
        if info.problem is not None:
            raise DamagedItem(f"{parts.part_dir(self.path, feature, e.part)}: damaged item {item} ({info.problem}); "
                              "the next `make extract` recomputes it")
        return e, info

    def _info(self, feature: str, part: str) -> _PartInfo:
        infos = self._infos.get(feature)
        if infos is None:
            infos = self._infos[feature] = {}
        info = infos.get(part)
        if info is None:
            arrays = self.index(feature).parts[part].arrays
            tails = {k: tuple(v["shape"][1:]) if v.get("shape") else None for k, v in arrays.items()}
            info = infos[part] = _PartInfo(self.part_problem(feature, part), tuple(arrays), tails, {})
        return info

    def item_attrs(self, feature: str, item: str) -> dict[str, Any]:
        e = self._entry(feature, item)
        return self._attrs(feature, item, e.attrs_json, e.part)

    # ---- reading rows ----

    def part_array(self, feature: str, part: str, name: str) -> Any:
        """A part's array: whole in memory when small enough (cached), else the lazy zarr array. When whole
        arrays of a (feature, array) leave the cache having served few reads (random access over more than
        the cache holds), its later parts are read lazily: one small zarr read per item, not a whole part."""
        slab = self._slabs.get((feature, name))
        if slab is not None and part in self._columns[feature].part_id:
            pid = self._columns[feature].part_id[part]
            if not slab.loaded[pid]:
                self._slab_load(feature, name, slab, pid)
            rows = slab.data[slab.offsets[pid]:slab.offsets[pid + 1]]
            info = self._infos.get(feature, {}).get(part)
            if info is not None:  # a part already resolved by a read (never checked here: see _gone)
                info.bases[name] = rows
            return rows
        key = (feature, part, name)
        if key in self._cache:
            self._cache.move_to_end(key)
            self._hits[key] = self._hits.get(key, 0) + 1
            return self._cache[key]
        if key in self._lazy:
            return self._lazy[key]
        value = self._load(feature, part, name, whole=None)
        if not isinstance(value, np.ndarray):
            self._lazy[key] = value
            return value
        self._cache[key] = value
        self._cache_bytes += value.nbytes
        self._evict()
        return value

    def _load(self, feature: str, part: str, name: str, whole: bool | None) -> Any:
        """A part's array through zarr: whole (a numpy array) or lazy; `whole=None`: whole when small enough
        and its (feature, array) does not thrash. A missing or unusable array raises DamagedItem (or
        SnapshotGone when a compaction removed its part)."""
        folder = parts.part_dir(self.path, feature, part)
        try:
            arr = zarr.open_array(folder / name, mode="r")
            if whole is None:
                nbytes = int(np.prod(arr.shape, dtype=np.int64)) * (64 if arr.dtype.kind in "OUT" else arr.dtype.itemsize)
                whole = nbytes <= self.whole_array_bytes and self._thrash.get((feature, name), 0) < _THRASH_LIMIT
            if not whole:
                return _LazyPart(self, feature, part, name, arr)
            value = arr[...]
        except FileNotFoundError:
            self._gone(feature, folder)
            raise DamagedPart(folder, f"{name} is missing") from None
        except MemoryError:
            raise
        except Exception as e:  # metadata that passed the quick check but zarr cannot use, a chunk failing its checksum
            raise self._unreadable(feature, part, name, e) from None
        self._check_present(feature, part, name)
        return value

    def _unreadable(self, feature: str, part: str, name: str, e: Exception) -> DamagedPart:
        """The error for an array of a part that zarr could not read (SnapshotGone when a compaction removed
        the part meanwhile). A part whose bytes changed since commit (a chunk failing its checksum) is
        noted in the store, so that the next plan checks it in full and recomputes its items."""
        folder = parts.part_dir(self.path, feature, part)
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
        folder = parts.part_dir(self.path, feature, part)
        prefix = f"{name}/"
        for rel in (record.files if record is not None else ()):
            if rel.startswith(prefix) and not os.path.exists(folder / rel):
                self._gone(feature, folder)
                raise DamagedPart(folder, f"{rel} is missing")

    def _note(self, feature: str, part: str, problem: str) -> None:
        """Best effort (a reader may not be able to write): `<feature>/damaged/<part>` holding the problem."""
        notes = self.path / feature / NOTES
        try:
            notes.mkdir(exist_ok=True)
            (notes / part).write_text(problem[:2000] + "\n")
        except OSError:
            return
        self._notes.setdefault(feature, set()).add(part)
        self._part_checks.pop((feature, part), None)

    def _noted(self, feature: str) -> set[str]:
        """Parts a read found damaged (`_note`): listed once per handle."""
        if feature not in self._notes:
            try:
                self._notes[feature] = set(os.listdir(self.path / feature / NOTES))
            except OSError:
                self._notes[feature] = set()
        return self._notes[feature]

    def _evict(self) -> None:
        """Drop the least recently used whole arrays until the cache (slabs' loaded rows included) fits."""
        while self._cache_bytes > self.part_cache_bytes and len(self._cache) > 1:
            old_key, old = self._cache.popitem(last=False)
            self._cache_bytes -= getattr(old, "nbytes", 0)
            if self._hits.pop(old_key, 0) < _FEW_HITS:
                self._thrash[old_key[0], old_key[2]] = self._thrash.get((old_key[0], old_key[2]), 0) + 1

    # ---- batched reads: the index in columns, arrays in slabs ----

    def columns(self, feature: str) -> Columns:
        """The feature's snapshot index in columns (store/columns.py), built once per handle."""
        if feature not in self._columns:
            self._columns[feature] = Columns(self.index(feature))
        return self._columns[feature]

    def _slab(self, feature: str, name: str) -> Slab | None:
        """The (feature, array)'s slab, made on first use when every current part holds the array whole-sized
        with one numeric dtype and row shape, and all of it fits in half the cache; else None."""
        key = (feature, name)
        if key not in self._slabs:
            cols, state = self.columns(feature), self.index(feature)
            recs = [state.parts[p].arrays.get(name) or {} for p in cols.part_names]
            shapes = [r.get("shape") for r in recs]
            kinds = {(r.get("dtype"), tuple(sh[1:])) for r, sh in zip(recs, shapes, strict=True) if sh}
            slab = None
            if recs and all(shapes) and len(kinds) == 1 and self._thrash.get(key, 0) < _THRASH_LIMIT:
                dtype_name, tail = kinds.pop()
                try:
                    dtype = np.dtype(dtype_name) if dtype_name else np.dtype(object)
                except (TypeError, ValueError):  # a string dtype numpy does not name
                    dtype = np.dtype(object)
                sizes = np.array([sh[0] for sh in shapes], np.int64)
                row_bytes = int(np.prod(tail, dtype=np.int64)) * dtype.itemsize
                if (dtype.kind in "biuf" and int(sizes.max()) * row_bytes <= self.whole_array_bytes
                        and int(sizes.sum()) * row_bytes <= self.part_cache_bytes // 2):
                    offsets = np.concatenate([[0], np.cumsum(sizes)])
                    row0, n = cols.rows_of(name)
                    slab = Slab(np.empty((int(offsets[-1]), *tail), dtype), offsets, np.zeros(len(sizes), bool),
                                np.zeros(len(sizes), bool), np.stack([offsets[cols.part] + row0, n, cols.part], 1))
            self._slabs[key] = slab
        return self._slabs[key]

    def _slab_load(self, feature: str, name: str, slab: Slab, pid: int) -> None:
        """Copy a part's array into the slab (taking it out of the LRU cache if it was there)."""
        part = self._columns[feature].part_names[pid]
        value = self._cache.pop((feature, part, name), None)
        if value is not None:
            self._cache_bytes -= value.nbytes
            self._hits.pop((feature, part, name), None)
        else:
            value = self._load(feature, part, name, whole=True)
        a, b = int(slab.offsets[pid]), int(slab.offsets[pid + 1])
        if value.shape != slab.data[a:b].shape:
            raise DamagedPart(parts.part_dir(self.path, feature, part),
                              f"{name} has shape {value.shape}, committed as {slab.data[a:b].shape}")
        slab.data[a:b] = value
        slab.loaded[pid] = True
        self._cache_bytes += slab.data[a:b].nbytes
        self._evict()

    def _gone(self, feature: str, folder: Path) -> None:
        """A pinned part (or a file of it) that no longer exists while the index has a new generation: compacted
        away, or being removed (a handle without a lease): SnapshotGone, never DamagedItem."""
        where = self.path / feature / index.INDEX
        pin = self._pins.get(feature)
        try:
            now = index.generation_of(where)
            # this handle's generation without loading its entries (a plan reads none)
            if feature in self._states or pin is None:
                mine = self.index(feature).generation
            else:
                mine = index.generation_of(where, pin[0])
        except (OSError, ValueError):
            return
        if now != mine:
            raise SnapshotGone(f"{self.path}: {feature} was compacted after this reader opened the store (its part "
                               f"{folder.name} is gone); open the store again") from None

    def view(self, feature: str, e: index.Entry, name: str, info: _PartInfo | None = None) -> RowView:
        span = e.spans.get(name) if e.spans else None
        row0, n = span if span else (e.row0, e.n_rows)
        info = info or self._info(feature, e.part)
        base = info.bases.get(name)  # a slab slice: no lookup at all
        return RowView(base if base is not None else functools.partial(self.part_array, feature, e.part, name),
                       row0, n, info.tails.get(name), e.item)

    def read(self, feature: str, item: str) -> ItemFeature:
        """One item of this handle's snapshot, after its part's quick check: a damaged part raises
        DamagedItem naming its folder instead of reading back zeros for a missing chunk."""
        try:
            got = self._read_slabs(feature, item)
        except DamagedPart as e:
            raise damaged_item(e.folder, item, e.problem) from None
        if got is not None:
            return got
        e, info = self._entry_info(feature, item)
        extras = {k: self.view(feature, e, k, info) for k in info.names if k not in (layout.FEATURES, layout.INTERVALS)}
        intervals = np.asarray(self.view(feature, e, layout.INTERVALS, info)[...], dtype=np.float64)
        return ItemFeature(feature=feature, item=item, features=self.view(feature, e, layout.FEATURES, info),
                           intervals=intervals, extras=extras, attrs=self._attrs(feature, item, e.attrs_json, e.part),
                           columns=list(self._feature_group(feature).get("columns", [])))

    def _attrs(self, feature: str, item: str, text: str, part: str) -> dict[str, Any]:
        """An item's attributes from its index line. The line passed its checksum, so JSON that does not
        parse was written so (or the line was rewritten with a fresh checksum): DamagedItem naming the item
        and the line, found again here only on this error path."""
        value, problem = _attrs_problem(text)
        if value is not None:
            return value
        raise DamagedItem(f"{self.path / feature / index.INDEX}: line {self._line_of(feature, part)} (part {part}): "
                          f"damaged item {item} (its attributes do not parse: {problem}); "
                          "the next `make extract` recomputes it")

    def _line_of(self, feature: str, part: str) -> int | str:
        """The number of the line of this handle's index naming `part` ('?' when the index was rebuilt from
        the parts in memory)."""
        pin = self._pins.get(feature)
        found: list[int] = []
        count = [0]

        def visit(rec: dict[str, Any]) -> None:
            count[0] += 1
            if rec.get("part") == part and not found:
                found.append(count[0])

        if pin is not None:
            with contextlib.suppress(index.IndexDamaged):
                index.fold(index.pinned_bytes(*pin), self.path / feature / index.INDEX, visit)
        return found[0] if found else "?"

    def _slab_reads(self, feature: str) -> _SlabReads | None:
        """The feature's `_SlabReads`, made once per handle; None where it does not apply (an extra array
        or an item with its own span in some part, or an array that gets no slab)."""
        if feature not in self._slab_readers:
            found = None
            cols, state = self.columns(feature), self.index(feature)
            plain = {layout.FEATURES, layout.INTERVALS}
            if cols.part_names and not cols._spans and all(set(state.parts[p].arrays) == plain for p in cols.part_names):
                features, intervals = self._slab(feature, layout.FEATURES), self._slab(feature, layout.INTERVALS)
                if features is not None and intervals is not None:
                    found = _SlabReads(cols, features, intervals)
            self._slab_readers[feature] = found
        return self._slab_readers[feature]

    def _read_slabs(self, feature: str, item: str) -> ItemFeature | None:
        """`read` through `_SlabReads`, or None where it does not apply or the read would raise (an unknown
        item, a damaged part: `read`'s own path then raises as before)."""
        if feature not in self._slab_readers and feature not in self._columns:
            # the columns and slabs cost about 1.5 µs an item to make (1.5 s for a million items, on top of
            # the index's 2 s), and save 3-4 µs a read there: made once a quarter of the items were read
            # one at a time, or at once where batched reads already made the columns
            count = self._single_reads[feature] = self._single_reads.get(feature, 0) + 1
            if count < len(self.index(feature).entries) // 4:
                return None
        fast = self._slab_reads(feature)
        if fast is None:
            return None
        k = fast.cols.table.find_one(item)
        if k < 0:
            return None
        start, n, pid = fast.f_items[3 * k], fast.f_items[3 * k + 1], fast.f_items[3 * k + 2]
        if not (fast.features.ready[pid] and fast.intervals.ready[pid]) and not self._slab_ready(feature, pid, fast.slabs):
            return None
        i0, m = fast.i_items[3 * k], fast.i_items[3 * k + 1]
        return ItemFeature(feature=feature, item=item, features=RowView(fast.features.data, start, n, fast.tail),
                           intervals=np.asarray(fast.intervals.data[i0:i0 + m], dtype=np.float64), extras={},
                           attrs=self._attrs(feature, item, fast.cols.attrs_json[k], fast.cols.part_names[pid]),
                           columns=list(self._feature_group(feature).get("columns", [])))

    def arrays(self, feature: str, item: str, names: list[str]) -> list[Any]:
        """The item's rows of the named arrays (`features`, `intervals` or extras), after its part's quick
        check: slices of the part's arrays in memory (not copies) when they are loaded whole. The cheap
        path of `read` for a reader that knows what it wants (no views, no attributes parsed)."""
        e, info = self._entry_info(feature, item)
        return [self.view(feature, e, name, info)[...] for name in names]

    def rows(self, feature: str, name: str, picks: list[tuple[str, int]]) -> np.ndarray:
        """Rows of many items at once: `picks` = (item, row within the item), stacked in the order of
        `picks` (the batched read path of the datasets). Where the array fits a slab (`_slab`), the picks are
        resolved through the columnar index and gathered with one `take`; otherwise rows of parts held in
        memory are stacked from row views and parts read lazily get one zarr gather each. An unknown item,
        a damaged part or a row out of range raises as a read of that item would (KeyError, DamagedItem,
        IndexError)."""
        try:
            if picks:
                got = self._rows_slab(feature, name, picks)
                if got is not None:
                    return got
            return self._rows_each(feature, name, picks)
        except DamagedPart as e:
            state = self.index(feature)
            hit = sorted({item for item, _ in picks if (en := state.entries.get(item)) is not None
                          and parts.part_dir(self.path, feature, en.part) == e.folder})
            raise damaged_item(e.folder, ", ".join(hit[:5]) + (f" and {len(hit) - 5} more" if len(hit) > 5 else ""),
                               e.problem) from None

    def _rows_slab(self, feature: str, name: str, picks: list[tuple[str, int]]) -> np.ndarray | None:
        """`rows` through the slab, or None where it does not apply (no slab) or a pick would raise (the
        per-pick path then raises the same error as before, in pick order)."""
        slab = self._slab(feature, name)
        if slab is None:
            return None
        cols = self._columns[feature]
        items, rows = zip(*picks, strict=True)
        k = cols.table.find(items)
        if (k < 0).any():
            return None
        r = np.array(rows, np.int64)
        start, n, pid = slab.items[k].T
        if ((r < 0) | (r >= n)).any():
            return None
        if not slab.ready[pid].all():
            for p in np.unique(pid[~slab.ready[pid]]).tolist():
                if not self._slab_ready(feature, p, ((name, slab),)):
                    return None
        return slab.data.take(start + r, axis=0)

    def _slab_ready(self, feature: str, pid: int, slabs: tuple[tuple[str, Slab], ...]) -> bool:
        """Part `pid` in each of the feature's (array name, slab): False when the part fails its quick check
        (the caller's per-item path then raises DamagedItem), else loaded and marked ready."""
        if self.part_problem(feature, self._columns[feature].part_names[pid]) is not None:
            return False
        for name, slab in slabs:
            if not slab.loaded[pid]:
                self._slab_load(feature, name, slab, pid)
            slab.ready[pid] = True
        return True

    def _rows_each(self, feature: str, name: str, picks: list[tuple[str, int]]) -> np.ndarray:
        """`rows` pick by pick: stacked row views of parts in memory, one zarr gather per lazy part."""
        spans: dict[str, tuple[str, int, int]] = {}
        bases: dict[str, Any] = {}
        got: list[Any] = []
        lazy: dict[str, tuple[list[int], list[int]]] = {}  # part -> (positions in picks, rows)
        for pos, (item, row) in enumerate(picks):
            span = spans.get(item)
            if span is None:
                e = self._entry(feature, item)
                own = (e.spans or {}).get(name)
                span = spans[item] = (e.part, *(own if own else (e.row0, e.n_rows)))
            part, row0, n = span
            if not 0 <= row < n:
                raise IndexError(f"{feature}/{item}: row {row} out of range for {n} rows")
            base = bases.get(part)
            if base is None:
                base = bases[part] = self.part_array(feature, part, name)
            if isinstance(base, np.ndarray):
                got.append(base[row0 + row])
            else:
                got.append(None)
                positions, rows = lazy.setdefault(part, ([], []))
                positions.append(pos)
                rows.append(row0 + row)
        for part, (positions, rows) in lazy.items():
            for pos, value in zip(positions, bases[part].oindex[np.asarray(rows)], strict=True):
                got[pos] = value
        return np.stack(got) if got else np.zeros((0,), np.float32)

    # ---- manifests and runs ----

    @cached_property
    def _media(self) -> list[MediaItem]:
        path = layout.manifest_dir(self.path) / "items.jsonl"
        return read_jsonl_all(path, MediaItem) if path.exists() else []

    @cached_property
    def _qa(self) -> list[QAItem]:
        path = layout.manifest_dir(self.path) / "qa.jsonl"
        return read_jsonl_all(path, QAItem) if path.exists() else []

    def media_items(self) -> list[MediaItem]:
        return list(self._media)

    def qa_items(self) -> list[QAItem]:
        return list(self._qa)

    def last_run(self) -> dict[str, Any] | None:
        runs = sorted(layout.runs_dir(self.path).glob("*.json"))
        return json.loads(runs[-1].read_text()) if runs else None


def open_store(path: Path | str, **options: Any) -> Store:
    """A snapshot reader of the store (`options`: `Store`'s cache sizes)."""
    return Store(path, **options)
