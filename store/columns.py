"""A feature's index in columns, for batched reads (`Store.rows`; docs/design.md, "Reads").

`index.IndexState.entries` holds one `Entry` object per item: fine for planning and single reads, but a
batched read of random items over a million of them chased, per pick, a dict probe, the key string, the
Entry tuple and its int objects, then stacked one row view per pick (each a cache and TLB miss, one after
the other in the interpreter). Here the same snapshot is held as arrays: an open-addressing hash table of
the items (numpy, keyed by Python's `hash` of the item string, each hit checked against the item's name)
and a row per item with its part number, first row and row count, so that resolving 64 picks is a few
vectorised gathers whose memory misses overlap. The `Entry` objects stay the index's API; these columns
are derived from them, once per (handle, feature).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from store.index import IndexState


class ItemTable:
    """item name -> position in `names`, for many names at once (`find`). Keyed by Python's string hash,
    which is salted per process: a table is made and used in one process (a Store is never pickled)."""

    def __init__(self, names: list[str]) -> None:
        self.names = np.array(names, dtype=str) if names else np.zeros(0, "U1")
        n = len(names)
        hashes = np.fromiter(map(hash, names), np.int64, n)
        # a load factor of 1/4 at every size: the probes a lookup needs (its rounds below) do not grow with n
        self._size = 4 * n + 1
        self._flat: memoryview | None = None  # `_slots` as int64s, for `find_one`
        self._slots = np.zeros((self._size, 2), np.int64)  # (hash, position + 1); 0: empty. One row: one miss
        # two items with one 64-bit hash (never seen in practice): a plain dict is exact
        self._dict = dict(zip(names, range(n), strict=True)) if np.unique(hashes).size < n else None
        pending, slot = np.arange(n), hashes % self._size
        while pending.size:  # linear probing, one round per probe step: a key skips only occupied slots
            at = slot[pending]
            free = np.flatnonzero(self._slots[at, 1] == 0)
            won_slots, first = np.unique(at[free], return_index=True)
            winners = pending[free[first]]
            self._slots[won_slots, 0], self._slots[won_slots, 1] = hashes[winners], winners + 1
            lost = np.ones(pending.size, bool)
            lost[free[first]] = False
            pending = pending[lost]
            slot[pending] = (slot[pending] + 1) % self._size

    def find_one(self, name: str) -> int:
        """Position of one name, -1 if absent: the probe of `find` in plain Python over the table's memory
        (a few reads of arrays in huge pages, where a dict lookup of a million string keys walks objects
        spread over the heap's small pages)."""
        if self._dict is not None:
            return self._dict.get(name, -1)
        if self._flat is None:
            self._flat = memoryview(self._slots).cast("B").cast("q")  # (hash, position + 1) pairs
        flat, size, h = self._flat, self._size, hash(name)
        slot = h % size
        while True:
            got = flat[2 * slot + 1]
            if got == 0:
                return -1
            if flat[2 * slot] == h and self.names[got - 1] == name:
                return got - 1
            slot = (slot + 1) % size

    def find(self, names: Sequence[str]) -> np.ndarray:
        """Positions of `names` (int64), -1 for a name not in the table."""
        m = len(names)
        if self._dict is not None:
            return np.fromiter((self._dict.get(x, -1) for x in names), np.int64, m)
        want = np.fromiter(map(hash, names), np.int64, m)
        out = np.full(m, -1, np.int64)
        todo, slot = np.arange(m), want % self._size
        while todo.size:
            at = slot[todo]
            got = self._slots[at]
            hit = (got[:, 0] == want[todo]) & (got[:, 1] > 0)
            out[todo[hit]] = got[hit, 1] - 1
            more = ~hit & (got[:, 1] > 0)
            todo = todo[more]
            slot[todo] = (at[more] + 1) % self._size
        if m and self.names.size:
            same = self.names[out] == np.array(names, dtype=str)  # a hash hit must be the same name
            out[~same] = -1
        return out


class Columns:
    """A feature's snapshot as arrays: item position -> part number, first row, row count."""

    def __init__(self, state: IndexState) -> None:
        entries = list(state.entries.values())
        self.table = ItemTable([e.item for e in entries])
        self.part_names = sorted({e.part for e in entries})
        self.part_id = {p: k for k, p in enumerate(self.part_names)}
        n = len(entries)
        self.part = np.fromiter((self.part_id[e.part] for e in entries), np.int32, n)
        self.row0 = np.fromiter((e.row0 for e in entries), np.int64, n)
        self.n_rows = np.fromiter((e.n_rows for e in entries), np.int64, n)
        self._spans = {k: e.spans for k, e in enumerate(entries) if e.spans}
        self.attrs_json = [e.attrs_json for e in entries]  # for single reads (`Store.read`)
        self._by_name: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def rows_of(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(first row, row count) of every item in array `name`: its own span where it has one (an array
        that is not row-aligned), else its rows."""
        if name not in self._by_name:
            row0, n = self.row0, self.n_rows
            own = [(k, s[name]) for k, s in self._spans.items() if name in s]
            if own:
                row0, n = row0.copy(), n.copy()
                for k, (start, length) in own:
                    row0[k], n[k] = start, length
            self._by_name[name] = (row0, n)
        return self._by_name[name]
