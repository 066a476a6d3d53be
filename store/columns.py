"""A reader's index of a feature: its snapshot as columns, one row per current item (docs/design.md, "Reads").

One `Entry` object per item (its strings, ints and dict slot) cost ~900 B resident each, 0.9 GB for a million
items, and every read chased several of them spread over the heap. Here the same snapshot is a handful of
arrays: per item its part number, first row, row count, spec, filtered flag and duration; its fingerprint and
attributes as bytes, decoded when asked for; and the item names with a dict from name to position (Python's
own hash index: at a million items 1.1 µs a lookup, against 2.3 µs for a hand-written numpy table and 4.4 µs
for pandas' `Index.get_loc`). `entries` still answers as the index's mapping of `Entry`, made on access.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from store.index import gc_paused
from store.layout import Entry, Header, PartRecord, Record


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


class Columns:
    """A feature's snapshot: the index log's records folded (`add`, in log order: a later part supersedes an
    item's earlier rows), then `done`. Answers what `index.IndexState` answers (generation, parts, length,
    torn, last_seq, entries, live_parts) without one object per item."""

    def __init__(self) -> None:
        self.generation, self.length, self.torn, self.last_seq = "", 0, False, 0
        self.rebuilt = False  # from the parts' own records, not from the log
        self.parts: dict[str, PartRecord] = {}
        self.part_names: list[str] = []  # part number -> name, in log order
        self.part_id: dict[str, int] = {}
        self.specs: list[str] = []  # spec number -> spec_hash
        self._spec_id: dict[str, int] = {}
        self._chunks: _Growing | None = _Growing()

    # ---- folding the log ----

    def add(self, rec: Record) -> None:
        """Fold one log record (the index log's `apply`, into columns)."""
        if isinstance(rec, Header):
            self.generation = rec.generation
            return
        part, seq, spans = rec.part, rec.seq, rec.spans
        c = self._chunks
        assert c is not None, "a finished Columns takes no more records"
        if part not in self.part_id:
            self.part_id[part] = len(self.part_names)
            self.part_names.append(part)
        if rec.rows:
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
        self.parts[part] = PartRecord(part, seq, rec.files, rec.arrays, ())
        self.last_seq = max(self.last_seq, seq)

    def _spec(self, spec: str) -> int:
        found = self._spec_id.get(spec)
        if found is None:
            found = self._spec_id[spec] = len(self.specs)
            self.specs.append(str(spec))
        return found

    def done(self) -> Columns:
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
            self._fp_at, self._attrs_at = self._fp_at[:, keep], self._attrs_at[:, keep]  # the old ones stay unused
            where = {int(old): k for k, old in enumerate(keep.tolist()) if old in c.spans}
            self.spans = {k: c.spans[old] for old, k in where.items()}
        self._by_name: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._tails: dict[int, dict[str, tuple[int, ...] | None]] = {}
        self.entries = _Entries(self)
        return self

    # ---- what a reader asks ----

    def __len__(self) -> int:
        return len(self.ids)

    def attrs_json(self, k: int) -> str:
        return self._attrs[self._attrs_at.item(0, k):self._attrs_at.item(1, k)].decode()

    def fingerprint(self, k: int) -> str:
        return self._fp[self._fp_at.item(0, k):self._fp_at.item(1, k)].decode()

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

def _spans(lengths: array) -> np.ndarray:
    """(start, end) in a buffer of strings one after another, of each of them, from their lengths."""
    end = np.cumsum(np.array(lengths, np.int64))
    return np.stack([end - np.array(lengths, np.int64), end])


class _Entries(Mapping[str, Entry]):
    """The snapshot as the index's item -> `Entry` mapping, each `Entry` made when asked for."""

    def __init__(self, cols: Columns) -> None:
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


def attrs_of(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(an item's attributes, None) from their JSON, or (None, why they do not parse)."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as e:
        return None, f"{type(e).__name__}: {e}"
    if not isinstance(value, dict):
        return None, f"a JSON {type(value).__name__}, not an object"
    return value, None
