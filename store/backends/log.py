"""An append-only log where there is no append and no rename (object storage), on the backend contract alone:
the commit protocol of docs/design.md ("On object storage"). A log `<key>` is a head object naming its current
generation and, under `<key>.d/<generation>/`, segments named by the byte offset they start at. Publishing
records is creating the segment at the log's current end with a create-if-absent write, so of two writers
racing for one position (one sequence number) exactly one wins and the other learns it and wrote nothing. A
new generation (a compaction's or a rebuild's whole new log) is written as its first segment, the old
generation sealed by an empty segment at its end (created the same way: a writer still appending to it loses
from then on) and the head replaced if unchanged since it was read. A reader's snapshot is a generation and
a byte length, as a local log's is an open file and its length."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import NamedTuple

from store.backends import pins
from store.backends.base import Backend, Conflict, LogEnd, Retired

_WIDTH = 16  # digits of a segment's offset: names sort as numbers


class Snapshot(NamedTuple):
    """A log as read: its generation, the bytes of its published segments, and whether it is sealed."""

    generation: str
    data: bytes
    sealed: bool = False


def _segments(key: str, generation: str) -> str:
    return f"{key}.d/{generation}"


def _segment(key: str, generation: str, at: int) -> str:
    return f"{_segments(key, generation)}/{at:0{_WIDTH}d}"


def head(backend: Backend, key: str) -> tuple[str, str] | None:
    """(generation, the head's version) of the log, or None when there is no log."""
    try:
        data = backend.get(key)
        version = backend.head(key).version
    except FileNotFoundError:
        return None
    return str(json.loads(data)["generation"]), version


def read(backend: Backend, key: str, generation: str | None = None) -> Snapshot | None:
    """The log's current generation (or `generation`) as published: its segments joined in offset order, up
    to the first gap or seal. None when there is no log."""
    if generation is None:
        found = head(backend, key)
        if found is None:
            return None
        generation = found[0]
    chain, length, sealed = [], 0, False
    for info in backend.list(_segments(key, generation)):
        at = int(info.key.rsplit("/", 1)[-1])
        if at != length:  # the chain ends where no segment starts at its end
            break
        if info.size == 0:
            sealed = True
            break
        chain.append(info.key)
        length += info.size
    got = backend.get_many(chain)  # several at a time: a log has a segment per commit
    if any(got[k] is None for k in chain):  # a listed segment is never removed while its generation is current
        raise FileNotFoundError(f"{backend.where(_segments(key, generation))}: a segment listed is gone; "
                                "the generation was replaced meanwhile: open the store again")
    return Snapshot(generation, b"".join(got[k] or b"" for k in chain), sealed)


def unchanged(backend: Backend, key: str, generation: str, length: int) -> bool:
    """Whether the log is still `generation` published up to `length`: its head names that generation and no
    segment starts at `length` (an append there would, and so would the seal a replacement writes before it
    switches the head)."""
    found = head(backend, key)
    return found is not None and found[0] == generation and not backend.exists(_segment(key, generation, length))


def append(backend: Backend, key: str, generation: str, at: int, data: bytes) -> int:
    """Publish `data` at byte `at` of the generation (its end as this writer knows it); the new length.
    Conflict, having written nothing, when another writer published there first or the generation was sealed."""
    if not data:
        return at
    backend.put_if_absent(_segment(key, generation, at), data)
    return at + len(data)


def replace(backend: Backend, key: str, data: bytes, expect: tuple[str, int] | None) -> str:
    """Publish `data` as a new generation of the log; its name. `expect`: the (generation, length) this writer
    read and rewrote (None: there was no log). Conflict, the log as it was, when it changed meanwhile: a
    record appended after that length (the new generation would drop it) or another new generation."""
    found = head(backend, key)
    if (found and found[0]) != (expect and expect[0]):
        raise Conflict(f"{backend.where(key)}: replaced by another writer (now generation {found and found[0]})")
    generation = uuid.uuid4().hex
    record = json.dumps({"generation": generation}).encode()
    backend.put_if_absent(_segment(key, generation, 0), data)
    try:
        if found is None or expect is None:
            backend.put_if_absent(key, record)
            return generation
        # the old generation closed where this writer read it: an append there since, or still to come, loses
        old = read(backend, key, found[0])
        if old is None or not old.sealed or len(old.data) != expect[1]:
            backend.put_if_absent(_segment(key, found[0], expect[1]), b"")
        backend.put_if_version(key, record, found[1])
    except BaseException:
        remove_generation(backend, key, generation)
        raise
    return generation


def remove_generation(backend: Backend, key: str, generation: str) -> None:
    """Delete a replaced generation's segments (once no reader holds a snapshot of it)."""
    backend.delete_prefix(_segments(key, generation))


def generations(backend: Backend, key: str) -> list[str]:
    """Every generation with segments, the current one included."""
    return backend.children(f"{key}.d")


class ConditionalLog:
    """The contract's index-log operations (base.py, `Backend.log_*`) by this module's protocol, for a backend
    with no append and no rename (store/backends/objects.py): a log's generation is its segments' folder, a
    replaced one is kept while a reader's pin (pins.py) holds it."""

    def log_read(self: Backend, key: str) -> tuple[str, bytes] | None:  # type: ignore[misc]
        snap = read(self, key)
        return None if snap is None else (snap.generation, snap.data)

    def log_append(self: Backend, key: str, end: LogEnd, data: bytes) -> int:  # type: ignore[misc]
        return append(self, key, end.generation, end.length, data)

    def log_replace(self: Backend, key: str, data: bytes, expect: LogEnd | None,  # type: ignore[misc]
                    retire: bool) -> str:
        generation = replace(self, key, data, None if expect is None else tuple(expect))  # type: ignore[arg-type]
        if not retire and expect is not None and expect.generation != generation:
            remove_generation(self, key, expect.generation)  # a damaged log rebuilt: no reader's to keep
            pins.clear(self, key, expect.generation)
        return generation

    @contextlib.contextmanager
    def log_retired(self: Backend, key: str) -> Iterator[list[Retired]]:  # type: ignore[misc]
        # nothing to hold: a reader pins only the generation the head names, and this one is no longer it
        found = head(self, key)
        out = []
        for generation in generations(self, key):
            if found is not None and generation == found[0]:
                continue
            snap = read(self, key, generation)
            out.append(Retired(generation, b"" if snap is None else snap.data, pins.alive(self, key, generation)))
        yield out

    def log_drop(self: Backend, key: str, token: str) -> None:  # type: ignore[misc]
        remove_generation(self, key, token)
        pins.clear(self, key, token)
