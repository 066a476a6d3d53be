"""Alignment on read: collapse the rows of a feature onto reference intervals. The overlap rule (times
closer than OVERLAP_TOL_S are one instant, so float noise never decides an overlap; an interval no longer than
it is a point) and how pairs are found and summed are in docs/reading.md, "Alignment".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np
from scipy.sparse import csr_matrix

from rows import check_intervals, fixed_rate_intervals
from store import Store, open_store

How = Literal["mean", "weighted", "max", "first"]
HOWS: tuple[str, ...] = get_args(How)
OVERLAP_TOL_S = 1e-5  # the CMU SDK's `epsilon`: far above float noise in seconds, far below any real time step
_PAIR_BUDGET = 1 << 22  # candidate pairs per block: bounds memory when many long rows overlap many references
_CHUNK_VALUES = 1 << 18  # values converted to float64 at a time (2 MiB): the sums stay in cache
_SCRATCH = threading.local()  # per-thread reusable work arrays (see _scratch)


def _nondecreasing(x: np.ndarray) -> bool:
    return bool(len(x) < 2 or (x[1:] >= x[:-1]).all())


@dataclass(frozen=True)
class _Group:
    order: np.ndarray  # row indices of this group, sorted by start (stable: ties keep row order)
    starts: np.ndarray  # their starts, sorted
    ends: np.ndarray  # their ends, in the same order
    longest_s: float  # the longest row of the group (0 for the group of points)
    exact: bool  # rows longer than the tolerance whose ends are sorted too: searchsorted ranges are exact


class RowIndex:
    """The rows of one feature, grouped by length class and sorted by start, ready for many lookups."""

    def __init__(self, intervals: np.ndarray) -> None:
        self.intervals = check_intervals(intervals)
        starts, ends = self.intervals[:, 0], self.intervals[:, 1]
        lengths = ends - starts
        extended = lengths > OVERLAP_TOL_S
        if len(starts) and extended.all() and _nondecreasing(starts) and _nondecreasing(ends):
            # Fixed-rate rows (the common case): one group, already in order, no sort and no class split.
            self.groups = [_Group(np.arange(len(starts)), starts, ends, float(lengths.max()), True)]
            return
        # Class -1: points (no longer than the tolerance); class k: lengths in [2^k, 2^(k+1)). Within a class the
        # longest row is at most twice the shortest, so the candidate range wastes at most about one row-length's
        # worth of rows.
        cls = np.full(len(lengths), -(2**20), dtype=np.int64)
        cls[extended] = np.floor(np.log2(lengths[extended])).astype(np.int64)
        self.groups = []
        for c in np.unique(cls):
            rows = np.flatnonzero(cls == c)
            order = rows[np.argsort(starts[rows], kind="stable")]
            exact = c != -(2**20) and _nondecreasing(ends[order])
            self.groups.append(_Group(order, starts[order], ends[order], float(lengths[rows].max()), exact))

    def _ranges(self, ref: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per group, the position range [lo, hi) of each reference interval: exact for `exact` groups, else a
        superset of candidates that `overlaps` filters."""
        out = []
        tol = OVERLAP_TOL_S
        for g in self.groups:
            if g.exact:
                # Rows longer than tol, starts and ends sorted. Overlap (docs/reading.md) is s < re - tol and
                # e > rs + tol for a reference longer than tol, s <= u + tol and e > u + tol for a point u.
                point = ref[:, 1] - ref[:, 0] <= tol
                hi = np.where(point, np.searchsorted(g.starts, ref[:, 0] + tol, "right"),
                              np.searchsorted(g.starts, ref[:, 1] - tol, "left"))
                lo = np.searchsorted(g.ends, ref[:, 0] + tol, "right")
                out.append((lo, np.maximum(hi, lo)))
                continue
            # A row of this group that overlaps [rs, re) starts in [rs - longest - tol, re + tol]; the slack
            # covers rounding.
            low = ref[:, 0] - g.longest_s - 2 * tol - 1e-9 * (np.abs(ref[:, 0]) + g.longest_s + 1.0)
            out.append((np.searchsorted(g.starts, low, "left"), np.searchsorted(g.starts, ref[:, 1] + 2 * tol, "right")))
        return out

    def _pairs(self, ref: np.ndarray, ranges: list[tuple[np.ndarray, np.ndarray]] | None = None,
               ) -> tuple[np.ndarray, np.ndarray]:
        """(overlapping rows per reference (M,), row indices (K,)), grouped by reference in order, each
        reference's rows ordered by start, then row index. `ranges`: `_ranges(ref)` when already known."""
        counts_all, refs, rows = np.zeros(len(ref), np.int64), [], []
        ranges = self._ranges(ref) if ranges is None else ranges
        for g, (lo, hi) in zip(self.groups, ranges, strict=True):
            counts = hi - lo
            total = int(counts.sum())
            if total == 0:
                continue
            offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            pos = np.repeat(lo, counts) + offsets
            if g.exact and len(self.groups) == 1:  # already the answer, in the promised order
                return counts, g.order[pos]
            r = np.repeat(np.arange(len(ref)), counts)
            cand = g.order[pos]
            keep = np.ones(total, bool) if g.exact else overlaps(ref[r], self.intervals[cand])
            refs.append(r[keep])
            rows.append(cand[keep])
        if not refs:
            return counts_all, np.zeros(0, np.int64)
        r, c = np.concatenate(refs), np.concatenate(rows)
        order = np.lexsort((c, self.intervals[c, 0], r))
        return np.bincount(r, minlength=len(ref)), c[order]

    def pairs(self, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All overlapping (reference index, row index) pairs, ordered by reference, then row start, then row."""
        counts, c = self._pairs(check_intervals(ref, "reference intervals"))
        return np.repeat(np.arange(len(counts)), counts), c

    def blocks(self, ref: np.ndarray, ranges: list[tuple[np.ndarray, np.ndarray]] | None = None) -> Iterator[slice]:
        """Slices of `ref` whose candidate pairs stay under the memory budget (`ranges`: `_ranges(ref)`)."""
        ranges = self._ranges(ref) if ranges is None else ranges
        per_ref = sum((hi - lo for lo, hi in ranges), np.zeros(len(ref), np.int64))
        ends = np.cumsum(per_ref)
        start = 0
        while True:  # one (empty) block when there is no reference
            base = ends[start - 1] if start else 0
            # the largest stop whose pairs fit the budget, at least one reference further
            stop = max(start + 1, int(np.searchsorted(ends, base + _PAIR_BUDGET, "right")))
            yield slice(start, min(stop, len(ref)))
            if stop >= len(ref):
                return
            start = stop


def overlaps(ref: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Element-wise overlap test of reference intervals `ref` (K, 2) and rows (K, 2), by the rule of docs/reading.md."""
    tol = OVERLAP_TOL_S
    rs, re_, s, e = ref[:, 0], ref[:, 1], rows[:, 0], rows[:, 1]
    ref_ext, row_ext = re_ - rs > tol, e - s > tol
    both = (s < re_ - tol) & (e > rs + tol)
    point_row = (rs - tol <= s) & (s < re_ - tol)
    point_ref = (s <= rs + tol) & (e > rs + tol)
    points = np.abs(s - rs) <= tol
    return np.where(ref_ext, np.where(row_ext, both, point_row), np.where(row_ext, point_ref, points))


def collapse(
    ref_intervals: np.ndarray, intervals: np.ndarray, values: np.ndarray, how: How = "mean",
    index: RowIndex | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Collapse rows `values` (N, D) with `intervals` (N, 2) onto `ref_intervals` (M, 2): `out` (M, D) and
    `mask` (M,), True where some row overlaps. Non-finite values are ignored per column; `out` is NaN where
    nothing is collapsed, never zero (each `how`: docs/reading.md, "How rows are collapsed")."""
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    ref = check_intervals(ref_intervals, "reference intervals")
    values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"values must be (N, D), got shape {values.shape}")
    index = index if index is not None else RowIndex(intervals)
    if len(index.intervals) != len(values):
        raise ValueError(f"{len(index.intervals)} intervals for {len(values)} value rows")
    out_dtype = np.float64 if values.dtype == np.float64 else np.float32
    out = np.full((len(ref), values.shape[1]), np.nan, out_dtype)
    mask = np.zeros(len(ref), bool)
    ranges = index._ranges(ref)  # per reference, so a block's ranges are slices of these: searched once
    for block in index.blocks(ref, ranges):
        counts, c = index._pairs(ref[block], [(lo[block], hi[block]) for lo, hi in ranges])
        _reduce(ref[block], index.intervals, values, counts, c, how, out[block], mask[block])
    return out, mask


def _scratch(slot: int, rows: int, dim: int) -> np.ndarray:
    """A (rows, dim) float64 work array reused across calls in this thread: a fresh multi-MiB array per call
    costs more in page faults than the sums themselves. At most 2 x _CHUNK_VALUES (or 2 rows) per slot."""
    cache = _SCRATCH.__dict__.setdefault("arrays", {})
    arr = cache.get(slot)
    if arr is None or arr.size < rows * dim:
        arr = cache[slot] = np.empty(max(rows * dim, 1 << 12))
    return arr[: rows * dim].reshape(rows, dim)


def _segment_sums(
    values: np.ndarray, c: np.ndarray, bounds: np.ndarray, w: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per segment k (pairs bounds[k]:bounds[k+1] of `c`, none empty): the float64 sum of w * values[c] over
    finite values (S, D), and the sum of w over those finite values: (S, D), or (S, 1) when all are finite.
    w None: every weight 1. Summed a cache-sized piece at a time as a sparse (segments x rows) matrix times the
    piece, in pair order, so a segment inside one piece gets exactly the sequential sum; pieces end at segment
    bounds unless one segment alone is larger than a piece."""
    n_seg, dim = len(bounds) - 1, values.shape[1]
    num = np.zeros((n_seg, dim))
    den_vec, den_full = np.zeros(n_seg), None  # den_full: per column, once some value is not finite
    step = max(1, _CHUNK_VALUES // max(dim, 1))
    a, n_pairs = 0, len(c)
    while a < n_pairs:
        i = int(np.searchsorted(bounds, a + step, "right")) - 1
        b = int(bounds[i]) if bounds[i] > a else min(a + step, n_pairs)
        k0 = int(np.searchsorted(bounds, a, "right")) - 1  # the segments this piece touches: k0 .. k1
        k1 = int(np.searchsorted(bounds, b - 1, "right")) - 1
        cc = c[a:b]
        lo, hi = int(cc.min()), int(cc.max()) + 1
        contiguous = hi - lo <= 2 * (b - a)  # neighbouring rows (fixed-rate features): a slice, no gather
        piece = _scratch(0, hi - lo if contiguous else b - a, dim)
        np.copyto(piece, values[lo:hi] if contiguous else values[cc])
        indptr = np.clip(bounds[k0 : k1 + 2], a, b) - a
        weights = np.ones(b - a) if w is None else w[a:b]
        mat = csr_matrix((weights, cc - lo if contiguous else np.arange(b - a), indptr), shape=(k1 - k0 + 1, len(piece)))
        finite = np.isfinite(piece)
        if finite.all():
            sums = np.diff(indptr).astype(np.float64) if w is None else np.asarray(mat.sum(axis=1)).ravel()
            if den_full is None:
                den_vec[k0 : k1 + 1] += sums
            else:
                den_full[k0 : k1 + 1] += sums[:, None]
        else:
            # NaN -> 0 as max(x, 0) + min(x, 0) (fmax/fmin skip NaN): exact for finite x, and several times
            # faster than a masked assignment; infinities are rare and zeroed by mask.
            low = _scratch(2, len(piece), dim)
            np.fmin(piece, 0.0, out=low)
            np.fmax(piece, 0.0, out=piece)
            np.add(piece, low, out=piece)
            inf = np.isinf(piece)
            if inf.any():
                piece[inf] = 0.0
            if den_full is None:
                den_full = np.repeat(den_vec[:, None], dim, axis=1)
            counted = _scratch(1, len(piece), dim)
            np.copyto(counted, finite)
            den_full[k0 : k1 + 1] += mat @ counted
        num[k0 : k1 + 1] += mat @ piece
        a = b
    return num, den_vec[:, None] if den_full is None else den_full


def _reduce(
    ref: np.ndarray, rows: np.ndarray, values: np.ndarray, counts: np.ndarray, c: np.ndarray, how: str,
    out: np.ndarray, mask: np.ndarray,
) -> None:
    """Fill `out` and `mask` (views of one block) from the overlapping rows `c`, `counts[j]` of them for ref j."""
    if len(c) == 0:
        return
    targets = np.flatnonzero(counts)
    bounds = np.r_[0, np.cumsum(counts[targets])]
    starts = bounds[:-1]
    mask[targets] = True
    if how in ("first", "max"):
        v = values[c]
        finite = np.isfinite(v)
        all_finite = bool(finite.all())
        if how == "first":
            out[targets] = v[starts] if all_finite else np.where(finite[starts], v[starts], np.nan)
            return
        best = np.maximum.reduceat(v if all_finite else np.where(finite, v, -np.inf), starts, axis=0)
        out[targets] = best if all_finite else np.where(np.isfinite(best), best, np.nan)
        return
    if how == "mean":
        num, den = _segment_sums(values, c, bounds, None)
    else:  # weighted by overlap duration, per column over its finite values
        r = np.repeat(targets, counts[targets])
        w = np.clip(np.minimum(rows[c, 1], ref[r, 1]) - np.maximum(rows[c, 0], ref[r, 0]), 0.0, None)
        num, den = _segment_sums(values, c, bounds, w)
        zero = den == 0  # no overlap weight on this column's finite values: their plain mean (NaN if none)
        if zero.any():
            num1, den1 = _segment_sums(values, c, bounds, None)
            num, den = np.where(zero, num1, num), np.where(zero, den1, den)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[targets] = np.where(den > 0, num / den, np.nan)


# ---- store level --------------------------------------------------------------------------------------

Reference = str | float | int | np.ndarray


@dataclass(frozen=True)
class Aligned:
    """Features of one item on a common reference: values[f] is (M, D), NaN where undefined; masks[f] (M,)."""

    item: str
    ref_intervals: np.ndarray  # (M, 2) float64 seconds
    values: dict[str, np.ndarray]
    masks: dict[str, np.ndarray]
    columns: dict[str, list[str]]
    ref_words: np.ndarray | None = None  # the words, when the reference is a transcript feature


def item_duration_s(store: Path | str | Store, item: str, features: Sequence[str]) -> float:
    """The item's duration: the largest `duration_s` the features record, else the latest row end."""
    s = open_store(store)
    found = [s.item_attrs(f, item).get("duration_s") for f in features]
    found = [float(d) for d in found if d is not None]
    if found:
        return max(found)
    ends = [float(s.read(f, item).intervals[:, 1].max(initial=0.0)) for f in features]
    return max(ends, default=0.0)


def reference_for(store: Path | str | Store, item: str, to: Reference, features: Sequence[str] = ()) -> np.ndarray:
    """Reference intervals: another feature's intervals (a name), a fixed rate (Hz), or given (M, 2) seconds."""
    s = open_store(store)
    if isinstance(to, str):
        return s.read(to, item).intervals
    if isinstance(to, int | float) and not isinstance(to, bool):
        return fixed_rate_intervals(item_duration_s(s, item, list(features) or s.features()), float(to))
    return check_intervals(np.asarray(to), "reference intervals")


def _row_window(intervals: np.ndarray, ref: np.ndarray) -> slice:
    """The smallest contiguous block of rows holding every row that could overlap the reference span."""
    if len(ref) == 0 or len(intervals) == 0:
        return slice(0, 0)
    lo_t, hi_t = ref[:, 0].min(), ref[:, 1].max()
    near = np.flatnonzero((intervals[:, 1] >= lo_t) & (intervals[:, 0] <= hi_t))
    return slice(int(near[0]), int(near[-1]) + 1) if len(near) else slice(0, 0)


def align(
    store: Path | str | Store, item: str, features: Sequence[str], to: Reference = "transcript",
    how: How | Mapping[str, How] = "mean",
) -> Aligned:
    """Align `features` of one item to `to`; only the rows that can overlap the reference are read."""
    s = open_store(store)
    reads = {f: s.read(f, item) for f in dict.fromkeys([*features, *([to] if isinstance(to, str) else [])])}
    if isinstance(to, str):
        ref, extras = reads[to].intervals, reads[to].extras
        words = np.asarray(extras["words"][...]) if "words" in extras else None
    else:
        ref, words = reference_for(s, item, to, features), None
    values, masks, columns = {}, {}, {}
    for f in features:
        r = reads[f]
        window = _row_window(r.intervals, ref)
        rows = np.asarray(r.features[window]) if window.stop > window.start else np.zeros((0, r.features.shape[1]))
        values[f], masks[f] = collapse(ref, r.intervals[window], rows, how[f] if isinstance(how, Mapping) else how)
        columns[f] = r.columns
    return Aligned(item, ref, values, masks, columns, words)
