"""Rows on a timeline: the one type every layer passes around, and the interval maths they share.

`FeatureRows` is what an extractor returns for one item and what the store writes and reads back: rows of
features, each with its [start, end) seconds, plus row-aligned extras and item attributes. It sits here, below
extractors/, store/ and reading/, so that none of them imports another to know the shape of a row (the store
knows no extractor, the reading layer no model code).

Intervals are (N, 2) float64 seconds [start, end); `check_intervals` is the one validation of them. A fixed-rate
grid is made once, by `rate_intervals` (every boundary one integer division, so neighbours share it exactly) and
`fixed_rate_intervals` (the grid that covers a duration). The roles of the `bert_qa` feature's rows are named
here too: extractors/qa.py writes them and reading/ plans QA samples from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The `role` extra of the `bert_qa` feature (docs/text.md): a context row, a question row, an answer row.
ROLE_CONTEXT, ROLE_QUESTION, ROLE_ANSWER = 0, 1, 2


def check_intervals(intervals: np.ndarray, what: str = "intervals", n: int | None = None) -> np.ndarray:
    """(N, 2) float64 [start, end) with finite values and end >= start (N == `n` when given), else ValueError
    naming `what` and the bad row."""
    arr = np.asarray(intervals, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 2 or (n is not None and len(arr) != n):
        raise ValueError(f"{what} must be ({'N' if n is None else n}, 2), got shape {arr.shape}")
    if len(arr) and not np.all(np.isfinite(arr)):
        bad = int(np.argmax(~np.all(np.isfinite(arr), axis=1)))
        raise ValueError(f"{what}: row {bad} is not finite: {arr[bad].tolist()}")
    if len(arr) and np.any(arr[:, 1] < arr[:, 0]):
        bad = int(np.argmax(arr[:, 1] < arr[:, 0]))
        raise ValueError(f"{what}: row {bad} ends before it starts: {arr[bad].tolist()}")
    return arr


def rate_intervals(n_rows: int, rate_hz: float, duration_s: float | None = None) -> np.ndarray:
    """(n_rows, 2) rows [i / rate, (i + 1) / rate), the last end clipped to `duration_s` when given.

    Every boundary is one division of an integer by the rate, so row i's end and row i + 1's start are the same
    float. Accumulating a float step (`arange(n) * 0.01`, then `start + 0.01`) instead leaves neighbours that
    overlap by ~1e-15 s, and an alignment then counts the neighbour of a boundary row as overlapping.
    """
    if n_rows < 0 or rate_hz <= 0 or not np.isfinite(rate_hz):
        raise ValueError(f"rate_intervals needs n_rows >= 0 and a positive rate, got {n_rows = }, {rate_hz = }")
    edges = np.arange(n_rows + 1, dtype=np.float64) / rate_hz
    ends = edges[1:] if duration_s is None else np.minimum(edges[1:], duration_s)
    return np.stack([edges[:-1], ends], axis=1)


def fixed_rate_intervals(duration_s: float, rate_hz: float, slack_rows: float = 1e-9) -> np.ndarray:
    """[k / rate, (k + 1) / rate) for k = 0 .. ceil(duration * rate - slack_rows) - 1, the last one clipped to the
    duration. `slack_rows`: a duration this little (in rows) past a whole step adds no row; the 1 fps frame grid
    (media/decode.py) takes 1e-6, so a container duration's microsecond noise adds no empty frame row."""
    if rate_hz <= 0 or not np.isfinite(rate_hz):
        raise ValueError(f"rate_hz must be positive, got {rate_hz}")
    if duration_s < 0 or not np.isfinite(duration_s):
        raise ValueError(f"duration_s must be >= 0, got {duration_s}")
    return rate_intervals(max(0, math.ceil(duration_s * rate_hz - slack_rows)), rate_hz, duration_s)


@dataclass(frozen=True)
class FeatureRows:
    """What an extractor returns for one item: rows with their intervals, plus feature-specific arrays."""

    features: np.ndarray  # (N, D) float16/float32
    intervals: np.ndarray  # (N, 2) float64 seconds [start, end)
    extras: dict[str, np.ndarray] = field(default_factory=dict)  # e.g. boxes, probs, words
    attrs: dict[str, Any] = field(default_factory=dict)  # item-level, JSON-safe (face_ratio, …)

    def __post_init__(self) -> None:
        if self.features.ndim != 2:
            raise ValueError(f"features must be (N, D), got {self.features.shape = }")
        check_intervals(self.intervals, "FeatureRows intervals", len(self.features))
