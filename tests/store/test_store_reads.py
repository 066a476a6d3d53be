"""The fast read paths: datasets built from the index, batched reads, text-only without alignment."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from reading import datasets
from reading.datasets import SocialIQA2, SocialIQA4, collate_qa
from rows import FeatureRows
from testing.synthetic_store import build_synthetic_store


@pytest.fixture(scope="module")
def store(tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_store(tiny_root_template, tmp_path_factory.mktemp("reads") / "tiny.zarr", 8, 16)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        if isinstance(v, torch.Tensor):
            torch.testing.assert_close(v, b[k], rtol=0, atol=0)
        elif isinstance(v, dict):
            _same(v, b[k])
        else:
            assert v == b[k]


@pytest.mark.parametrize("text", ["tokens", "pooled"])
@pytest.mark.parametrize("cls", [SocialIQA2, SocialIQA4])
def test_the_batched_path_equals_one_sample_at_a_time(store: Path, text: str, cls: type) -> None:
    ds = cls(store, split=None, modalities=("frames",), to=1.0, exclude_filtered=False, text=text)
    order = list(np.random.default_rng(0).permutation(len(ds)))
    batch = ds.__getitems__(order)
    assert len(batch) == len(ds)
    for i, got in zip(order, batch, strict=True):
        _same(got, ds[int(i)])


def test_a_dataloader_reads_a_batch_in_one_gather(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With automatic batching the DataLoader calls __getitems__: one `rows` gather per array per batch."""
    from store.reader import Store

    ds = SocialIQA2(store, split=None, modalities=(), to=1.0, exclude_filtered=False, text="tokens")
    expected = [collate_qa([ds[i] for i in range(k, min(k + 8, len(ds)))]) for k in range(0, len(ds), 8)]
    calls = []
    real = Store.rows
    monkeypatch.setattr(Store, "rows", lambda self, *a: (calls.append(a[:2]), real(self, *a))[1])
    got = list(DataLoader(ds, batch_size=8, collate_fn=collate_qa))
    assert len(calls) == 2 * len(got)  # tokens and token_mask, once per batch
    for a, b in zip(got, expected, strict=True):
        _same(a, b)


def test_a_text_only_dataset_never_aligns_nor_needs_a_reference(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "align", lambda *a, **k: pytest.fail("a text-only dataset aligned"))
    ds = SocialIQA2(store, split=None, modalities=(), to="no-such-feature", exclude_filtered=False)
    assert len(ds) == 24
    out = ds[3]
    assert out["modalities"] == {} and out["ref_intervals"].shape == (0, 2)
    batch = collate_qa(ds.__getitems__([0, 5, 7]))
    assert batch["lengths"].tolist() == [0, 0, 0] and batch["question"].shape[0] == 3


@pytest.mark.parametrize("to,fill", [(1.0, 0.0), ("transcript", 0.0), ("transcript", -7.5)])
def test_a_materialised_view_reads_what_alignment_gives(store: Path, to: object, fill: float) -> None:
    """The view is made once (and kept while its sources are unchanged); its samples equal the aligned ones,
    with any fill value (the view stores 0.0 and `valid`; undefined values are there: faces, empty steps)."""
    mods = ("frames", "acoustic", "faces")
    direct = SocialIQA2(store, split=None, modalities=mods, to=to, exclude_filtered=False, fill_value=fill)
    viewed = SocialIQA2(store, split=None, modalities=mods, to=to, exclude_filtered=False, materialized=True,
                        fill_value=fill)
    assert viewed.view is not None and viewed.view.is_dir() and viewed.samples == direct.samples
    invalid = 0
    for i in range(len(direct)):
        a, b = direct[i], viewed[i]
        for f in mods:  # values stored as float32: the same float32 the direct path returns
            for k in ("x", "mask", "valid"):
                torch.testing.assert_close(a["modalities"][f][k], b["modalities"][f][k], rtol=0, atol=0)
            invalid += int((~b["modalities"][f]["valid"]).sum())
            assert (b["modalities"][f]["x"][~b["modalities"][f]["valid"]] == fill).all()
        torch.testing.assert_close(a["ref_intervals"], b["ref_intervals"], rtol=0, atol=0)
    assert invalid > 0
    from store.reader import Store

    parts = {f: dict(Store(viewed.view).index(f).parts) for f in mods}
    again = SocialIQA2(store, split=None, modalities=mods, to=to, exclude_filtered=False, materialized=True)
    assert again.view == viewed.view and {f: dict(Store(again.view).index(f).parts) for f in mods} == parts
    assert "_views" not in open_store_features(store)


