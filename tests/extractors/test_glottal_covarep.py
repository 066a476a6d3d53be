"""Version 8's COVAREP-method kernels (extractors/glottal.py) against direct, unvectorised references written from
the same definitions: per-frame loops with scipy's Toeplitz solver and lfilter, the DTFT by its sum, MSP's error by
building the remainder's spectrum for each candidate. Synthetic signals only: fast, and run everywhere."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_toeplitz
from scipy.signal import lfilter

from extractors import glottal
from testing.synth_voice import FS_HZ, synth_vowel


def mhann(n: int) -> np.ndarray:
    return 0.5 * (1 - np.cos(2 * np.pi * np.arange(1, n + 1) / (n + 1)))


def lpc(x: np.ndarray, p: int) -> np.ndarray:
    r = np.correlate(x, x, "full")[x.size - 1 : x.size + p]
    return np.concatenate([[1.0], solve_toeplitz(r[:p], -r[1 : p + 1])])


@pytest.fixture(scope="module")
def vowel() -> np.ndarray:
    """An LF vowel with noise 40 dB below it: order-18/20 normal equations of a near noise-free vowel are so
    ill-conditioned that the kernels' 1e-9 white-noise correction alone moves the coefficients by 0.3 %."""
    x = synth_vowel(0.6, lambda t: 120 + 30 * t, 1.2).speech.astype(np.float64)
    return x + 0.01 * x.std() * np.random.default_rng(3).standard_normal(x.size)


def test_lp_residual_equals_a_frame_loop(vowel: np.ndarray) -> None:
    x = vowel
    ref = np.zeros(x.size)
    win = mhann(401)
    for start in range(0, x.size - 401, 80):
        seg = x[start : start + 401] * win
        inv = lfilter(lpc(seg, 18), 1, seg)
        ref[start : start + 401] += inv * np.sqrt(np.sum(seg**2) / np.sum(inv**2))
    ref /= np.abs(ref).max()
    np.testing.assert_allclose(glottal.lp_residual(x, FS_HZ), ref, atol=1e-4)  # measured 5e-6 (peak 1)


def test_iaif_gci_equals_a_per_gci_loop(vowel: np.ndarray) -> None:
    """COVAREP's iaif_gci/iaif, one frame at a time (GCI +- T0, Hann twice, a ramp before the frame)."""
    x = vowel
    gcis = np.round(np.cumsum(np.full(60, FS_HZ / 125.0)) + 200).astype(int)
    gcis = gcis[gcis < x.size - 200]
    d, p_vt, p_gl = 0.99, 20, 8
    g_ref, dg_ref = np.zeros(x.size), np.zeros(x.size)
    for i, c in enumerate(gcis):
        t0 = (c - gcis[i - 1]) if i else gcis[1] - c
        a, b = max(0, c - t0), min(x.size - 1, c + t0)
        fr = x[a : b + 1] * mhann(b + 1 - a)
        win = mhann(fr.size)
        sig = np.concatenate([np.linspace(-fr[0], fr[0], p_vt + 1), fr])
        y = lfilter(lpc(fr * win, 1), 1, sig)[p_vt + 1 :]
        g1 = lfilter([1], [1, -d], lfilter(lpc(y * win, p_vt), 1, sig))[p_vt + 1 :]
        y = lfilter([1], [1, -d], lfilter(lpc(g1 * win, p_gl), 1, sig))[p_vt + 1 :]
        dgf = lfilter(lpc(y * win, p_vt), 1, sig)
        g_ref[a : b + 1] += lfilter([1], [1, -d], dgf)[p_vt + 1 :]
        dg_ref[a : b + 1] += dgf[p_vt + 1 :]
    g, dg = glottal.iaif_gci(x, gcis, FS_HZ, d, 320)
    # the kernels' Levinson recursion with its 1e-9 white-noise correction against scipy's Toeplitz solve
    np.testing.assert_allclose(dg, dg_ref, atol=1e-3 * np.abs(dg_ref).max())
    np.testing.assert_allclose(g, g_ref, atol=1e-3 * np.abs(g_ref).max())


