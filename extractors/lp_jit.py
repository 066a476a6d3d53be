"""Compiled row-wise linear-prediction kernels (numba) behind glottal.py's autocorr_rows, levinson_rows and _fir_rows.

Why compiled: the numpy formulations pay per call and per lag (one einsum per lag for the autocorrelation, one per
order step for Levinson, a batched matmul of ~0.5 GMAC/s on a strided view for the short FIRs) on thousands of short
rows a minute. No fastmath: every output sums its terms in one fixed order whatever the batch, so a row's numbers
never depend on the other rows, and they differ from the numpy formulations' only by summation order (rounding; the
FIR's order is numpy's own, so it is bit-identical). Rows are read through 1-d slices, never `x[n + k]` on the row:
numba's negative-index wrap-around on a computed index keeps LLVM from vectorising the loop (4x slower).
`cache=True`: the machine code is kept in __pycache__ (or numba's user cache), so only a fresh clone's first process
compiles (the cost is in docs/acoustic.md). Arrays come in C-contiguous float64 (glottal.py's wrappers see to it):
one compiled version per kernel.
"""

import numba
import numpy as np


@numba.njit(cache=True)
def autocorr(win: np.ndarray, order: int, start: int) -> np.ndarray:
    """(F, order+1): r[f, k] = sum_n w[n] * w[n + k] with w = win[f, start:]."""
    n_rows = win.shape[0]
    n = win.shape[1] - start
    r = np.zeros((n_rows, order + 1))
    acc = np.zeros(max(order + 1, 4))
    for f in range(n_rows):
        w = win[f, start:]
        if order < 4:  # few lags: per lag, four interleaved partial sums (a fixed pattern), then their sum
            for k in range(min(order + 1, n)):
                m = n - k
                a = w[k:]
                s0 = s1 = s2 = s3 = 0.0
                mb = m // 4 * 4
                for i in range(0, mb, 4):
                    s0 += a[i] * w[i]
                    s1 += a[i + 1] * w[i + 1]
                    s2 += a[i + 2] * w[i + 2]
                    s3 += a[i + 3] * w[i + 3]
                s = (s0 + s1) + (s2 + s3)
                for i in range(mb, m):
                    s += a[i] * w[i]
                r[f, k] = s
            continue
        # many lags: for each sample, for each lag (the lag loop vectorises; each lag sums in increasing n)
        acc[:] = 0.0
        full = max(n - order, 0)  # samples with every lag inside the row
        for i in range(full):
            wi = w[i]
            seg = w[i : i + order + 1]
            for k in range(order + 1):
                acc[k] += wi * seg[k]
        for i in range(full, n):
            wi = w[i]
            seg = w[i:]
            for k in range(n - i):
                acc[k] += wi * seg[k]
        r[f] = acc[: order + 1]
    return r


@numba.njit(cache=True)
def levinson(r: np.ndarray) -> np.ndarray:
    """(F, order+1) LPC polynomials by the Levinson-Durbin recursion, one row at a time; a row whose coefficients
    end non-finite (no signal: a zero error) gets the identity filter."""
    n_rows, taps = r.shape
    a = np.zeros((n_rows, taps))
    prev = np.zeros(taps)
    for f in range(n_rows):
        row = a[f]
        rf = r[f]
        row[0] = 1.0
        err = rf[0] * (1 + 1e-9)  # tiny white-noise correction keeps the recursion stable
        for i in range(1, taps):
            s = rf[i]
            back = rf[i - 1 : 0 : -1] if i > 1 else rf[1:1]  # r[i-1], ..., r[1]
            for j in range(i - 1):
                s += row[j + 1] * back[j]
            k = -s / err if err != 0.0 else np.nan  # numba raises on a division by zero; numpy's nan/inf instead
            prev[:i] = row[:i]
            for j in range(1, i):
                row[j] = prev[j] + k * prev[i - j]
            row[i] = k
            err = err * (1 - k * k)
        ok = True
        for j in range(taps):  # as numpy's: a non-finite coefficient anywhere marks the row
            ok = ok and np.isfinite(row[j])
        if not ok:
            row[:] = 0.0
            row[0] = 1.0
    return a


@numba.njit(cache=True)
def fir(a: np.ndarray, ext: np.ndarray, start: int) -> np.ndarray:
    """(F, n_out): out[f, n] = sum_k a[f, taps-1-k] * ext[f, start + n + k], k increasing (numpy's matmul order);
    for each tap, for each sample: the sample loop vectorises."""
    n_rows, taps = a.shape
    n_out = ext.shape[1] - start - taps + 1
    out = np.zeros((n_rows, n_out))
    for f in range(n_rows):
        o = out[f]
        for k in range(taps):
            c = a[f, taps - 1 - k]
            x = ext[f, start + k : start + k + n_out]
            for n in range(n_out):
                o[n] += c * x[n]
    return out
