"""A feature's index in columns (store/index.py) and the one read path through it (`Store.read`, `rows`)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store import index, layout
from store.compact import compact_store
from store.integrity import DamagedItem
from store.reader import Store
from store.writer import StoreWriter

SPEC = {"spec_hash": "x", "columns": ["a", "b", "c"], "rate_hz": None}


def _rows(rng: np.random.Generator, n: int, own: int | None = None) -> FeatureRows:
    """`n` rows of 3 columns; `own`: a `tok` extra of that many rows (not row-aligned: a span of its own)."""
    extras = {"tok": rng.standard_normal((n if own is None else own, 2)).astype(np.float16)}
    return FeatureRows(rng.standard_normal((n, 3)).astype(np.float32), np.zeros((n, 2)), extras)


def _commit(path: Path, batches: list[list[str]], seed: int, own: bool = False) -> None:
    rng = np.random.default_rng(seed)
    with StoreWriter(path, "t") as w:  # the writer's index, grown commit by commit, checked after
        w.set_feature("f", SPEC)
        for items in batches:
            w.commit_batch("f", [(it, _rows(rng, 1 + k % 3, (k % 4) if own else None),
                                  {"spec_hash": "x" if k % 5 else "old", "fingerprint": f"{seed}-{it}",
                                   "filtered": k % 3 == 1, "duration_s": None if k % 2 else k + 0.25,
                                   "note": "é" * k})
                                 for k, it in enumerate(items)])
        _same_as_entries(w.index("f"), path)


class _Folded:
    """The log folded the plain way, independently of the columns: an `Entry` per item in a dict (a later
    part's entry replaces an earlier one at its first position), the parts' records, and what the log says."""

    def __init__(self, log: Path) -> None:
        self.entries: dict[str, layout.Entry] = {}
        self.parts: dict[str, layout.PartLine] = {}
        self.generation, self.last_seq = "", 0
        self.length, self.torn = layout.fold(log.read_bytes(), log, self._add)

    def _add(self, rec: layout.Record) -> None:
        if isinstance(rec, layout.Header):
            self.generation = rec.generation
            return
        self.entries.update((item, layout.Entry(item, rec.part, row0, n, fp, spec, filt, dur, attrs, rec.seq,
                                                rec.spans.get(item)))
                            for item, row0, n, fp, spec, filt, dur, attrs in rec.rows)
        self.parts[rec.part], self.last_seq = rec, max(self.last_seq, rec.seq)

    def live_parts(self) -> list[str]:
        return [p for p in self.parts if any(e.part == p for e in self.entries.values())]


def _same_as_entries(s: Store | index.Index, path: Path) -> None:
    """The columns (a reader's, or a writer's after its commits: `Index._append`) say for every item what the
    log folded into `Entry` objects says: part, rows, fingerprint, spec, filtered, duration, attributes,
    sequence and own spans, in the same order; and the snapshot's parts, generation and length."""
    want = _Folded(path / "f" / layout.INDEX)
    if isinstance(s, index.Index):  # a writer's: what compaction decides on, and what its reader sees besides
        assert s.usage() == {p: (sum(e.part == p for e in want.entries.values()),
                                 sum(e.n_rows for e in want.entries.values() if e.part == p)) for p in want.parts}
    cols, s = (s, Store(path)) if isinstance(s, index.Index) else (s.index("f"), s)
    assert list(cols.entries) == list(want.entries) and len(cols.entries) == len(want.entries)
    assert list(cols.entries.values()) == list(want.entries.values())
    assert {it: cols.entries[it] for it in want.entries} == want.entries and "nope" not in cols.entries
    assert (cols.generation, cols.length, cols.last_seq) == (want.generation, want.length, want.last_seq)
    assert {p: (r.seq, r.files, r.arrays) for p, r in cols.parts.items()} == {
        p: (r.seq, r.files, r.arrays) for p, r in want.parts.items()}
    assert cols.live_parts() == want.live_parts()
    for name in ("features", "tok"):
        row0, n = cols.rows_of(name)
        for k, e in enumerate(want.entries.values()):
            assert [row0[k], n[k]] == list((e.spans or {}).get(name, (e.row0, e.n_rows)))
    current = [e for e in want.entries.values() if e.spec_hash == "x"]
    assert s.items("f") == sorted(e.item for e in current if not e.filtered)
    assert s.filtered("f") == sorted(e.item for e in current if e.filtered)
    for spec in ("x", "old", "y"):  # each spec's own filtered items only ("y": none committed)
        assert cols.filtered_entries(spec) == [e for e in want.entries.values() if e.spec_hash == spec and e.filtered]
    assert s.items("f", include_filtered=True, include_stale=True) == sorted(want.entries)


def test_columns_equal_the_entries_after_supersedes_compaction_and_in_a_held_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _commit(path, [[f"i{b}-{k}" for k in range(b + 6)] for b in range(4)], seed=1, own=True)
    held = Store(path)
    _same_as_entries(held, path)
    before = {it: held.arrays("f", it, ["features", "tok"]) for it in held.items("f")}
    _commit(path, [["i0-0", "i2-1", "new"], ["i3-4"]], seed=2)  # supersedes (rows now row-aligned), in parts of their own
    now = Store(path)
    _same_as_entries(now, path)
    assert now.index("f").part_names != held.index("f").part_names
    current = {it: now.arrays("f", it, ["features"])[0] for it in ("i0-0", "i2-1", "new", "i1-2")}
    compact_store(path)
    compacted = Store(path)
    _same_as_entries(compacted, path)
    assert len(compacted.index("f").part_names) == 1
    for it, want in current.items():
        assert np.array_equal(compacted.rows("f", "features", [(it, r) for r in range(len(want))]), want)
    # the held handle still reads its own snapshot: old rows of superseded items (its parts were removed by
    # the compaction, but the ones it loaded are in memory)
    for it, (feats, _) in before.items():
        assert np.array_equal(held.rows("f", "features", [(it, r) for r in range(len(feats))]), feats)


def test_a_damaged_part_raises_in_batched_reads(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _commit(path, [["a", "b"], ["c", "d"]], seed=6)
    s = Store(path)
    part = s.index("f").entries["c"].part
    (path / "f" / "parts" / part / "features" / "zarr.json").write_text("{}")
    assert s.rows("f", "features", [("a", 0), ("b", 0)]).shape == (2, 3)
    with pytest.raises(DamagedItem, match=part):
        s.rows("f", "features", [("a", 0), ("c", 0)])


def test_a_slab_is_made_only_where_the_array_fits_what_the_cache_has_left(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _commit(path, [[f"i{k}" for k in range(10)]], seed=7)
    small = Store(path, part_cache_bytes=100)
    assert small.rows("f", "features", [("i3", 0)]).shape == (1, 3) and small._arrays["f", "features"].data is None
    big = Store(path)
    assert np.array_equal(big.rows("f", "features", [("i3", 0)]), small.rows("f", "features", [("i3", 0)]))
    assert big._arrays["f", "features"].data is not None



def test_an_array_whose_dtype_was_not_recorded_is_read_through_zarr_as_stored(tmp_path: Path) -> None:
    """A part record without an array's dtype (a hand-made or old record) gives that array no slab: its rows read
    through zarr in their stored dtype, never cast into a slab of a guessed one (numpy's dtype of None is float64)."""
    path = tmp_path / "s.zarr"
    _commit(path, [[f"i{k}" for k in range(4)]], seed=3)
    s, plain = Store(path), Store(path)
    for rec in s.index("f").parts.values():
        rec.arrays["features"]["dtype"] = None
    got, want = s.rows("f", "features", [("i1", 0), ("i3", 0)]), plain.rows("f", "features", [("i1", 0), ("i3", 0)])
    assert got.dtype == want.dtype == np.float32 and np.array_equal(got, want)
    assert s._arrays["f", "features"].data is None and plain._arrays["f", "features"].data is not None

def _commit_plain(path: Path, batches: list[list[str]], seed: int) -> None:
    """Items of `features` and `intervals` only (what single reads through the slabs take)."""
    rng = np.random.default_rng(seed)
    with StoreWriter(path, "t") as w:
        w.set_feature("f", SPEC)
        for items in batches:
            w.commit_batch("f", [(it, FeatureRows(rng.standard_normal((1 + k % 3, 3)).astype(np.float32),
                                                  np.stack([np.arange(1 + k % 3.0), np.arange(1 + k % 3.0) + 1], 1)),
                                  {"spec_hash": "x", "fingerprint": f"{seed}-{it}", "duration_s": k + 0.5})
                                 for k, it in enumerate(items)])


def _read(s: Store, item: str) -> tuple:
    r = s.read("f", item)
    return r.item, np.asarray(r.features[...]).tolist(), r.features.shape, r.intervals.tolist(), r.attrs, r.columns


def test_single_reads_from_the_slabs_equal_reads_from_parts_and_raise_as_they_do(tmp_path: Path) -> None:
    """`Store.read` takes its rows from the slab where the feature has one and from the part's own array
    where it does not (a store too small for slabs): the same rows, intervals and attributes, also for
    superseded items and in a snapshot held across a recommit; an unknown item and a damaged part raise."""
    path = tmp_path / "s.zarr"
    _commit_plain(path, [[f"i{b}-{k}" for k in range(b + 2)] for b in range(4)], seed=1)
    held = Store(path)
    held.rows("f", "features", [("i3-0", 0)])
    _commit_plain(path, [["i0-0", "i2-1", "new"]], seed=2)
    fast, slow = Store(path), Store(path, part_cache_bytes=100)
    items = fast.items("f")
    got = {it: _read(fast, it) for it in items}
    assert got == {it: _read(fast, it) for it in items}  # the second time from the slab's loaded parts
    assert got == {it: _read(slow, it) for it in items}
    assert fast._arrays["f", "features"].data is not None and slow._arrays["f", "features"].data is None
    held_got = {it: _read(held, it) for it in ("i0-0", "i2-1", "i3-0")}
    assert got["i0-0"][4]["fingerprint"] == "2-i0-0" and held_got["i0-0"][4]["fingerprint"] == "1-i0-0"
    assert held_got["i0-0"][1] != got["i0-0"][1]
    with pytest.raises(KeyError, match="no item 'nope'"):
        fast.read("f", "nope")
    part = fast.index("f").entries["i3-1"].part
    (path / "f" / "parts" / part / "features" / "zarr.json").write_text("{}")
    damaged = Store(path)
    assert _read(damaged, "new") == got["new"]
    with pytest.raises(DamagedItem, match=part):
        damaged.read("f", "i3-1")


def test_a_reader_holds_no_object_per_item(tmp_path: Path) -> None:
    """A reader's index is arrays and one name per item (str, which the collector does not track): no
    `Entry` or other container per item, whatever was read (a million items' objects were 0.9 GB)."""
    path = tmp_path / "s.zarr"
    _commit_plain(path, [[f"i{b}-{k}" for k in range(1000)] for b in range(4)], seed=1)
    gc.collect()
    before = len(gc.get_objects())
    s = Store(path)
    items = s.items("f")
    for it in items[::7]:
        s.read("f", it)
    s.rows("f", "features", [(it, 0) for it in items[::3]])
    del items
    gc.collect()
    assert len(gc.get_objects()) - before < 400
