"""A video (or caption, or audio file) in a bucket is decoded from a copy on the node's disk: one GET streams it
into a bounded, least-recently-used cache, and the decoders open the copy as they open any file.

Why a copy and not ranged reads through a file-like object: docs/scale.md, "Raw data in a bucket" (the profile
of both for 5-100 MB clips against the local S3 server). A pair decodes its video more than once (frames, faces
and the audio track are three decodes), and a decoder seeks: a copy costs one GET of the whole object, ranged
reads one GET per buffer and per seek.

Where: the run's own folder in the node's temporary folder (`siq-raw-<uid>-<run id>`: the driver lists its raw
root with a `spec` naming the run, which every object carries to the worker that decodes it, and removes that
folder on every node when the run ends, so nothing of a run is left on a node), or, asked for (a run's
`raw_cache`), one folder kept across runs, where a re-run finds its copies. Outside a run: `SIQ_RAW_CACHE`, else a
folder of this process, removed when it exits. The bound: a run's `raw_cache_bytes`, else `SIQ_RAW_CACHE_BYTES`
(default 8 GiB, and never less than the one object being read). A copy is named by the
object's URL, size and ETag: a changed object is never read from a stale copy, and the GET asks for that ETag
(If-Match), so an object replaced after the run listed it fails its pair, naming the URL, rather than being
decoded under the old identity. Written beside its name and renamed into place: a copy is whole or absent, also
with several actors of one node fetching at once. Evicted oldest-used first once the folder passes its bound;
a copy used within the last minute is kept (an actor of the node may be about to open it).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from objectio.paths import ObjectPath, _failure, client

DEFAULT_BYTES = 8 << 30
KEEP_RECENT_S = 60.0  # a copy used this recently is not evicted: another actor may have it about to open
CHUNK = 8 << 20


KEPT_ENV = "SIQ_RAW_CACHE"  # outside a run: a folder kept across processes
BYTES_ENV = "SIQ_RAW_CACHE_BYTES"  # outside a run: the bound


def spec(run_id: str, kept: Path | str | None, bound_bytes: int | None) -> tuple[str | None, str | None, int | None]:
    """What a run's driver gives its raw root (`raw_root(url, cache=…)`), so that every object it lists carries
    it to whichever worker decodes it: the run's id (its own folder on each node), the folder kept across runs
    instead (RunConfig `raw_cache`), the bound (`raw_cache_bytes`). Carried by the objects rather than a worker's
    environment, which a Ray reused from an earlier run of the same process would have from that run."""
    return run_id, None if kept is None else str(kept), bound_bytes


def _temp() -> Path:
    return Path(os.environ.get("TMPDIR") or "/tmp")


def run_dir(run_id: str) -> Path:
    """The run's folder of copies on this node (the node's temporary folder: TMPDIR where this process runs)."""
    return _temp() / f"siq-raw-{os.getuid()}-{run_id}"


def cache_dir(where: tuple[str | None, str | None, int | None] | None = None) -> Path:
    """The folder for copies: the kept one, else the run's, as `where` (a `spec`) says; without one,
    `SIQ_RAW_CACHE`, else a folder of this process removed when it exits."""
    run, kept, _ = where or (None, None, None)
    if kept:
        return Path(kept)
    if run:
        return run_dir(run)
    if os.environ.get(KEPT_ENV):
        return Path(os.environ[KEPT_ENV])
    return _process_dir()


_mine: Path | None = None


def _process_dir() -> Path:
    """A folder of this process's own, removed when it exits (a decoder used outside a run)."""
    global _mine
    if _mine is None or os.getpid() != int(_mine.name.rsplit("-p", 1)[-1]):
        _mine = _temp() / f"siq-raw-{os.getuid()}-p{os.getpid()}"
        atexit.register(_remove_if_mine, _mine, os.getpid())
    return _mine


def _remove_if_mine(folder: Path, pid: int) -> None:
    if os.getpid() == pid:  # a forked child inherits the handler, not the folder
        shutil.rmtree(folder, ignore_errors=True)


