"""The store's only writer: batched atomic commits of many (feature, item) pairs (docs/design.md, "Store").

A batch of one feature is written as one or more immutable parts (store/parts.py: the rows of many items
concatenated), each in full under `<store>/.staging/<part>/`, every file fsynced, then renamed into
`<store>/<feature>/parts/<part>`. The batch becomes visible in one step: one append of its records to the
feature's index log (store/index.py), fsynced. A run killed at any moment leaves at most a staging folder
(swept by the next writer) or a renamed part that no index line names: complete, so the next writer adopts
it from its own metadata (store/repair.py) rather than delete rows that were written whole; a reader never
sees half a written part, and a recomputed item's new rows supersede its old ones without touching other
items' data (`python -m pipeline compact` reclaims the superseded rows). A commit that fails (disk full) removes what
it wrote and truncates the log to where it was: the store is as before the batch.

The rename and the append are atomic on a local or POSIX shared filesystem, which is what this writer
supports. One writer per store at a time: an exclusive lock on `<store>/.lock` (held while the writer is
open) makes a second run on the same store stop with a clear error instead of sweeping the first run's
unfinished parts away.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import zarr

from manifests.records import MediaItem, QAItem, check_id, write_jsonl
from rows import FeatureRows
from store import index, layout, parts

log = logging.getLogger(__name__)
_write_array = parts.write_array  # tests wrap it to die mid-write


def _package_version() -> str:
    try:
        return version("siqfeat")
    except PackageNotFoundError:
        return "0+unknown"


_fsync = index.fsync_path  # flush a file, or a directory's entries, to disk (tests wrap it)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            _fsync(os.path.join(folder, name))
        _fsync(folder)


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
    """Creates `<dataset>.zarr` if needed and commits batches of finished (feature, item) pairs into it."""

    def __init__(self, path: Path | str, dataset: str, allow_v1: bool = False) -> None:
        """`allow_v1`: for `store.migrate` only, which writes version-2 parts into a version-1 store."""
        self.path = Path(path)
        self._index: dict[str, index.IndexState] = {}
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"{self.path}: is a file, not a store folder; give --out a folder (new or a store)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = self._acquire_lock()
            self.root = self._open_root()
            attrs = dict(self.root.attrs)
            if attrs.get("schema") == layout.SCHEMA_V1 and not allow_v1:
                raise ValueError(layout.v1_refusal(self.path))
            if attrs.get("schema", layout.SCHEMA) not in (layout.SCHEMA, layout.SCHEMA_V1):
                raise ValueError(f"{self.path}: store schema {attrs['schema']!r}, this code writes {layout.SCHEMA!r}")
            if attrs.get("dataset", dataset) != dataset:
                raise ValueError(f"{self.path}: store holds dataset {attrs['dataset']!r}, not {dataset!r}")
            if not allow_v1 and (attrs.get("schema") != layout.SCHEMA or attrs.get("dataset") != dataset):
                self.root.attrs.update({"schema": layout.SCHEMA, "dataset": dataset,
                                        "package_version": _package_version()})
            self._sweep_staging()
        except OSError as e:
            self.close()
            raise StoreError(f"cannot write the store: {_os_problem(e, self.path)}") from e
        except BaseException:
            self.close()
            raise

    def _open_root(self) -> zarr.Group:
        try:
            return zarr.open_group(self.path, mode="a")
        except (ValueError, TypeError, KeyError) as e:  # invalid JSON is a ValueError too
            raise StoreError(f"{self.path / 'zarr.json'}: the store's own metadata is unreadable "
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
                meta = self.path / feature / "zarr.json"
                log.warning("%s: unreadable (%s: %s); writing it anew from this run's spec", meta,
                            type(e).__name__, e)
                meta.unlink(missing_ok=True)
                group = self.root.require_group(feature)
            if dict(group.attrs) != attrs:
                group.attrs.put(attrs)  # one metadata write: never a moment with no spec_hash
            self.index(feature)
        except OSError as e:
            raise StoreError(f"cannot write the store: {_os_problem(e, self.path / feature)}") from e

    def index(self, feature: str) -> index.IndexState:
        """The feature's index as this writer keeps it, loaded once: repaired if damaged (rebuilt from the
        parts), parts that no index line names (a killed commit's, or lines lost to damage) adopted, and the
        parts of compacted logs that no reader leases any more removed (store/repair.py)."""
        if feature not in self._index:
            from store.repair import open_index

            self._index[feature] = open_index(self.path, feature)
        return self._index[feature]

    def commit(self, feature: str, item_id: str, rows: FeatureRows, item_attrs: dict[str, Any]) -> None:
        """Write one item's rows atomically (a batch of one); supersedes an older version of the same item."""
        self.commit_batch(feature, [(item_id, rows, item_attrs)])

    def commit_batch(self, feature: str, batch: list[tuple[str, FeatureRows, dict[str, Any]]]) -> None:
        """Write many items of one feature atomically: all of them become visible at once, or none.
        Items with differently shaped arrays go to separate parts of the same commit."""
        for item_id, _, _ in batch:
            check_id(item_id)
            if item_id in layout.RESERVED:
                raise ValueError(f"invalid id {item_id!r}: reserved by the store")
        if not (self.path / feature / "zarr.json").is_file():  # not group_keys(): that parses every feature
            raise KeyError(f"feature {feature!r} has no group yet; call set_feature first")
        state = self.index(feature)
        latest = {item: (item, rows, {**rows.attrs, **attrs, "n_rows": int(len(rows.features)), "complete": True})
                  for item, rows, attrs in batch}  # an item twice in a batch: its last rows count
        groups: dict[tuple, list[tuple[str, FeatureRows, dict[str, Any]]]] = {}
        for entry in latest.values():
            groups.setdefault(parts.signature(entry[1]), []).append(entry)
        records, placed = [], []
        try:
            for seq, members in enumerate(groups.values(), start=state.last_seq + 1):
                name = f"{seq:09d}-{uuid.uuid4().hex[:8]}"
                records.append(self._write_part(feature, name, seq, members))
                placed.append(parts.part_dir(self.path, feature, name))
            new_length = index.append(self.path / feature / index.INDEX, records, state.length)
        except BaseException as e:
            for p in placed:  # renamed but never published: the store is as before the batch
                shutil.rmtree(p, ignore_errors=True)
            if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
                raise StoreError(f"cannot write the store: {_os_problem(e, self.path / feature)}; "
                                 f"the batch of {len(latest)} item(s) was not committed") from e
            raise
        for rec in records:
            index.apply(state, rec)
        state.length = new_length

    def _write_part(self, feature: str, name: str, seq: int, members: list[tuple[str, FeatureRows, dict[str, Any]]],
                    ) -> dict[str, Any]:
        staging = self.path / layout.STAGING / name
        staging.parent.mkdir(exist_ok=True)
        try:
            arrays, entries, spans = parts.concat(members)
            group = zarr.open_group(staging, mode="w")
            n_rows = len(arrays[layout.FEATURES])
            for arr_name, data in arrays.items():
                _write_array(group, arr_name, data, "row" if len(data) == n_rows else f"{arr_name}_dim0")
            group.attrs.put({parts.ATTR: {"feature": feature, "seq": seq, "items": entries, "spans": spans,
                                          "files": parts.data_files(staging)}})
            files, shapes = parts.record_files(staging)
            _fsync_tree(staging)  # on disk before it becomes visible: a power cut cannot leave empty chunks
            target = parts.part_dir(self.path, feature, name)
            target.parent.mkdir(exist_ok=True)
            staging.rename(target)
            _fsync(target.parent)  # the rename itself
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return index.part_record(name, seq, entries, files, shapes, spans)

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
        tmp = out.with_suffix(".partial")
        try:
            folder.mkdir(exist_ok=True)
            tmp.write_text(layout.canonical_json(report))
            tmp.replace(out)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"cannot save the run report: {_os_problem(e, out)}") from e
        return out
