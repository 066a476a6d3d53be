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
def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """sum x * y over equal-length slices: four interleaved partial sums (a fixed pattern), then their sum."""
    n = x.size
    s0 = s1 = s2 = s3 = 0.0
    mb = n // 4 * 4
    for i in range(0, mb, 4):
        s0 += x[i] * y[i]
        s1 += x[i + 1] * y[i + 1]
        s2 += x[i + 2] * y[i + 2]
        s3 += x[i + 3] * y[i + 3]
    s = (s0 + s1) + (s2 + s3)
    for i in range(mb, n):
        s += x[i] * y[i]
    return s


@numba.njit(cache=True)
def _autocorr_row(w: np.ndarray, order: int, out: np.ndarray) -> None:
    """out[k] = sum_n w[n] * w[n + k] for k = 0..order (0 past the row's end)."""
    n = w.size
    out[:] = 0.0
    if order < 4:  # few lags: per lag, `_dot`'s four interleaved partial sums (a fixed pattern), then their sum
        for k in range(min(order + 1, n)):
            out[k] = _dot(w[k:], w[: n - k])
        return
    # many lags: for each sample, for each lag (the lag loop vectorises; each lag sums in increasing n)
    full = max(n - order, 0)  # samples with every lag inside the row
    for i in range(full):
        wi = w[i]
        seg = w[i : i + order + 1]
        for k in range(order + 1):
            out[k] += wi * seg[k]
    for i in range(full, n):
        wi = w[i]
        seg = w[i:]
        for k in range(n - i):
            out[k] += wi * seg[k]


@numba.njit(cache=True)
def _levinson_row(r: np.ndarray, row: np.ndarray) -> None:
    """row (order+1): the LPC polynomial of autocorrelation r by Levinson-Durbin, the identity filter where its
    coefficients end non-finite (no signal: a zero error)."""
    taps = r.size
    row[:] = 0.0
    row[0] = 1.0
    err = r[0] * (1 + 1e-9)  # tiny white-noise correction keeps the recursion stable
    for i in range(1, taps):
        s = r[i]
        for j in range(1, i):
            s += row[j] * r[i - j]
        k = -s / err if err != 0.0 else np.nan  # numba raises on a division by zero; numpy's nan/inf instead
        lo, hi = 1, i - 1  # a[j] += k * a[i - j] on the previous step's a: in place, a pair at a time
        while lo < hi:
            a_lo, a_hi = row[lo], row[hi]
            row[lo] = a_lo + k * a_hi
            row[hi] = a_hi + k * a_lo
            lo += 1
            hi -= 1
        if lo == hi:
            row[lo] = row[lo] + k * row[lo]
        row[i] = k
        err = err * (1 - k * k)
    ok = True
    for j in range(taps):  # as numpy's: a non-finite coefficient anywhere marks the row
        ok = ok and np.isfinite(row[j])
    if not ok:
        row[:] = 0.0
        row[0] = 1.0


