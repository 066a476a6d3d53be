"""A reader's hold on one generation of an index log where there is no flock (object storage): a pin object
`<log>.pins/<generation>/<random>` naming its host, pid and expiry, written when the reader opens the log,
renewed in the background while it stays open and removed when it closes. A writer removes the parts of a
replaced generation (a compaction's old parts) only once no pin of that generation is alive
(store/repair.py `release_retired`), as a local writer waits for the readers' shared flocks on
a retired log. A reader killed without closing leaves its pin; it stops holding anything `TTL_S` after its
last renewal. Written against the backend contract alone."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
import weakref

from store.backends.base import Backend

log = logging.getLogger(__name__)

# long next to a renewal (every TTL_S / 3) and to any clock skew between a reader's machine and a writer's: a
# killed reader only delays the removal of the parts it read by this much
TTL_S = 900.0


def prefix(key: str, generation: str) -> str:
    return f"{key}.pins/{generation}"


class Pin:
    """This process's hold on `generation` of the log at `key`, until `close`."""

    def __init__(self, backend: Backend, key: str, generation: str) -> None:
        self.backend, self.generation = backend, generation
        self.key = f"{prefix(key, generation)}/{uuid.uuid4().hex}"
        self.pid = os.getpid()
        self.renew()
        _keeper.add(self)

    def renew(self, now: float | None = None) -> None:
        expires = (time.time() if now is None else now) + TTL_S
        self.backend.put(self.key, json.dumps({"host": socket.gethostname(), "pid": self.pid,
                                               "expires": expires}, sort_keys=True).encode())

    def close(self) -> None:
        _keeper.discard(self)
        if os.getpid() == self.pid:  # a forked child closing its copy leaves its parent's hold alone
            with contextlib.suppress(OSError, RuntimeError):
                self.backend.delete(self.key)


def alive(backend: Backend, key: str, generation: str, now: float | None = None) -> bool:
    """Whether a reader holds `generation` (a pin of it not past its expiry)."""
    now = time.time() if now is None else now
    for info in backend.list(prefix(key, generation)):
        try:
            expires = float(json.loads(backend.get(info.key)).get("expires") or 0)
        except FileNotFoundError:  # closed meanwhile
            continue
        except (ValueError, TypeError, AttributeError):  # not a pin this code wrote: held, to be safe
            return True
        if expires > now:
            return True
    return False


def clear(backend: Backend, key: str, generation: str) -> None:
    """Remove a released generation's pins (expired ones: live ones keep it)."""
    backend.delete_prefix(prefix(key, generation))


class _Keeper:
    """One thread per process renews every open pin."""

    def __init__(self) -> None:
        self.pins: weakref.WeakSet[Pin] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, pin: Pin) -> None:
        with self.lock:
            self.pins.add(pin)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="store-pins", daemon=True)
                self.thread.start()

    def discard(self, pin: Pin) -> None:
        with self.lock:
            self.pins.discard(pin)

    def _run(self) -> None:
        while True:
            time.sleep(TTL_S / 3)
            with self.lock:
                pins = list(self.pins)
            for pin in pins:
                try:
                    pin.renew()
                except Exception as e:  # the storage failing for a while: the next round tries again
                    log.warning("%s: could not renew a reader's hold on it (%s)", pin.backend.where(pin.key), e)

    def forked(self) -> None:
        """In a forked child: the pins are its parent's to renew and close; none is this process's."""
        self.pins, self.lock, self.thread = weakref.WeakSet(), threading.Lock(), None


_keeper = _Keeper()
os.register_at_fork(after_in_child=_keeper.forked)