def test_sedreams_finds_one_gci_per_period_at_the_residual_peak() -> None:
    """A pulse train through one resonance: one GCI per pulse, at the pulse (the residual's peak)."""
    period = 128  # 125 Hz
    pulses = np.arange(400, 16000 - 400, period)
    e = np.zeros(16000)
    e[pulses] = 1.0
    r, f = 0.97, 700.0
    x = lfilter([1.0], [1.0, -2 * r * np.cos(2 * np.pi * f / FS_HZ), r * r], e)
    x += 1e-4 * np.random.default_rng(0).standard_normal(x.size)
    res = glottal.lp_residual(x, FS_HZ)
    if glottal.skewness(res) < 0:
        x, res = -x, -res
    gcis = glottal.sedreams(x, res, FS_HZ, FS_HZ / period)
    inner = gcis[(gcis > 600) & (gcis < 15400)]
    assert np.all(np.abs(inner[:, None] - pulses[None]).min(axis=1) <= 1)
    assert np.all(np.diff(inner) >= period - 2)
    assert inner.size >= pulses[(pulses > 600) & (pulses < 15400)].size - 1


def test_harmonic_spectrum_equals_the_dtft() -> None:
    """On a harmonic signal (what it reads) with noise 20 dB below: within 4 % of the largest harmonic (measured
    2.7 %: linear interpolation across a main lobe 12 bins wide)."""
    rng = np.random.default_rng(1)
    centres, f0 = np.array([1500, 3000, 4500]), np.array([97.0, 130.0, 241.0])
    n_all = np.arange(6000)
    seg = np.searchsorted([2250, 3750], n_all)  # each centre's own voice
    amps, phases = rng.uniform(0.2, 1.0, (3, 40)), rng.uniform(-np.pi, np.pi, (3, 40))
    x = sum(amps[seg, k - 1] * np.cos(2 * np.pi * k * f0[seg] * n_all / FS_HZ + phases[seg, k - 1]) for k in range(1, 41))
    x = x + 0.1 * x.std() * rng.standard_normal(x.size)
    got = glottal.harmonic_spectrum(x, centres, f0, FS_HZ, 8)
    for i in range(3):
        h = round(1.5 * FS_HZ / f0[i])
        n = np.arange(-h, h + 1)
        w = 0.42 + 0.5 * np.cos(np.pi * n / h) + 0.08 * np.cos(2 * np.pi * n / h)
        w /= w.sum()
        ref = np.array([np.sum(w * x[centres[i] + n] * np.exp(-2j * np.pi * k * f0[i] * n / FS_HZ)) for k in range(1, 9)])
        assert np.abs(got[i] - ref).max() <= 0.04 * np.abs(ref).max(), (i, np.abs(got[i] - ref).max(), np.abs(ref).max())


def test_msp_error_equals_the_remainder_built_per_candidate() -> None:
    """rd_msp's factored error (frame minus model, each against its own minimum phase) equals COVAREP's per-candidate
    construction: divide, mirror, real-cepstrum minimum phase, phase of the quotient, second differences."""
    rng = np.random.default_rng(2)
    h, k = 40, glottal.MSP_HARMONICS + 1
    m = rng.uniform(0.2, 1.0, h) * np.exp(1j * rng.uniform(-np.pi, np.pi, h))
    for j in (0, 70, 150, 220):
        n = m / glottal.lf_spectrum(h)[j]
        n[-1] = abs(n[-2])
        full = np.concatenate([[abs(n[0])], n, np.conj(n[-2::-1])])
        rcc = np.fft.ifft(np.log(np.abs(full))).real
        fold = np.concatenate([rcc[:1], 2 * rcc[1:h], rcc[h : h + 1], np.zeros(h - 1)])
        p = np.angle(full[:k] / np.exp(np.fft.fft(fold)[:k]))
        d2 = np.angle(np.exp(1j * (np.diff(p) - p[1])))[1:]
        ref = np.mean(d2**2)
        frame = np.angle(m[: k - 1]) - glottal._min_phase(glottal._edge_mags(m), k)[1:]
        err = glottal._msp_error(frame[None], glottal._lf_phase(h)[None, [j]])[0, 0]
        assert err == pytest.approx(ref, rel=1e-9, abs=1e-12), j


