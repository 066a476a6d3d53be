"""The one-writer lock where there is no flock (object storage): a lease object naming its holder, host and
expiry, taken by a conditional write, renewed by another before it expires, and taken over (said so, with
the old holder's name) once a dead holder's expiry has passed, or at once when the holder is a process of
this very machine that is gone (a run killed with kill -9 and started again). A holder that cannot renew in time (stalled
past its expiry) loses the lease: `Lease.lost` says so, and its next commit fails on its own conditional
write rather than overwrite the new holder's. Written against the backend contract alone."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from store.backends.base import Backend, Conflict, Locked

log = logging.getLogger(__name__)

TTL_S = 60.0  # a killed writer's store is free again this long after its last renewal


@dataclass
class Lease:
    backend: Backend
    key: str
    holder: str
    ttl_s: float = TTL_S
    version: str = ""
    lost: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)

    def record(self, expires: float) -> bytes:
        return json.dumps({"holder": self.holder, "host": socket.gethostname(), "pid": os.getpid(),
                           "machine": _machine(), "expires": expires}, sort_keys=True).encode()

    def take(self, now: float | None = None) -> None:
        """Hold the lease, or raise Locked naming whoever holds it and until when."""
        now = time.time() if now is None else now
        data = self.record(now + self.ttl_s)
        try:
            self.version = self.backend.put_if_absent(self.key, data).version
            return
        except Conflict:
            pass
        try:
            old, info = json.loads(self.backend.get(self.key)), self.backend.head(self.key)
        except (FileNotFoundError, ValueError):  # released and removed meanwhile, or not a lease: try once more
            old, info = {}, None
        if info is None:
            try:
                self.version = self.backend.put_if_absent(self.key, data).version
                return
            except Conflict:
                raise Locked(f"{self.backend.url}: another run took this store's lease just now; "
                             "wait for it to finish or write to another store") from None
        expires = float(old.get("expires") or 0)
        who = _who(old)
        gone = expires > now and _gone(old)
        if expires > now and not gone:
            raise Locked(f"{self.backend.url}: another run is writing to this store ({who}, lease until "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(expires))}); wait for it to "
                         "finish or write to another store")
        try:
            self.version = self.backend.put_if_version(self.key, data, info.version).version
        except Conflict:
            raise Locked(f"{self.backend.url}: another run took over this store's expired lease just now; "
                         "wait for it to finish or write to another store") from None
        if gone:
            log.warning("%s: took over the write lease of %s, a process of this machine that is gone (that run "
                        "was killed)", self.backend.url, who)
        elif not old.get("released"):
            log.warning("%s: took over the write lease of %s, which expired %.0f s ago without being released "
                        "(that run was killed or stalled)", self.backend.url, who, now - expires)

    def renew(self, now: float | None = None) -> bool:
        """Extend the lease; False (and `lost`) when another holder has it now."""
        now = time.time() if now is None else now
        try:
            self.version = self.backend.put_if_version(self.key, self.record(now + self.ttl_s), self.version).version
        except (Conflict, FileNotFoundError):
            self.lost = True
        return not self.lost

    def release(self) -> None:
        """Mark the lease free (expired and released): the next taker says nothing of it."""
        self._stop.set()
        if self.lost or not self.version:
            return
        rec = json.loads(self.record(0.0))
        with contextlib.suppress(Conflict, FileNotFoundError, OSError):
            self.version = self.backend.put_if_version(
                self.key, json.dumps({**rec, "released": True}, sort_keys=True).encode(), self.version).version

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if not self.renew():
                    log.error("%s: this run lost its write lease (it could not renew it in time and another "
                              "run took it over); its next commit will be refused", self.backend.url)
                    return
            except Exception as e:  # the storage failing for a while: try again at the next tick
                log.warning("%s: could not renew the write lease (%s); retrying", self.backend.url, e)


def _who(record: dict) -> str:
    """The holder as a person finds it: its pid and host, and its own name where that says more."""
    where = f"pid {record.get('pid', '?')} on {record.get('host', '?')}"
    holder = str(record.get("holder") or "")
    return holder if where in holder else f"{holder} ({where})" if holder else where


def _machine() -> str:
    """This running system and pid namespace (boot id, /proc/self/ns/pid): where a lease's pid names a process
    that can be looked up. Another container on the same host, or the same host after a reboot, differs."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f"{f.read().strip()}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""  # not Linux: a holder's liveness cannot be known, its lease waits for its expiry


def _gone(record: dict) -> bool:
    """Whether the lease's holder is a process of this machine that no longer exists. A pid taken again by
    another process reads as alive: the lease then waits for its expiry, as any other holder's."""
    if not record.get("machine") or record["machine"] != _machine() or not isinstance(record.get("pid"), int):
        return False
    try:
        os.kill(record["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, under another user
        return False
    return False


def alive(backend: Backend, key: str, now: float | None = None) -> bool:
    """Whether a writer holds the lease at `key` now: there, not released, not past its expiry, and its
    holder not a process of this machine that is gone (what `take` would take over at once)."""
    try:
        record = json.loads(backend.get(key))
    except FileNotFoundError:
        return False
    except ValueError:  # not a lease this code wrote: held, to be safe
        return True
    if not isinstance(record, dict):
        return True
    expires = float(record.get("expires") or 0)  # a released lease expires at 0
    return expires > (time.time() if now is None else now) and not _gone(record)


@contextlib.contextmanager
def held(backend: Backend, key: str, holder: str, ttl_s: float = TTL_S) -> Iterator[Lease]:
    """The lease on `key`, renewed in the background until the block ends, then released."""
    got = Lease(backend, key, holder, ttl_s)
    got.take()
    keeper = threading.Thread(target=got._keep, name="store-lease", daemon=True)
    keeper.start()
    try:
        yield got
    finally:
        got.release()
        keeper.join(timeout=5)
