"""The store's only writer: every change a typed operation (`Append`, `Rewrite`) through one commit path, parts
renamed into place whole and then published by one fsynced index append or a new generation, so a kill
leaves nothing a reader takes for data (docs/design.md, "Commit"). One writer per store: a flock on `.lock`."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import zarr

import atomicio
from manifests.records import MediaItem, QAItem, check_id, write_jsonl
from rows import FeatureRows
from store import index, layout, parts, repair
from store.backends import Conflict, Locked, is_url, join, open_backend, pins
from store.backends import log as blog
from store.workerparts import WrittenRows, part_meta

log = logging.getLogger(__name__)
Member = tuple[str, FeatureRows, dict[str, Any]]  # (item, rows, attributes)


@dataclass(frozen=True)
class Append:
    """New parts, one per batch (items of one array signature each), appended to the index: their items'
    rows supersede older ones of the same items."""

    batches: list[list[Member]]


@dataclass(frozen=True)
class Rewrite:
    """The rows in `batches` (the current rows of the parts in `old`, read back) written as new parts, and
    a new index generation naming the feature's other parts and the new ones but none of `old`. The old
    parts are removed once no reader leases a log that names them (store/repair.py `release_retired`)."""

    old: frozenset[str]
    batches: list[list[Member]]


def _package_version() -> str:
    try:
        return version("siqfeat")
    except PackageNotFoundError:
        return "0+unknown"


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            atomicio.fsync_path(os.path.join(folder, name))
        atomicio.fsync_path(folder)


class StoreError(RuntimeError):
    """The store as a whole cannot be written (read-only, not a folder, disk full, unreadable root
    metadata); the message names the path and the problem in one line."""


class StoreLocked(StoreError):
    """Another run holds the store's write lock."""


def _flock_pid(fd: int) -> int | None:
    """The pid holding a flock on fd's file, from the kernel's table (Linux /proc/locks; None elsewhere)."""
    st = os.fstat(fd)
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; waiters have "->"
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5].count(":") != 2:
            continue
        major, minor, inode = fields[5].split(":")
        if (int(major, 16), int(minor, 16), int(inode)) == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino):
            return int(fields[4])
    return None


def _lock_holder(fd: int) -> str:
    """Who holds the lock: the kernel's pid for it where the lock file does not name that pid (the holder
    is between its flock and its write, or a crashed run left its name), else what the holder wrote."""
    written = os.pread(fd, 200, 0).decode(errors="replace").strip()
    pid = _flock_pid(fd)
    if pid is not None and not written.startswith(f"pid {pid} "):
        return f"pid {pid} on {os.uname().nodename}"
    return written or "a process on another machine that has not written its name yet"


def _os_problem(e: OSError, fallback: Path) -> str:
    """'<path>: <problem>' from an OSError, whichever path it names (or the store's)."""
    return f"{e.filename or fallback}: {e.strerror or e}"


# the storage failed (full, read-only, over quota, I/O error), not the input: the CLI exits STORE on these too
STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO}


