"""The compiled LP kernels (extractors/lp_jit.py, behind glottal.autocorr_rows, levinson_rows and _fir_rows) against
the numpy formulations they replaced, kept here as the references: per-lag einsums, the row-vectorised
Levinson-Durbin recursion, a matmul on a strided lag view. Same sums in another order, so they agree to rounding
(the FIR keeps numpy's order). Random rows of the sizes the extractor uses (orders 1..18, 25 ms frames), rows
shorter than the order, silent rows (identity filter) and the `start` column the callers pass."""

from __future__ import annotations

import numpy as np
import pytest

from extractors import acoustic, glottal


def autocorr_ref(win: np.ndarray, order: int) -> np.ndarray:
    n = win.shape[1]
    return np.stack(
        [np.einsum("fn,fn->f", win[:, k:], win[:, : n - k]) if k < n else np.zeros(len(win)) for k in range(order + 1)],
        axis=1)  # fmt: skip


def levinson_ref(r: np.ndarray) -> np.ndarray:
    order = r.shape[1] - 1
    a = np.zeros((len(r), order + 1))
    a[:, 0] = 1.0
    err = r[:, 0] * (1 + 1e-9)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(1, order + 1):
            k = -(r[:, i] + np.einsum("fj,fj->f", a[:, 1:i], r[:, i - 1 : 0 : -1])) / err
            a[:, 1:i] += k[:, None] * a[:, i - 1 : 0 : -1]
            a[:, i] = k
            err = err * (1 - k * k)
    a[~np.all(np.isfinite(a), axis=1)] = np.eye(1, order + 1)
    return a


def fir_ref(a: np.ndarray, ext: np.ndarray) -> np.ndarray:
    lagged = np.lib.stride_tricks.sliding_window_view(ext, a.shape[1], axis=1)
    return (lagged @ a[:, ::-1, None])[..., 0]


