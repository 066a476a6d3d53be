"""The index in columns (store/columns.py) and the batched reads through it (`Store.rows` on a slab)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store import columns
from store.columns import ItemTable
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
    with StoreWriter(path, "t") as w:
        w.set_feature("f", SPEC)
        for items in batches:
            w.commit_batch("f", [(it, _rows(rng, 1 + k % 3, (k % 4) if own else None),
                                  {"spec_hash": "x", "fingerprint": f"{seed}"}) for k, it in enumerate(items)])


def _same_as_entries(s: Store) -> None:
    """The columns say for every item what its `Entry` says: part, rows, and each array's own span."""
    entries = s.index("f").entries
    cols = s.columns("f")
    names = list(entries)
    k = cols.table.find(names)
    assert (k >= 0).all() and len(set(k.tolist())) == len(names)
    for name in ("features", "tok"):
        row0, n = cols.rows_of(name)
        for item, pos in zip(names, k.tolist(), strict=True):
            e = entries[item]
            assert cols.part_names[cols.part[pos]] == e.part
            assert (cols.row0[pos], cols.n_rows[pos]) == (e.row0, e.n_rows)
            assert [row0[pos], n[pos]] == list((e.spans or {}).get(name, (e.row0, e.n_rows)))
    assert (cols.table.find(["nope", "", names[0] + "x"]) == -1).all()


def test_item_table_finds_what_a_dict_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    names = [f"item-{k}" * (1 + k % 3) for k in range(3000)]
    want = dict(zip(names, range(len(names)), strict=True))
    asked = [names[k] for k in rng.integers(0, len(names), 500)] + ["item-", "missing", "item-1item-1item-1", "é"]
    t = ItemTable(names)
    assert t.find(asked).tolist() == [want.get(x, -1) for x in asked]
    assert [t.find_one(x) for x in asked] == [want.get(x, -1) for x in asked]
    assert t.find([]).shape == (0,)
    assert ItemTable([]).find(["a"]).tolist() == [-1]
    monkeypatch.setattr(columns, "hash", lambda _: 7, raising=False)  # every name one hash: the exact fallback
    assert ItemTable(names).find(asked).tolist() == [want.get(x, -1) for x in asked]
    assert [ItemTable(names).find_one(x) for x in asked[:20]] == [want.get(x, -1) for x in asked[:20]]


def test_columns_equal_the_entries_after_supersedes_compaction_and_in_a_held_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _commit(path, [[f"i{b}-{k}" for k in range(b + 2)] for b in range(4)], seed=1, own=True)
    held = Store(path)
    _same_as_entries(held)
    before = {it: held.arrays("f", it, ["features", "tok"]) for it in held.items("f")}
    _commit(path, [["i0-0", "i2-1", "new"], ["i3-4"]], seed=2, own=True)  # supersedes, in parts of their own
    now = Store(path)
    _same_as_entries(now)
    assert now.columns("f").part_names != held.columns("f").part_names
    current = {it: now.arrays("f", it, ["features"])[0] for it in ("i0-0", "i2-1", "new", "i1-1")}
    compact_store(path)
    compacted = Store(path)
    _same_as_entries(compacted)
    assert len(compacted.columns("f").part_names) == 1
    for it, want in current.items():
        assert np.array_equal(compacted.rows("f", "features", [(it, r) for r in range(len(want))]), want)
    # the held handle still reads its own snapshot: old rows of superseded items (its parts were removed by
    # the compaction, but the ones it loaded are in memory)
    for it, (feats, _) in before.items():
        assert np.array_equal(held.rows("f", "features", [(it, r) for r in range(len(feats))]), feats)


def test_rows_through_the_slab_equal_per_item_reads_and_raise_as_they_do(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _commit(path, [[f"i{b}-{k}" for k in range(b + 2)] for b in range(5)], seed=3)
    _commit(path, [["i1-0", "i4-2"]], seed=4)
    s = Store(path)
    rng = np.random.default_rng(5)
    items = s.items("f")
    picks = [(it, int(rng.integers(0, s.read("f", it).features.shape[0]))) for it in rng.choice(items, 50)]
    for name in ("features", "tok", "intervals"):
        want = np.stack([np.asarray(s.arrays("f", it, [name])[0][r]) for it, r in picks])
        got = s.rows("f", name, picks)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert s._slabs["f", name] is not None  # the columnar path was taken
    assert np.array_equal(s.read("f", "i4-2").features[...], Store(path).read("f", "i4-2").features[...])
    with pytest.raises(KeyError, match="no item 'nope'"):
        s.rows("f", "features", [(items[0], 0), ("nope", 0)])
    with pytest.raises(IndexError, match="row 7 out of range"):
        s.rows("f", "features", [(items[0], 0), (items[1], 7)])
    with pytest.raises(IndexError, match="row -1 out of range"):
        s.rows("f", "features", [(items[0], -1)])


def test_a_damaged_part_raises_in_batched_reads(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _commit(path, [["a", "b"], ["c", "d"]], seed=6)
    s = Store(path)
    part = s.index("f").entries["c"].part
    (path / "f" / "parts" / part / "features" / "zarr.json").write_text("{}")
    assert s.rows("f", "features", [("a", 0), ("b", 0)]).shape == (2, 3)
    with pytest.raises(DamagedItem, match=part):
        s.rows("f", "features", [("a", 0), ("c", 0)])


def test_a_slab_is_made_only_where_the_feature_fits_half_the_cache(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _commit(path, [[f"i{k}" for k in range(10)]], seed=7)
    small = Store(path, part_cache_bytes=100)
    assert small.rows("f", "features", [("i3", 0)]).shape == (1, 3) and small._slabs["f", "features"] is None
    big = Store(path)
    assert np.array_equal(big.rows("f", "features", [("i3", 0)]), small.rows("f", "features", [("i3", 0)]))
    assert big._slabs["f", "features"] is not None


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


def test_single_reads_through_the_slabs_equal_reads_through_the_entries_and_raise_as_they_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Store.read` of a feature with only `features` and `intervals`, once a quarter of its items were read
    one at a time (or at once after a batched read), finds the item in the columnar index and its rows in the
    slabs, never through its `Entry`; it returns what the per-part path returns (a store too small for slabs
    takes that path), also for superseded items and in a snapshot held across a recommit; an unknown item
    and a damaged part raise as before."""
    path = tmp_path / "s.zarr"
    _commit_plain(path, [[f"i{b}-{k}" for k in range(b + 2)] for b in range(4)], seed=1)
    held = Store(path)
    _commit_plain(path, [["i0-0", "i2-1", "new"]], seed=2)
    fast, slow = Store(path), Store(path, part_cache_bytes=100)
    items = fast.items("f")
    quarter = len(items) // 4
    first = [_read(fast, it) for it in items[:quarter - 1]]
    assert "f" not in fast._slab_readers  # not yet: a few reads do not pay for the columns

    def no_entry(*args: object) -> None:
        raise AssertionError("read went through the index entries")

    with monkeypatch.context() as m:
        m.setattr(fast, "_entry_info", no_entry)
        got = {it: _read(fast, it) for it in items}
        assert first == [got[it] for it in items[:quarter - 1]]
        held.rows("f", "features", [("i3-0", 0)])  # a batched read made the columns: slabs at once
        m.setattr(held, "_entry_info", no_entry)
        held_got = {it: _read(held, it) for it in ("i0-0", "i2-1", "i3-0")}
    assert got == {it: _read(slow, it) for it in items}
    assert fast._slab_readers["f"] is not None and slow._slab_readers["f"] is None
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