def _view_copy(store: Path, tmp_path: Path) -> tuple[Path, dict]:
    import shutil

    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy, ignore=shutil.ignore_patterns("_views"))
    return copy, {"split": None, "modalities": ("frames", "faces"), "to": "transcript", "exclude_filtered": False,
                  "cache_items": 0}


def _item_samples(ds: SocialIQA2, item: str) -> list[dict]:
    return [ds[i] for i, smp in enumerate(ds.samples) if smp.item == item]


def test_a_view_follows_a_recomputed_item_while_a_held_reader_keeps_its_snapshot(store: Path, tmp_path: Path) -> None:
    """A re-extracted item is aligned again into the view (the others' rows stay in their parts); a dataset
    that had the view open keeps reading the rows of its snapshot, a new one reads the new rows."""
    from store.reader import Store, open_store
    from store.writer import StoreWriter

    copy, opts = _view_copy(store, tmp_path)
    held = SocialIQA2(copy, materialized=True, **opts)
    before = _item_samples(held, "tiny-a")  # opens the view: its snapshot is pinned
    parts = {i: e.part for i, e in Store(held.view).index("frames").entries.items()}
    r = open_store(copy).read("frames", "tiny-a")
    with StoreWriter(copy, "sample") as w:
        w.commit("frames", "tiny-a", FeatureRows(np.asarray(r.features[...]) * 2 + 1, r.intervals),
                 {**r.attrs, "fingerprint": "recomputed"})
    fresh = SocialIQA2(copy, materialized=True, **opts)
    assert fresh.view == held.view
    now = {i: e.part for i, e in Store(fresh.view).index("frames").entries.items()}
    assert now["tiny-a"] != parts["tiny-a"] and all(now[i] == parts[i] for i in parts if i != "tiny-a")
    direct = _item_samples(SocialIQA2(copy, **{**opts, "cache_items": 8}), "tiny-a")
    for a, b in zip(direct, _item_samples(fresh, "tiny-a"), strict=True):
        _same(a, b)
    assert not torch.equal(direct[0]["modalities"]["frames"]["x"], before[0]["modalities"]["frames"]["x"])
    for a, b in zip(before, _item_samples(held, "tiny-a"), strict=True):  # the held reader: its snapshot
        _same(a, b)


def test_a_view_item_written_by_an_older_layout_is_aligned_again_not_misread(store: Path, tmp_path: Path) -> None:
    """Layout 1 stored NaN values and no `valid`; its items (same fingerprint hash without the layout) are
    aligned again by the next materialise, and read like the aligned ones."""
    from reading import views
    from store import layout
    from store.reader import Store, open_store
    from store.writer import StoreWriter

    copy, opts = _view_copy(store, tmp_path)
    path = SocialIQA2(copy, materialized=True, **opts).view
    src = open_store(copy)
    old_fp = layout.sha256_of([src.index(f).entries["tiny-b"].fingerprint for f in ("frames", "faces", "transcript")])[:32]
    v = Store(path)
    with StoreWriter(path, f"view-{path.stem.split('-', 1)[1]}") as w:
        for f in ("frames", "faces"):
            r = v.read(f, "tiny-b")
            x = np.where(np.asarray(r.extras["valid"][...]), np.asarray(r.features[...]), np.nan).astype(np.float32)
            w.commit(f, "tiny-b", FeatureRows(x, r.intervals, {"mask": np.asarray(r.extras["mask"][...])}),
                     {"fingerprint": old_fp, "spec_hash": r.attrs["spec_hash"]})
    assert "valid" not in Store(path).read("frames", "tiny-b").extras
    viewed = SocialIQA2(copy, materialized=True, **opts)
    assert viewed.view == path and "valid" in Store(path).read("frames", "tiny-b").extras
    assert views.LAYOUT == 2
    for a, b in zip(_item_samples(SocialIQA2(copy, **opts), "tiny-b"), _item_samples(viewed, "tiny-b"), strict=True):
        _same(a, b)


def open_store_features(path: Path) -> list[str]:
    from store.reader import open_store

    return open_store(path).features()