def remove_run(run_id: str) -> int:
    """Remove the run's folder of copies on this node (the driver runs this on every node as the run ends);
    the bytes it held."""
    folder = run_dir(run_id)
    held = 0
    with contextlib.suppress(FileNotFoundError):
        held = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    shutil.rmtree(folder, ignore_errors=True)
    return held


def bound(where: tuple[str | None, str | None, int | None] | None = None) -> int:
    return (where[2] if where else None) or int(os.environ.get(BYTES_ENV) or DEFAULT_BYTES)


def local_copy(path: ObjectPath) -> Path:
    """The object's bytes in a file on this node (fetched now, or found from an earlier fetch)."""
    size, etag = path.stat().st_size, path.stat().etag
    name = hashlib.sha256(f"{path}\0{size}\0{etag}".encode()).hexdigest()[:24] + "-" + path.name
    folder = cache_dir(path.cache)
    copy = folder / name
    if copy.is_file() and copy.stat().st_size == size:
        os.utime(copy)  # used now: the last to be evicted
        return copy
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = folder / f".{name}.{uuid.uuid4().hex[:8]}.partial"
    try:
        _fetch(path, etag, tmp)
        if tmp.stat().st_size != size:
            raise OSError(f"{path}: read {tmp.stat().st_size:,} bytes, the listing said {size:,}")
        os.replace(tmp, copy)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    evict(folder, bound(path.cache), keep=copy)
    return copy


def _fetch(path: ObjectPath, etag: str, dest: Path) -> None:
    from objectio.client import obstore, oe

    try:
        got = obstore.get(client(path.bucket), path.key, options={"if_match": etag} if etag else None)
        with open(dest, "wb") as f:
            for chunk in got.stream(min_chunk_size=CHUNK):
                f.write(chunk)
    except oe.PreconditionError:
        raise FileNotFoundError(f"{path}: changed since the run listed it (ETag {etag}); run again to read the "
                                "new object") from None
    except FileNotFoundError:  # obstore's NotFound (the copy's folder was made just before)
        raise FileNotFoundError(f"{path}: no such object") from None
    except Exception as e:
        if isinstance(e, OSError) and not isinstance(e, oe.BaseError):  # this node's disk, not the storage
            raise
        raise _failure(e, path) from None


def evict(folder: Path, limit: int, keep: Path | None = None) -> int:
    """Remove the least recently used copies until the folder holds at most `limit` bytes; the bytes removed."""
    entries = []
    for p in folder.iterdir():
        if p.name.startswith("."):
            continue
        with contextlib.suppress(FileNotFoundError):
            st = p.stat()
            entries.append((st.st_mtime, st.st_size, p))
    total = sum(e[1] for e in entries)
    removed = 0
    now = time.time()
    for mtime, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        if p == keep or now - mtime < KEEP_RECENT_S:
            continue
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            total -= size
            removed += size
    return removed


def ranged(path: ObjectPath, buffer_bytes: int = 1 << 20) -> _Ranged:
    """A seekable file object reading the object by ranged GETs of `buffer_bytes` (PyAV opens it like a file):
    what reads a video's header without fetching it all (the stream choice at planning, media/container.py);
    the profile in docs/scale.md compares it with `local_copy` for whole decodes."""
    from objectio.client import obstore

    try:
        return _Ranged(obstore.open_reader(client(path.bucket), path.key, buffer_size=buffer_bytes,
                                           size=path.stat().st_size))
    except OSError:
        raise
    except Exception as e:
        raise _failure(e, path) from None


class _Ranged(io.RawIOBase):
    """obstore's buffered reader as the binary file PyAV wants (`read` giving bytes)."""

    def __init__(self, reader: Any) -> None:
        super().__init__()
        self._reader = reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return bytes(self._reader.read(None if size is None or size < 0 else size))

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._reader.seek(offset, whence)

    def tell(self) -> int:
        return self._reader.tell()

    def close(self) -> None:
        if not self.closed:
            self._reader.close()
        super().close()
