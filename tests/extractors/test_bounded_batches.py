"""`extractors.batched.bounded_batches`: model batches bounded in items and in bytes (frames of any size)."""

from __future__ import annotations

import numpy as np
import pytest

from extractors.batched import bounded_batches


def spans(item_bytes: list[int], max_items: int, max_bytes: int) -> list[list[int]]:
    return [list(range(len(item_bytes)))[s] for s in bounded_batches(item_bytes, max_items, max_bytes)]


def test_splits_as_specified() -> None:
    assert spans([], 4, 100) == []
    assert spans([10] * 5, 2, 100) == [[0, 1], [2, 3], [4]]  # counts only
    assert spans([10] * 5, 16, 25) == [[0, 1], [2, 3], [4]]  # bytes only: a third frame would make 30 > 25
    assert spans([10] * 3, 16, 30) == [[0, 1, 2]]  # exactly the limit fits
    assert spans([10, 500, 10, 10], 16, 25) == [[0], [1], [2, 3]]  # a frame over the limit runs alone
    assert spans([300, 300], 16, 1) == [[0], [1]]
    assert spans([5, 20, 5, 5, 20], 3, 30) == [[0, 1, 2], [3, 4]]


@pytest.mark.parametrize("seed", range(20))
def test_random_sizes_cover_everything_in_order_within_limits_and_greedy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 100, int(rng.integers(0, 40))).tolist()
    max_items, max_bytes = int(rng.integers(1, 8)), int(rng.integers(1, 300))
    batches = spans(sizes, max_items, max_bytes)
    assert [i for b in batches for i in b] == list(range(len(sizes)))
    for k, b in enumerate(batches):
        total = sum(sizes[i] for i in b)
        assert len(b) <= max_items and (total <= max_bytes or len(b) == 1)
        if k + 1 < len(batches):  # greedy: the next item would have passed a limit
            assert len(b) == max_items or total + sizes[batches[k + 1][0]] > max_bytes


def test_rejects_non_positive_limits() -> None:
    for bad in [(0, 10), (1, 0)]:
        with pytest.raises(ValueError, match="max_items >= 1"):
            bounded_batches([1, 2], *bad)
