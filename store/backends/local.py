"""The local backend: a POSIX folder. Whole-object writes are atomicio's temp file renamed into place; a
create-if-absent is a hard link of the finished temp file (which fails, atomically, where the name exists);
a replace-if-unchanged holds a flock on a sidecar lock file around its check and rename."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import zarr

import atomicio
from store.backends.base import Backend, BackendError, Conflict, Locked, ObjectInfo, Pinned


def _version(st: os.stat_result) -> str:
    # a rename gives the name a new inode, so a rewrite within one mtime tick still changes the version
    return f"{st.st_size}-{st.st_mtime_ns}-{st.st_ino}"


def _temp(path: Path) -> Path:
    """A temporary name beside `path` of this writer alone (threads of one process race for one key too)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.partial")


def _temporary(name: str) -> bool:
    return name.startswith(".") and (name.endswith(".partial") or name.endswith(".cas"))


class LocalBackend(Backend):
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        parts = [p for p in key.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ValueError(f"{self.where(key)}: a key may not name . or ..")
        return self.root.joinpath(*parts)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise FileNotFoundError(f"{self.where(key)}: no such object") from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            with self._path(key).open("rb") as f:
                return os.pread(f.fileno(), length, start)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise FileNotFoundError(f"{self.where(key)}: no such object") from None

    def head(self, key: str) -> ObjectInfo:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            raise FileNotFoundError(f"{self.where(key)}: no such object") from None
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(f"{self.where(key)}: a folder, not an object")
        return ObjectInfo(key, st.st_size, _version(st))

    def sha256(self, key: str) -> str:
        try:
            with self._path(key).open("rb") as f:  # streamed: a part's shard may be larger than memory allows
                return hashlib.file_digest(f, "sha256").hexdigest()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise FileNotFoundError(f"{self.where(key)}: no such object") from None

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        top = self._path(prefix)
        out = []
        for folder, dirs, names in os.walk(top):
            dirs.sort()
            rel = os.path.relpath(folder, self.root).replace(os.sep, "/")
            for name in names:
                if _temporary(name):
                    continue
                with contextlib.suppress(FileNotFoundError):  # removed while listed
                    st = os.stat(os.path.join(folder, name))
                    key = name if rel == "." else f"{rel}/{name}"
                    out.append(ObjectInfo(key, st.st_size, _version(st)))
        return sorted(out)

    def children(self, prefix: str = "") -> list[str]:
        try:
            return sorted(n for n in os.listdir(self._path(prefix)) if not _temporary(n))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def put(self, key: str, data: bytes) -> ObjectInfo:
        return self._publish(key, data, os.replace)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        def link(tmp: Path, path: Path) -> None:
            try:
                os.link(tmp, path)  # whole, and refused where the name exists: what If-None-Match: * does
            except FileExistsError:
                raise Conflict(f"{self.where(key)}: already exists") from None

        return self._publish(key, data, link)

    def _publish(self, key: str, data: bytes, place: Callable[[Path, Path], None]) -> ObjectInfo:
        """`data` written whole and synced beside the object, then put in its place by `place` (a rename, or a
        link that fails where the name exists); the temporary file never outlives the call."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp(path)
        try:
            tmp.write_bytes(data)
            atomicio.fsync_path(tmp)
            place(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        atomicio.fsync_path(path.parent)
        return ObjectInfo(key, len(data), _version(path.stat()))

    def put_if_version(self, key: str, data: bytes, version: str) -> ObjectInfo:
        path = self._path(key)
        with self._cas(path):
            try:
                now = _version(path.stat())
            except FileNotFoundError:
                raise Conflict(f"{self.where(key)}: deleted since version {version}") from None
            if now != version:
                raise Conflict(f"{self.where(key)}: changed since version {version}")
            return self.put(key, data)

    @contextlib.contextmanager
    def _cas(self, path: Path) -> Iterator[None]:
        """Compare-and-swap writers of one object take turns (the sidecar lives beside it, never listed)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(f".{path.name}.cas"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)

    def pin_log(self, key: str) -> Pinned | None:
        fd = _lease(self._path(key))
        return None if fd is None else _LocalPin(fd)

    def check(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise BackendError(f"{self.root}: is a file, not a store folder")

    def zarr_store(self, prefix: str = "", read_only: bool = False) -> Any:
        return zarr.storage.LocalStore(self._path(prefix), read_only=read_only)

    @contextlib.contextmanager
    def lock(self, key: str, holder: str) -> Iterator[str]:
        """A flock: the kernel releases it when the holder dies, so there is no lease to expire."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                who = os.pread(fd, 400, 0).decode(errors="replace").strip() or "another process"
                raise Locked(f"{self.url}: another run is writing to this store ({who}); wait for it to finish "
                             "or write to another store") from None
            os.pwrite(fd, holder.encode(), 0)
            os.ftruncate(fd, len(holder.encode()))
            yield holder
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)


class _LocalPin(Pinned):
    """An open log file under a shared flock (docs/design.md, "Snapshots"), and its length when opened."""

    def __init__(self, fd: int) -> None:
        self.fd, self.length = fd, os.fstat(fd).st_size

    def read(self, limit: int | None = None) -> bytearray:
        """The bytes into one buffer (no second copy of a large index)."""
        length = self.length if limit is None else min(limit, self.length)
        buf = bytearray(length)
        view, pos = memoryview(buf), 0
        while pos < length:
            got = os.preadv(self.fd, [view[pos:pos + (1 << 24)]], pos)
            if not got:
                break
            pos += got
        view.release()
        del buf[pos:]
        return buf

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


def _lease(path: Path) -> int | None:
    """The index log at `path`, opened and leased (a shared flock until the handle closes). The path is checked
    to still name the file locked: a compaction that renamed a new log in between may already have found the
    old one unleased. Where flock is refused: the log, without a lease."""
    for attempt in range(50):
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
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
