"""The store's only writer: one atomic commit per (feature, item).

Each item group is written in full under `<store>/.staging/<uuid>/`, marked `complete` last, and then
renamed into `<store>/<feature>/<item>`. A run killed at any moment leaves at most an orphan staging
directory (invisible to readers, swept on the next open); a reader never sees half an item.
Every staged file is fsynced before the rename (and the parent folder after it), so a power cut, not
only a killed process, cannot leave a complete-looking item with empty chunks. Replacing an item moves
the old version aside first; if a run dies between the two renames, the next
writer puts the old version back. The rename is atomic on a local or POSIX shared filesystem, which is
what this writer supports. One writer per store at a time: an exclusive lock on `<store>/.lock` (held
while the writer is open) makes a second run on the same store stop with a clear error instead of
sweeping the first run's unfinished items away.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
import warnings
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from extractors.base import FeatureRows
from manifests.records import MediaItem, QAItem, check_id, write_jsonl
from store import layout
from store.integrity import RECORD, STORE_RECORDS, make_record, new_marker

log = logging.getLogger(__name__)
_CHUNK_BYTES = 1 << 21  # ~2 MiB per chunk along N


def _package_version() -> str:
    try:
        return version("siqfeat")
    except PackageNotFoundError:
        return "0+unknown"


def _chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * itemsize)
    rows = max(1, min(max(shape[0], 1), _CHUNK_BYTES // row_bytes))
    return (rows, *shape[1:])


def _write_array(group: zarr.Group, name: str, data: np.ndarray) -> None:
    data = np.asarray(data)
    if data.dtype.kind == "U":
        data = data.astype(str)  # variable-length UTF-8 in zarr v3
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zarr warns that string dtypes are not in the v3 core spec yet
            arr = group.create_array(name, shape=data.shape, dtype=str, chunks=_chunks(data.shape, 64))
            if data.size:
                arr[...] = data
        return
    if data.dtype.kind == "O":
        raise ValueError(f"array {name!r}: object arrays cannot be stored; got {data.dtype}")
    arr = group.create_array(name, shape=data.shape, dtype=data.dtype, chunks=_chunks(data.shape, data.dtype.itemsize))
    if data.size:
        arr[...] = data


def _fsync(path: Path | str) -> None:
    """Flush a file, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        parts = line.split()  # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; waiters have "->"
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[5].count(":") != 2:
            continue
        major, minor, inode = parts[5].split(":")
        if (int(major, 16), int(minor, 16), int(inode)) == (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino):
            return int(parts[4])
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


class StoreWriter:
    """Creates `<dataset>.zarr` if needed and commits finished (feature, item) groups into it."""

    def __init__(self, path: Path | str, dataset: str) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise StoreError(f"{self.path}: is a file, not a store folder; give --out a folder (new or a store)")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = self._acquire_lock()
            self.root = self._open_root()
            attrs = dict(self.root.attrs)
            if attrs.get("schema", layout.SCHEMA) != layout.SCHEMA:
                raise ValueError(f"{self.path}: store schema {attrs['schema']!r}, this code writes {layout.SCHEMA!r}")
            if attrs.get("dataset", dataset) != dataset:
                raise ValueError(f"{self.path}: store holds dataset {attrs['dataset']!r}, not {dataset!r}")
            marker = attrs.get(STORE_RECORDS) or new_marker(self.path, layout.RESERVED)  # store/integrity.py
            self.root.attrs.update({"schema": layout.SCHEMA, "dataset": dataset,
                                    "package_version": _package_version(), STORE_RECORDS: marker})
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
        """Remove what a killed run left half-written, and put back an old item version that a killed
        replacement had moved aside. Safe: this writer holds the store's lock."""
        staging = self.path / layout.STAGING
        if not staging.exists():
            return
        for marker in staging.glob("*.target"):
            old = staging / (marker.stem + "-old")
            target = self.path / marker.read_text()
            if old.is_dir() and not target.exists():
                log.info("restoring %s, which an interrupted run was replacing", target.relative_to(self.path))
                old.rename(target)
        leftovers = [p for p in staging.iterdir() if p.suffix != ".target"]
        if leftovers:
            log.info("removing %d unfinished item(s) left by an interrupted run", len(leftovers))
        shutil.rmtree(staging)

    def set_feature(self, feature: str, attrs: dict[str, Any]) -> None:
        """Create or update a feature group's attributes (extractor, version, config, columns, rate_hz, weights)."""
        check_id(feature)
        if feature in (layout.MANIFESTS, layout.RUNS):
            raise ValueError(f"invalid feature name {feature!r}: the store keeps its own {feature}/ folder")
        try:
            try:
                group = self.root.require_group(feature)
            except (ValueError, TypeError, KeyError) as e:  # its metadata is damaged; the items are separate
                meta = self.path / feature / "zarr.json"
                log.warning("%s: unreadable (%s: %s); writing it anew from this run's spec", meta,
                            type(e).__name__, e)
                meta.unlink(missing_ok=True)
                group = self.root.require_group(feature)
            if dict(group.attrs) != attrs:
                group.attrs.put(attrs)  # one metadata write: never a moment with no spec_hash
        except OSError as e:
            raise StoreError(f"cannot write the store: {_os_problem(e, self.path / feature)}") from e

    def commit(self, feature: str, item_id: str, rows: FeatureRows, item_attrs: dict[str, Any]) -> None:
        """Write one item's rows atomically; replaces an older version of the same item."""
        check_id(item_id)
        if not (self.path / feature / "zarr.json").is_file():  # not group_keys(): that parses every feature
            raise KeyError(f"feature {feature!r} has no group yet; call set_feature first")
        staging = self.path / layout.STAGING / uuid.uuid4().hex
        staging.parent.mkdir(exist_ok=True)
        try:
            group = zarr.open_group(staging, mode="w")
            _write_array(group, layout.FEATURES, rows.features)
            _write_array(group, layout.INTERVALS, rows.intervals.astype(np.float64))
            for name, data in rows.extras.items():
                if name in (layout.FEATURES, layout.INTERVALS):
                    raise ValueError(f"extra array name {name!r} is reserved")
                _write_array(group, name, data)
            group.attrs.update({**rows.attrs, **item_attrs, "n_rows": int(len(rows.features))})
            # What verify compares with later: every file's size and hash, each array's shape and dtype, and a
            # hash of the attributes as they read back. One metadata write with `complete`, written last.
            group.attrs.update({RECORD: make_record(staging), "complete": True})
            _fsync_tree(staging)  # on disk before it becomes visible: a power cut cannot leave empty chunks
            self._swap_in(staging, feature, item_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _swap_in(self, staging: Path, feature: str, item_id: str) -> None:
        target = self.path / feature / item_id
        if not (staging / layout.FEATURES / "zarr.json").exists():
            raise RuntimeError(f"{staging}: staged item lost its arrays before commit; not committing {feature}/{item_id}")
        old = marker = None
        if target.exists():
            old = staging.with_name(staging.name + "-old")
            marker = staging.with_name(staging.name + ".target")
            marker.write_text(f"{feature}/{item_id}")  # lets the next writer undo a half-done swap
            target.rename(old)
        staging.rename(target)
        _fsync(target.parent)  # the rename itself
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
            marker.unlink(missing_ok=True)

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
