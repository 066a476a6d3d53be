"""Writing a file whole or not at all: the one temp-file-then-rename of the project.

Every writer of a file that a reader may open at any moment (the store's index and metadata, manifests, run
reports, plan caches, exports, calibration caches, the report page) writes a temporary file beside the
target and renames it over the target: a reader sees the old file or the new one, never half of one, and a
killed writer leaves only a `.partial` file (removed here when the write fails in this process; a kill's
leftover is named so that no reader takes it for data).

The fsync rules, decided once:
- `durable=True` (the default: the store's truth and what a user keeps: index logs, the root's metadata,
  manifests, run reports, exports): the temporary file is fsynced before the rename, and the folder after
  it. Without the first, a power cut after the rename can leave the new name holding an empty or partial
  file (ext4/xfs allocate blocks late, and a rename does not order data before metadata); without the
  second, the rename itself may be lost and the old file come back.
- `durable=False` (caches that are only a shortcut: plan caches, calibration results): no fsync. A power
  cut may lose the new file or leave it empty; its reader treats an unreadable cache as absent and
  computes it again, and an fsync per cache entry would cost more than that (a plan cache is written on
  every dataset build).

This module is the lowest layer: it imports nothing of the project, so every package may use it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def fsync_path(path: Path | str) -> None:
    """Flush a file, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path: Path) -> Path:
    """Where this process writes `path` before renaming it into place."""
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


@contextlib.contextmanager
def atomic_path(path: Path | str, durable: bool = True) -> Iterator[Path]:
    """A temporary path beside `path` for the caller to write (by any library: h5py, zarr, open()); renamed
    over `path` when the block ends without an error (fsynced first when `durable`), removed when it raises.
    The temporary name holds the process id, so writers of one target in several processes (Ray workers,
    DataLoader workers) never share it: the last rename wins, whole. Within a process, one write of a
    target at a time."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        yield tmp
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if durable:
        fsync_path(path.parent)


def atomic_write(path: Path | str, data: bytes | str, durable: bool = True) -> None:
    """Write `data` (str: UTF-8) as the whole content of `path`, atomically (see `atomic_path`)."""
    with atomic_path(path, durable) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