class StoreWriter:
    """Creates `<dataset>.zarr` if needed and commits batches of finished (feature, item) pairs into it. Given
    an object-storage URL (s3://, gs://, az://), it is the writer for storage with no rename and no append
    (`_ObjectWriter`, below)."""

    def __new__(cls, path: Path | str, dataset: str) -> StoreWriter:
        if cls is StoreWriter and is_url(path):
            return super().__new__(_ObjectWriter)
        return super().__new__(cls)

    def __init__(self, path: Path | str, dataset: str) -> None:
        self.path = Path(path)
        self._index: dict[str, index.Index] = {}
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"{self.path}: is a file, not a store folder; give --out a folder (new or a store)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = self._acquire_lock()
            self.root = self._open_root()
            self._claim_root(dict(self.root.attrs), dataset)
            self._sweep_staging()
        except OSError as e:
            self.close()
            raise StoreError(f"cannot write the store: {_os_problem(e, self.path)}") from e
        except BaseException:
            self.close()
            raise

    def _claim_root(self, attrs: dict[str, Any], dataset: str) -> None:
        """A version-2 store of `dataset`, or a new one, which is made so (store/migrate.py overrides this)."""
        layout.check_schema(self.path, attrs)
        if attrs.get("dataset", dataset) != dataset:
            raise ValueError(f"{self.path}: store holds dataset {attrs['dataset']!r}, not {dataset!r}")
        if attrs.get("schema") != layout.SCHEMA or attrs.get("dataset") != dataset:
            self.root.attrs.update({"schema": layout.SCHEMA, "dataset": dataset, "package_version": _package_version()})

    def _open_root(self) -> zarr.Group:
        try:
            return zarr.open_group(self.path, mode="a")
        except (ValueError, TypeError, KeyError) as e:  # invalid JSON is a ValueError too
            raise StoreError(f"{self.path / layout.META}: the store's own metadata is unreadable "
                             f"({type(e).__name__}: {e}); its items may be intact, but this store needs repair "
                             "by hand or a new --out") from e

    def _acquire_lock(self) -> int:
        fd = os.open(self.path / layout.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            os.close(fd)
            raise StoreLocked(f"{self.path}: another run is writing to this store ({holder}); "
                              "wait for it to finish or write to another store") from None
        me = f"pid {os.getpid()} on {os.uname().nodename}".encode()
        os.pwrite(fd, me, 0)  # then cut: the file is never empty while held by a run that wrote it
        os.ftruncate(fd, len(me))
        return fd

    def close(self) -> None:
        """Release the store's write lock (also done when the writer is garbage-collected or the process ends);
        the holder's name is erased first, so a later reader never takes it for the next holder."""
        if getattr(self, "_lock", None) is not None:
            with contextlib.suppress(OSError):  # a read-only or full store: the name stays, the lock goes
                os.ftruncate(self._lock, 0)
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _sweep_staging(self) -> None:
        """Remove what a killed run left half-written. Safe: this writer holds the store's lock."""
        staging = self.path / layout.STAGING
        if staging.exists():
            leftovers = list(staging.iterdir())
            if leftovers:
                log.info("removing %d unfinished part(s) left by an interrupted run", len(leftovers))
            shutil.rmtree(staging)

    def set_feature(self, feature: str, attrs: dict[str, Any]) -> None:
        """Create or update a feature group's attributes (extractor, version, config, columns, rate_hz, weights)."""
        check_id(feature)
        if feature in layout.RESERVED:
            raise ValueError(f"invalid feature name {feature!r}: the store keeps its own {feature}/ folder")
        try:
            try:
                group = self.root.require_group(feature)
            except (ValueError, TypeError, KeyError) as e:  # its metadata is damaged; the parts are separate
                meta = self.path / feature / layout.META
                log.warning("%s: unreadable (%s: %s); writing it anew from this run's spec", meta,
                            type(e).__name__, e)
                meta.unlink(missing_ok=True)
                group = self.root.require_group(feature)
            if dict(group.attrs) != attrs:
                group.attrs.put(attrs)  # one metadata write: never a moment with no spec_hash
            self.index(feature)
        except OSError as e:
            raise StoreError(f"cannot write the store: {_os_problem(e, self.path / feature)}") from e

    def index(self, feature: str) -> index.Index:
        """The feature's index as this writer keeps it, loaded once: repaired if damaged (rebuilt from the
        parts), parts that no index line names (a killed commit's, or lines lost to damage) adopted, and the
        parts of compacted logs that no reader leases any more removed (store/repair.py)."""
        if feature not in self._index:
            self._index[feature] = repair.open_index(self.path, feature)
        return self._index[feature]

    def commit(self, feature: str, item_id: str, rows: FeatureRows, item_attrs: dict[str, Any]) -> None:
        """Write one item's rows atomically (a batch of one); supersedes an older version of the same item."""
        self.commit_batch(feature, [(item_id, rows, item_attrs)])

    def commit_batch(self, feature: str, batch: list[Member]) -> None:
        """Write many items of one feature atomically: all of them become visible at once, or none.
        Items with differently shaped arrays go to separate parts of the same commit."""
        for item_id, _, _ in batch:
            check_id(item_id)
            if item_id in layout.RESERVED:
                raise ValueError(f"invalid id {item_id!r}: reserved by the store")
        latest = {item: (item, rows, {**rows.attrs, **attrs, "n_rows": int(len(rows.features)), "complete": True})
                  for item, rows, attrs in batch if not isinstance(rows, WrittenRows)}  # twice: its last rows count
        groups: dict[tuple, list[Member]] = {}
        for entry in latest.values():
            groups.setdefault(parts.signature(entry[1]), []).append(entry)
        self.commit_op(feature, Append([*groups.values(), *_written_parts(batch)]))

    def commit_op(self, feature: str, op: Append | Rewrite) -> index.Index:
        """The one commit path: the operation's parts written and renamed into place, then published (an
        appended index line per part, or a new generation). A failure removes the parts it placed: the
        store is as before. Returns the feature's index as it is now."""
        if not self._has_group(feature):
            raise KeyError(f"feature {feature!r} has no group yet; call set_feature first")
        state = self.index(feature)
        lines, placed = [], []
        try:
            for seq, members in enumerate(op.batches, start=state.last_seq + 1):
                written = members[0][1] if members and isinstance(members[0][1], WrittenRows) else None
                name = written.part.name if written is not None else f"{seq:09d}-{uuid.uuid4().hex[:8]}"
                lines.append(self._write_part(feature, name, seq, members))
                placed.append(name)
            retired = self._publish(feature, state, op, lines)
        except BaseException as e:
            published = self._index[feature] is not state  # a rewrite's log renamed before the error
            for p in () if published else placed:  # never published: the store is as before
                self._remove_part(feature, p)
            if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
                n = sum(len(b) for b in op.batches)
                raise StoreError(f"cannot write the store: {_os_problem(e, self.path / feature)}; the batch of {n} "
                                 f"item(s) was {'published, its folder not flushed' if published else 'not committed'}"
                                 ) from e
            raise
        if retired:
            repair.release_retired(self.path, feature, self._index[feature])
        return self._index[feature]

    def _has_group(self, feature: str) -> bool:
        return (self.path / feature / layout.META).is_file()  # not group_keys(): that parses every feature

    def _remove_part(self, feature: str, name: str) -> None:
        shutil.rmtree(layout.part_dir(self.path, feature, name), ignore_errors=True)

    def _publish(self, feature: str, state: index.Index, op: Append | Rewrite, lines: list[layout.PartLine],
                 ) -> bool:
        """Make the written parts visible; True when a log was retired (a rewrite)."""
        path = layout.index_path(self.path, feature)
        if isinstance(op, Append):
            state.publish(path, lines)
            return False
        kept = _current_lines(state, set(state.parts) - op.old)
        records: list[layout.Record] = index.chained([layout.new_header(), *kept, *lines])
        retired = repair.retire_current(self.path, feature)
        try:
            index.replace(path, records)
        except BaseException:
            if _generation_is(path, records[0].generation):  # renamed, then the folder's fsync failed: published
                self._index[feature] = index.of_records(records, path.stat().st_size)
                raise
            retired.unlink(missing_ok=True)
            raise
        self._index[feature] = index.of_records(records, path.stat().st_size)
        return True

    def _write_part(self, feature: str, name: str, seq: int, members: list[Member]) -> layout.PartLine:
        staging = self.path / layout.STAGING / name
        staging.parent.mkdir(exist_ok=True)
        try:
            arrays, rows, spans = parts.concat(members)
            group = zarr.open_group(staging, mode="w")
            n_rows = len(arrays[layout.FEATURES])
            for arr_name, data in arrays.items():
                parts.write_array(group, arr_name, data, "row" if len(data) == n_rows else f"{arr_name}_dim0")
            own = parts.data_files(staging)  # hashed once: kept in the part's attributes and in its line
            group.attrs.put({layout.PART_ATTR: {"feature": feature, "seq": seq, "items": rows, "spans": spans,
                                                "files": own}})
            files, shapes = parts.record_files(staging, own)
            _fsync_tree(staging)  # on disk before it becomes visible: a power cut cannot leave empty chunks
            target = layout.part_dir(self.path, feature, name)
            target.parent.mkdir(exist_ok=True)
            staging.rename(target)
            atomicio.fsync_path(target.parent)  # the rename itself
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return layout.PartLine(name, seq, rows, files, shapes, spans)

    def write_manifests(self, items: Iterable[MediaItem], qa: Iterable[QAItem]) -> None:
        folder = layout.manifest_dir(self.path)
        try:
            folder.mkdir(exist_ok=True)
            write_jsonl(folder / "items.jsonl", items)
            write_jsonl(folder / "qa.jsonl", qa)
        except OSError as e:
            raise StoreError(f"cannot write the store: {_os_problem(e, folder)}") from e

    def write_run_report(self, run_id: str, report: dict[str, Any]) -> Path:
        folder = layout.runs_dir(self.path)
        out = folder / f"{run_id}.json"
        try:
            folder.mkdir(exist_ok=True)
            atomicio.atomic_write(out, layout.canonical_json(report))
        except OSError as e:
            raise StoreError(f"cannot save the run report: {_os_problem(e, out)}") from e
        return out


def _written_parts(batch: list[Member]) -> list[list[Member]]:
    """The parts workers wrote (`WrittenRows`), one batch each with its items in the part's row order and the
    attributes the part's record gets; ValueError when the batch lacks an item of one of them (a part is
    published whole or not at all)."""
    by_part: dict[str, dict[str, Member]] = {}
    for item, rows, attrs in batch:
        if isinstance(rows, WrittenRows):
            by_part.setdefault(rows.part.name, {})[item] = (
                item, rows, {**rows.attrs, **attrs, "n_rows": rows.n_rows, "complete": True})
    out = []
    for name, members in by_part.items():
        part = next(iter(members.values()))[1].part
        missing = [i for i in part.items if i not in members]
        if missing:
            raise ValueError(f"part {name}: item(s) {', '.join(missing)} of it are not in this commit; it is "
                             "published whole or not at all")
        out.append([members[i] for i in part.items])
    return out


def _named_in(snap: blog.Snapshot | None, where: str) -> set[str] | None:
    """The parts a log generation names; None when it cannot be read whole."""
    names: set[str] = set()
    if snap is None:
        return names
    try:
        layout.fold(snap.data, where, lambda rec: names.add(rec.part) if isinstance(rec, layout.PartLine) else None)
    except (ValueError, KeyError):
        return None
    return names


def _generation_is(path: Path, generation: str) -> bool:
    try:
        return index.generation_of(path) == generation
    except (OSError, ValueError):
        return False


def _current_lines(state: index.Index, keep: set[str]) -> list[layout.PartLine]:
    """The kept parts' lines in a new generation, in commit order: each with its entries that are still
    current (the others are superseded by later parts, which the new log names too)."""
    return [layout.PartLine(p, state.parts[p].seq, [layout.row_of(e) for e in es], state.parts[p].files,
                            state.parts[p].arrays, {e.item: e.spans for e in es if e.spans})
            for p, es in state.entries_of(keep).items()]


class _ObjectWriter(StoreWriter):
    """The writer where the storage has no rename and no append (object storage; docs/design.md, "On object
    storage"), written against the backend contract alone. The one-writer lock is a lease object
    (store/backends/lease.py). A part is staged in memory (hashed there, the same bytes as a local part's),
    then uploaded under its unique final name with its own zarr.json last: a part without that file, or
    named by no index record, is not data. It is published by creating the log's next segment at the log's
    end with a create-if-absent write (store/backends/log.py): of two writers racing for one sequence
    number exactly one wins, and the loser's commit fails with its parts removed. A compaction publishes a
    new log generation the same way; the parts it replaced are removed once no reader's pin holds the old
    generation (`release_retired`)."""

    def __init__(self, path: Path | str, dataset: str) -> None:
        self.path = str(path).rstrip("/")  # type: ignore[assignment]
        self._index: dict[str, index.Index] = {}
        self._heads: dict[str, tuple[str, int]] = {}  # feature -> (log generation, length published)
        self._finished: dict[tuple[str, str], bool] = {}  # workers' parts given their zarr.json, not yet published
        self._groups: set[str] = set()  # features whose group is known to exist (`_has_group`)
        self._lock = None
        self._lease: contextlib.ExitStack | None = contextlib.ExitStack()
        self.backend = open_backend(self.path)
        try:
            self.backend.check()
            try:
                self._lease.enter_context(self.backend.lock(layout.LOCK, f"pid {os.getpid()} on {os.uname().nodename}"))
            except Locked as e:
                raise StoreLocked(str(e)) from None
            self.root = self._open_root()
            self._claim_root(dict(self.root.attrs), dataset)
        except BaseException:
            self.close()
            raise

    def _open_root(self) -> zarr.Group:
        try:
            return zarr.open_group(self.backend.zarr_store(), mode="a")
        except (ValueError, TypeError, KeyError) as e:
            raise StoreError(f"{self.backend.where(layout.META)}: the store's own metadata is unreadable "
                             f"({type(e).__name__}: {e}); this store needs repair by hand or a new --out") from e

    def close(self) -> None:
        lease, self._lease = getattr(self, "_lease", None), None
        if lease is not None:
            lease.close()

    def set_feature(self, feature: str, attrs: dict[str, Any]) -> None:
        check_id(feature)
        if feature in layout.RESERVED:
            raise ValueError(f"invalid feature name {feature!r}: the store keeps its own {feature}/ folder")
        group = self.root.require_group(feature)
        if dict(group.attrs) != attrs:
            group.attrs.put(attrs)
        self.index(feature)

    def _has_group(self, feature: str) -> bool:
        # a request per commit otherwise; a group is never removed while this writer holds the lease
        if feature not in self._groups and self.backend.exists(join(feature, layout.META)):
            self._groups.add(feature)
        return feature in self._groups

    def _remove_part(self, feature: str, name: str) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            if self._finished.pop((feature, name), False):  # a worker's: as it uploaded it, for a commit retried
                self.backend.delete(join(feature, layout.PARTS, name, layout.META))
                return
            self.backend.delete_prefix(join(feature, layout.PARTS, name))

    def index(self, feature: str) -> index.Index:
        """The feature's index, loaded once: a missing or damaged log written anew from the parts' own records,
        and parts no record names (a killed commit's) adopted when whole, removed when not."""
        if feature in self._index:
            return self._index[feature]
        key = join(feature, layout.INDEX)
        where = self.backend.where(key)
        snap = blog.read(self.backend, key)
        state, why = None, "index missing"
        if snap is not None and snap.data:  # a generation without its first segment has no log
            try:
                state = index.parse(snap.data, where)
            except layout.IndexDamaged as e:
                why = str(e)
        if state is None:
            found, unreadable = parts.records_on_disk(self.backend, feature)
            for name in unreadable:
                self._remove_part(feature, name)  # never complete: its zarr.json (uploaded last) is not there
            records: list[layout.Record] = index.chained([layout.new_header(), *found])
            data = b"".join(layout.encode(r) for r in records)
            generation = blog.replace(self.backend, key, data, None if snap is None else (snap.generation, len(snap.data)))
            if found or snap is not None:
                log.warning("%s: %s; written anew from %d part(s)", where, why, len(found))
            state = index.of_records(records, len(data))
            self._heads[feature] = (generation, len(data))
        else:
            self._heads[feature] = (snap.generation, len(snap.data))
            held = self.release_retired(feature, state)  # (the parts readers still read are not unindexed)
            unindexed = [p for p in parts.part_names(self.backend, feature) if p not in state.parts and p not in held]
            found, unreadable = parts.records_on_disk(self.backend, feature, unindexed)
            for name in unreadable:
                self._remove_part(feature, name)
            if found:
                log.info("%s: adopting %d part(s) no index record named (a run was stopped before publishing "
                         "them)", where, len(found))
                self._index[feature] = state
                self._append(feature, state, list(found))
        self._index[feature] = state
        return state

    def _append(self, feature: str, state: index.Index, lines: list[layout.PartLine]) -> None:
        generation, at = self._heads[feature]
        lines = index.chained(lines, state.order.prev)  # type: ignore[assignment,arg-type]  # as Index.publish does
        try:
            end = blog.append(self.backend, join(feature, layout.INDEX), generation, at,
                              b"".join(layout.encode(r) for r in lines))
        except Conflict as e:
            raise StoreError(f"{self.backend.where(join(feature, layout.INDEX))}: another writer published to "
                             f"this index meanwhile ({e}); this run's lease was lost; run again") from None
        self._heads[feature] = (generation, end)
        state.length = end
        for rec in lines:
            state.add(rec)

    def _publish(self, feature: str, state: index.Index, op: Append | Rewrite, lines: list[layout.PartLine],
                 ) -> bool:
        for line in lines:  # published from here on (or never, should this raise): nothing to take back
            self._finished.pop((feature, line.part), None)
        if isinstance(op, Append):
            self._append(feature, state, lines)
            return False
        kept = _current_lines(state, set(state.parts) - op.old)
        records: list[layout.Record] = index.chained([layout.new_header(), *kept, *lines])
        data = b"".join(layout.encode(r) for r in records)
        try:
            generation = blog.replace(self.backend, join(feature, layout.INDEX), data, self._heads[feature])
        except Conflict as e:
            raise StoreError(f"{self.backend.where(join(feature, layout.INDEX))}: changed by another writer "
                             f"during the compaction ({e}); nothing was replaced") from None
        self._heads[feature] = (generation, len(data))
        self._index[feature] = index.of_records(records, len(data))
        self.release_retired(feature, self._index[feature])
        return False

    def release_retired(self, feature: str, state: index.Index) -> set[str]:
        """Remove the parts of the feature's replaced log generations (a compaction's old parts) that no
        reader holds any more (no live pin of their generation: store/backends/pins.py) and that neither the
        current index (`state`) nor a held generation names; then those generations. The parts the held
        generations name (kept) are returned. A failure here is said and left to the next writer: what was
        published stays published."""
        key = join(feature, layout.INDEX)
        current = self._heads[feature][0]
        held: set[str] = set()
        free: list[tuple[str, set[str]]] = []
        try:
            for generation in blog.generations(self.backend, key):
                if generation == current:
                    continue
                names = _named_in(blog.read(self.backend, key, generation), self.backend.where(key))
                if names is None:  # unreadable: which parts it names is unknown, so none is removed
                    log.warning("%s: replaced generation %s unreadable, kept with its parts", self.backend.where(key),
                                generation)
                    continue
                if pins.alive(self.backend, key, generation):
                    held |= names
                else:
                    free.append((generation, names))
            removed = 0
            for generation, names in free:
                for name in sorted(names - set(state.parts) - held):
                    self.backend.delete_prefix(join(feature, layout.PARTS, name))
                    removed += 1
                blog.remove_generation(self.backend, key, generation)  # after its parts: a failure retries them
                pins.clear(self.backend, key, generation)
        except (OSError, RuntimeError) as e:
            log.warning("%s: could not remove the parts a compaction replaced (%s); the next writer tries again",
                        self.backend.where(feature), e)
            return held | {n for _, names in free for n in names}
        if removed:
            log.debug("%s: removed %d part(s) superseded by a compaction (no reader holds them)",
                      self.backend.where(feature), removed)
        return held

    def _write_part(self, feature: str, name: str, seq: int, members: list[Member]) -> layout.PartLine:
        if isinstance(members[0][1], WrittenRows):
            return self._finish_written(feature, name, seq, members)
        part, key = parts.MemoryPart(members), join(feature, layout.PARTS, name)
        try:  # each array's files sent while the next is encoded; its own zarr.json last, once they are all there
            self.backend.put_many((join(key, rel), data) for rel, data in part.write())
            staged = part.staged()
            rows, spans = staged.entries, staged.spans
            staged.group.attrs.put({layout.PART_ATTR: {"feature": feature, "seq": seq, "items": rows, "spans": spans,
                                                       "files": staged.own}})
            files, shapes = parts.record_staged(staged)
            self.backend.put(join(key, layout.META), staged.bytes_of(layout.META))
        except BaseException:
            self._remove_part(feature, name)
            raise
        return layout.PartLine(name, seq, rows, files, shapes, spans)

    def _finish_written(self, feature: str, name: str, seq: int, members: list[Member]) -> layout.PartLine:
        """A part a worker uploaded (store/workerparts.py): its data files checked to be there as it recorded
        them (one listing), then its own zarr.json written with its record; the caller publishes it."""
        part = members[0][1].part
        key = join(feature, layout.PARTS, name)
        there = {i.key[len(key) + 1:]: i.size for i in self.backend.list(key)}
        wrong = sorted(rel for rel, (size, _) in part.files.items() if there.get(rel) != size)
        if wrong:
            raise OSError(f"{self.backend.where(key)}: the worker's upload is not all there ({', '.join(wrong[:3])}"
                          f"{' …' if len(wrong) > 3 else ''} missing or of another size); not published")
        rows = [layout.item_row(item, r0, n, attrs) for (item, _, attrs), (r0, n) in zip(members, part.rows, strict=True)]
        raw = part_meta(feature, seq, part, rows)
        self.backend.put(join(key, layout.META), raw)
        self._finished[feature, name] = True  # (a failed commit takes back only this: `_remove_part`)
        files = {**{rel: list(v) for rel, v in part.files.items()}, layout.META: [len(raw), hashlib.sha256(raw).hexdigest()]}
        return layout.PartLine(name, seq, rows, files, part.arrays, part.spans)

    def write_manifests(self, items: Iterable[MediaItem], qa: Iterable[QAItem]) -> None:
        for name, records in (("items.jsonl", items), ("qa.jsonl", qa)):
            self.backend.put(join(layout.MANIFESTS, name), "".join(r.model_dump_json() + "\n" for r in records).encode())

    def write_run_report(self, run_id: str, report: dict[str, Any]) -> Any:
        key = join(layout.RUNS, f"{run_id}.json")
        self.backend.put(key, layout.canonical_json(report).encode())
        return self.backend.where(key)
