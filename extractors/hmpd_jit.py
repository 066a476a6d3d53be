"""HMPD's kernels compiled (numba): PDD (`pdd`), PDM (`pdm`), the phasors on the bins (`phasors_on_bins`) and the
envelopes' interpolation (`envelopes`), each doing the same operations in the same order as the numpy code it
replaces (`hmpd._pdd_numpy`, `_pdm_numpy`, `_phasors_on_bins_numpy`, np.interp, kept as their references), so their
results are bit-identical to it.

Why compiled: PDD (a 9-row median, a 17-tap Hann trend, the deviation phasors, a 9-row mean forwards and
backwards, sqrt(-ln R²)) is ~40 cheap operations per value, and numpy makes one pass over a block per operation.
Here each row is finished in one loop over its bins (the contiguous axis, innermost, so LLVM vectorises it); the
sums keep numpy's order (no fastmath: no reassociation, no fused multiply-add), the median is the same exchange
network (it only selects values). Comparisons are written out (`_mn`, `_mx`) where numba's min/max builtins doubled
the compile time. docs/acoustic.md, "Throughput (one core)", measures the kernels and their compile cost.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def _tree9(x, j, out):
    """out = x[j] + … + x[j + 8] (rows), summed as `hmpd._window_sums` sums them (9 = 8 + 1, the 8 by pairs)."""
    x0, x1, x2, x3, x4, x5, x6, x7, x8 = x[j], x[j + 1], x[j + 2], x[j + 3], x[j + 4], x[j + 5], x[j + 6], x[j + 7], x[j + 8]
    for c in range(out.size):
        out[c] = (((x0[c] + x1[c]) + (x2[c] + x3[c])) + ((x4[c] + x5[c]) + (x6[c] + x7[c]))) + x8[c]


@numba.njit(cache=True)
def _mn(a, b):
    """np.minimum of two numbers (no NaN here)."""
    return a if a <= b else b


@numba.njit(cache=True)
def _mx(a, b):
    """np.maximum of two numbers (no NaN here)."""
    return a if a >= b else b


@numba.njit(cache=True)
def _sort3(v0, v1, v2):
    """(v0, v1, v2) sorted by `hmpd._median9`'s first three exchanges: (1 2), (0 1), (1 2)."""
    lo, hi = _mn(v1, v2), _mx(v1, v2)
    v0, v1 = _mn(v0, lo), _mx(v0, lo)
    return v0, _mn(v1, hi), _mx(v1, hi)


@numba.njit(cache=True)
def _extend_ends(ext, n, half):
    """`hmpd._extend_ends`: filtfilt's odd reflection of the rows beyond both ends."""
    pad = min(3 * half, n - 1)
    for i in range(1, half + 1):
        j = min(i, pad)
        for c in range(ext.shape[1]):
            first, last = ext[half, c], ext[half + n - 1, c]
            if pad:  # 2 x as x + x: exact, and float32 stays float32
                ext[half - i, c] = (first + first) - ext[half + j, c]
                ext[half + n - 1 + i, c] = (last + last) - ext[half + n - 1 - j, c]
            else:
                ext[half - i, c] = first
                ext[half + n - 1 + i, c] = last