@pytest.mark.parametrize("rd", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("f0", [110.0, 220.0])
def test_rd_msp_recovers_lf_vowels(rd: float, f0: float) -> None:
    """MSP on an LF vowel through /a/'s five formants (measured: 110 Hz 0.32 / 1.03 / 2.50, 220 Hz 0.38 / 1.07 /
    2.50; the grid ends at 2.5)."""
    voice = synth_vowel(0.5, lambda t: f0 + 0 * t, rd)
    x = voice.speech.astype(np.float64)
    centres = np.arange(1500, 6500, 160)
    est = np.median(glottal.rd_msp(x, centres, np.full(centres.size, f0), FS_HZ)[0])
    assert abs(est - rd) <= 0.1, est


@pytest.mark.parametrize(("width", "n_bins"), [(37, 20), (300, 128), (512, 256), (1000, 60), (1100, 40), (200, 300)])
def test_spectra_by_dft_product_equal_the_fft(width: int, n_bins: int) -> None:
    """`_rfft_mag`'s DFT matrix product (short rows, few bins) and its FFT path (wider rows or more bins) give
    |rfft(rows, 2048)| up to n_bins within rounding (1e-12 of the largest magnitude; measured ~4e-15)."""
    rows = np.random.default_rng(7).standard_normal((150, width))
    ref = np.abs(np.fft.rfft(rows, 2048, axis=1)[:, :n_bins])
    np.testing.assert_allclose(glottal._rfft_mag(rows, 2048, n_bins), ref, rtol=0, atol=1e-12 * ref.max())


def test_psp_of_equals_the_full_spectrum_fit() -> None:
    """PSP's parabola coefficient from the first 128 bins' spectra (all 256 only where the fit goes on) equals
    `psp_a` on the pulses' full 256-bin dB spectra from the FFT (1e-9 relative: the DFT product's rounding)."""
    rng = np.random.default_rng(8)
    n = np.arange(300)[None]
    lengths = rng.integers(10, 300, 60)[:, None]  # the short ones' fits run past 128 bins: the second stage
    pulses = np.where(n < lengths, np.abs(np.sin(np.pi * n / lengths)) ** rng.uniform(0.5, 4, (60, 1)), 0.0)
    boxes = np.where(n < lengths, 1.0 / lengths, 0.0)
    stopped = glottal._psp_fit(20 * np.log10(glottal._rfft_mag(pulses, glottal.PSP_NFFT, 128) + 1e-9), 0.01)[1]
    assert stopped.any() and not stopped.all()
    for rows in (pulses, boxes):
        spec = 20 * np.log10(np.abs(np.fft.rfft(rows, glottal.PSP_NFFT, axis=1)[:, :256]) + 1e-9)
        np.testing.assert_allclose(glottal.psp_of(rows), glottal.psp_a(spec), rtol=1e-9)


def test_h1h2_at_equals_the_maximum_filter_reading() -> None:
    """H1-H2 read from H1's and H2's own bins equals `harmonics_at`'s reading (every bin's magnitude, a maximum
    filter of +-F0/2, the harmonics' bins) within 1e-9 dB, periods from a few samples (reaching past 256 bins) to
    COVAREP's longest."""
    rng = np.random.default_rng(9)
    dg = rng.standard_normal(40000)
    t0 = np.concatenate([[5, 7, 9], rng.integers(30, 320, 400)]).astype(float)
    half = np.round(1.5 * t0).astype(int)
    starts = rng.integers(400, 39000 - 1000, t0.size) - half
    f0 = FS_HZ / t0
    ref = glottal.harmonics_at(dg, starts, 2 * half + 1, f0, FS_HZ, search=0.5, max_hz=2 * float(f0.max()))["h1h2"]
    np.testing.assert_allclose(glottal.h1h2_at(dg, starts, 2 * half + 1, f0, FS_HZ), ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("size", [16000, 16050, 300])
def test_peak_slope_equals_a_row_loop(size: int) -> None:
    """Peak slope per row from the bands' maxima of |band| over the row's 40 ms window (row centre +-20 ms, zeros
    outside the signal), regressed on the band index by np.polyfit."""
    x = np.random.default_rng(10).standard_normal(size) * np.repeat(np.linspace(0.1, 1, 10), -(-size // 10))[:size]
    n_rows = size // 160 + (size % 160 > 0)
    bands = np.abs(glottal.wavelet_bands(x, [64, 32, 16, 8, 4, 2, 1]))
    ref = np.empty(n_rows)
    for r in range(n_rows):
        c = r * 160 + 80
        peaks = bands[:, max(0, c - 320) : max(0, c + 320)].max(axis=1, initial=0.0)
        ref[r] = np.polyfit(np.arange(7), np.log10(peaks), 1)[0]
    np.testing.assert_allclose(glottal.peak_slope(x, n_rows, 160), ref, rtol=1e-9, atol=1e-12)
