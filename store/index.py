"""A feature's index, `<feature>/index.log` (docs/design.md, "Store layout"): this module folds its records
(store/layout.py) into the state a writer holds and writes the log: appends after the good prefix (a torn
tail cut off first), and whole new generations renamed over it (compaction, rebuilds). A line is appended
only after its part is renamed into place, complete; a reader's snapshot is a prefix of the log.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from atomicio import atomic_write
from store.layout import Entry, Header, IndexDamaged, PartLine, PartRecord, Record, decode, encode, fold


@dataclass
class IndexState:
    generation: str = ""
    entries: dict[str, Entry] = field(default_factory=dict)  # latest entry per item
    parts: dict[str, PartRecord] = field(default_factory=dict)
    length: int = 0  # bytes of the log this state reflects (the good prefix)
    torn: bool = False  # the log ends in an unfinished line (a killed append)
    last_seq: int = 0

    def live_parts(self) -> list[str]:
        """Parts that hold a current row of some item (a part whose items were all superseded does not).
        Each part stops at its first item still current in it: about one lookup per part, not per item."""
        return [p for p, r in self.parts.items()
                if any((e := self.entries.get(i)) is not None and e.part == p for i in r.items)]

    def usage(self) -> dict[str, tuple[int, int]]:
        """part -> (its items still current, their rows): what compaction decides on."""
        out = dict.fromkeys(self.parts, (0, 0))
        for e in self.entries.values():
            items, rows = out.get(e.part, (0, 0))
            out[e.part] = (items + 1, rows + e.n_rows)
        return out


def apply(state: IndexState, rec: Record) -> None:
    """Fold one log record into the state: later parts supersede earlier entries of the same items."""
    if isinstance(rec, Header):
        state.generation = rec.generation
        return
    entries = state.entries
    for e in rec.entries():
        entries[e.item] = e
    state.parts[rec.part] = rec.record()
    state.last_seq = max(state.last_seq, rec.seq)


def of_records(records: list[Record], length: int = 0) -> IndexState:
    """The state of records this process has just written (no log read back)."""
    state = IndexState(length=length)
    with gc_paused():
        for rec in records:
            apply(state, rec)
    return state


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while many objects are made at once (an index's entries, a dataset's
    plan): none of them is in a cycle, and each full collection would walk all of them again, and every
    object already alive besides: a cost per object that grows with the heap (a million entries: 1/3 of
    loading the index). Nested uses leave it to the outermost to switch collection back on."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse(data: bytes | bytearray, where: Path) -> IndexState:
    """The state of a log's bytes. A torn (unterminated) last line is left out and flagged; a complete line
    that fails its checksum, wherever it is, raises IndexDamaged."""
    state = IndexState()
    with gc_paused():  # one Entry per item
        state.length, state.torn = fold(data, where, lambda rec: apply(state, rec))
    return state


def pinned_bytes(fd: int, length: int) -> bytearray:
    """The first `length` bytes of an open log, read into one buffer (no second copy of a large index)."""
    buf = bytearray(length)
    view, pos = memoryview(buf), 0
    while pos < length:
        got = os.preadv(fd, [view[pos:pos + (1 << 24)]], pos)
        if not got:
            break
        pos += got
    view.release()
    del buf[pos:]
    return buf


def generation_of(path: Path, fd: int | None = None) -> str:
    """The generation of the log at `path` (or of the open log `fd`), from its header line alone."""
    if fd is None:
        with open(path, "rb") as f:
            first = f.readline()
    else:
        first = os.pread(fd, 4096, 0).split(b"\n", 1)[0]
    rec = decode(first.rstrip(b"\n"))
    if not isinstance(rec, Header):
        raise IndexDamaged(f"{path}: line 1 is not a header")
    return rec.generation


def load(path: Path) -> IndexState:
    """The current state of a log file; an empty state when there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return IndexState()
    return parse(data, path)


def append(path: Path, records: list[PartLine], good_length: int) -> int:
    """Append records after the log's good prefix (cutting a torn tail first); fsynced. Returns the new length."""
    data = b"".join(encode(r) for r in records)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != good_length:
            os.ftruncate(fd, good_length)
        written = os.pwrite(fd, data, good_length)
        if written != len(data):
            raise OSError(f"{path}: short write ({written} of {len(data)} bytes)")
        os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, good_length)  # a failed append (disk full) must not leave a torn line behind
        raise
    finally:
        os.close(fd)
    return good_length + len(data)


def replace(path: Path, records: list[Record]) -> int:
    """Write a whole new log (a new generation) and rename it over the old one atomically (durable)."""
    data = b"".join(encode(r) for r in records)
    atomic_write(path, data)
    return len(data)
