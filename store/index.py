"""A feature's index: item -> part, rows, fingerprint, status and per-item attributes (docs/design.md, "Store").

The index is an append-only log, `<feature>/index.log`, one line per committed part:

    <first 16 hex digits of the SHA-256 of the JSON> <JSON>\n

A line is how readers find a part: the part's folder is renamed into place first (complete and fsynced,
its own metadata holding the same entries), then the line is appended and fsynced. An append writes its
lines in one `pwrite`, so a kill leaves a prefix of them: at most one last line without its newline (a torn
tail), which is no line of this log, and the next writer cuts it off. A line that ends in its newline and
fails its checksum, last or not, is damage (a kill cannot make one): readers rebuild the state from the
parts, and the next writer or `verify` rebuilds the log from them (store/repair.py). A part no line names
(a torn tail's, or one whose lines were cut off) is never deleted for that: the next writer adopts it from
its own metadata. Compaction writes a whole new log (a new `generation`) and renames it over the old one.

A snapshot is a log prefix: a reader pins the log's length (and its open file) when it opens, so later
commits never change what it sees.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

INDEX = "index.log"
_SUM = 16  # hex digits of the line checksum


class IndexDamaged(ValueError):
    """The index log has a line that fails its checksum (not a torn tail): rebuild it from the parts."""


class Entry(NamedTuple):
    """One item's current rows. `attrs_json`: the per-item attributes, parsed on demand (a million items load fast)."""

    item: str
    part: str
    row0: int  # first row in the part's row-aligned arrays
    n_rows: int
    fingerprint: str
    spec_hash: str
    filtered: bool
    duration_s: float | None
    attrs_json: str
    seq: int
    spans: dict[str, list[int]] | None = None  # arrays not row-aligned: name -> [start, length] along axis 0

    def attrs(self) -> dict[str, Any]:
        return json.loads(self.attrs_json)


@dataclass(frozen=True)
class PartRecord:
    """What a part held when it was committed: its files (size, SHA-256) and arrays (shape, dtype)."""

    part: str
    seq: int
    files: dict[str, list[Any]]
    arrays: dict[str, dict[str, Any]]
    items: tuple[str, ...]


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

    def live_rows(self) -> dict[str, int]:
        """part -> rows still current in it (for compaction)."""
        out = dict.fromkeys(self.parts, 0)
        for e in self.entries.values():
            out[e.part] = out.get(e.part, 0) + e.n_rows
        return out


def encode(record: dict[str, Any]) -> bytes:
    body = json.dumps(record, separators=(",", ":"), sort_keys=True, default=str)
    return f"{hashlib.sha256(body.encode()).hexdigest()[:_SUM]} {body}\n".encode()


def header(generation: str | None = None) -> dict[str, Any]:
    return {"kind": "header", "generation": generation or uuid.uuid4().hex}


def entry_row(item: str, row0: int, n_rows: int, attrs: dict[str, Any]) -> list[Any]:
    """The compact form of an entry in a log line (and in the part's own metadata)."""
    duration = attrs.get("duration_s")
    return [item, row0, n_rows, str(attrs.get("fingerprint", "")), str(attrs.get("spec_hash", "")),
            bool(attrs.get("filtered", False)), None if duration is None else float(duration),
            json.dumps(attrs, separators=(",", ":"), sort_keys=True, default=str)]


def part_record(part: str, seq: int, rows: list[list[Any]], files: dict[str, list[Any]],
                arrays: dict[str, dict[str, Any]], spans: dict[str, dict[str, list[int]]] | None = None) -> dict[str, Any]:
    rec = {"kind": "part", "part": part, "seq": seq, "items": rows, "files": files, "arrays": arrays}
    if spans:
        rec["spans"] = spans
    return rec


def apply(state: IndexState, rec: dict[str, Any]) -> None:
    """Fold one log record into the state: later parts supersede earlier entries of the same items."""
    if rec.get("kind") == "header":
        state.generation = str(rec.get("generation", ""))
        return
    if rec.get("kind") != "part":
        raise ValueError(f"unknown index record kind {rec.get('kind')!r}")
    part, seq, spans = str(rec["part"]), int(rec["seq"]), rec.get("spans") or {}
    items = []
    for item, row0, n, fp, spec, filt, dur, attrs in rec["items"]:
        state.entries[item] = Entry(item, part, int(row0), int(n), fp, spec, bool(filt), dur, attrs, seq,
                                    spans.get(item))
        items.append(item)
    state.parts[part] = PartRecord(part, seq, rec.get("files", {}), rec.get("arrays", {}), tuple(items))
    state.last_seq = max(state.last_seq, seq)


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


def fold(data: bytes | bytearray, where: Path, visit: Callable[[dict[str, Any]], None]) -> tuple[int, bool]:
    """Hand each committed record of a log's bytes to `visit`, in order; returns (the good prefix's length,
    whether the log ends in a torn line). A reader that needs only part of each record (planning: an item's
    part and fingerprint) keeps only that: the lines are decoded one at a time, never all held at once."""
    pos, end = 0, len(data)
    k = 0
    while pos < end:
        k += 1
        stop = data.find(b"\n", pos)
        rec = _decode(data[pos:end if stop < 0 else stop])
        if rec is None:
            if stop < 0:  # no newline: the tail of a killed append
                return pos, True
            raise IndexDamaged(f"{where}: line {k} fails its checksum (the index is damaged; "
                               "`python -m pipeline verify` rebuilds it from the parts)")
        if stop < 0:  # a complete record without its newline: the append was cut before the newline
            return pos, True
        visit(rec)
        pos = stop + 1
    return pos, False


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        text = line.decode()
        digest, body = text[:_SUM], text[_SUM + 1:]
        if len(text) <= _SUM + 1 or text[_SUM] != " " or hashlib.sha256(body.encode()).hexdigest()[:_SUM] != digest:
            return None
        rec = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def read_pinned(fd: int, length: int, where: Path) -> IndexState:
    """The state of the first `length` bytes of an open log (a reader's snapshot)."""
    return parse(pinned_bytes(fd, length), where)


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
    rec = _decode(first.rstrip(b"\n"))
    if rec is None or rec.get("kind") != "header":
        raise IndexDamaged(f"{path}: line 1 is not a header")
    return str(rec.get("generation", ""))


def load(path: Path) -> IndexState:
    """The current state of a log file; an empty state when there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return IndexState()
    return parse(data, path)


def fsync_path(path: Path | str) -> None:
    """Flush a file, or a directory's entries, to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append(path: Path, records: list[dict[str, Any]], good_length: int) -> int:
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


def replace(path: Path, records: list[dict[str, Any]]) -> int:
    """Write a whole new log (a new generation) and rename it over the old one atomically."""
    tmp = path.with_name(path.name + ".new")
    data = b"".join(encode(r) for r in records)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
    return len(data)