def test_a_plan_is_cached_with_the_store_and_made_again_when_the_store_changes(
        store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from store.writer import StoreWriter

    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy, ignore=shutil.ignore_patterns("_views"))
    first = SocialIQA4(copy, split=None, modalities=("frames",), to=1.0, exclude_filtered=False)
    real_plan = SocialIQA4._plan
    monkeypatch.setattr(SocialIQA4, "_plan", lambda *a: pytest.fail("planned again"))
    again = SocialIQA4(copy, split=None, modalities=("frames",), to=1.0, exclude_filtered=False)
    assert again.samples == first.samples and again.dropped == first.dropped
    other = SocialIQA4  # another seed is another plan
    monkeypatch.setattr(SocialIQA4, "_plan", real_plan)
    assert other(copy, split=None, modalities=("frames",), to=1.0, exclude_filtered=False, seed=5).samples
    from store.reader import open_store

    s = open_store(copy)
    r = s.read("frames", "tiny-a")
    with StoreWriter(copy, "sample") as w:  # a re-extraction of one item: the cached plan is not used
        w.commit("frames", "tiny-a", FeatureRows(np.asarray(r.features[...]), r.intervals), r.attrs)
    calls = []
    monkeypatch.setattr(SocialIQA4, "_plan", lambda *a: (calls.append(1), real_plan(*a))[1])
    assert SocialIQA4(copy, split=None, modalities=("frames",), to=1.0, exclude_filtered=False).samples == first.samples
    assert calls == [1]


def test_a_damaged_plan_cache_file_is_built_again_not_used(store: Path, tmp_path: Path, caplog) -> None:
    """Issue 53 point 2 (any cache): a plan file edited in a way that keeps it valid JSON (a sample's row number,
    a key) is said and the plan built again: the samples equal a fresh plan's."""
    import shutil

    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy, ignore=shutil.ignore_patterns("_views"))
    opts = {"split": None, "modalities": ("frames",), "to": 1.0, "exclude_filtered": False}
    want = SocialIQA2(copy, **opts).samples
    [cached] = (copy / "_views" / "plans").glob("*.json")
    good = cached.read_text()
    for damage in (lambda t: t.replace('"samples"', '"sampl#s"'), lambda t: t.replace(",0,", ",1,", 1),
                   lambda t: t.replace('"dropped":', '"dropped":1,"x":', 1)):
        bad = damage(good)
        assert bad != good
        cached.write_text(bad)
        caplog.clear()
        assert SocialIQA2(copy, **opts).samples == want
        assert any("is damaged" in r.getMessage() and str(cached) in r.getMessage() for r in caplog.records)
        assert cached.read_text() == good  # saved again whole


def test_a_cached_plan_is_not_used_once_a_part_is_damaged(store: Path, tmp_path: Path) -> None:
    import shutil

    from store.reader import open_store

    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy, ignore=shutil.ignore_patterns("_views"))
    opts = {"split": None, "modalities": ("frames",), "to": 1.0, "exclude_filtered": False}
    assert {s.item for s in SocialIQA2(copy, **opts).samples} == {"tiny-a", "tiny-b", "tiny-c"}
    part = open_store(copy).index("frames").entries["tiny-a"].part  # one part per item in this store
    shutil.rmtree(copy / "frames" / "parts" / part)
    ds = SocialIQA2(copy, **opts)
    assert {s.item for s in ds.samples} == {"tiny-b", "tiny-c"}