@pytest.mark.parametrize("order", [1, 2, 3, 4, 12, 18])
def test_kernels_match_numpy_references(order: int) -> None:
    rng = np.random.default_rng(order)
    n = 401
    buf = rng.standard_normal((37, 20 + n)) * np.hanning(20 + n)  # 20 columns of history, then the rows
    buf[3] = 0.0  # a silent row: zero autocorrelation, the identity filter
    win = buf[:, 20:]
    r = glottal.autocorr_rows(buf, order, start=20)  # the buffer and its start column, as lp_residual passes them
    r_ref = autocorr_ref(win, order)
    np.testing.assert_allclose(r, r_ref, rtol=0, atol=1e-12 * np.abs(r_ref).max())
    np.testing.assert_array_equal(glottal.autocorr_rows(win, order), r)  # a strided view: the same numbers
    a, a_ref = glottal.levinson_rows(r_ref), levinson_ref(r_ref)
    np.testing.assert_allclose(a, a_ref, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(a[3], np.eye(1, order + 1)[0])
    y, y_ref = glottal._fir_rows(a_ref, buf, 20 - order), fir_ref(a_ref, buf[:, 20 - order :])
    assert y.shape == y_ref.shape == win.shape
    np.testing.assert_allclose(y, y_ref, rtol=0, atol=1e-12 * np.abs(y_ref).max())


def test_short_rows_and_breakdowns() -> None:
    """Rows shorter than the order (lags past the row's end are 0) and recursions that break down (a zero or
    non-finite error) end as numpy's did: finite coefficients or the identity filter."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 6))
    np.testing.assert_allclose(glottal.autocorr_rows(w, 8), autocorr_ref(w, 8), rtol=0, atol=1e-12)
    r = autocorr_ref(rng.standard_normal((6, 40)), 4)
    r[1] = 0.0
    r[2, 0] = np.nan
    r[4, 2] = np.inf
    np.testing.assert_allclose(glottal.levinson_rows(r), levinson_ref(r), rtol=0, atol=1e-9)


def lp_residual_ref(x: np.ndarray, fs: int, order: int) -> np.ndarray:
    """glottal.lp_residual as numpy computed it: all frames' LPC at once, then their residuals overlap-added."""
    length, shift = round(0.025 * fs) + 1, round(0.005 * fs)
    starts = np.arange(0, max(0, x.size - length), shift)
    win = glottal.hann_sym(np.array([length]), length)[0]
    frames = np.lib.stride_tricks.sliding_window_view(x, length)[starts] * win
    r = autocorr_ref(frames, order)
    inv = fir_ref(levinson_ref(r), np.concatenate([np.zeros((starts.size, order)), frames], axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.nan_to_num(np.sqrt(r[:, 0] / np.einsum("fn,fn->f", inv, inv)), posinf=0.0)
    res = np.zeros(x.size)
    for f, s in enumerate(starts):
        res[s : s + length] += gain[f] * inv[f]
    return res / np.abs(res).max()


@pytest.mark.parametrize("order", [12, 18])
def test_lp_residual_matches_numpy_reference(order: int) -> None:
    rng = np.random.default_rng(order)
    fs = 16000
    x = np.convolve(rng.standard_normal(fs), [1.0, -1.6, 0.9], "same")  # 1 s of a resonant noise
    x[4000:6000] = 0.0  # silent frames: identity filters and no gain
    y, y_ref = glottal.lp_residual(x, fs, order), lp_residual_ref(x, fs, order)
    np.testing.assert_allclose(y, y_ref, rtol=0, atol=1e-11)
    assert np.abs(y).max() == 1.0 and np.all(y[4400:5600] == 0.0)


def nccf_ref(x: np.ndarray, rows: np.ndarray, lag: np.ndarray, length: np.ndarray, offsets: tuple) -> np.ndarray:
    """acoustic.nccf as numpy computed it: zero-padded segments out to the longest, masked, one einsum per sum."""
    hop = acoustic.HOP
    width = int(length.max())
    start = rows * hop + hop // 2 - (length + lag) // 2
    inside = np.arange(width)[None] < length[:, None]
    a = np.where(inside, glottal.windows(x, start, width), 0.0)
    out = np.zeros((rows.size, len(offsets)))
    for i, d in enumerate(offsets):
        b = glottal.windows(x, start + lag + d, width)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[:, i] = np.einsum("fn,fn->f", a, b) / np.sqrt(
                np.einsum("fn,fn->f", a, a) * np.einsum("fn,fn,fn->f", b, b, inside)
            )
    return np.nan_to_num(out)


def test_nccf_matches_numpy_reference() -> None:
    """Rows across the whole signal (segments running off both ends), a silent stretch (no energy: 0), lags and
    lengths of the F0 range, the offsets the voicing stages use."""
    rng = np.random.default_rng(5)
    x = np.convolve(rng.standard_normal(16000 * 3), [1.0, -1.5, 0.8], "same") + 3 * np.sin(np.arange(48000) / 15.0)
    x[16000:20000] = 0.0  # rows 103..122 see only zeros in their segments
    rows = np.sort(rng.choice(300, 200, replace=False))
    lag = rng.integers(32, 320, rows.size)
    for length, offsets in ((np.maximum(2 * lag, acoustic.HOP), tuple(range(-7, 8))), (3 * lag, (-1, 0, 1))):
        r, r_ref = acoustic.nccf(x, rows, lag, length, offsets), nccf_ref(x, rows, lag, length, offsets)
        np.testing.assert_allclose(r, r_ref, rtol=0, atol=1e-12)
        assert np.all(r[(rows > 102) & (rows < 123)] == 0.0) and np.abs(r).max() > 0.5


def test_leaky_integrator_is_lfilter() -> None:
    """lp_jit.leaky is scipy's lfilter([1], [1, -leak]) from rest, bit for bit (iaif_gci's integrations)."""
    from scipy.signal import lfilter

    from extractors import lp_jit

    y = np.random.default_rng(2).standard_normal((9, 333))
    np.testing.assert_array_equal(lp_jit.leaky(y, 0.99), lfilter([1.0], [1.0, -0.99], y, axis=1))
    np.testing.assert_array_equal(lp_jit.leaky(y[:, 7:].copy(), 0.9), lfilter([1.0], [1.0, -0.9], y[:, 7:], axis=1))
