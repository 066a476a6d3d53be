"""Alignment against a brute-force reference written here: a loop over every (reference, row) pair."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reading.align import HOWS, OVERLAP_TOL_S, RowIndex, align, collapse
from rows import FeatureRows, fixed_rate_intervals
from store.writer import StoreWriter

TOL = dict(rtol=1e-9, atol=1e-9)


def brute_overlaps(rs: float, re: float, s: float, e: float, tol: float = OVERLAP_TOL_S) -> bool:
    """The rule of docs/reading.md, case by case: times closer than tol are one instant."""
    if re - rs > tol and e - s > tol:
        return s < re - tol and e > rs + tol
    if re - rs > tol:  # a point row [s, s]
        return rs - tol <= s < re - tol
    if e - s > tol:  # a point reference [rs, rs]
        return s <= rs + tol and e > rs + tol
    return abs(s - rs) <= tol


def brute_collapse(ref: np.ndarray, rows: np.ndarray, values: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray]:
    out = np.full((len(ref), values.shape[1]), np.nan)
    mask = np.zeros(len(ref), bool)
    for j, (rs, re) in enumerate(ref):
        hits = [i for i, (s, e) in enumerate(rows) if brute_overlaps(rs, re, s, e)]
        if not hits:
            continue
        mask[j] = True
        if how == "first":
            i = min(hits, key=lambda i: (rows[i, 0], i))
            out[j] = np.where(np.isfinite(values[i]), values[i], np.nan)
            continue
        overlap = {i: max(0.0, min(rows[i, 1], re) - max(rows[i, 0], rs)) for i in hits}
        for d in range(values.shape[1]):
            ok = [i for i in hits if np.isfinite(values[i, d])]
            if how == "max":
                out[j, d] = max(values[i, d] for i in ok) if ok else np.nan
                continue
            # Weighted: per column over its finite rows; a zero total there means the plain mean of those rows.
            weights = overlap if how == "weighted" and sum(overlap[i] for i in ok) > 0 else dict.fromkeys(hits, 1.0)
            den = sum(weights[i] for i in ok)
            out[j, d] = sum(weights[i] * values[i, d] for i in ok) / den if den > 0 else np.nan
    return out, mask


def random_intervals(rng: np.random.Generator, n: int, grid: bool) -> np.ndarray:
    """Starts and lengths on a coarse grid (so boundaries touch and lengths are often zero), or continuous."""
    if grid:
        s = rng.integers(0, 20, n) * 0.5
        length = rng.integers(0, 5, n) * 0.5
    else:
        s = rng.uniform(0, 10, n)
        length = rng.exponential(0.7, n) * (rng.random(n) > 0.1)
    return np.stack([s, s + length], axis=1)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("seed", range(12))
def test_collapse_matches_brute_force_on_random_intervals(how: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    grid = seed % 2 == 0
    rows = random_intervals(rng, int(rng.integers(0, 40)), grid)
    ref = random_intervals(rng, int(rng.integers(0, 30)), grid)
    values = rng.normal(size=(len(rows), 3)) * 10 + 100  # an offset: errors in sums would show
    values[rng.random(values.shape) < 0.15] = np.nan
    values[rng.random(values.shape) < 0.05] = np.inf
    out, mask = collapse(ref, rows, values, how)
    want, want_mask = brute_collapse(ref, rows, values, how)
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_allclose(out, want, **TOL, equal_nan=True)


interval = st.tuples(st.integers(0, 12), st.integers(0, 4)).map(lambda t: (t[0] / 4, (t[0] + t[1]) / 4))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(interval, max_size=25),
    ref=st.lists(interval, max_size=15),
    how=st.sampled_from(HOWS),
    data=st.data(),
)
def test_collapse_property(rows: list, ref: list, how: str, data: st.DataObject) -> None:
    rows_a = np.asarray(rows, np.float64).reshape(-1, 2)
    ref_a = np.asarray(ref, np.float64).reshape(-1, 2)
    vals = data.draw(st.lists(st.sampled_from([0.0, 1.5, -2.0, 7.25, np.nan, -np.inf]),
                              min_size=2 * len(rows), max_size=2 * len(rows)))
    values = np.asarray(vals, np.float64).reshape(len(rows), 2)
    out, mask = collapse(ref_a, rows_a, values, how)
    want, want_mask = brute_collapse(ref_a, rows_a, values, how)
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_allclose(out, want, **TOL, equal_nan=True)


def sdk_align_mean(ref: np.ndarray, rows: np.ndarray, values: np.ndarray, eps: float = 10e-6) -> dict[int, np.ndarray]:
    """The CMU SDK's mmdataset.align with an average collapse (its __intersect_and_copy, restated):
    reference index -> mean of the rows whose clipped intersection is longer than eps; others absent."""
    out = {}
    for j, (rs, re) in enumerate(ref):
        if abs(re - rs) < eps:
            continue  # the SDK skips zero-length references
        near = (rows[:, 0] < re + eps) & (rows[:, 1] > rs - eps)
        clipped = np.minimum(rows[near, 1], re) - np.maximum(rows[near, 0], rs)
        keep = np.flatnonzero(near)[np.abs(clipped) > eps]
        if len(keep):
            out[j] = np.average(values[keep], axis=0)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_mean_matches_the_cmu_sdk_align_on_positive_length_intervals(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    rows = random_intervals(rng, 60, False)
    rows = rows[rows[:, 1] - rows[:, 0] > 1e-3]  # the SDK drops zero-length rows; ours aligns them (docs)
    ref = random_intervals(rng, 30, False)
    ref = ref[ref[:, 1] - ref[:, 0] > 1e-3]
    values = rng.normal(size=(len(rows), 4))
    out, mask = collapse(ref, rows, values, "mean")
    sdk = sdk_align_mean(ref, rows, values)
    assert sorted(sdk) == np.flatnonzero(mask).tolist()
    for j, v in sdk.items():
        np.testing.assert_allclose(out[j], v, **TOL)


def test_row_index_pairs_match_brute_force_on_a_long_row_among_short_ones() -> None:
    # One row spanning everything beside many short ones: the length classes keep the candidates right.
    rng = np.random.default_rng(3)
    rows = np.concatenate([[[0.0, 100.0]], random_intervals(rng, 200, False)])
    ref = fixed_rate_intervals(12.0, 1.0)
    r, c = RowIndex(rows).pairs(ref)
    want = {(j, i) for j in range(len(ref)) for i in range(len(rows)) if brute_overlaps(*ref[j], *rows[i])}
    assert set(zip(r.tolist(), c.tolist(), strict=True)) == want
    assert len(r) == len(want)


def test_float_noise_in_row_times_does_not_make_neighbours_overlap() -> None:
    """10 ms rows built by accumulating a float step (`arange(n) * 0.01`, then `start + 0.01`) overlap their
    neighbours by ~1e-15 s; within the tolerance that is touching, so they collapse exactly like rows built
    from integers (`i / 100`), onto one-second steps and onto word times alike."""
    n = 13_200
    noisy = np.stack([np.arange(n) * 0.01, np.arange(n) * 0.01 + 0.01], axis=1)
    exact = fixed_rate_intervals(n / 100, 100.0)
    assert (noisy[:-1, 1] > noisy[1:, 0]).sum() > 1000 and (exact[:-1, 1] == exact[1:, 0]).all()
    values = np.random.default_rng(1).normal(size=(n, 3)) + 50
    words = np.array([[0.12, 0.57], [1.0, 1.3], [17.0, 17.25], [99.99, 101.0], [130.0, 130.0]])
    for ref in (fixed_rate_intervals(n / 100, 1.0), words):
        got, got_mask = collapse(ref, noisy, values)
        want, want_mask = collapse(ref, exact, values)
        np.testing.assert_array_equal(got_mask, want_mask)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    one_hz, _ = collapse(fixed_rate_intervals(n / 100, 1.0), noisy, values)
    np.testing.assert_allclose(one_hz, values.reshape(132, 100, 3).mean(axis=1), rtol=1e-12)  # 100 rows each


def test_overlaps_shorter_than_the_tolerance_do_not_count() -> None:
    ref = np.array([[1.0, 2.0]])
    rows = np.array([[0.5, 1.0 + 0.9 * OVERLAP_TOL_S], [2.0 - 0.9 * OVERLAP_TOL_S, 3.0], [1.5, 1.5 + OVERLAP_TOL_S / 2],
                     [0.5, 1.0 + 2 * OVERLAP_TOL_S]])
    r, c = RowIndex(rows).pairs(ref)
    assert c.tolist() == [3, 2]  # by start: the long row reaching 2 tol in, then the short row (a point at 1.5)
    point = np.array([[2.0 - OVERLAP_TOL_S / 2] * 2])  # the point 2.0 - tol/2 is 2.0
    assert RowIndex(rows).pairs(point)[1].tolist() == [1]


@pytest.mark.parametrize("seed", range(6))
def test_sorted_rows_of_varied_length_match_brute_force(seed: int) -> None:
    """Rows sorted by start and by end (the exact-range path), with gaps and overlaps, against every kind of
    reference: long, short, points, touching."""
    rng = np.random.default_rng(50 + seed)
    starts = np.cumsum(rng.choice([0.0, 0.25, 0.5, 0.3], 60))
    rows = np.stack([starts, starts + rng.choice([0.25, 0.5, 0.75], 60)], axis=1)
    rows[:, 1] = np.maximum.accumulate(rows[:, 1])
    ref = random_intervals(rng, 40, seed % 2 == 0)
    values = rng.normal(size=(60, 2)) + 10
    values[rng.random(values.shape) < 0.2] = np.nan
    for how in HOWS:
        out, mask = collapse(ref, rows, values, how)
        want, want_mask = brute_collapse(ref, rows, values, how)
        np.testing.assert_array_equal(mask, want_mask)
        np.testing.assert_allclose(out, want, **TOL, equal_nan=True)


@pytest.mark.parametrize("how", ["mean", "weighted"])
@pytest.mark.parametrize("seed", range(4))
def test_sums_split_into_small_pieces_match_brute_force(monkeypatch, how: str, seed: int) -> None:
    """Pieces of a few values force every path of the piecewise sums: segments split across pieces, gathered
    rows, a non-finite value appearing after all-finite pieces."""
    import reading.align

    monkeypatch.setattr(reading.align, "_CHUNK_VALUES", 7)
    rng = np.random.default_rng(seed)
    rows = random_intervals(rng, 50, seed % 2 == 0) if seed < 2 else fixed_rate_intervals(5.0, 10.0)
    ref = np.concatenate([random_intervals(rng, 20, seed % 2 == 0), [[0.0, 5.0]]])
    values = rng.normal(size=(len(rows), 3)) * 10 + 100
    values[-5:][rng.random((5, 3)) < 0.5] = np.nan
    values[-1, 0] = np.inf
    out, mask = collapse(ref, rows, values, how)
    want, want_mask = brute_collapse(ref, rows, values, how)
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_allclose(out, want, **TOL, equal_nan=True)


def test_worked_example_from_docs() -> None:
    """The example of docs/reading.md, by hand: words on 0.5 s acoustic rows."""
    words = np.array([[0.0, 0.4], [0.4, 1.2], [1.2, 1.2], [2.0, 2.5]])  # hi, there, uh (zero-length), friend
    acoustic = np.array([[0.0, 0.5], [0.5, 1.0], [1.0, 1.5], [1.5, 2.0]])
    values = np.array([[1.0], [3.0], [np.nan], [8.0]])
    out, mask = collapse(words, acoustic, values, "mean")
    np.testing.assert_array_equal(mask, [True, True, True, False])  # "friend" only touches [1.5, 2.0)
    np.testing.assert_allclose(out[:, 0], [1.0, 2.0, np.nan, np.nan], equal_nan=True)
    w_out, _ = collapse(words, acoustic, values, "weighted")
    np.testing.assert_allclose(w_out[:, 0], [1.0, (0.1 * 1 + 0.5 * 3) / 0.6, np.nan, np.nan], equal_nan=True)
    first, _ = collapse(words, acoustic, values, "first")
    np.testing.assert_allclose(first[:, 0], [1.0, 1.0, np.nan, np.nan], equal_nan=True)


def test_weighted_falls_back_to_the_mean_per_column_over_finite_values() -> None:
    # The only finite value of column 0 sits on a zero-length row; the long row's NaN must not claim the weight.
    ref = np.array([[0.0, 1.0]])
    rows = np.array([[0.2, 0.2], [0.0, 1.0]])
    values = np.array([[5.0, 1.0], [np.nan, 3.0]])
    out, mask = collapse(ref, rows, values, "weighted")
    np.testing.assert_allclose(out, [[5.0, 3.0]])  # column 1: all the overlap weight is on the long row
    np.testing.assert_allclose(out, brute_collapse(ref, rows, values, "weighted")[0])
    np.testing.assert_allclose(collapse(ref, rows, values, "mean")[0][:, 0], [5.0])


def test_sorted_fixed_rate_rows_match_brute_force_at_scale() -> None:
    rng = np.random.default_rng(0)
    rows = fixed_rate_intervals(30.0, 100.0)
    values = rng.normal(size=(len(rows), 4)) + 250.0
    ref = np.sort(rng.uniform(0, 30, (60, 2)), axis=1)
    out, mask = collapse(ref, rows, values, "weighted")
    want, want_mask = brute_collapse(ref, rows, values, "weighted")
    np.testing.assert_array_equal(mask, want_mask)
    np.testing.assert_allclose(out, want, **TOL)


def test_fixed_rate_intervals_clip_the_last_row() -> None:
    np.testing.assert_allclose(fixed_rate_intervals(2.5, 1.0), [[0, 1], [1, 2], [2, 2.5]])
    assert fixed_rate_intervals(3.0, 1.0).shape == (3, 2)
    assert fixed_rate_intervals(0.0, 1.0).shape == (0, 2)


def test_bad_input_is_rejected_with_the_values() -> None:
    with pytest.raises(ValueError, match=r"row 1 ends before it starts: \[2.0, 1.0\]"):
        collapse(np.array([[0.0, 1.0], [2.0, 1.0]]), np.zeros((0, 2)), np.zeros((0, 1)))
    with pytest.raises(ValueError, match="2 intervals for 3 value rows"):
        collapse(np.array([[0.0, 1.0]]), np.zeros((2, 2)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="how must be one of"):
        collapse(np.array([[0.0, 1.0]]), np.zeros((1, 2)), np.zeros((1, 1)), "median")


def test_store_level_align_to_words_rate_and_feature(tmp_path) -> None:
    w = StoreWriter(tmp_path / "s.zarr", "test")
    word_iv = np.array([[0.2, 0.6], [0.6, 1.4], [2.5, 2.7]])
    acoustic_iv = fixed_rate_intervals(3.0, 100.0)
    acoustic = np.arange(len(acoustic_iv), dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    w.set_feature("transcript", {"columns": ["t0"], "rate_hz": None})
    w.set_feature("acoustic", {"columns": ["a0", "a1"], "rate_hz": 100.0})
    words = np.array(["hello", "there", "friend"])
    w.commit("transcript", "clip", FeatureRows(np.ones((3, 1), np.float32), word_iv, {"words": words}),
             {"duration_s": 3.0})
    w.commit("acoustic", "clip", FeatureRows(acoustic, acoustic_iv), {"duration_s": 3.0})

    a = align(tmp_path / "s.zarr", "clip", ["acoustic"], to="transcript")
    want, _ = brute_collapse(word_iv, acoustic_iv, acoustic.astype(np.float64), "mean")
    np.testing.assert_allclose(a.values["acoustic"], want, rtol=1e-6)
    assert a.ref_words.tolist() == ["hello", "there", "friend"]
    assert a.columns["acoustic"] == ["a0", "a1"]

    b = align(tmp_path / "s.zarr", "clip", ["acoustic", "transcript"], to=1.0)
    np.testing.assert_allclose(b.ref_intervals, [[0, 1], [1, 2], [2, 3]])
    np.testing.assert_allclose(b.values["acoustic"][:, 0], [49.5, 149.5, 249.5], rtol=1e-6)
    np.testing.assert_array_equal(b.masks["transcript"], [True, True, True])

    c = align(tmp_path / "s.zarr", "clip", ["transcript"], to=np.array([[1.5, 2.0]]))
    np.testing.assert_array_equal(c.masks["transcript"], [False])
    assert np.isnan(c.values["transcript"]).all()