@pytest.mark.parametrize("whole_bytes", [16 << 20, 0, 200])
def test_rows_gathers_what_reads_give_from_slabs_lazy_parts_and_both(tmp_path: Path, whole_bytes: int) -> None:
    """`Store.rows` over items of several parts, repeated items, rows past the first, 2-d rows: the same as
    each item's own read, whether the arrays are in slabs, read lazily (0), or one of each (200 bytes:
    `features`' parts are small enough for a slab, `tok`'s are not)."""
    from store.reader import Store
    from store.writer import StoreWriter

    rng = np.random.default_rng(4)
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "t") as w:
        w.set_feature("f", {"spec_hash": "x", "columns": ["a", "b", "c"], "rate_hz": None})
        for batch in range(5):  # parts of 1..5 items, 1..4 rows each
            w.commit_batch("f", [(f"i{batch}-{k}", FeatureRows(rng.standard_normal((1 + k % 4, 3)).astype(np.float32),
                                                                np.zeros((1 + k % 4, 2)),
                                                                {"tok": rng.standard_normal((1 + k % 4, 2, 3)),
                                                                 "word": np.array([f"w{batch}{k}{r}" for r in range(1 + k % 4)])}),
                                  {"spec_hash": "x", "fingerprint": "-"}) for k in range(batch + 1)])
    s = Store(path, whole_array_bytes=whole_bytes)
    items = s.items("f")
    picks = [(it, int(r)) for it in rng.choice(items, 40) for r in [rng.integers(0, s.read("f", it).features.shape[0])]]
    for name in ("features", "tok", "word"):  # strings too: a StringDType slab, or zarr's own strings
        want = np.stack([np.asarray((s.read("f", it).features if name == "features" else s.read("f", it).extras[name])[r])
                         for it, r in picks])
        got = s.rows("f", name, picks)
        if name == "word":  # a string row reads as a Python str, which numpy stacks as fixed-width
            assert got.dtype == np.dtypes.StringDType() and got.tolist() == want.tolist()
            continue
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    kinds = {name: {type(s.part_array("f", p, name)).__name__ for p in s.index("f").parts}
             for name in ("features", "tok", "word")}
    assert kinds == {16 << 20: {"features": {"ndarray"}, "tok": {"ndarray"}, "word": {"ndarray"}},
                     0: {"features": {"RowView"}, "tok": {"RowView"}, "word": {"RowView"}},
                     200: {"features": {"ndarray"}, "tok": {"RowView"}, "word": {"RowView"}}}[whole_bytes], kinds
    with pytest.raises(IndexError, match="row 9 out of range"):
        s.rows("f", "features", [(items[0], 9)])
    assert s.rows("f", "features", []).shape == (0,)


def test_a_read_from_the_slabs_is_the_read_of_its_part_and_a_noted_part_is_checked_again(tmp_path: Path) -> None:
    """A part that passed its check and holds only `features` and `intervals`, both in their slabs, is read
    without the per-array lookups (`Store._ready`): the same rows, dtypes, attributes and columns as a reader
    that reads every part lazily (no slab); a part with an extra array never takes that branch; a part that a
    read noted damaged (a chunk failing its checksum) is checked again, in full, on its next read."""
    from store import layout
    from store.integrity import DamagedItem
    from store.reader import Store
    from store.writer import StoreWriter

    rng = np.random.default_rng(5)
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "t") as w:
        w.set_feature("f", {"spec_hash": "x", "columns": ["a", "b", "c"], "rate_hz": None})
        for batch in range(4):  # parts 0-2 plain, part 3 with an extra array
            w.commit_batch("f", [(f"i{batch}-{k}", FeatureRows(rng.standard_normal((1 + k, 3)).astype(np.float32),
                                                                np.sort(rng.random((1 + k, 2)), axis=1),
                                                                {"tok": rng.standard_normal((1 + k, 2))} if batch == 3 else {}),
                                  {"spec_hash": "x", "fingerprint": "-", "k": k}) for k in range(3)])
    s, lazy = Store(path), Store(path, whole_array_bytes=0)
    items = s.items("f")
    for rep in range(2):  # the first pass loads the slabs, the second reads from them
        for item in items:
            got, want = s.read("f", item), lazy.read("f", item)
            assert got.intervals.dtype == np.float64 and (type(got.features) is np.ndarray or not rep)
            np.testing.assert_array_equal(got.features, np.asarray(want.features))
            np.testing.assert_array_equal(got.intervals, want.intervals)
            assert (got.attrs, got.columns, got.extras.keys()) == (want.attrs, want.columns, want.extras.keys())
            for name, rows in got.extras.items():
                np.testing.assert_array_equal(np.asarray(rows), np.asarray(want.extras[name]))
    cols = s.index("f")
    ready = {cols.part_names[p] for p, got in enumerate(s._ready["f"]) if got is not None}
    assert ready == {cols.part_names[cols.part[cols.pos[f"i{b}-0"]]] for b in range(3)}
    part = cols.part_names[cols.part[cols.pos["i0-1"]]]
    chunk = next(p for p in (layout.part_dir(path, "f", part) / "features").rglob("*") if p.is_file() and p.name != "zarr.json")
    before = np.asarray(lazy.read("f", "i0-1").features)
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0xFF  # the same size: only the full check (SHA-256) finds it
    chunk.write_bytes(bytes(data))
    np.testing.assert_array_equal(s.read("f", "i0-1").features, before)  # its rows are in memory already
    s._note("f", part, "features: a chunk failed its checksum")  # what a read that meets such a chunk does
    with pytest.raises(DamagedItem, match=f"{part}: damaged item i0-1"):
        s.read("f", "i0-1")
