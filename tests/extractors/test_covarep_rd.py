"""Rd as COVAREP's features compute it (`glottal.rd_covarep`, `rd_method="covarep"`, the 74-column layout's default):
its search, its model table and its model, each against an independent reference. Its agreement with COVAREP's own
output is tests/extractors/test_covarep_ref.py's (docs/acoustic.md, "Agreement with COVAREP")."""

from __future__ import annotations

import numpy as np
from scipy.optimize import fminbound

from extractors import glottal

FS = 16000
HOP = 160


def test_brent_rows_equal_scipy_fminbound() -> None:
    """The vectorised search is Brent's bounded minimisation (MATLAB's fminbnd, scipy's fminbound) row by row: on
    curves with several minima each row stops where scipy's stops (a different step rule lands in other minima)."""
    rng = np.random.default_rng(0)
    amp, freq, ph = rng.normal(size=(300, 4)), rng.uniform(1, 8, (300, 4)), rng.uniform(0, 6, (300, 4))

    def curves(x: np.ndarray) -> np.ndarray:
        return (amp * np.sin(freq * x[:, None] + ph)).sum(axis=1)

    x, fx = glottal.brent_min_rows(curves, 300, 0.3, 2.5, 0.01, 500)
    ref = np.array([fminbound(lambda t, i=i: (amp[i] * np.sin(freq[i] * t + ph[i])).sum(), 0.3, 2.5, xtol=0.01,
                              maxfun=501) for i in range(300)])  # fmt: skip
    np.testing.assert_allclose(x, ref, atol=1e-8)
    np.testing.assert_allclose(fx, curves(x), atol=1e-12)


def _model_phase(rds: np.ndarray, n_harm: int) -> np.ndarray:
    """The time-reversed LF model's phase minus its minimum phase, computed at exactly these Rds."""
    g = np.conj(glottal.lf_spectrum_for(glottal.lf_params_for(rds), n_harm))
    return np.angle(g[:, : glottal.MSP_HARMONICS]) - glottal._min_phase(glottal._edge_mags(g), glottal.MSP_HARMONICS + 1)[:, 1:]


def test_model_table_interpolates_within_a_milliradian() -> None:
    """Brent evaluates the model between the 0.01 grid's Rds: the table read linearly there is within 1e-3 rad of
    the model computed at that Rd (measured 5.5e-4 .. 8.7e-4 rad, 10 to 133 harmonics)."""
    rds = np.round(np.random.default_rng(1).uniform(0.3, 2.5, 100), 4)
    for h in (10, 40, 133):
        d = glottal._interp_rows(glottal._lf_phase_unwrapped(h), rds) - _model_phase(rds, h)
        assert np.abs(np.angle(np.exp(1j * d))).max() < 1e-3, h


def _harmonic_signal(spectrum: np.ndarray, f0: float, seconds: float) -> np.ndarray:
    """Sum of harmonics k = 1.. with the given complex amplitudes, phases relative to t = 0 (and, at 100 Hz, to every
    row boundary)."""
    t = np.arange(int(seconds * FS)) / FS
    k = np.arange(1, spectrum.size + 1)[:, None]
    return (np.abs(spectrum)[:, None] * np.cos(2 * np.pi * k * f0 * t + np.angle(spectrum)[:, None])).sum(axis=0)


def test_rd_covarep_fits_the_time_reversed_lf_pulse() -> None:
    """A periodic signal whose harmonics are the conjugated LF spectrum at Rd 1.234 (off the table's grid) is read
    as 1.234 (Brent's tolerance 0.01); the same pulse as it is (the paper's MSP model) is not: COVAREP's Rd fits the
    time-reversed pulse (glottal.py, above `rd_covarep`), and the paper's `rd_msp` reads the plain pulse instead."""
    rd, f0 = 1.234, 100.0
    g = glottal.lf_spectrum_for(glottal.lf_params_for(np.array([rd])), int(glottal.MSP_MAX_HZ / f0))[0]
    n_rows = 40
    voiced = np.zeros(n_rows, bool)
    voiced[10:30] = True
    f0_rows = np.full(n_rows, f0)
    got = glottal.rd_covarep(_harmonic_signal(np.conj(g), f0, 0.4), f0_rows, voiced, FS, HOP)[0]
    assert np.isnan(got[~voiced]).all()
    np.testing.assert_allclose(got[voiced], rd, atol=0.01)
    plain = glottal.rd_covarep(_harmonic_signal(g, f0, 0.4), f0_rows, voiced, FS, HOP)[0]
    assert np.abs(plain[voiced] - rd).min() > 0.1, plain[voiced]
    centres = np.flatnonzero(voiced) * HOP + HOP // 2
    paper = glottal.rd_msp(_harmonic_signal(g, f0, 0.4), centres, f0_rows[voiced], FS)[0]
    np.testing.assert_allclose(paper, rd, atol=0.02)


def test_srh_reads_the_f0_of_a_steady_vowel_and_searches_covareps_range() -> None:
    """SRH (extractors/srh.py, the F0 of the 74-column layout's windows on unvoiced rows) on LF vowels at a steady
    F0: every frame within 1 Hz of it (its grid is 1 Hz; MATLAB's 1-based bins move the first harmonic's peak by 1 Hz);
    the range narrows to [F0med / 2, 2 F0med] inside [50, 500] as pitch_srh's does, after a first pass over the full
    range whose median it takes (`srh_track`), with MATLAB's rounding (halves up: Python's and numpy's take them to
    even, which moved F0 by 1 Hz on ~10 % of COVAREP's frames)."""
    from extractors import srh
    from testing.synth_voice import synth_vowel

    for f0 in (95.0, 140.0, 210.0):
        x = synth_vowel(1.0, lambda t, f0=f0: f0 + 0 * t, 1.0).speech.astype(float)
        got = srh.srh_f0(x, np.arange(30, 70) * HOP + HOP // 2, FS, f0)
        assert np.abs(got - f0).max() <= 1.0, (f0, got)
    tracked, median = srh.srh_track(x, np.arange(30, 70) * HOP, FS)  # the 210 Hz vowel
    assert abs(median - 210.0) <= 1.0 and np.abs(tracked - 210.0).max() <= 1.0, (median, tracked)
    f, _, minus = srh.candidates(51, 53)  # E(1.5 f) for f = 51, 52, 53: 76.5, 78, 79.5 Hz, at bins 76, 77, 79
    assert f.tolist() == [51, 52, 53] and minus[0].tolist() == [76, 77, 79]
    assert srh.search_range(125.0) == (63, 250) and srh.search_range(127.5) == (64, 255)
    assert srh.search_range(None) == (50, 500) and srh.search_range(120.0) == (60, 240)
    assert srh.search_range(80.0) == (50, 160) and srh.search_range(300.0) == (150, 500)