@numba.njit(cache=True)
def _fir_row(a: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
    """out[n] = sum_k a[taps-1-k] * x[n + k], k increasing (numpy's matmul order); for each tap, for each sample:
    the sample loop vectorises."""
    taps = a.size
    n_out = out.size
    out[:] = 0.0
    for k in range(taps):
        c = a[taps - 1 - k]
        seg = x[k : k + n_out]
        for n in range(n_out):
            out[n] += c * seg[n]


@numba.njit(cache=True)
def autocorr(win: np.ndarray, order: int, start: int) -> np.ndarray:
    """(F, order+1): r[f, k] = sum_n w[n] * w[n + k] with w = win[f, start:]."""
    r = np.zeros((win.shape[0], order + 1))
    for f in range(win.shape[0]):
        _autocorr_row(win[f, start:], order, r[f])
    return r


@numba.njit(cache=True)
def levinson(r: np.ndarray) -> np.ndarray:
    """(F, order+1) LPC polynomials of the autocorrelations r (F, order+1), row by row (_levinson_row)."""
    a = np.zeros(r.shape)
    for f in range(r.shape[0]):
        _levinson_row(r[f], a[f])
    return a


@numba.njit(cache=True)
def fir(a: np.ndarray, ext: np.ndarray, start: int) -> np.ndarray:
    """(F, n_out): row f of ext[:, start:] (taps-1 samples of history, then the frame) through filter a[f]."""
    n_out = ext.shape[1] - start - a.shape[1] + 1
    out = np.zeros((a.shape[0], n_out))
    for f in range(a.shape[0]):
        _fir_row(a[f], ext[f, start:], out[f])
    return out


@numba.njit(cache=True)
def lp_residual(x: np.ndarray, win: np.ndarray, shift: int, n_frames: int, order: int) -> np.ndarray:
    """glottal.lp_residual's overlap-add before its peak normalisation, one frame at a time: frame f (x[f * shift:]
    times win) through its own order-`order` LPC inverse filter (zero initial state), scaled to the frame's energy,
    added into the output in increasing f."""
    length = win.size
    res = np.zeros(x.size)
    ext = np.zeros(order + length)  # `order` zeros of history, then the windowed frame
    frame = ext[order:]
    r = np.zeros(order + 1)
    a = np.zeros(order + 1)
    part = np.zeros(length)
    for f in range(n_frames):
        seg = x[f * shift : f * shift + length]
        for n in range(length):
            frame[n] = seg[n] * win[n]
        _autocorr_row(frame, order, r)
        _levinson_row(r, a)
        _fir_row(a, ext, part)
        energy = _dot(part, part)  # the residual's energy
        gain = np.sqrt(r[0] / energy) if energy > 0.0 else np.inf
        if not np.isfinite(gain):  # no residual energy (or no signal): the frame adds nothing, as numpy's nan_to_num
            gain = 0.0
        out = res[f * shift : f * shift + length]
        for n in range(length):
            out[n] += part[n] * gain
    return res


@numba.njit(cache=True)
def nccf(x: np.ndarray, starts: np.ndarray, lag: np.ndarray, length: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """(rows, offsets): normalised cross-correlation of x[s : s + L] with x[s + lag + d : s + lag + d + L]
    (s, lag, L per row; d per column; x is zero outside itself), 0 where either segment has no energy. Each sum
    runs over the samples inside x only: the same sums as over zero-padded segments, without the zeros."""
    n_x = x.size
    out = np.zeros((starts.size, offsets.size))
    for f in range(starts.size):
        sa, n = starts[f], length[f]
        lo, hi = max(sa, 0), min(sa + n, n_x)
        if hi <= lo:
            continue
        energy_a = _dot(x[lo:hi], x[lo:hi])
        for i in range(offsets.size):
            shift = lag[f] + offsets[i]
            blo, bhi = max(sa + shift, 0), min(sa + shift + n, n_x)
            if bhi <= blo:
                continue
            energy_b = _dot(x[blo:bhi], x[blo:bhi])
            plo, phi = max(lo, blo - shift), min(hi, bhi - shift)  # where both segments lie inside x
            cross = _dot(x[plo:phi], x[plo + shift : phi + shift]) if phi > plo else 0.0
            den = np.sqrt(energy_a * energy_b)
            if den > 0.0:
                out[f, i] = cross / den
    return out


@numba.njit(cache=True)
def leaky(y: np.ndarray, leak: float) -> np.ndarray:
    """(F, n): rows of y through 1 / (1 - leak z^-1) from rest, y[n] = x[n] + leak * y[n - 1]:
    scipy's lfilter([1], [1, -leak]) to the bit (its direct form adds 0 * x and negates exactly), without its
    per-call cost on short rows."""
    n_rows = y.shape[0]
    n = y.shape[1]
    out = np.empty((n_rows, n))
    for f in range(n_rows):
        x = y[f]
        o = out[f]
        prev = 0.0
        for i in range(n):
            prev = x[i] + leak * prev
            o[i] = prev
    return out
