"""Alignment on read: collapse the rows of a feature onto reference intervals (docs/reading.md).

Overlap rule, for a row [s, e) and a reference interval [rs, re):
- both of positive length: they overlap when s < re and e > rs (touching is not overlapping);
- a zero-length row [t, t] overlaps a reference when rs <= t < re;
- a zero-length reference [t, t] collects the rows with s <= t < e;
- a zero-length row [t, t] and a zero-length reference [u, u] overlap when t == u.

Each reference interval gets one output row: the rows that overlap it collapsed by `how`. A reference
interval that no row overlaps is False in the returned mask and NaN in the output, never zero.

The pairs (reference, row) that overlap are found with sorted-interval arithmetic: rows are grouped by
length class (powers of two), each group sorted by start, and for each reference interval the candidate
rows of a group are one `searchsorted` range [rs - longest row of the group, re]. Rows may be unsorted and
may overlap each other (words do). For fixed-rate features (one group, sorted) the candidates are the
overlapping rows plus at most one on each side, so the cost is O((N + M) log N + pairs x D).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

How = Literal["mean", "weighted", "max", "first"]
HOWS: tuple[str, ...] = get_args(How)
_PAIR_BUDGET = 1 << 22  # candidate pairs per block: bounds memory when many long rows overlap many references


def as_intervals(intervals: np.ndarray, what: str = "intervals") -> np.ndarray:
    """(N, 2) float64 [start, end) with finite values and end >= start, else ValueError naming the bad row."""
    arr = np.asarray(intervals, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{what} must be (N, 2), got shape {arr.shape}")
    if len(arr) and not np.all(np.isfinite(arr)):
        bad = int(np.argmax(~np.all(np.isfinite(arr), axis=1)))
        raise ValueError(f"{what}: row {bad} is not finite: {arr[bad].tolist()}")
    if len(arr) and np.any(arr[:, 1] < arr[:, 0]):
        bad = int(np.argmax(arr[:, 1] < arr[:, 0]))
        raise ValueError(f"{what}: row {bad} ends before it starts: {arr[bad].tolist()}")
    return arr


def fixed_rate_intervals(duration_s: float, rate_hz: float) -> np.ndarray:
    """[k / rate, (k + 1) / rate) for k = 0 .. ceil(duration * rate) - 1, the last one clipped to the duration."""
    if rate_hz <= 0 or not np.isfinite(rate_hz):
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    if duration_s < 0 or not np.isfinite(duration_s):
        raise ValueError(f"duration_s must be >= 0, got {duration_s}")
    n = int(np.ceil(duration_s * rate_hz - 1e-9))
    starts = np.arange(n, dtype=np.float64) / rate_hz
    ends = np.minimum(np.arange(1, n + 1, dtype=np.float64) / rate_hz, duration_s)
    return np.stack([starts, ends], axis=1)


@dataclass(frozen=True)
class _Group:
    order: np.ndarray  # row indices of this group, sorted by start (stable: ties keep row order)
    starts: np.ndarray  # their starts, sorted
    longest_s: float  # the longest row of the group (0 for the zero-length group)


class RowIndex:
    """The rows of one feature, grouped by length class and sorted by start, ready for many lookups."""

    def __init__(self, intervals: np.ndarray) -> None:
        self.intervals = as_intervals(intervals)
        lengths = self.intervals[:, 1] - self.intervals[:, 0]
        # Class -1: zero-length rows; class k: lengths in [2^k, 2^(k+1)). Within a class the longest row is at
        # most twice the shortest, so the candidate range wastes at most about one row-length's worth of rows.
        cls = np.full(len(lengths), -(2**20), dtype=np.int64)
        pos = lengths > 0
        cls[pos] = np.floor(np.log2(lengths[pos])).astype(np.int64)
        self.groups = []
        for c in np.unique(cls):
            rows = np.flatnonzero(cls == c)
            order = rows[np.argsort(self.intervals[rows, 0], kind="stable")]
            self.groups.append(_Group(order, self.intervals[order, 0], float(lengths[rows].max())))

    def _ranges(self, ref: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per group, the candidate position range [lo, hi) of each reference interval (a superset)."""
        out = []
        for g in self.groups:
            # A row of this group that overlaps [rs, re) starts in [rs - longest, re]; the slack covers rounding.
            low = ref[:, 0] - g.longest_s - 1e-9 * (np.abs(ref[:, 0]) + g.longest_s + 1.0)
            out.append((np.searchsorted(g.starts, low, "left"), np.searchsorted(g.starts, ref[:, 1], "right")))
        return out

    def pairs(self, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All overlapping (reference index, row index) pairs, ordered by reference, then row start, then row."""
        ref = as_intervals(ref, "reference intervals")
        refs, rows = [], []
        for g, (lo, hi) in zip(self.groups, self._ranges(ref), strict=True):
            counts = hi - lo
            total = int(counts.sum())
            if total == 0:
                continue
            r = np.repeat(np.arange(len(ref)), counts)
            offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            cand = g.order[np.repeat(lo, counts) + offsets]
            keep = overlaps(ref[r], self.intervals[cand])
            refs.append(r[keep])
            rows.append(cand[keep])
        if not refs:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        r, c = np.concatenate(refs), np.concatenate(rows)
        order = np.lexsort((c, self.intervals[c, 0], r))
        return r[order], c[order]

    def blocks(self, ref: np.ndarray) -> Iterator[slice]:
        """Slices of `ref` whose candidate pairs stay under the memory budget."""
        per_ref = sum((hi - lo for lo, hi in self._ranges(ref)), np.zeros(len(ref), np.int64))
        start, acc = 0, 0
        for j, n in enumerate(per_ref.tolist()):
            if acc and acc + n > _PAIR_BUDGET:
                yield slice(start, j)
                start, acc = j, 0
            acc += n
        if start < len(ref) or len(ref) == 0:
            yield slice(start, len(ref))


def overlaps(ref: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Element-wise overlap test of reference intervals `ref` (K, 2) and rows (K, 2), by the module's rule."""
    rs, re_, s, e = ref[:, 0], ref[:, 1], rows[:, 0], rows[:, 1]
    ref_pos, row_pos = re_ > rs, e > s
    both = (s < re_) & (e > rs)
    zero_row = (rs <= s) & (s < re_)
    zero_ref = (s <= rs) & (rs < e)
    points = s == rs
    return np.where(ref_pos, np.where(row_pos, both, zero_row), np.where(row_pos, zero_ref, points))


def overlap_pairs(ref_intervals: np.ndarray, intervals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(reference index, row index) of every overlapping pair, by reference then row start."""
    return RowIndex(intervals).pairs(as_intervals(ref_intervals, "reference intervals"))


def collapse(
    ref_intervals: np.ndarray, intervals: np.ndarray, values: np.ndarray, how: How = "mean",
    index: RowIndex | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Collapse rows `values` (N, D) with `intervals` (N, 2) onto `ref_intervals` (M, 2).

    Returns `out` (M, D) and `mask` (M,): mask[j] is True when at least one row overlaps reference j.
    Non-finite values (NaN, +-inf: undefined parameters) are ignored per column by every `how`:
    - "mean": the plain mean of the overlapping rows (the CMU SDK's `align` with an average collapse);
    - "weighted": the mean weighted by each row's overlap duration with the reference; in a column whose
      finite values have zero total overlap (a zero-length reference, or only zero-length rows) their plain mean;
    - "max": the column-wise maximum;
    - "first": the overlapping row that starts first (ties: the lower row index), non-finite -> NaN.
    `out` is NaN where mask is False and where a column has no finite value to collapse.
    """
    if how not in HOWS:
        raise ValueError(f"how must be one of {HOWS}, got {how!r}")
    ref = as_intervals(ref_intervals, "reference intervals")
    values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"values must be (N, D), got shape {values.shape}")
    index = index if index is not None else RowIndex(intervals)
    if len(index.intervals) != len(values):
        raise ValueError(f"{len(index.intervals)} intervals for {len(values)} value rows")
    out_dtype = np.float64 if values.dtype == np.float64 else np.float32
    out = np.full((len(ref), values.shape[1]), np.nan, out_dtype)
    mask = np.zeros(len(ref), bool)
    for block in index.blocks(ref):
        r, c = index.pairs(ref[block])
        _reduce(ref[block], index.intervals, values, r, c, how, out[block], mask[block])
    return out, mask


def _reduce(
    ref: np.ndarray, rows: np.ndarray, values: np.ndarray, r: np.ndarray, c: np.ndarray, how: str,
    out: np.ndarray, mask: np.ndarray,
) -> None:
    """Fill `out` and `mask` (views of one block) from the overlapping pairs (r, c), sorted by r."""
    if len(r) == 0:
        return
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    sizes = np.diff(np.r_[starts, len(r)])
    targets = r[starts]
    mask[targets] = True
    # Every row once, in order (fixed-rate rows onto a coarser grid): no gathered copy needed.
    v = values if len(c) == len(values) and np.array_equal(c, np.arange(len(c))) else values[c]
    finite = np.isfinite(v)
    all_finite = bool(finite.all())  # the common case (frames, words): no masking passes needed
    if how == "first":
        out[targets] = v[starts] if all_finite else np.where(finite[starts], v[starts], np.nan)
        return
    if how == "max":
        best = np.maximum.reduceat(v if all_finite else np.where(finite, v, -np.inf), starts, axis=0)
        out[targets] = best if all_finite else np.where(np.isfinite(best), best, np.nan)
        return
    v0 = v if all_finite else np.where(finite, v, 0)
    if how == "mean":
        num = np.add.reduceat(v0, starts, axis=0, dtype=np.float64)
        den = sizes[:, None] if all_finite else np.add.reduceat(finite, starts, axis=0, dtype=np.int64)
    else:  # weighted by overlap duration, per column over its finite values
        w = np.clip(np.minimum(rows[c, 1], ref[r, 1]) - np.maximum(rows[c, 0], ref[r, 0]), 0.0, None)[:, None]
        num = np.add.reduceat(v0 * w, starts, axis=0, dtype=np.float64)
        den = np.add.reduceat(finite * w, starts, axis=0, dtype=np.float64)
        zero = den == 0  # no overlap weight on this column's finite values: their plain mean (NaN if none)
        if zero.any():
            num = np.where(zero, np.add.reduceat(v0, starts, axis=0, dtype=np.float64), num)
            den = np.where(zero, np.add.reduceat(finite, starts, axis=0, dtype=np.float64), den)
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


def _open(store: object):  # -> Store; imported lazily so the pure functions above need no zarr
    from store.reader import Store, open_store

    return store if isinstance(store, Store) else open_store(Path(store))


def item_duration_s(store: object, item: str, features: Sequence[str]) -> float:
    """The item's duration: the largest `duration_s` the features record, else the latest row end."""
    s = _open(store)
    found = [s.item_attrs(f, item).get("duration_s") for f in features]
    found = [float(d) for d in found if d is not None]
    if found:
        return max(found)
    ends = [float(s.read(f, item).intervals[:, 1].max(initial=0.0)) for f in features]
    return max(ends, default=0.0)


def reference_for(store: object, item: str, to: Reference, features: Sequence[str] = ()) -> np.ndarray:
    """Reference intervals: another feature's intervals (a name), a fixed rate (Hz), or given (M, 2) seconds."""
    s = _open(store)
    if isinstance(to, str):
        return s.read(to, item).intervals
    if isinstance(to, int | float) and not isinstance(to, bool):
        return fixed_rate_intervals(item_duration_s(s, item, list(features) or s.features()), float(to))
    return as_intervals(np.asarray(to), "reference intervals")


def _row_window(intervals: np.ndarray, ref: np.ndarray) -> slice:
    """The smallest contiguous block of rows holding every row that could overlap the reference span."""
    if len(ref) == 0 or len(intervals) == 0:
        return slice(0, 0)
    lo_t, hi_t = ref[:, 0].min(), ref[:, 1].max()
    near = np.flatnonzero((intervals[:, 1] >= lo_t) & (intervals[:, 0] <= hi_t))
    return slice(int(near[0]), int(near[-1]) + 1) if len(near) else slice(0, 0)


def align(
    store: object, item: str, features: Sequence[str], to: Reference = "transcript",
    how: How | Mapping[str, How] = "mean",
) -> Aligned:
    """Align `features` of one item to `to`; only the rows that can overlap the reference are read."""
    s = _open(store)
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
