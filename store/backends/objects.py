"""The object-storage backend (s3://, gs://, az://) through obstore, the Rust `object_store` that zarr-python
3's ObjectStore wraps: chosen over s3fs by measurement (docs/design.md, "Object storage"), reached through
objectio/ (the one package that imports it; an import-linter contract), which also gives the raw data read from a
bucket the same credentials, endpoint, retry policy and error lines. Objects are written whole by nature; the
conditional writes are S3's If-None-Match: * and If-Match: ETag. No message made here holds a credential: they
name the URL and the variable to set (objectio/client.py)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import zarr

from objectio.client import CREDENTIALS as _CREDENTIALS
from objectio.client import ENDPOINT as _ENDPOINT
from objectio.client import NO_RETRY as _NO_RETRY
from objectio.client import OBSTORE_RETRY as _OBSTORE_RETRY
from objectio.client import RETRY, describe, from_url, obstore, oe, unsigned
from objectio.client import first_line as _first_line
from objectio.client import options as _options
from objectio.client import status as _status
from objectio.client import transient as _transient
from store.backends import lease, log, pins
from store.backends.base import Backend, BackendError, Conflict, ObjectInfo, Pinned, count_retry, join

log_ = logging.getLogger(__name__)  # (`log` is the index log's module)

THREADS = 8  # requests in flight at once (`put_many`, `get_many`)


def _info(meta: dict[str, Any], key: str) -> ObjectInfo:
    return ObjectInfo(key, int(meta.get("size") or 0), str(meta.get("e_tag") or meta.get("version") or ""))


# The process whose first store started obstore's runtime (tokio's threads). A process forked from it has
# the runtime but none of its threads, and its first request waits forever (or crashes): what a PyTorch
# DataLoader's workers are under Linux's default start method. So a forked process is refused, in one line
# that says what to use instead, before it touches obstore.
_RUNTIME_PID: int | None = None


def _not_forked(url: str) -> None:
    global _RUNTIME_PID
    if _RUNTIME_PID is None:
        _RUNTIME_PID = os.getpid()
    elif os.getpid() != _RUNTIME_PID:
        raise BackendError(f"{url}: object storage cannot be used in a process forked from one that used it "
                           "(the storage library's threads do not survive a fork); start the process with "
                           "spawn or forkserver, e.g. DataLoader(..., multiprocessing_context='forkserver')")


class ObjectBackend(log.ConditionalLog, Backend):  # the index log by conditional writes (log.py)
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        _not_forked(self.url)
        # S3 with nothing to sign with: a refusal then means "no credentials", not "these may not"
        self._unsigned = unsigned(url)
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None  # `put_many`'s and `get_many`'s, made on first use
        try:
            self._store = from_url(self.url, **_options(self.url, _NO_RETRY))
        except (oe.BaseError, ValueError) as e:
            raise BackendError(f"{self.url}: cannot open this object store ({_first_line(e)}); "
                               f"{_CREDENTIALS}, {_ENDPOINT}") from None

    def _error(self, e: Exception, key: str, tries: int = 1) -> Exception:
        """One line naming the URL and what to set, for the storage failing as a whole or a request failing
        however often it was tried; FileNotFoundError for a missing object; the others as they are."""
        where = self.where(key)
        kind, times = _transient(e), f"{tries} time(s), with backoff" if tries > 1 else "once"
        if kind == "throttled":
            return BackendError(f"{where}: the storage answered 503 SlowDown (throttled) to every try ({times}); "
                                "write less at once or ask for a higher request rate")
        if kind == "dropped":
            return BackendError(f"{where}: the connection was dropped mid-request on every try ({times}); "
                                f"{_ENDPOINT}")
        if kind == "server":
            return BackendError(f"{where}: the storage answered HTTP {_status(str(e)) or '5xx'} to every try ({times})")
        found = describe(e, where, self.url, self._unsigned)  # no bucket, no credentials, denied, unreachable
        if found is None:
            return e
        what, line = found
        return FileNotFoundError(line) if what == "missing" else BackendError(line)

    def _retrying(self, key: str, attempt: Callable[[], Any]) -> Any:
        """`attempt()`, tried again after a passing failure (RETRY; each retry counted for the run report);
        a failure that stays, or is not passing, as `_error` says it. `attempt` does the whole request, the
        reading of its answer included: a download cut midway is tried again whole, never returned short."""
        t0, tries = time.monotonic(), 0
        while True:
            tries += 1
            try:
                return attempt()
            except (oe.BaseError, OSError) as e:
                kind = _transient(e)
                limit = RETRY.connect_attempts if kind == "connect" else RETRY.attempts
                if kind is None or tries >= limit or time.monotonic() - t0 > RETRY.deadline_s:
                    raise self._error(e, key, tries) from None
                count_retry(kind)
                time.sleep(RETRY.delay(tries))

    def _call(self, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self._retrying(key, lambda: fn(self._store, *args, **kwargs))

    def get(self, key: str) -> bytes:
        return self._retrying(key, lambda: bytes(obstore.get(self._store, key).bytes()))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        size = self.head(key).size
        length = max(0, min(length, size - start))
        if length == 0:
            return b""
        return bytes(self._call(key, obstore.get_range, key, start=start, length=length))

    def head(self, key: str) -> ObjectInfo:
        return _info(self._call(key, obstore.head, key), key)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        top = f"{prefix.strip('/')}/" if prefix.strip("/") else None
        return sorted(self._retrying(prefix, lambda: [_info(m, m["path"]) for chunk in obstore.list(self._store, top)
                                                      for m in chunk]))

    def children(self, prefix: str = "") -> list[str]:
        top = f"{prefix.strip('/')}/" if prefix.strip("/") else None
        got = self._call(prefix, obstore.list_with_delimiter, top)
        names = {p.rstrip("/").rsplit("/", 1)[-1] for p in got["common_prefixes"]}
        names |= {m["path"].rsplit("/", 1)[-1] for m in got["objects"]}
        return sorted(names)

    def put(self, key: str, data: bytes) -> ObjectInfo:
        got = self._call(key, obstore.put, key, data)
        return ObjectInfo(key, len(data), str(got.get("e_tag") or got.get("version") or ""))

    def put_many(self, objects: Mapping[str, bytes] | Iterable[tuple[str, bytes]]) -> None:
        """The objects written THREADS at a time, each sent as soon as it comes: a part is ~17 small objects,
        and a round trip to a real endpoint (tens of ms) dwarfs sending one. Each is retried on its own
        (`put`); the first failure is raised after the others have finished or were never started."""
        pool, futures = self._pool(), []
        try:
            for key, data in objects.items() if isinstance(objects, Mapping) else objects:
                futures.append(pool.submit(self.put, key, data))
        except BaseException:  # the producer failed: nothing more starts, what has ends first
            self._cancel(futures)
            raise
        self._all(futures)

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes | None]:
        """The objects read THREADS at a time (a reader's quick checks ask for every array's zarr.json of every
        part of a feature: a round trip each); the first failure but a missing object is raised once none is
        in flight."""
        keys = list(keys)
        if len(keys) < 2:
            return super().get_many(keys)

        def one(key: str) -> bytes | None:
            try:
                return self.get(key)
            except FileNotFoundError:
                return None

        return dict(zip(keys, self._all([self._pool().submit(one, key) for key in keys]), strict=True))

    def _all(self, futures: list[concurrent.futures.Future]) -> list[Any]:
        """The futures' results, in order, once every one is done (or cancelled before it started)."""
        try:
            concurrent.futures.wait(futures)
        except BaseException:  # interrupted
            self._cancel(futures)
            raise
        return [f.result() for f in futures]

    @staticmethod
    def _cancel(futures: list[concurrent.futures.Future]) -> None:
        """What has not started never will; what has, ends first."""
        for f in futures:
            f.cancel()
        concurrent.futures.wait(futures)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(THREADS, thread_name_prefix="siq-objects")
        return self._threads

    def _put_conditional(self, key: str, data: bytes, mode: Any, why: str) -> ObjectInfo:
        tries = 0

        def attempt() -> ObjectInfo:
            nonlocal tries
            tries += 1
            try:
                got = obstore.put(self._store, key, data, mode=mode)
            except (oe.AlreadyExistsError, oe.PreconditionError, oe.NotFoundError, FileNotFoundError,
                    FileExistsError) as e:
                lost = e
            except oe.GenericError as e:
                if "PreconditionFailed" not in str(e) and _status(str(e)) != 412:
                    raise
                lost = e
            else:
                return ObjectInfo(key, len(data), str(got.get("e_tag") or got.get("version") or ""))
            # Refused after a try whose answer never came: that try may have been applied, and the refusal be
            # of this very write. The object holding exactly these bytes says so (a lease record names its
            # holder, pid and expiry; a log segment the unique names of its parts): this writer won.
            if tries > 1 and not isinstance(lost, FileNotFoundError | oe.NotFoundError):
                with contextlib.suppress(FileNotFoundError):
                    if self.get(key) == data:
                        return self.head(key)
            raise Conflict(f"{self.where(key)}: {why}") from None

        return self._retrying(key, attempt)

    def put_if_absent(self, key: str, data: bytes) -> ObjectInfo:
        return self._put_conditional(key, data, "create", "already exists")

    def put_if_version(self, key: str, data: bytes, version: str) -> ObjectInfo:
        return self._put_conditional(key, data, {"e_tag": version}, f"changed since version {version}")

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._call(key, obstore.delete, key)

    def sizes(self, prefix: str, names: Iterable[str]) -> dict[str, int | None]:
        """One listing of `prefix` (a request per 1,000 objects), not a HEAD per name."""
        listed = {info.key: info.size for info in self.list(prefix)}
        return {name: listed.get(join(prefix, name)) for name in names}

    def delete_prefix(self, prefix: str) -> None:
        keys = [i.key for i in self.list(prefix)]
        for k in range(0, len(keys), 1000):
            self._call(prefix, obstore.delete, keys[k:k + 1000])

    def zarr_store(self, prefix: str = "", read_only: bool = False) -> Any:
        sub = from_url(f"{self.url}/{prefix.strip('/')}" if prefix.strip("/") else self.url,
                       **_options(self.url, _OBSTORE_RETRY))
        return zarr.storage.ObjectStore(sub, read_only=read_only)

    @contextlib.contextmanager
    def lock(self, key: str, holder: str) -> Iterator[lease.Lease]:
        with lease.held(self, key, holder) as got:
            yield got

    def pin_log(self, key: str) -> Pinned | None:
        """The log's segments read now (store/backends/log.py): a snapshot in memory, its generation held by a
        pin (store/backends/pins.py) until it is closed, so that a compaction keeps the parts it names. The
        pin is written before the head is read again: a compaction that replaced the head before the pin
        existed is seen then (and this generation let go), one that replaces it later sees the pin."""
        for _ in range(5):
            found = log.head(self, key)
            if found is None:
                return None
            try:
                pin: pins.Pin | None = pins.Pin(self, key, found[0])
            except BackendError as e:  # read-only credentials: the snapshot is read, but not held
                pin = None
                if self.url not in _UNHELD:
                    _UNHELD.add(self.url)
                    log_.warning("%s: cannot hold this reader's snapshot (%s); a compaction meanwhile may remove "
                                 "the parts it reads (then open the store again)", self.url, e)
            try:
                again = json.loads(self.get(key))["generation"]
                if again == found[0]:
                    snap = log.read(self, key, found[0])
                    if snap is None or not snap.data:  # a generation without its first segment: no log
                        _close(pin)
                        return None
                    return _Snapshot(snap.data, pin, self, key, found[0])
            except FileNotFoundError:
                _close(pin)
                return None
            except BaseException:
                _close(pin)
                raise
            _close(pin)
        raise RuntimeError(f"{self.where(key)}: replaced by another generation each time it was read (5 times); "
                           "open the store again")

    def read_log(self, key: str, limit: int | None = None) -> bytes | None:
        """The current log's bytes, read once: nothing is held afterwards, so no pin is needed."""
        snap = log.read(self, key)
        if snap is None or not snap.data:
            return None
        return snap.data if limit is None else snap.data[:limit]

    def lock_held(self, key: str) -> bool:
        return lease.alive(self, key)

    def check(self) -> None:
        """One request that fails as the storage would (no bucket, no credentials, denied, unreachable)."""
        self._call("", obstore.list_with_delimiter, None)


_UNHELD: set[str] = set()  # stores whose readers could not write a pin here (said once)


def _close(pin: pins.Pin | None) -> None:
    if pin is not None:
        pin.close()


class _Snapshot(Pinned):
    def __init__(self, data: bytes, pin: pins.Pin | None, backend: Backend, key: str, generation: str) -> None:
        self.data, self.length, self.pin = data, len(data), pin
        self.backend, self.key, self.generation = backend, key, generation

    def unchanged(self) -> bool:
        """The head still names this generation and no segment was created at its end (log.py)."""
        return log.unchanged(self.backend, self.key, self.generation, self.length)

    def read(self, limit: int | None = None) -> bytes:
        return self.data if limit is None else self.data[:limit]

    def close(self) -> None:
        _close(self.pin)
