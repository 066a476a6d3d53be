"""The contract every storage backend of the engine keeps (zarr-python 3's `zarr.abc.store.Store` is the model):
whole objects under `/`-separated keys relative to the store's root, written whole or not at all, and the two
conditional writes the commit protocol needs where there is no rename and no append (create only if absent,
replace only if unchanged since a version was read). Where a local folder and object storage truly differ in
how the writer commits, the difference is an operation here too, not a branch above: the one-writer `lock`, a
part placed whole (`place`, `sweep_staged`) and the index log as its writer sees it (`log_*`, conditional on a
`LogEnd`). One file per backend implements it (local.py: a POSIX folder; objects.py: object storage through
obstore, its log by log.py's conditional writes); tests/store/test_backends.py is the one conformance suite
both pass. Code above this interface (the writer, store/writer.py, and its repairs, store/repair.py) names
keys, never paths or URLs, and never learns which backend it is on."""

from __future__ import annotations

import abc
import contextlib
import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, NamedTuple


class ObjectInfo(NamedTuple):
    """What a backend knows of a stored object without reading it: its key, size in bytes and version (an
    ETag on object storage, a stamp of size, mtime and inode locally): the token a conditional write names."""

    key: str
    size: int
    version: str


class LogEnd(NamedTuple):
    """Where the writer holding the store's lock last saw an index log's end: the backend's name for the log's
    current generation (opaque above the backend: "" locally, where the flock alone keeps other writers out)
    and the bytes published in it. The writer's appends and replacements are conditional on it."""

    generation: str
    length: int


class Retired(NamedTuple):
    """A replaced generation of an index log (a compaction's old log), as the writer finds it: `token` for
    `log_drop`, its bytes (None when they cannot be read: then which parts it names is unknown), and whether a
    reader still holds it (a pin: its parts must stay)."""

    token: str
    data: bytes | None
    held: bool


class BackendError(RuntimeError):
    """The storage itself cannot be used (no such bucket, no credentials, access denied, unreachable
    endpoint): one line naming the store's URL and what to set. The CLI exits 2 on it, before any work."""


class Conflict(RuntimeError):
    """A conditional write lost: another writer created the key first, or changed it since its version was
    read. Nothing was written."""


