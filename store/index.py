"""A feature's index (docs/design.md, "Store layout" and "Reads"): the log `<feature>/index.log` folded into
columns, the one form a writer and a reader hold (the log's writes are its backend's: store/backends/base.py,
`log_append` and `log_replace`). Columns, not an `Entry` object per item: those cost ~900 B resident each."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
from array import array
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from store.layout import (
    Entry,
    Header,
    IndexDamaged,
    IndexOutOfOrder,
    PartLine,
    PartRecord,
    Record,
    decode,
    fold,
)


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


class _Growing:
    """The columns of the records folded so far, each one growing buffer: a million items' values in a few
    allocations, where a list of per-record arrays, interleaved with the decoding's own short-lived objects,
    kept that memory from going back to the system (the names too are copied out once, at the end)."""

    def __init__(self) -> None:
        self.count = 0
        self.ids, self.fp, self.attrs = bytearray(), bytearray(), bytearray()  # UTF-8; names each NUL-ended
        # lengths: the names' in characters, the others' in bytes
        self.ids_len, self.fp_len, self.attrs_len = array("q"), array("q"), array("q")
        self.part, self.spec, self.filtered = array("i"), array("i"), array("b")
        self.row0, self.n_rows, self.duration = array("q"), array("q"), array("d")
        self.spans: dict[int, dict[str, list[int]]] = {}  # position -> its arrays' own spans

    def names(self) -> list[str]:
        text = self.ids.decode()
        names = text.split("\x00")
        if len(names) == self.count + 1:  # no name holds a NUL itself
            names.pop()
            return names
        at = np.concatenate([[0], np.cumsum(np.array(self.ids_len, np.int64) + 1)]).tolist()
        return [text[a:b - 1] for a, b in zip(at, at[1:], strict=False)]


def _blob(texts: tuple[Any, ...]) -> tuple[bytes, np.ndarray]:
    """Strings as one UTF-8 blob and their byte lengths."""
    texts = tuple(map(str, texts)) if not all(isinstance(t, str) for t in texts) else texts
    joined = "".join(texts).encode()
    if len(joined) == sum(map(len, texts)):  # ASCII (JSON from json.dumps always is): lengths in characters
        return joined, np.fromiter(map(len, texts), np.int64, len(texts))
    encoded = [t.encode() for t in texts]
    return b"".join(encoded), np.fromiter(map(len, encoded), np.int64, len(encoded))


DISORDER = "part line "  # how each of `LogOrder`'s problems begins


class LogOrder:
    """The order a log's part lines must keep: seqs strictly rising, and each line's `after` (where written) the
    seq of the line before it. No crash breaks it (appends go after the good prefix, generations are renamed in
    whole); a bad copy, a sync tool or a hand edit does: a middle line deleted (its items would read their older
    rows), the log cut and joined, an old line appended again (its items' older rows would win for good)."""

    def __init__(self) -> None:
        self.prev, self.lines, self.problem = 0, 0, None  # seq of the last part line; part lines seen

    def see(self, rec: Record) -> str | None:
        """The first disorder found so far, `rec` (a part line) included."""
        if isinstance(rec, Header) or self.problem is not None:
            return self.problem
        self.lines += 1
        # a rebuilt log may hold two parts of one seq (a part folder copied under another name): chained, not an error
        if rec.seq < self.prev or (rec.seq == self.prev and rec.after is None):
            self.problem = (f"part line {self.lines} repeats or reorders an older commit: seq {rec.seq} after "
                            f"seq {self.prev}, part {rec.part}")
        elif rec.after is not None and rec.after != self.prev:
            self.problem = (f"part line {self.lines} was written after seq {rec.after} but follows seq {self.prev}: "
                            f"{'a line before it is missing' if rec.after > self.prev else 'lines out of place'}"
                            f", part {rec.part}")
        self.prev = rec.seq
        return self.problem


def chained(records: list[Record], after: int = 0) -> list[Record]:
    """`records` as a log's lines: each part line's `after` set to the seq of the part line before it (`after`
    for the first: the log's last seq when they are appended, 0 in a new log)."""
    out: list[Record] = []
    for rec in records:
        if isinstance(rec, PartLine):
            rec, after = dataclasses.replace(rec, after=after), rec.seq
        out.append(rec)
    return out


class Index:
    """A feature's index: the log's records folded (`add`, in log order: a later part supersedes an item's
    earlier rows), then `done`; a writer goes on adding the records it commits (`_append`)."""

    def __init__(self) -> None:
        self.generation, self.length, self.torn, self.last_seq = "", 0, False, 0
        self.token = ""  # the backend's name of the log generation read (store/backends/base.py `LogEnd`)
        self.order = LogOrder()  # `order.problem`: the first part line out of order, None while the log keeps it
        self.rebuilt = False  # from the parts' own records, not from the log
        self.parts: dict[str, PartRecord] = {}
        self.part_names: list[str] = []  # part number -> name, in log order
        self.part_id: dict[str, int] = {}
        self.specs: list[str] = []  # spec number -> spec_hash
        self._spec_id: dict[str, int] = {}
        self._chunks: _Growing | None = _Growing()  # None after `done`
        self._room: dict[str, np.ndarray] = {}  # after `done`: each column's buffer, grown by `_append`

    # ---- folding the log ----

    def add(self, rec: Record) -> None:
        """Fold one log record into the columns."""
        if isinstance(rec, Header):
            self.generation = rec.generation
            return
        self.order.see(rec)
        part, seq, spans = rec.part, rec.seq, rec.spans
        c = self._chunks
        if part not in self.part_id:
            self.part_id[part] = len(self.part_names)
            self.part_names.append(part)
        if c is None:
            self._append(rec)
        elif rec.rows:
            rows = rec.columns()
            items = rows.items
            for item in spans.keys() & set(items):
                c.spans[c.count + items.index(item)] = spans[item]
            one = set(rows.spec_hash)  # nearly always one spec per record
            codes = np.full(len(items), self._spec(one.pop()), np.int32) if len(one) == 1 else \
                np.fromiter(map(self._spec, rows.spec_hash), np.int32, len(items))
            for column, values in ((c.part, np.full(len(items), self.part_id[part], np.int32)), (c.spec, codes),
                                   (c.row0, np.array(rows.row0, np.int64)), (c.n_rows, np.array(rows.n_rows, np.int64)),
                                   (c.filtered, np.array(rows.filtered, np.int8)),
                                   (c.duration, np.array(rows.duration_s, np.float64))):  # a None duration: NaN
                column.frombytes(values.tobytes())
            for texts, blob, lengths in ((rows.fingerprint, c.fp, c.fp_len), (rows.attrs_json, c.attrs, c.attrs_len)):
                data, length = _blob(texts)
                blob += data
                lengths.frombytes(length.tobytes())
            c.ids += ("\x00".join(items) + "\x00").encode()
            c.ids_len.extend(map(len, items))
            c.count += len(items)
        # no names per part: they would keep every decoded name alive (the columns answer `live_parts`)
        self.parts[part] = PartRecord(part, seq, rec.files, rec.arrays)
        self.last_seq = max(self.last_seq, seq)

    def _spec(self, spec: str) -> int:
        found = self._spec_id.get(spec)
        if found is None:
            found = self._spec_id[spec] = len(self.specs)
            self.specs.append(str(spec))
        return found

    def done(self) -> Index:
        """Join the records' columns, keeping each item's latest rows at the position of its first."""
        c, self._chunks = self._chunks, None
        assert c is not None, "done once"
        ids = c.names()
        with gc_paused():  # a million strings at once, none in a cycle
            pos = dict(zip(ids, range(len(ids)), strict=True))  # the last occurrence wins
        self.part, self.spec = np.array(c.part, np.int32), np.array(c.spec, np.int32)
        self.row0, self.n_rows = np.array(c.row0, np.int64), np.array(c.n_rows, np.int64)
        self.filtered, self.duration = np.array(c.filtered, bool), np.array(c.duration, np.float64)
        self._fp, self._fp_at = c.fp, _spans(c.fp_len)
        self._attrs, self._attrs_at = c.attrs, _spans(c.attrs_len)
        self.ids, self.pos, self.spans = ids, pos, c.spans
        if len(pos) < len(ids):  # items committed again: their superseded rows dropped
            keep = np.fromiter(pos.values(), np.int64, len(pos))
            self.ids = list(pos)
            with gc_paused():
                self.pos = dict(zip(self.ids, range(len(self.ids)), strict=True))
            for name in ("part", "row0", "n_rows", "spec", "filtered", "duration"):
                setattr(self, name, getattr(self, name)[keep])
            self._fp_at, self._attrs_at = self._fp_at[keep], self._attrs_at[keep]  # the old ones stay unused
            where = {int(old): k for k, old in enumerate(keep.tolist()) if old in c.spans}
            self.spans = {k: c.spans[old] for old, k in where.items()}
        self._by_name: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._tails: dict[int, dict[str, tuple[int, ...] | None]] = {}
        self.entries = _Entries(self)
        return self

    _COLUMNS = ("part", "spec", "row0", "n_rows", "filtered", "duration", "_fp_at", "_attrs_at")

    def _append(self, rec: PartLine) -> None:
        """A record added after `done` (a writer's commit, an adopted part): its items' rows replace their
        earlier ones in place and new items go at the end, in columns grown by doubling, so that a run's
        thousands of commits to a large index cost what their items do, not a copy of the index each."""
        one = of_records([rec])
        n, m = len(self.ids), len(one)
        at = np.fromiter((self.pos.get(i, -1) for i in one.ids), np.int64, m)
        fresh = np.flatnonzero(at < 0)
        at[fresh] = np.arange(n, n + len(fresh))
        total = n + len(fresh)
        new = {"part": np.full(m, self.part_id[rec.part], np.int32),
               "spec": np.array([self._spec(s) for s in one.specs] or [0], np.int32)[one.spec],
               "row0": one.row0, "n_rows": one.n_rows, "filtered": one.filtered, "duration": one.duration,
               "_fp_at": one._fp_at + len(self._fp), "_attrs_at": one._attrs_at + len(self._attrs)}
        for name, values in new.items():
            buf = self._room.get(name, getattr(self, name))
            if len(buf) < total:
                buf = np.concatenate([buf[:n], np.empty((max(total, 2 * n) - n, *buf.shape[1:]), buf.dtype)])
            buf[at] = values
            self._room[name] = buf
            setattr(self, name, buf[:total])
        self._fp += one._fp
        self._attrs += one._attrs
        for k in at.tolist():
            self.spans.pop(k, None)
        self.spans.update({int(at[k]): s for k, s in one.spans.items()})
        names = [one.ids[k] for k in fresh.tolist()]
        self.ids.extend(names)
        self.pos.update(zip(names, range(n, total), strict=True))
        self._by_name.clear()

    # ---- what a reader asks ----

    def __len__(self) -> int:
        return len(self.ids)

    def attrs_json(self, k: int) -> str:
        return self._attrs[self._attrs_at.item(k, 0):self._attrs_at.item(k, 1)].decode()

    def fingerprint(self, k: int) -> str:
        return self._fp[self._fp_at.item(k, 0):self._fp_at.item(k, 1)].decode()

    def positions(self, items: list[str] | tuple[str, ...]) -> np.ndarray:
        """Positions of `items` (KeyError naming the first one not in this snapshot)."""
        return np.fromiter(map(self.pos.__getitem__, items), np.int64, len(items))

    def rows_of(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(first row, row count) of every item in array `name`: its own span where it has one (an array
        that is not row-aligned), else its rows."""
        if name not in self._by_name:
            row0, n = self.row0, self.n_rows
            own = [(k, s[name]) for k, s in self.spans.items() if name in s]
            if own:
                row0, n = row0.copy(), n.copy()
                for k, (start, length) in own:
                    row0[k], n[k] = start, length
            self._by_name[name] = (row0, n)
        return self._by_name[name]

    def tails(self, pid: int) -> dict[str, tuple[int, ...] | None]:
        """Array name -> its row shape, of part number `pid` (as committed; None where not recorded)."""
        found = self._tails.get(pid)
        if found is None:
            arrays = self.parts[self.part_names[pid]].arrays
            found = self._tails[pid] = {k: tuple(v["shape"][1:]) if v.get("shape") else None for k, v in arrays.items()}
        return found

    def entry(self, k: int) -> Entry:
        duration = float(self.duration[k])
        part = self.part_names[self.part[k]]
        return Entry(self.ids[k], part, int(self.row0[k]), int(self.n_rows[k]), self.fingerprint(k),
                     self.specs[self.spec[k]], bool(self.filtered[k]), None if duration != duration else duration,
                     self.attrs_json(k), self.parts[part].seq, self.spans.get(k))

    def live_parts(self) -> list[str]:
        """Parts that hold a current row of some item (a part whose items were all superseded does not)."""
        live = set(np.unique(self.part).tolist())
        return [p for k, p in enumerate(self.part_names) if k in live]

    def entries_of(self, parts: set[str]) -> dict[str, list[Entry]]:
        """part -> its current items' entries, in index order, for `parts` in commit order (what a compaction
        copies, and what a new generation's lines keep)."""
        out: dict[str, list[Entry]] = {p: [] for p in sorted(parts, key=self.part_id.__getitem__)}
        for k in np.flatnonzero(np.isin(self.part, [self.part_id[p] for p in parts])).tolist():
            e = self.entry(k)
            out[e.part].append(e)
        return dict(sorted(out.items(), key=lambda kv: self.parts[kv[0]].seq))

    def usage(self) -> dict[str, tuple[int, int]]:
        """part -> (its items still current, their rows): what compaction decides on."""
        items = np.bincount(self.part, minlength=len(self.part_names)).tolist()
        rows = np.bincount(self.part, self.n_rows, minlength=len(self.part_names)).astype(np.int64).tolist()
        return {p: (items[k], rows[k]) for k, p in enumerate(self.part_names) if p in self.parts}

    def filtered_entries(self, spec_hash: str) -> list[Entry]:
        """The entries of the current items that spec `spec_hash`'s extractor filtered, found in the columns: an
        `Entry` made for those alone, not for every item (a run's report asks this of every feature)."""
        code = self._spec_id.get(spec_hash)
        if code is None:
            return []
        return [self.entry(k) for k in np.flatnonzero(self.filtered & (self.spec == code)).tolist()]


def _spans(lengths: array) -> np.ndarray:
    """(start, end) in a buffer of strings one after another, of each of them, from their lengths."""
    end = np.cumsum(np.array(lengths, np.int64))
    return np.stack([end - np.array(lengths, np.int64), end], axis=1)


class _Entries(Mapping[str, Entry]):
    """The snapshot as the index's item -> `Entry` mapping, each `Entry` made when asked for."""

    def __init__(self, cols: Index) -> None:
        self._cols = cols

    def __getitem__(self, item: str) -> Entry:
        return self._cols.entry(self._cols.pos[item])

    def __contains__(self, item: object) -> bool:
        return item in self._cols.pos

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols.ids)

    def __len__(self) -> int:
        return len(self._cols.ids)

    def values(self) -> Iterator[Entry]:  # type: ignore[override]
        return map(self._cols.entry, range(len(self._cols.ids)))


def of_records(records: list[Record], length: int = 0) -> Index:
    """The index of records this process has just written (no log read back)."""
    state = Index()
    with gc_paused():
        for rec in records:
            state.add(rec)
    state.length = length
    return state.done()


def parse(data: bytes | bytearray, where: Path) -> Index:
    """The index of a log's bytes. A torn (unterminated) last line is left out and flagged; a complete line
    that fails its checksum, wherever it is, or a part line out of order (`LogOrder`) raises IndexDamaged."""
    state = Index()
    with gc_paused():  # a million items' strings, none in a cycle
        state.length, state.torn = fold(data, where, state.add)
    if state.order.problem is not None:
        raise IndexOutOfOrder(f"{where}: {state.order.problem}; the index is damaged, its items are read from the "
                           "parts' own records (`python -m pipeline verify` rebuilds it)")
    return state.done()


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


def generation_in(data: bytes | bytearray | None, where: Any) -> str:
    """The generation of a log from its first bytes (its header line)."""
    if data is None:
        raise FileNotFoundError(f"{where}: missing")
    rec = decode(bytes(data).split(b"\n", 1)[0])
    if not isinstance(rec, Header):
        raise IndexDamaged(f"{where}: line 1 is not a header")
    return rec.generation


def attrs_of(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(an item's attributes, None) from their JSON, or (None, why they do not parse)."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as e:
        return None, f"{type(e).__name__}: {e}"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, None