@numba.njit(cache=True)
def pdd(zc, zs, taps, rounding, ln_r_floor, no_phase):
    """(rows, bins) PDD of the phasors zc + i zs (float64, C-contiguous): `hmpd._pdd`'s steps. taps: the Hann
    trend's 17 taps (forwards and backwards); rounding: R² at or above which PDD is 0; ln_r_floor: -ln R² where R is
    0; no_phase: the PDD of a bin without a phasor."""
    n, nb = zc.shape
    w2 = 2 * nb
    half, h9 = 8, 4
    # the phasors, cos and sin side by side, with the median's zeros beyond the ends
    zp = np.zeros((n + 2 * h9, w2))
    for r in range(n):
        for b in range(nb):
            zp[h9 + r, b] = zc[r, b]
            zp[h9 + r, nb + b] = zs[r, b]
    # the 9-row median (`hmpd._median9`'s network: sorted triples, then the exchanges whose values are read)
    med = np.empty((n + 2 * half, w2))
    for r in range(n):
        x0, x1, x2, x3, x4 = zp[r], zp[r + 1], zp[r + 2], zp[r + 3], zp[r + 4]
        x5, x6, x7, x8, m = zp[r + 5], zp[r + 6], zp[r + 7], zp[r + 8], med[half + r]
        for c in range(w2):
            q0, q1, q2 = _sort3(x0[c], x1[c], x2[c])
            q3, q4, q5 = _sort3(x3[c], x4[c], x5[c])
            q6, q7, q8 = _sort3(x6[c], x7[c], x8[c])
            e3, e5 = _mx(q0, q3), _mn(q5, q8)
            e4, e7 = _mn(q4, q7), _mx(q4, q7)
            e6 = _mx(e3, q6)
            e4 = _mx(q1, e4)
            e2 = _mn(q2, e5)
            e4 = _mn(e4, e7)
            e4, e2 = _mn(e4, e2), _mx(e4, e2)
            e4 = _mx(e6, e4)
            m[c] = _mn(e4, e2)
    _extend_ends(med, n, half)
    # the trend (`hmpd._symmetric`: taps at equal distances added first, zero taps skipped), its phasor, and the
    # phasors times its conjugate
    dev = np.empty((n + 2 * half, w2))
    trend = np.empty(w2)
    for r in range(n):
        mid = med[r + half]
        for c in range(w2):
            trend[c] = mid[c] * taps[half]
        for i in range(1, half + 1):
            k = taps[half + i]
            if k != 0:
                lo, hi = med[r + half - i], med[r + half + i]
                for c in range(w2):
                    trend[c] += (lo[c] + hi[c]) * k
        if r == 0 or r == n - 1:  # no direction where the median is 0 (`hmpd._pdd`)
            for b in range(nb):
                if mid[b] == 0 and mid[nb + b] == 0:
                    trend[b], trend[nb + b] = 0.0, 0.0
        a_r, s_r, d = zc[r], zs[r], dev[half + r]
        for b in range(nb):
            tc, ts = trend[b], trend[nb + b]
            norm = np.sqrt(tc * tc + ts * ts)
            flat = norm == 0
            if flat:
                norm = 1.0
            cos_t = 1.0 if flat else tc / norm
            sin_t = ts / norm
            d[b] = a_r[b] * cos_t + s_r[b] * sin_t
            d[nb + b] = s_r[b] * cos_t - a_r[b] * sin_t
    _extend_ends(dev, n, half)
    # the 9-row mean forwards and backwards (`hmpd._box_twice`: two 9-row sums, then / 81), sqrt(-ln R²)
    s1 = np.empty((n + half, w2))
    for j in range(n + half):
        _tree9(dev, j, s1[j])
    out = np.empty((n, nb))
    dm = np.empty(w2)
    for r in range(n):
        _tree9(s1, r, dm)
        o, a_r, s_r = out[r], zc[r], zs[r]
        for b in range(nb):
            c, s = dm[b] / 81.0, dm[nb + b] / 81.0
            q = c * c + s * s
            if q >= rounding:
                p = 0.0
            elif q == 0:
                p = np.sqrt(ln_r_floor)
            else:
                p = np.sqrt(_mn(_mx(-np.log(q), 0.0), ln_r_floor))
            if a_r[b] == 0 and s_r[b] == 0:
                p = no_phase
            o[b] = p
    return out


@numba.njit(cache=True)
def phasors_on_bins(ys, count, f0, bins):
    """(rows, bins, 2) cos and sin of `hmpd._phasors_on_bins`' phasors (its steps per bin, in one loop over a row's
    bins). ys: (rows, n + 1) PD unwrapped over the harmonics, column 0 the 0.95 f0 anchor; count: harmonics per row;
    bins: the bins' frequencies (Hz)."""
    rows, n1 = ys.shape
    n = n1 - 1
    out = np.zeros((rows, bins.size, 2))
    for r in range(rows):
        f, c, y, o = f0[r], count[r], ys[r], out[r]
        if c < 1:
            continue
        last = y[c]
        cos_last, sin_last = np.cos(last), np.sin(last)
        for j in range(bins.size):
            u = bins[j] / f
            if u <= c:  # inside the harmonics: linear in the unwrapped PD
                if u < 1.0:  # from the 0.95 f0 anchor (PD 0) to the first harmonic
                    val = y[1] * _mn(_mx((u - 0.95) / 0.05, 0.0), 1.0)
                else:
                    k = _mn(_mx(int(np.floor(u)), 0), n - 1)
                    frac = _mn(_mx(u - k, 0.0), 1.0)
                    low, high = y[k], y[_mn(k + 1, n)]
                    val = low + frac * (high - low)
                o[j, 0], o[j, 1] = np.cos(val), np.sin(val)
            elif u - c < 1:  # the expected phasor of COVAREP's random next harmonic: e^{ia} sinc(w)
                x = np.pi * (u - c)
                s = np.sin(x) / x
                o[j, 0], o[j, 1] = cos_last * s, sin_last * s
    return out