class Backend(abc.ABC):
    """A store's storage: every operation takes keys relative to the store's root (`""` is the root)."""

    #: where the store is, for messages: a path or a URL, never a credential
    url: str

    def where(self, key: str) -> str:
        """A key as a user would name it: the store's URL or path joined with it."""
        return f"{self.url.rstrip('/')}/{key}" if key else self.url

    def describe(self, key: str) -> Any:
        """Where a key is, as messages, reports and checks name it (`where`'s text): its URL here, and the file's
        Path in a local folder (callers there compare it with paths they hold, and may open it). The one place
        that answers "a path or a URL", so that no code above the interface asks which backend it is on."""
        return self.where(key)

    # ---- reading ----

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object; FileNotFoundError naming `where(key)` when there is none."""

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes | None]:
        """key -> the whole object (`get`), None where there is none."""
        out: dict[str, bytes | None] = {}
        for key in keys:
            try:
                out[key] = self.get(key)
            except FileNotFoundError:
                out[key] = None
        return out

    @abc.abstractmethod
    def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (fewer at the object's end)."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size and version without reading; FileNotFoundError when there is no such object."""

    def exists(self, key: str) -> bool:
        try:
            self.head(key)
        except FileNotFoundError:
            return False
        return True

    def sizes(self, prefix: str, names: Iterable[str]) -> dict[str, int | None]:
        """name -> the size of the object `prefix/name` as `head` gives it, None where there is none. Object
        storage answers with one listing of `prefix` instead of a request per name (a part's quick check asks
        for every file of the part: ~20 requests of a few ms each against one)."""
        out: dict[str, int | None] = {}
        for name in names:
            try:
                out[name] = self.head(join(prefix, name)).size
            except FileNotFoundError:
                out[name] = None
        return out

    def sha256(self, key: str) -> str:
        """The SHA-256 of the object's bytes (hex)."""
        return hashlib.sha256(self.get(key)).hexdigest()

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with `prefix/` (all of them for ""), at any depth, sorted by key."""

    @abc.abstractmethod
    def children(self, prefix: str = "") -> list[str]:
        """The names one level below `prefix` (objects and folders alike), sorted; [] where there is nothing."""

    # ---- writing ----

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Write `data` as the whole object: a reader sees the old object or the new one, never a part."""

    def put_many(self, objects: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        """`put` each of `objects` (key -> bytes, or (key, bytes) pairs: taken as they come, so a producer may
        still be making the next while the first is sent); every one written when this returns. On a failure
        (the producer's too) the first error is raised once no write is in flight any more (some objects may be
        written: the caller removes them), so nothing lands after the caller has cleaned up."""
        for key, data in objects.items() if isinstance(objects, Mapping) else objects:
            self.put(key, data)

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        """Create the object only if there is none (S3's If-None-Match: *): of writers racing for one key
        exactly one wins; the others get Conflict and wrote nothing."""

    @abc.abstractmethod
    def put_if_version(self, key: str, data: bytes, version: str) -> ObjectInfo:
        """Replace the object only if it is still at `version` (S3's If-Match: ETag); Conflict when it changed
        or was deleted since."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object (no error when there is none)."""

    def delete_prefix(self, prefix: str) -> None:
        """Remove every object under `prefix/` (none there: no error); OSError or BackendError when one could
        not be removed."""
        for info in self.list(prefix):
            self.delete(info.key)

    # ---- an index log: appended to, pinned by readers (a snapshot is a log's length) ----

    @abc.abstractmethod
    def pin_log(self, key: str) -> Pinned | None:
        """The log at `key` as it is now, held for a reader: its later records are never read through the pin,
        and (locally) the pin is a lease that keeps a compaction from removing the parts it names. None when
        there is no log."""

    def read_log(self, key: str, limit: int | None = None) -> bytes | None:
        """The current log's bytes (the first `limit` of them); None when there is no log."""
        pin = self.pin_log(key)
        if pin is None:
            return None
        try:
            return bytes(pin.read(limit))
        finally:
            pin.close()

    # ---- the index log as its one writer sees it (the caller holds the store's lock) ----
    # Where the backends truly differ: locally a log is appended to in place and replaced by a rename (the old
    # file kept under a hard link while readers hold it); on object storage it is segments created by
    # create-if-absent writes and generations switched by a replace-if-unchanged of its head (log.py).

    @abc.abstractmethod
    def log_read(self, key: str) -> tuple[str, bytes] | None:
        """The log's current generation (its name, as `LogEnd.generation`) and published bytes; None when
        there is no log. OSError when it exists but cannot be read."""

    @abc.abstractmethod
    def log_append(self, key: str, end: LogEnd, data: bytes) -> int:
        """Publish `data` at `end.length` of generation `end.generation`, durable when this returns; the log's
        new length. Anything after `end.length` that was never published (a torn line a killed append left on
        a disk) is cut first; a failed append leaves the log as it was. Conflict, having written nothing, when
        another writer published there first or the generation was replaced (object storage: its lease was
        taken over; a local log is written only under the flock, which keeps any second writer out)."""

    @abc.abstractmethod
    def log_replace(self, key: str, data: bytes, expect: LogEnd | None, retire: bool) -> str:
        """Publish `data` as the log's new generation, whole and durable; its name. `expect`: the end of the
        generation this writer read and rewrote (None: it found no log). `retire`: the old generation stays
        readable for the readers that hold it, and `log_retired` lists it (a compaction's); else it goes (a
        rebuild replacing a damaged log). Conflict, the log as it was, when it changed since `expect`. Another
        failure may come after the switch (a folder's fsync): the caller reads the log to know."""

    @abc.abstractmethod
    def log_retired(self, key: str) -> AbstractContextManager[list[Retired]]:
        """The log's replaced generations (`retire=True`), each one that no reader holds kept so until the
        block ends (locally: an exclusive flock, which a reader's snapshot, a shared one, cannot then take)."""

    @abc.abstractmethod
    def log_drop(self, key: str, token: str) -> None:
        """Remove a replaced generation (`Retired.token`), once the parts only it names are gone."""

    # ---- a tree of files (a part) placed whole ----

    def place(self, key: str, files: Iterable[tuple[str, bytes]], last: str, finish: Callable[[], bytes]) -> None:
        """The tree `files` ((relative key, bytes), taken as they come: a producer may still be making the next)
        as the objects under `key/`, then its file `last` (a part's own zarr.json, the mark of a whole part)
        with the bytes `finish()` makes once every other file is written; durable when this returns. On an
        error nothing of it is left. Here: uploaded as they come (`put_many`), `last` after all of them, so a
        writer killed midway leaves a tree without `last` (never read as data; the next writer removes it).
        The local backend writes the tree in `.staging/` and renames it into place whole instead."""
        try:
            self.put_many((join(key, rel), data) for rel, data in files)
            self.put(join(key, last), finish())
        except BaseException:
            with contextlib.suppress(OSError, RuntimeError):
                self.delete_prefix(key)
            raise

    def sweep_staged(self) -> int:
        """Remove what killed writers' `place` calls left outside the store's tree (the caller holds the
        store's lock); how many trees. Here there is nothing: a temporary folder is its own process's, and a
        tree cut short inside the store lacks `last` (the writer finds it with the part folders)."""
        return 0

    # ---- what the layers above need besides bytes ----

    @abc.abstractmethod
    def zarr_store(self, prefix: str = "", read_only: bool = False) -> Any:
        """A zarr-python 3 store rooted at `prefix`, over the same storage (parts are plain Zarr groups)."""

    @abc.abstractmethod
    def lock(self, key: str, holder: str) -> AbstractContextManager[Any]:
        """The store's one-writer lock at `key`, held until the context ends: a flock locally, a lease object
        on object storage (store/backends/lease.py). Raises `Locked` naming the holder when another has it."""

    @abc.abstractmethod
    def lock_held(self, key: str) -> bool:
        """Whether a writer holds the store's lock at `key` now (`lock`'s): locally a flock someone has, on
        object storage a lease neither released nor expired. A reader asks it before taking parts no line of
        its snapshot names for damage (store/reader.py `_newer_parts`): a writer may be committing them."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise BackendError when the storage cannot be used at all (before any work is done)."""


class Pinned(abc.ABC):
    """A reader's hold on one log: its `length` when pinned, and its bytes up to there."""

    length: int

    @abc.abstractmethod
    def read(self, limit: int | None = None) -> bytes | bytearray:
        """The pinned bytes (the first `limit` of them)."""

    @abc.abstractmethod
    def unchanged(self) -> bool:
        """Whether the log is still what this pin holds: the same generation (locally the same file) with nothing
        published after `length`, so no later record can be read through the log's key than through the pin."""

    @abc.abstractmethod
    def close(self) -> None:
        """Let the hold go (a compaction may then remove what only this reader still read)."""


class Locked(RuntimeError):
    """Another writer holds the store's lock; the message names it (holder, host, and on object storage when
    its lease expires)."""


def join(*keys: str) -> str:
    """Keys joined with `/`, empty ones skipped."""
    return "/".join(k.strip("/") for k in keys if k and k.strip("/"))


# Requests a backend retried after a transient failure, by kind, in this process: "throttled" (503 SlowDown,
# 429), "dropped" (a connection cut or timed out mid-request), "server" (another 5xx), "connect" (no
# connection at all). A run reports the difference over its own time (`RunReport.storage_retries`).
RETRY_KINDS = ("throttled", "dropped", "server", "connect")
_retried: Counter[str] = Counter()
_retried_lock = threading.Lock()


def count_retry(kind: str) -> None:
    with _retried_lock:
        _retried[kind] += 1


def retries() -> dict[str, int]:
    """This process's retried requests so far, by kind (every kind, 0 where none)."""
    with _retried_lock:
        return {k: _retried[k] for k in RETRY_KINDS}


def retries_since(before: dict[str, int]) -> dict[str, int]:
    """The retried requests since `before` (a `retries()`), the kinds with none left out."""
    now = retries()
    return {k: now[k] - before.get(k, 0) for k in RETRY_KINDS if now[k] - before.get(k, 0)}
