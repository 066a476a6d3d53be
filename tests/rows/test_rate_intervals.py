"""Rate-based row intervals are built from integers, so neighbouring rows share their boundary exactly."""

from __future__ import annotations

import numpy as np
import pytest

from extractors.base import Audio
from rows import fixed_rate_intervals, rate_intervals


def test_rate_intervals_are_integer_divisions() -> None:
    iv = rate_intervals(13_200, 100.0, 131.995)
    i = np.arange(13_200)
    np.testing.assert_array_equal(iv[:, 0], i / 100.0)
    np.testing.assert_array_equal(iv[:-1, 1], (i[:-1] + 1) / 100.0)
    np.testing.assert_array_equal(iv[1:, 0], iv[:-1, 1])  # accumulating 0.01 breaks this ~3,000 times
    assert iv[-1].tolist() == [131.99, 131.995]
    assert rate_intervals(0, 30.0).shape == (0, 2)
    with pytest.raises(ValueError, match="positive rate"):
        rate_intervals(3, 0.0)


def test_every_rate_based_grid_uses_them() -> None:
    np.testing.assert_array_equal(fixed_rate_intervals(2.5, 1.0), [[0, 1], [1, 2], [2, 2.5]])
    np.testing.assert_array_equal(fixed_rate_intervals(90.0, 30.0), rate_intervals(2700, 30.0, 90.0))
    # the 1 fps frame grid (media/decode.py) lets a container duration's microsecond noise add no row; an
    # alignment to a rate keeps every row down to 1e-9 of a step (both callers' grids before they were one)
    assert len(fixed_rate_intervals(2.0000005, 1.0, slack_rows=1e-6)) == 2
    assert len(fixed_rate_intervals(2.0000005, 1.0)) == 3


def test_covarep_rows_share_their_boundaries() -> None:
    from extractors.acoustic import Covarep, CovarepConfig

    rng = np.random.default_rng(0)
    samples = (0.1 * rng.standard_normal(16_000 + 80)).astype(np.float32)  # 1.005 s
    rows = Covarep(CovarepConfig(f0_method="dio")).extract(Audio(samples, 16_000, samples.size / 16_000))
    iv = rows.intervals
    np.testing.assert_array_equal(iv[:, 0], np.arange(len(iv)) / 100.0)
    np.testing.assert_array_equal(iv[1:, 0], iv[:-1, 1])
    assert iv[-1].tolist() == [1.0, 1.005]