@numba.njit(cache=True)
def envelopes(bins, xp, fp, count, out):
    """out[i] = np.interp(bins, xp[i, : count[i] + 1], fp[i, : count[i] + 1]) for each row i, bins ascending, the
    knots strictly ascending: numpy's arithmetic (its C loop's slope, the exact knot, the NaN fallbacks) walked along
    the bins instead of a binary search per bin, without a Python call per row (numba's own np.interp would give the
    same values but costs 2 s more to compile)."""
    for i in range(xp.shape[0]):
        x, y, o = xp[i], fp[i], out[i]
        last = count[i]
        j = 0
        for m in range(bins.size):
            v = bins[m]
            if last == 0:  # one knot
                o[m] = y[0]
                continue
            while j < last and x[j + 1] <= v:
                j += 1
            if v < x[0]:
                o[m] = y[0]
            elif j == last:  # at or past the last knot
                o[m] = y[last]
            elif x[j] == v:
                o[m] = y[j]
            else:
                slope = (y[j + 1] - y[j]) / (x[j + 1] - x[j])
                r = slope * (v - x[j]) + y[j]
                if np.isnan(r):
                    r = slope * (v - x[j + 1]) + y[j + 1]
                    if np.isnan(r) and y[j] == y[j + 1]:
                        r = y[j]
                o[m] = r


@numba.njit(cache=True)
def _sums8(x, out):
    """out[j] = x[j] + … + x[j + 7] (rows), by pairs as `hmpd._window_sums` sums them."""
    for j in range(out.shape[0]):
        x0, x1, x2, x3, x4, x5, x6, x7 = x[j], x[j + 1], x[j + 2], x[j + 3], x[j + 4], x[j + 5], x[j + 6], x[j + 7]
        o = out[j]
        for c in range(o.size):
            o[c] = ((x0[c] + x1[c]) + (x2[c] + x3[c])) + ((x4[c] + x5[c]) + (x6[c] + x7[c]))


@numba.njit(cache=True)
def _sums25(x, p8, out):
    """out[j] = x[j] + … + x[j + 24] as `hmpd._window_sums` sums them (25 = 16 + 8 + 1, each by pairs); p8: room
    for the 8-row sums."""
    _sums8(x, p8)
    for j in range(out.shape[0]):
        a, b, d, e, o = p8[j], p8[j + 8], p8[j + 16], x[j + 24], out[j]
        for c in range(o.size):
            o[c] = ((a[c] + b[c]) + d[c]) + e[c]


@numba.njit(cache=True)
def pdm(zc, zs):
    """(rows, bins, 2) float32 cos and sin of `hmpd._pdm`'s PDM phasors (its steps, in float32 as there): the
    25-row mean forwards and backwards, normalised to 1, 0 where its length is at most 1e-6."""
    n, nb = zc.shape
    w2, half = 2 * nb, 24
    ext = np.empty((n + 2 * half, w2), np.float32)
    for r in range(n):
        for b in range(nb):
            ext[half + r, b] = zc[r, b]
            ext[half + r, nb + b] = zs[r, b]
    _extend_ends(ext, n, half)
    p8 = np.empty((n + 2 * half - 7, w2), np.float32)
    s1 = np.empty((n + half, w2), np.float32)
    _sums25(ext, p8, s1)
    s2 = np.empty((n, w2), np.float32)
    _sums25(s1, p8, s2)
    out = np.empty((n, nb, 2), np.float32)
    scale, tiny = np.float32(625.0), np.float32(1e-6)
    for r in range(n):
        m, o = s2[r], out[r]
        for b in range(nb):
            c, s = m[b] / scale, m[nb + b] / scale
            mag = np.sqrt(c * c + s * s)
            if mag <= tiny:  # no direction: 0
                mag = np.float32(np.inf)
            o[b, 0], o[b, 1] = c / mag, s / mag
    return out
