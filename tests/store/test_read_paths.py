"""Every read path of the engine gives what was committed, whatever the cache decides (one property, many stores).

The reader serves one item's rows four ways: a slice of a slab (its part loaded into one allocation per array),
the ready branch of `Store.read` (a checked part whose `features` and `intervals` are both in their slabs), a
lazy row view that reads through zarr, and `Store.rows`'s batched gather (a `take` from a slab, or one zarr gather
per part). Which one a read takes depends on the cache's bytes, the array's size, the dtypes and what was read
before. Here hypothesis draws stores (parts of several items, superseded items, float16/float32 rows, 2-d and
string extras) and handles (slab sizes from everything to nothing) and a read order, and every path is held to two
references that share no reader code: the rows as committed (the last commit of an item wins), and a plain zarr
read of the part folder the index names (zarr-python's own array, sliced by the index entry's rows).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rows import FeatureRows
from store.reader import Store
from store.writer import StoreWriter

SPEC = {"spec_hash": "x", "columns": ["a", "b", "c"], "rate_hz": None}


@st.composite
def stores(draw: st.DrawFn) -> dict:
    """Batches of (item, rows, dtype, with extras): items may come back in a later batch (superseded)."""
    names = [f"i{k}" for k in range(draw(st.integers(2, 9)))]
    dtype = draw(st.sampled_from(["float32", "float16"]))
    extras = draw(st.booleans())  # a part with extras never takes the ready branch
    batches = draw(st.lists(st.lists(st.tuples(st.sampled_from(names), st.integers(1, 5)), min_size=1, max_size=5,
                                     unique_by=lambda t: t[0]), min_size=1, max_size=4))
    return {"dtype": dtype, "extras": extras, "batches": batches, "seed": draw(st.integers(0, 2**16))}


def _write(path: Path, plan: dict) -> dict[str, FeatureRows]:
    """Commit the plan; the truth is each item's last committed rows."""
    rng = np.random.default_rng(plan["seed"])
    truth: dict[str, FeatureRows] = {}
    with StoreWriter(path, "t") as w:
        w.set_feature("f", SPEC)
        for b, batch in enumerate(plan["batches"]):
            pairs = []
            for item, n in batch:
                start = np.round(rng.uniform(0, 100, n), 3)
                ex = ({"tok": rng.standard_normal((n, 2, 3)).astype(np.float32),
                       "word": np.array([f"{item}-{b}-{r}-é" for r in range(n)])} if plan["extras"] else {})
                rows = FeatureRows(rng.standard_normal((n, 3)).astype(plan["dtype"]),
                                   np.stack([start, start + 0.5], 1), ex)
                truth[item] = rows
                pairs.append((item, rows, {"spec_hash": "x", "fingerprint": f"{b}-{item}"}))
            w.commit_batch("f", pairs)
    return truth


def _plain(path: Path, s: Store, item: str, name: str) -> np.ndarray:
    """The item's rows of array `name` by zarr alone: the part folder and rows the index entry names."""
    e = s.index("f").entries[item]
    return np.asarray(zarr.open_array(path / "f" / "parts" / e.part / name, mode="r")[e.row0:e.row0 + e.n_rows])


def _same(got: object, want: np.ndarray) -> None:
    got = np.asarray(got[...] if not isinstance(got, np.ndarray) else got)
    if want.dtype.kind == "U":  # strings come back as numpy's StringDType (zarr's own and the slabs')
        assert got.tolist() == want.tolist()
        return
    assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=stores(), cache=st.sampled_from([64 << 20, 600, 0]), whole=st.sampled_from([16 << 20, 300, 0]),
       order=st.randoms(use_true_random=False))
def test_every_read_path_gives_the_committed_rows(tmp_path_factory: pytest.TempPathFactory, plan: dict, cache: int,
                                                  whole: int, order) -> None:
    path = tmp_path_factory.mktemp("s") / "s.zarr"
    truth = _write(path, plan)
    s = Store(path, part_cache_bytes=cache, whole_array_bytes=whole)
    items = sorted(truth)
    assert s.items("f") == items
    names = ["features", "intervals", *(["tok", "word"] if plan["extras"] else [])]
    reads = [it for it in items for _ in range(2)]  # twice: the second may take the ready branch or a loaded slab
    order.shuffle(reads)
    for it in reads:
        r = s.read("f", it)
        want = truth[it]
        _same(r.features, want.features)
        _same(r.intervals, want.intervals)
        for name, value in want.extras.items():
            _same(r.extras[name], value)
        assert r.attrs["fingerprint"].endswith(f"-{it}") and r.columns == SPEC["columns"]
        for name in names:
            _same(_plain(path, s, it, name), want.features if name == "features" else
                  want.intervals if name == "intervals" else want.extras[name])
    picks = [(it, order.randrange(len(truth[it].features))) for it in order.choices(items, k=12)]
    for name in names:
        want = np.stack([(truth[it].features if name == "features" else truth[it].intervals if name == "intervals"
                          else truth[it].extras[name])[row] for it, row in picks])
        _same(s.rows("f", name, picks), want)
        _same(Store(path, part_cache_bytes=cache, whole_array_bytes=whole).rows("f", name, picks), want)  # cold
    assert s.cached_bytes <= cache
    with pytest.raises(KeyError, match="no item 'nope'"):
        s.read("f", "nope")
    with pytest.raises(KeyError, match="no item 'nope'"):
        s.rows("f", "features", [(items[0], 0), ("nope", 0)])
    for bad in (len(truth[items[-1]].features), -1):
        with pytest.raises(IndexError, match=f"row {bad} out of range"):
            s.rows("f", "features", [(items[0], 0), (items[-1], bad)])
