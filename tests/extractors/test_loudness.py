"""The loudness extractor (extractors/loudness.py, docs/design.md's worked example) against librosa's RMS."""

from __future__ import annotations

import librosa
import numpy as np
import pytest

from extractors.base import Audio, get_extractor
from pipeline.config import RunConfig

RATE_HZ = 16000


def _audio(seconds: float, seed: int = 0) -> Audio:
    """Noise whose level changes every second (so rows differ), and a silent second in the middle."""
    rng = np.random.default_rng(seed)
    n = round(seconds * RATE_HZ)
    gain = np.repeat([0.5, 0.05, 0.0, 0.9, 0.2, 0.7], RATE_HZ)[:n]
    samples = (rng.uniform(-1, 1, n) * np.pad(gain, (0, max(0, n - gain.size)), constant_values=0.3)).astype(np.float32)
    return Audio(samples=samples, sample_rate_hz=RATE_HZ, duration_s=n / RATE_HZ)


@pytest.mark.parametrize("rows_per_s", [1.0, 4.0])
def test_rows_are_librosa_rms_of_each_rows_samples(rows_per_s: float) -> None:
    x = _audio(6.0)
    cls = get_extractor("rms_loudness")  # registered by its module alone: no table names it
    rows = cls(cls.config_type(rate_hz=rows_per_s)).extract(x)
    hop = round(RATE_HZ / rows_per_s)
    ref = librosa.feature.rms(y=x.samples, frame_length=hop, hop_length=hop, center=False)[0]
    assert rows.features.shape == (len(ref), 2) == (6 * rows_per_s, 2)
    np.testing.assert_allclose(rows.features[:, 0], ref, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(rows.intervals, np.arange(len(ref))[:, None] / rows_per_s + [0, 1 / rows_per_s])
    silent = rows.intervals[:, 0] // 1 == 2  # the third second is silence: the floor
    assert silent.any() and (rows.features[silent, 1] == -120).all()
    loud = ~silent
    np.testing.assert_allclose(rows.features[loud, 1], 20 * np.log10(ref[loud]), rtol=1e-5)


def test_a_partial_last_row_is_the_rms_of_its_own_samples() -> None:
    x = _audio(2.25)
    rows = get_extractor("rms_loudness")(RunConfig(features={"l": {"extractor": "rms_loudness"}}).features["l"]).extract(x)
    assert rows.intervals.tolist() == [[0, 1], [1, 2], [2, 2.25]]
    tail = x.samples[2 * RATE_HZ:].astype(np.float64)
    assert tail.size == RATE_HZ // 4
    assert rows.features[2, 0] == pytest.approx(np.sqrt(np.mean(tail**2)), rel=1e-6)
    # a full-scale sine is -3.01 dB re full scale
    sine = np.sin(2 * np.pi * 440 * np.arange(RATE_HZ) / RATE_HZ).astype(np.float32)
    level = get_extractor("rms_loudness")(get_extractor("rms_loudness").config_type()).extract(
        Audio(samples=sine, sample_rate_hz=RATE_HZ, duration_s=1.0))
    assert level.features[0, 1] == pytest.approx(-3.0103, abs=1e-3)
