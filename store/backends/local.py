"""The local backend: a POSIX folder. Whole-object writes are atomicio's temp file renamed into place; a
create-if-absent is a hard link of the finished temp file (which fails, atomically, where the name exists);
a replace-if-unchanged holds a flock on a sidecar lock file around its check and rename. The store's lock is
a flock (the kernel lets it go when its holder dies); an index log is appended to in place (fsynced) and
replaced by a rename, the old file kept under `retired/` while a reader's shared flock holds it; a part is
written in `.staging/` and renamed into place whole (docs/design.md, "Commit")."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import zarr

import atomicio
from store.backends.base import Backend, BackendError, Conflict, Locked, LogEnd, ObjectInfo, Pinned, Retired
from store.layout import RETIRED, STAGING


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

    def describe(self, key: str) -> Path:
        return self._path(key)

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
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self._path(prefix))

    # ---- the index log: appended in place, replaced by a rename ----

    def log_read(self, key: str) -> tuple[str, bytes] | None:
        try:
            return "", self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def log_append(self, key: str, end: LogEnd, data: bytes) -> int:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != end.length:
                os.ftruncate(fd, end.length)
            written = os.pwrite(fd, data, end.length)
            if written != len(data):
                raise OSError(f"{path}: short write ({written} of {len(data)} bytes)")
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end.length)  # a failed append (disk full) must not leave a torn line behind
            raise
        finally:
            os.close(fd)
        return end.length + len(data)

    def log_replace(self, key: str, data: bytes, expect: LogEnd | None, retire: bool) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        link = None
        if retire and path.exists():
            # readers pin the log file itself (a shared flock): a hard link keeps the old one reachable for
            # `log_retired` after the rename, until no reader holds it
            folder = path.parent / RETIRED
            folder.mkdir(exist_ok=True)
            link = folder / f"{uuid.uuid4().hex}.log"
            os.link(path, link)
            atomicio.fsync_path(folder)
        try:
            atomicio.atomic_write(path, data)
        except BaseException:
            if link is not None and not _starts_with(path, data.split(b"\n", 1)[0]):  # not renamed: not retired
                link.unlink(missing_ok=True)
            raise
        return ""

    @contextlib.contextmanager
    def log_retired(self, key: str) -> Iterator[list[Retired]]:
        folder = self._path(key).parent / RETIRED
        out, held = [], []
        try:
            for path in sorted(folder.glob("*.log")):
                fd = os.open(path, os.O_RDONLY)
                try:
                    data: bytes | None = path.read_bytes()
                except OSError:
                    data = None
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until the block ends (its parts gone)
                except OSError:  # a reader holds it (or flock fails here): its parts stay
                    os.close(fd)
                    out.append(Retired(path.name, data, True))
                    continue
                held.append(fd)
                out.append(Retired(path.name, data, False))
            yield out
        finally:
            for fd in held:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def log_drop(self, key: str, token: str) -> None:
        (self._path(key).parent / RETIRED / token).unlink(missing_ok=True)

    # ---- a part: written in `.staging/`, renamed into place whole ----

    def place(self, key: str, files: Iterable[tuple[str, bytes]], last: str, finish: Callable[[], bytes]) -> None:
        """Written in `.staging/<name>` under the store, fsynced file by file and renamed into place: a reader
        finds the whole tree or none of it, and a kill leaves it in `.staging/` (`sweep_staged`)."""
        staging = self.root / STAGING / key.rstrip("/").rsplit("/", 1)[-1]
        try:
            staging.mkdir(parents=True)
            for rel, data in files:
                path = staging / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            (staging / last).write_bytes(finish())
            _fsync_tree(staging)  # on disk before it becomes visible: a power cut cannot leave empty chunks
            target = self._path(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(target)
            atomicio.fsync_path(target.parent)  # the rename itself
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def sweep_staged(self) -> int:
        staging = self.root / STAGING
        if not staging.exists():
            return 0
        found = len(os.listdir(staging))
        shutil.rmtree(staging)
        return found

    def pin_log(self, key: str) -> Pinned | None:
        path = self._path(key)
        fd = _lease(path)
        return None if fd is None else _LocalPin(fd, path)

    def lock_held(self, key: str) -> bool:
        """A shared flock refused: the writer's exclusive one is held (the writer takes it for a run's life)."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:  # flock refused here (some network filesystems): no holder can be seen
            return False
        finally:
            os.close(fd)
        return False

    def check(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise BackendError(f"{self.root}: is a file, not a store folder; give --out a folder (new or a store)")

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
                who = _lock_holder(fd)
                raise Locked(f"{self.url}: another run is writing to this store ({who}); wait for it to finish "
                             "or write to another store") from None
            os.pwrite(fd, holder.encode(), 0)
            os.ftruncate(fd, len(holder.encode()))
            yield holder
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        finally:
            os.close(fd)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            atomicio.fsync_path(os.path.join(folder, name))
        atomicio.fsync_path(folder)


def _starts_with(path: Path, first: bytes) -> bool:
    """Whether the file at `path` begins with the line `first` (a log's header names its generation)."""
    try:
        with path.open("rb") as f:
            return f.readline().rstrip(b"\n") == first
    except OSError:
        return False


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


class _LocalPin(Pinned):
    """An open log file under a shared flock (docs/design.md, "Snapshots"), and its length when opened."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path, self.length = fd, path, os.fstat(fd).st_size

    def unchanged(self) -> bool:
        """The file at the log's path is the one open here (a replacement is a rename: another inode) and as
        long as when pinned (an append writes in place)."""
        if self.fd < 0:
            return False
        try:
            now, mine = os.stat(self.path), os.fstat(self.fd)
        except OSError:
            return False
        return (now.st_ino, now.st_dev, now.st_size) == (mine.st_ino, mine.st_dev, self.length)

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
