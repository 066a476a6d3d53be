"""Glottal-source and wavelet voice-quality parameters for the `covarep` feature, vectorised over frames and cycles.

Everything here works on one block of 16 kHz mono audio and a row grid of `hop` samples whose row j is centred at
sample `j * hop + hop // 2` (the [j*10 ms, (j+1)*10 ms) rows of the store). References:

- IAIF: Alku, "Glottal wave analysis with pitch synchronous iterative adaptive inverse filtering", Speech Comm. 11,
  1992. Run per 32 ms frame (Hann window, autocorrelation LPC as MATLAB's `lpc`), vocal-tract order
  2*round(fs/2000)+4, glottal order 2*round(fs/4000), as in COVAREP; the frames' inverse filters are cross-faded
  between row centres.
- GFM-IAIF (H1-H2 and HRF since version 6, first stage only): Perrotin & McLoughlin, "A spectral glottal flow model
  for source-filter separation of speech", ICASSP 2019. QCP (option): Airaksinen, Raitio, Story & Alku,
  "Quasi closed phase glottal inverse filtering analysis with weighted linear prediction", IEEE/ACM TASLP 22(3), 2014.
- GCIs: Drugman, Thomas, Gudnason, Naylor & Dutoit, "Detection of glottal closure instants from speech signals: a
  quantitative review", IEEE TASLP 20(3), 2012 (SEDREAMS). SEDREAMS takes the residual peak inside intervals derived
  from a mean-based signal; here the intervals come from the F0 contour instead (the next GCI is searched in
  [0.6, 1.4] local periods after the last one) and the peak is the minimum of the IAIF flow derivative, the LF
  model's instant of maximal excitation: found at 2 kHz, then refined at 1 kHz within +-0.5 ms. Polarity: in upright speech the flow derivative's negative (closing)
  peak exceeds its positive one; a block where most voiced 30 ms windows say otherwise is inverted.
- NAQ: Alku, Bäckström & Vilkman, JASA 112(2), 2002: f_ac / (d_peak * T0) per cycle. QOQ: Hacki 1989 (quasi-open
  quotient at 50 % of f_ac). PSP: Alku, Strik & Vilkman, Speech Comm. 22, 1997 (parabola fitted to the single-cycle
  flow spectrum, relative to that of a DC pulse). H1-H2 (Titze & Sundberg 1992; Hanson 1997) and HRF (Childers & Lee,
  JASA 90(5), 1991) on a 3-period Hamming-windowed flow derivative, harmonics up to 5 kHz.
- MDQ: Kane & Gobl, "Wavelet maxima dispersion for breathy to tense voice discrimination", IEEE TASLP 21(6), 2013.
- Peak slope: Kane & Gobl, "Identifying regions of non-modal phonation using features of the wavelet transform",
  Interspeech 2011 (cosine-modulated Gaussian wavelets of d'Alessandro & Sturmel 2011, octave bands 8 kHz..125 Hz).
"""

from __future__ import annotations

import functools

import librosa
import numpy as np
from scipy.fft import irfft, rfft
from scipy.ndimage import maximum_filter1d
from scipy.signal import butter, ellip, ellipord, find_peaks, lfilter, sosfiltfilt

from extractors import lp_jit

IAIF_FRAME_S = 0.032
PSP_NFFT = 2048  # as in Alku et al. (1997)
SPEC_NFFT = 2048
HRF_MAX_HZ = 5000.0


def highpass(x: np.ndarray, fs: int, cutoff_hz: float = 40.0) -> np.ndarray:
    """Zero-phase 4th-order Butterworth high-pass: removes rumble without moving GCIs."""
    return sosfiltfilt(butter(4, cutoff_hz, "highpass", fs=fs, output="sos"), x)


def windows(x: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """(len(starts), length) copies of x[s : s + length], zero outside x.

    Windows inside x are read from a strided view of x itself; only those crossing its ends are assembled with
    zeros (padding the whole block for them cost ~0.2 s per minute of audio: it is called ~300 times a minute)."""
    starts = np.asarray(starts)
    if x.size < length:
        x = np.pad(x, (0, length - x.size))
    view = np.lib.stride_tricks.sliding_window_view(x, length)
    if starts.size and starts.min() >= 0 and starts.max() + length <= x.size:
        return view[starts]  # all inside (the common case): one gathering copy
    out = np.empty((starts.size, length), dtype=x.dtype)
    inside = (starts >= 0) & (starts + length <= x.size)
    out[inside] = view[starts[inside]]
    edge = np.flatnonzero(~inside)
    if edge.size:
        idx = starts[edge, None] + np.arange(length)[None]
        valid = (idx >= 0) & (idx < x.size)
        out[edge] = np.where(valid, x[np.clip(idx, 0, x.size - 1)], 0)
    return out


def lpc_rows(frames: np.ndarray, order: int, method: str = "autocorrelation", window: bool = True) -> np.ndarray:
    """LPC polynomials (F, order+1) of Hann-windowed rows; rows without signal get the identity filter.

    "autocorrelation": Levinson-Durbin on the rows' autocorrelation (what MATLAB's `lpc`, and so COVAREP's IAIF,
    uses), vectorised over rows. "burg": `librosa.lpc`, about 15x slower here. `window=False`: the rows as given
    (already windowed, or zero-padded frames of different lengths, which a common window would distort).
    """
    win = frames * np.hanning(frames.shape[1]) if window else frames
    if method == "burg":
        a = librosa.lpc(win, order=order, axis=-1)
        bad = ~np.all(np.isfinite(a), axis=1)
        a[bad] = np.eye(1, order + 1)
        return a
    return levinson_rows(autocorr_rows(win, order))


def _f64c(x: np.ndarray) -> np.ndarray:
    """x as a C-contiguous float64 array (a copy only when it is not one): the compiled kernels' one layout."""
    return np.ascontiguousarray(x, dtype=np.float64)


def autocorr_rows(win: np.ndarray, order: int, start: int = 0) -> np.ndarray:
    """(F, order+1) autocorrelation of each row win[f, start:] at lags 0..order (no window applied here); `start`
    lets a caller pass the C-contiguous buffer its rows sit in rather than a strided view of it."""
    # lags 0..order directly: cheaper than an FFT for order << n, and exact; compiled (extractors/lp_jit.py)
    return lp_jit.autocorr(_f64c(win), order, start)


def levinson_rows(r: np.ndarray) -> np.ndarray:
    """LPC polynomials (F, order+1) from autocorrelations (F, order+1) by Levinson-Durbin, row by row, compiled
    (extractors/lp_jit.py; each row's numbers the same whatever the other rows: callers batch rows freely); rows
    without signal get the identity filter."""
    return lp_jit.levinson(_f64c(r))


def _fir_rows(a: np.ndarray, ext: np.ndarray, start: int = 0) -> np.ndarray:
    """Row-wise FIR: ext[:, start:] holds `order` samples of history before each frame; returns the frame-length
    output (compiled: extractors/lp_jit.py; `start` spares a strided view of a C-contiguous buffer)."""
    return lp_jit.fir(_f64c(a), _f64c(ext), start)


def iaif_filters(
    x_hp: np.ndarray, centres: np.ndarray, fs: int, leak: float, lpc_method: str = "autocorrelation"
) -> np.ndarray:
    """Vocal-tract inverse filters (F, p_vt+1) by IAIF for frames centred at `centres` (Alku 1992, two passes)."""
    p_vt, p_gl = 2 * round(fs / 2000) + 4, 2 * round(fs / 4000)
    length = round(IAIF_FRAME_S * fs)
    ext = windows(x_hp, centres - length // 2 - p_vt, length + p_vt)

    def integrate(y: np.ndarray) -> np.ndarray:  # cancels lip radiation; mean removed so LPC sees no start-up offset
        y = lfilter([1.0], [1.0, -leak], y, axis=1)
        return y - y.mean(axis=1, keepdims=True)

    frame = ext[:, p_vt:]
    tilt = _fir_rows(lpc_rows(frame, 1, lpc_method), ext, p_vt - 1)  # 1st pass: remove a 1-pole tilt
    g1 = integrate(_fir_rows(lpc_rows(tilt, p_vt, lpc_method), ext))
    a_gl = lpc_rows(g1, p_gl, lpc_method)  # 2nd pass: glottal contribution of order p_gl from the 1st flow estimate
    y = integrate(_fir_rows(a_gl, ext, p_vt - p_gl))
    return lpc_rows(y, p_vt, lpc_method)


def gfm_filters(x_hp: np.ndarray, centres: np.ndarray, fs: int, leak: float, n_gl: int = 3) -> np.ndarray:
    """Vocal-tract inverse filters (F, p_vt+1) by the first ("gross") stage of GFM-IAIF (Perrotin & McLoughlin,
    ICASSP 2019): on the lip-radiation-cancelled (leakily integrated) 32 ms frame, the glottis is modelled as n_gl
    cascaded 1st-order LPCs (glottal formant and spectral tilt; IAIF takes one), then the vocal tract is the order
    p_vt LPC of the frame with that glottis cancelled. The paper's second ("fine") glottis/tract pass was measured
    and not kept (docs/acoustic.md, "Version 6")."""
    p_vt = 2 * round(fs / 2000) + 4
    length = round(IAIF_FRAME_S * fs)
    gv = lfilter([1.0], [1.0, -leak], x_hp)
    ext = windows(gv, centres - length // 2 - n_gl, length + n_gl)

    def fir(a: np.ndarray) -> np.ndarray:  # row-wise FIR of a few taps: shifted multiply-adds beat a thin matmul
        return sum(a[:, k, None] * ext[:, n_gl - k : n_gl - k + length] for k in range(a.shape[1]))

    ag = lpc_rows(ext[:, n_gl:], 1)
    for _ in range(n_gl - 1):  # cancel the current glottis estimate, fit one more pole, cascade (polynomial product)
        a1 = lpc_rows(fir(ag), 1)[:, 1:]
        ag = np.pad(ag, ((0, 0), (0, 1))) + a1 * np.pad(ag, ((0, 0), (1, 0)))
    return lpc_rows(fir(ag), p_vt)


# Quasi-closed-phase analysis (Airaksinen, Raitio, Story & Alku, IEEE/ACM TASLP 22(3), 2014): the attenuated-main-
# excitation (AME) weight is 1 from QCP_PQ to QCP_PQ + QCP_DQ of each glottal cycle after its GCI (linear ramps of
# QCP_RAMP samples at both ends) and QCP_D elsewhere, so the vocal-tract fit ignores the instants around each closure,
# where the glottal excitation (not the tract's ringing) dominates the prediction error. DQ, d and the ramp are the
# paper's values; PQ 0.05 of its 0-0.1 (0.1 and 0 were measured worse on the LF vowels: docs).
# The fit is made on the pre-emphasised (1 - z^-1) signal, as in the paper; without it the fit takes the glottal tilt
# (docs/acoustic.md, "QCP").
QCP_DQ, QCP_PQ, QCP_D, QCP_RAMP = 0.7, 0.05, 1e-5, 7


def ame_weight(
    n: int, gcis: np.ndarray, max_period: float, dq: float | None = None, pq: float | None = None,
    d: float | None = None, ramp: int | None = None,
) -> np.ndarray:  # fmt: skip
    """AME weight per sample of a block of n samples: 1 where no glottal cycle is near (unvoiced: plain LP)."""
    dq = QCP_DQ if dq is None else dq
    pq = QCP_PQ if pq is None else pq
    d = QCP_D if d is None else d
    ramp = QCP_RAMP if ramp is None else ramp
    w = np.ones(n)
    if gcis.size < 2:
        return w
    periods = np.diff(gcis).astype(float)
    ok = periods <= max_period
    # each sample's cycle: the last GCI at or before it, its period the gap to the next GCI (or the previous gap
    # for the last GCI of a run); the half period before a run's first GCI takes that cycle's period too
    t = np.arange(n)
    k = np.searchsorted(gcis, t, side="right") - 1
    per = np.concatenate([[np.nan], np.where(ok, periods, np.nan), [np.nan]])  # per[k + 1] = period after gci k
    after = per[k + 1]
    before = per[np.clip(k, 0, None)]  # period ending at gci k (previous gap), for a run's last GCI
    period = np.where(np.isfinite(after), after, before)
    start = gcis[np.clip(k, 0, None)].astype(float)
    ahead = per[np.clip(k + 2, 0, per.size - 1)]  # period after the next GCI
    first = np.isfinite(ahead) & ~np.isfinite(period)  # before a run's first GCI: phase from the GCI ahead
    nxt = gcis[np.clip(k + 1, 0, gcis.size - 1)]
    period = np.where(first, ahead, period)
    start = np.where(first, nxt - period, start)
    phase_s = t - start  # samples since the cycle's GCI
    near = np.isfinite(period) & (phase_s >= 0) & (phase_s < np.where(np.isfinite(period), period, 0))
    lo, hi = pq * period, (pq + dq) * period
    up = np.clip((phase_s - lo + 1) / (ramp + 1), 0, 1)
    down = np.clip((hi - phase_s) / (ramp + 1), 0, 1)
    w_cyc = d + (1 - d) * np.minimum(up, down)
    w[near] = w_cyc[near]
    return w


def wlp_rows(frames: np.ndarray, weights: np.ndarray, order: int, chunk: int = 256) -> np.ndarray:
    """Weighted LP polynomials (F, order+1): minimise sum_n w[n] e[n]^2 over n = 0 .. N+order-1 of each Hann-windowed
    row (zero outside it), `weights` (F, N+order). The weighted covariance normal equations are built with one
    batched matmul per chunk of rows and solved together; rows without signal get the identity filter."""
    n = frames.shape[1]
    win = frames * np.hanning(n)
    out = np.zeros((len(win), order + 1))
    out[:, 0] = 1.0
    diag = np.arange(1, order + 1)
    for i in range(0, len(win), chunk):
        f = np.pad(win[i : i + chunk], ((0, 0), (order, order)))
        y = np.lib.stride_tricks.sliding_window_view(f, n + order, axis=1)[:, ::-1]  # [F, k, n] = s[n - k]
        yw = y * np.sqrt(weights[i : i + chunk])[:, None]
        r = yw @ np.swapaxes(yw, 1, 2)  # (F, order+1, order+1)
        r[:, diag, diag] *= 1 + 1e-9  # tiny white-noise correction, as in lpc_rows
        r[:, diag, diag] += 1e-300
        with np.errstate(all="ignore"):
            out[i : i + chunk, 1:] = np.linalg.solve(r[:, 1:, 1:], -r[:, 1:, :1])[..., 0]
    bad = ~np.all(np.isfinite(out), axis=1)
    out[bad] = np.eye(1, order + 1)
    return out


def qcp_filters(
    x_hp: np.ndarray, centres: np.ndarray, weight: np.ndarray, fs: int, order: int | None = None
) -> np.ndarray:
    """Vocal-tract inverse filters (F, order+1) by quasi-closed-phase weighted LP of the pre-emphasised signal,
    32 ms frames centred at `centres`; `weight` is the AME function at absolute sample positions."""
    p = order or 2 * round(fs / 2000) + 4
    length = round(IAIF_FRAME_S * fs)
    x_pe = np.diff(x_hp, prepend=x_hp[:1])
    starts = centres - length // 2
    return wlp_rows(windows(x_pe, starts, length), windows(weight, starts, length + p), p)


def inverse_filter(x: np.ndarray, a_rows: np.ndarray, hop: int) -> np.ndarray:
    """Time-varying FIR: row j's filter holds at sample j*hop + hop//2, coefficients linearly interpolated between.

    Interpolating coefficients equals cross-fading the outputs of neighbouring rows' filters (filtering is linear
    in the coefficients), so no frame edge leaves a step in the output. Memory: one strided view, no lag matrix.
    """
    n_rows, taps = a_rows.shape
    if x.size != n_rows * hop:
        raise ValueError(f"inverse_filter needs {n_rows} rows * {hop} samples, got {x.size} samples")
    a_ext = np.concatenate([a_rows[:1], a_rows, a_rows[-1:]])  # rows -1 and n_rows hold their neighbours' filter
    first = hop // 2 - hop  # centre of row -1: segment s spans [centre(s-1), centre(s))
    pad = taps + hop
    xp = np.pad(x, (pad, pad))
    view = np.lib.stride_tricks.sliding_window_view(xp, taps)
    lagged = view[first - taps + 1 + pad : first - taps + 1 + pad + (n_rows + 1) * hop]
    lagged = lagged.reshape(n_rows + 1, hop, taps)  # [s, i, k] = x[centre(s-1) + i - (taps - 1) + k]
    both = lagged @ np.stack([a_ext[:-1, ::-1], a_ext[1:, ::-1]], axis=2)  # (segments, hop, left/right filter)
    w = np.arange(hop) / hop
    return ((1 - w) * both[..., 0] + w * both[..., 1]).reshape(-1)[-first : -first + x.size]


def polarity(dg: np.ndarray, voiced_centres: np.ndarray, fs: int) -> float:
    """+1 for upright speech, -1 for inverted: in most 30 ms windows the flow derivative's negative peak dominates.

    Skewness (the idea of RESKEW, Drugman 2013) is dominated here by onsets and the ringing after closures; this
    per-window vote is not.
    """
    if voiced_centres.size == 0:
        return 1.0
    w = windows(dg, voiced_centres - round(0.015 * fs), round(0.03 * fs))
    return 1.0 if np.mean(w.max(axis=1) + w.min(axis=1) < 0) >= 0.5 else -1.0


def iaif_polarity(x_hp: np.ndarray, centres: np.ndarray, fs: int, leak: float, every: int = 3) -> float:
    """`polarity`'s vote on a row-wise IAIF flow derivative (each 30 ms window through the IAIF filter of its own
    32 ms frame), from every `every`-th of the voiced row centres given: a majority needs no more, at a third of the
    filters' cost. The pitch-synchronous derivative is no substitute: its vote inverts a breathy 220 Hz LF vowel."""
    sample = centres[::every]
    if sample.size == 0:
        return 1.0
    a = iaif_filters(x_hp, sample, fs, leak)
    half, p = round(0.015 * fs), a.shape[1] - 1
    dg = _fir_rows(a, windows(x_hp, sample - half - p, 2 * half + p))
    return 1.0 if np.mean(dg.max(axis=1) + dg.min(axis=1) < 0) >= 0.5 else -1.0


# The minima are taken on the flow derivative low-passed at this cutoff (4th-order Butterworth, zero phase): above
# it the IAIF output is mostly what the vocal-tract inverse filter amplifies (noise, aspiration, missed formants),
# which moves a sample-level minimum by samples. Chosen on noisy LF vowels (docs/acoustic.md, "GCIs"): the lowest
# cutoff whose pulse-shape-dependent offset spreads no wider than without the filter; lower ones pull the
# minimum towards the slow side of the pulse, by an amount that depends on Rd.
GCI_LOWPASS_HZ = 2000.0
# Each minimum is then moved to the minimum of the derivative low-passed at GCI_REFINE_HZ within
# +-GCI_REFINE_S (coarse to fine, as SEDREAMS takes the residual peak inside an interval, here the other way round):
# the 2 kHz signal says WHICH trough is the closure (a creaky or pressed closure is a spike a sample or two wide that
# a 1 kHz filter flattens below a broad neighbouring trough), the 1 kHz one WHERE it is (aspiration noise in
# breathy voice moves a 2 kHz minimum by samples). Chosen on LF vowels with Rd and F0 sweeping inside each clip, EGG
# files held out (docs/acoustic.md, "Version 5").
GCI_REFINE_HZ = 1000.0
GCI_REFINE_S = 0.0005


def _lowpass(x: np.ndarray, cutoff_hz: float, fs: int) -> np.ndarray:
    """Zero-phase 4th-order Butterworth low-pass; a cutoff at or above Nyquist leaves x as it is."""
    return sosfiltfilt(butter(4, cutoff_hz, fs=fs, output="sos"), x) if fs / 2 > cutoff_hz else x


def detect_gcis(dg: np.ndarray, f0_rows: np.ndarray, voiced: np.ndarray, hop: int, fs: int) -> np.ndarray:
    """GCI sample positions: minima of the (low-passed) flow derivative one local period apart, in voiced runs,
    each refined to the minimum of the derivative low-passed at GCI_REFINE_HZ within +-GCI_REFINE_S."""
    gcis = _gci_minima(_lowpass(dg, GCI_LOWPASS_HZ, fs), f0_rows, voiced, hop, fs)
    if gcis.size == 0:
        return gcis
    r = round(GCI_REFINE_S * fs)
    fine = windows(_lowpass(dg, GCI_REFINE_HZ, fs), gcis - r, 2 * r + 1)
    return np.unique(np.clip(gcis - r + fine.argmin(axis=1), 0, dg.size - 1))


def _gci_minima(dg: np.ndarray, f0_rows: np.ndarray, voiced: np.ndarray, hop: int, fs: int) -> np.ndarray:
    """Minima of dg one local period apart (F0-guided), in voiced runs."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], voiced.astype(np.int8), [0]])))
    out: list[int] = []
    for r0, r1 in zip(edges[::2], edges[1::2], strict=True):
        lo, hi = r0 * hop, min(r1 * hop, dg.size)
        centres = np.arange(r0, r1) * hop + hop // 2
        # local period at every sample; one sample past the run too, since a search window [a, b] may end at hi
        period_at = np.interp(np.arange(lo, hi + 1), centres, fs / f0_rows[r0:r1])
        seg = dg[lo : hi + 1]
        anchor = lo + int(np.argmin(seg[: hi - lo]))
        out.append(anchor)
        for step in (1, -1):
            pos = anchor
            while True:
                period = float(period_at[pos - lo])
                a, b = sorted((pos + step * round(0.6 * period), pos + step * round(1.4 * period)))
                if a < lo or b > hi:
                    break
                pos = a + int(seg[a - lo : b + 1 - lo].argmin())
                out.append(pos)
    return np.unique(np.asarray(out, dtype=np.int64))


def psp_a(spec_db: np.ndarray, ne_min: float = 0.01, first_bins: int = 128) -> np.ndarray:
    """Alku et al. (1997) parabola coefficient per row: fit b + a*k^2 to bins 0..N-1, N grown from 3 while NE < ne_min.

    All N are fitted at once from running sums; a row's result is the fit at the first N (>= 3) whose normalised
    error reaches ne_min, as in the reference's iteration. Most rows stop early, so the first `first_bins` bins are
    tried first and only the rows that have not stopped there are refitted on all bins (running sums are sequential,
    so the prefix gives the same numbers).
    """
    a, stopped = _psp_fit(spec_db[:, :first_bins], ne_min)
    late = ~stopped
    if late.any() and spec_db.shape[1] > first_bins:
        a[late] = _psp_fit(spec_db[late], ne_min)[0]
    return a


def _psp_fit(spec_db: np.ndarray, ne_min: float) -> tuple[np.ndarray, np.ndarray]:
    """(a at the first N whose error reaches ne_min, or at the last N; whether that N was found) per row."""
    k2 = np.arange(spec_db.shape[1], dtype=float) ** 2
    n = np.arange(1, spec_db.shape[1] + 1, dtype=float)
    s_k2, s_k4 = np.cumsum(k2), np.cumsum(k2**2)
    s_x, s_xk2, s_x2 = (np.cumsum(v, axis=1) for v in (spec_db, spec_db * k2, spec_db**2))
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (n * s_xk2 - s_x * s_k2) / (n * s_k4 - s_k2**2)
        r_sum, r2_sum = s_x - a * s_k2, s_x2 - 2 * a * s_xk2 + a**2 * s_k4  # residual r = X - a k^2
        ne = (r2_sum - r_sum**2 / n) / s_x2
    stop = (ne >= ne_min) & (n >= 3)
    stopped = stop.any(axis=1)
    first = np.where(stopped, np.argmax(stop, axis=1), spec_db.shape[1] - 1)
    return a[np.arange(len(a)), first], stopped


def hann_sym(n: np.ndarray, width: int) -> np.ndarray:
    """(len(n), width): for each length n, the Hann window without zero end points (MATLAB's `hanning(n)`, which
    COVAREP's frames use), zero from n on."""
    k = np.arange(1, width + 1)[None]
    uniq, inv = np.unique(np.asarray(n), return_inverse=True)  # one window per distinct length
    return np.where(k <= uniq[:, None], 0.5 * (1 - np.cos(2 * np.pi * k / (uniq[:, None] + 1))), 0.0)[inv]


def lp_residual(x: np.ndarray, fs: int, order: int | None = None) -> np.ndarray:
    """LP residual by overlap-add (as COVAREP's `lpcresidual`, which its SEDREAMS and MDQ read): 25 ms Hann frames
    every 5 ms, order fs/1000 + 2 (SRH's: round(0.75 fs/1000), `srh`), each frame's residual scaled to the frame's
    energy (so the sum keeps the signal's level wherever the fit is good), the whole normalised to a peak of 1.
    Closures are its positive peaks when the flow derivative's closing peak is negative (`polarity`)."""
    length, shift = round(0.025 * fs) + 1, round(0.005 * fs)
    order = round(fs / 1000) + 2 if order is None else order
    starts = np.arange(0, max(0, x.size - length), shift)
    res = np.zeros(x.size)
    if starts.size == 0:
        return res
    win = hann_sym(np.array([length]), length)[0]
    # compiled frame by frame (extractors/lp_jit.py): window, autocorrelation, Levinson, FIR, gain and overlap-add
    # in one pass over each frame while it is in cache; the overlap-add sums the frames reaching a sample in
    # increasing frame order
    res = lp_jit.lp_residual(np.ascontiguousarray(x, dtype=np.float64), win, shift, starts.size, order)
    peak = np.abs(res).max()
    return res / peak if peak > 0 else res


def skewness(x: np.ndarray) -> float:
    """Sample skewness of x (0 for a constant)."""
    d = x - x.mean()
    d2 = d * d
    sd = np.sqrt(np.mean(d2))
    return float(np.mean(d2 * d) / sd**3) if sd > 0 else 0.0  # d2 * d: d**3 is a pow() per sample


def sedreams(x: np.ndarray, residual: np.ndarray, fs: int, f0_mean: float) -> np.ndarray:
    """GCIs (sample positions) by SEDREAMS (Drugman, Thomas, Gudnason, Naylor & Dutoit 2012), the detector
    COVAREP's features use: the mean-based signal (a Blackman window of 1.7 mean periods, high-passed at 50 Hz)
    gives one interval per period, from each minimum towards the next maximum, placed at the median relative
    position of the residual's strong peaks (> 0.4) +-0.35; the GCI is the residual's maximum inside it."""
    t0 = round(fs / f0_mean)
    half = round(1.7 * t0 / 2)
    if x.size <= 2 * half + 1 or x.size < 64:
        return np.zeros(0, dtype=np.int64)
    black = np.blackman(2 * half + 1)
    mbs = np.convolve(x, black / black.size, "same")
    mbs[:half] = 0.0
    mbs[-half:] = 0.0
    order, wn = ellipord(50, 30, 3, 60, fs=fs)
    mbs = sosfiltfilt(ellip(order, 3, 60, wn, "highpass", fs=fs, output="sos"), mbs)
    maxima, minima = find_peaks(mbs)[0], find_peaks(-mbs)[0]
    # each period runs from a minimum to the next maximum: drop a leading maximum and a trailing minimum
    maxima = maxima[maxima > (minima[0] if minima.size else x.size)]
    minima = minima[minima < (maxima[-1] if maxima.size else -1)]
    # pair each minimum with the first maximum after it (the two alternate on a smooth signal)
    nxt = np.searchsorted(maxima, minima)
    ok = nxt < maxima.size
    minima, maxima = minima[ok], maxima[nxt[ok]]
    if minima.size == 0:
        return np.zeros(0, dtype=np.int64)
    strong = np.flatnonzero(residual > 0.4)
    ratio = 0.0
    if strong.size:
        j = np.clip(np.searchsorted(minima, strong), 1, minima.size - 1)
        j = np.where(np.abs(strong - minima[j - 1]) <= np.abs(minima[j] - strong), j - 1, j)
        ratio = float(np.median((strong - minima[j]) / (maxima[j] - minima[j])))
    span = maxima - minima
    lo = np.clip(minima + np.round((ratio - 0.35) * span).astype(int), 0, x.size - 1)
    hi = np.clip(minima + np.round((ratio + 0.35) * span).astype(int), 0, x.size - 1)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    width = int((hi - lo).max(initial=0)) + 1
    seg = np.where(np.arange(width)[None] <= (hi - lo)[:, None], windows(residual, lo, width), -np.inf)
    return np.unique(lo + seg.argmax(axis=1)).astype(np.int64)


def iaif_gci(
    x: np.ndarray, gcis: np.ndarray, fs: int, leak: float, max_period: float, chunk: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """(flow, flow derivative) by pitch-synchronous IAIF as COVAREP's `iaif_gci` computes it: per GCI a 2-period
    frame (GCI +- T0, T0 the gap to the previous GCI, or to the next one where that is no period), Hann-windowed,
    IAIF (Alku 1992) inside the frame, the frames' outputs overlap-added. The frame's start-up is a ramp from -x[0]
    to x[0] of p_vt + 1 samples before it, as COVAREP's. The high-pass COVAREP runs inside each frame is done once
    on the whole signal by the caller."""
    p_vt, p_gl = 2 * round(fs / 2000) + 4, 2 * round(fs / 4000)
    pre = p_vt + 1
    g, dg = np.zeros(x.size), np.zeros(x.size)
    if gcis.size < 2:
        return g, dg
    gaps = np.diff(gcis).astype(float)
    prev = np.concatenate([[np.inf], gaps])
    nxt = np.concatenate([gaps, [np.inf]])
    t0 = np.where(prev <= max_period, prev, nxt)
    ok = t0 <= max_period  # an isolated GCI has no period to frame
    centre, t0 = gcis[ok], t0[ok].astype(int)
    start = np.maximum(0, centre - t0)
    stop = np.minimum(x.size - 1, centre + t0)
    length = stop - start + 1
    order = np.argsort(length, kind="stable")  # chunks of similar lengths: little zero padding to compute
    start, length = start[order], length[order]

    def fir(a: np.ndarray, ext: np.ndarray) -> np.ndarray:  # ext: p_vt zeros (zero initial state), then the input
        return _fir_rows(a, ext, p_vt + 1 - a.shape[1])

    def leaky(y: np.ndarray) -> np.ndarray:  # lfilter([1], [1, -leak], y, axis=1) to the bit, compiled
        return lp_jit.leaky(_f64c(y), leak)

    ramp_shape = np.linspace(-1.0, 1.0, pre)[None]
    wins, exts = [], []
    for c in range(0, centre.size, chunk):
        n = length[c : c + chunk]
        width = int(n.max())
        wins.append(hann_sym(n, width))
        # one buffer: p_vt zeros (the filters' zero initial state), the start-up ramp, the frame
        ext = np.zeros((n.size, p_vt + pre + width))
        frame = ext[:, p_vt + pre :]
        np.multiply(windows(x, start[c : c + chunk], width), wins[-1], out=frame)  # COVAREP windows the frame,
        np.multiply(frame[:, :1], ramp_shape, out=ext[:, p_vt : p_vt + pre])  # then IAIF windows each fit again
        exts.append(ext)
    bounds = np.cumsum([len(w) for w in wins])[:-1]

    def fits(ys: list[np.ndarray], order: int) -> list[np.ndarray]:  # each chunk's LPC of its windowed rows
        r = np.concatenate([autocorr_rows(y * w, order) for y, w in zip(ys, wins, strict=True)])
        return np.split(levinson_rows(r), bounds)  # one recursion for all chunks: its Python loop once

    # the four fits stage by stage over all chunks (chunk by chunk, each fit's Levinson loop ran once per chunk)
    ys = [e[:, p_vt + pre :] for e in exts]
    ys = [fir(a, e)[:, pre:] for a, e in zip(fits(ys, 1), exts, strict=True)]
    ys = [leaky(fir(a, e))[:, pre:] for a, e in zip(fits(ys, p_vt), exts, strict=True)]  # g1
    ys = [leaky(fir(a, e))[:, pre:] for a, e in zip(fits(ys, p_gl), exts, strict=True)]
    idx, g_parts, dg_parts = [], [], []
    for c, a, e, win in zip(range(0, centre.size, chunk), fits(ys, p_vt), exts, wins, strict=True):
        d = fir(a, e)
        gf, d = leaky(d)[:, pre:], d[:, pre:]
        inside = win > 0
        idx.append((start[c : c + chunk, None] + np.arange(win.shape[1])[None])[inside])
        g_parts.append(gf[inside])
        dg_parts.append(d[inside])
    # one overlap-add for all chunks (a whole-signal sum per chunk cost a fifth of this function)
    idx = np.concatenate(idx)
    g = np.bincount(idx, np.concatenate(g_parts), minlength=x.size)[: x.size]
    dg = np.bincount(idx, np.concatenate(dg_parts), minlength=x.size)[: x.size]
    return g, dg


def covarep_cycle_params(
    g: np.ndarray, dg: np.ndarray, gcis: np.ndarray, fs: int, f0_range_hz: tuple[float, float], rfft_mag=None
) -> dict:
    """NAQ, QOQ, PSP per cycle [gci_k-1, gci_k] as COVAREP's `get_vq_params` measures them, written at gci_k
    ('centre'): f_ac = maximum of the flow minus the straight line through its values at the two GCIs, d_peak =
    max |flow derivative| up to 0.5 ms after the closing GCI, NAQ = f_ac / (d_peak T0); QOQ = time above 50 % of
    f_ac around that maximum / T0; PSP from the cycle's flow (no line removed) scaled to [0, 1]."""
    start, length = gcis[:-1], np.diff(gcis)
    keep = (length >= fs / f0_range_hz[1] * 0.8) & (length <= fs / f0_range_hz[0] * 1.2)
    start, length = start[keep], length[keep]
    shift = round(0.0005 * fs)
    naq, qoq, a = (np.empty(start.size) for _ in range(3))
    # cycles in chunks of similar lengths (sorted), each as wide as its longest: every step below reads a cycle's
    # own samples only (the rest of its row is masked), so its values are the same whatever the chunk
    order = np.argsort(length, kind="stable")
    for c in range(0, start.size, 128):
        part = order[c : c + 128]
        s0, n0 = start[part], length[part]
        width = int(n0.max(initial=1)) + shift + 1
        n = np.arange(width)[None]
        inside = n <= n0[:, None]
        seg, d_seg = windows(g, s0, width), windows(dg, s0, width)
        line = seg[:, :1] + (seg[np.arange(len(s0)), n0] - seg[:, 0])[:, None] * n / n0[:, None]
        comp = np.where(inside, seg - line, -np.inf)
        f_ac, i_max = comp.max(axis=1), comp.argmax(axis=1)
        d_peak = np.where(n <= (n0 + shift)[:, None], np.abs(d_seg), -np.inf).max(axis=1)
        # COVAREP walks from the maximum to the first sample at or below half of f_ac on each side, stopping two
        # samples short of the cycle's ends
        below = ~(comp > 0.5 * f_ac[:, None])
        t1 = np.maximum(np.where(below & (n < i_max[:, None]), n, 2).max(axis=1), 2)
        t1 = np.minimum(t1, i_max)
        t2 = np.where(below & (n > i_max[:, None]), n, width).min(axis=1)
        t2 = np.maximum(np.minimum(t2, n0 - 2), i_max)
        raw = np.where(inside, seg, np.nan)
        raw = raw - np.nanmin(raw, axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            naq[part] = f_ac / (d_peak * n0)
            qoq[part] = (t2 - t1) / n0
            pulse = np.nan_to_num(raw / np.nanmax(raw, axis=1, keepdims=True))
        a[part] = psp_of(pulse, rfft_mag)
    uniq, inv = np.unique(length, return_inverse=True)
    boxes = (np.arange(int(uniq.max(initial=1)))[None] < uniq[:, None]) / uniq[:, None]
    psp = a / psp_of(boxes, rfft_mag)[inv]
    psp[psp > 1] = np.nan  # as cycle_params: no glottal pulse
    return {"centre": (start + length).astype(float), "naq": naq, "qoq": qoq, "psp": psp}


# Spectra of short rows at a few low bins of a long transform (the PSP pulses: <= ~400 samples, bins < 256 of 2048;
# H1-H2's 3-period segments, <= ~1000 samples: bins up to 2.5 F0) are read from one matrix product with the DFT's
# cosines and sines (BLAS), 3-6x faster here than the zero-padded FFT, whose output is mostly never read; equal to it
# within ~4e-15 of the largest magnitude (rounding). Rows wider than DFT_MAX_WIDTH, or more bins, take the FFT. The
# tables: 4 MB, made once.
DFT_MAX_WIDTH, DFT_MAX_BINS = 1024, 256


@functools.cache
def _dft_table(nfft: int) -> tuple[np.ndarray, np.ndarray]:
    """(cos, -sin) of 2 pi n k / nfft, (DFT_MAX_WIDTH, DFT_MAX_BINS) each, from one period's table at (n k) mod nfft
    (exact phases: no large arguments to the trigonometric functions)."""
    phase = 2 * np.pi * np.arange(nfft) / nfft
    idx = (np.arange(DFT_MAX_WIDTH)[:, None] * np.arange(DFT_MAX_BINS)[None]) % nfft
    return np.cos(phase)[idx], -np.sin(phase)[idx]


def _rfft_mag(rows: np.ndarray, nfft: int, n_bins: int, chunk: int = 128) -> np.ndarray:
    """|rfft(rows, nfft)| up to bin n_bins, in chunks of rows: each chunk's spectra stay in cache and the full
    spectra, far larger than the bins kept, are never held at once (about 2x faster than one call here). Short rows
    and few bins by the DFT's matrix product instead (DFT_MAX_WIDTH)."""
    out = np.empty((len(rows), n_bins))
    width = rows.shape[1]
    if width <= min(DFT_MAX_WIDTH, nfft) and n_bins <= DFT_MAX_BINS:
        cos, sin = _dft_table(nfft)
        cos, sin = cos[:width, :n_bins], sin[:width, :n_bins]
        for i in range(0, len(rows), chunk):
            re, im = rows[i : i + chunk] @ cos, rows[i : i + chunk] @ sin
            out[i : i + chunk] = np.sqrt(re * re + im * im)
        return out
    for i in range(0, len(rows), chunk):
        out[i : i + chunk] = np.abs(rfft(rows[i : i + chunk], nfft, axis=1)[:, :n_bins])
    return out


def psp_of(pulses: np.ndarray, rfft_mag=None, first_bins: int = 128) -> np.ndarray:
    """`psp_a` of the pulses' PSP_NFFT-point dB spectra (bins below PSP_NFFT // 8), taking the spectra of the first
    `first_bins` bins first and all bins only for the rows whose fit goes on past them (as `psp_a` refits them)."""
    a, stopped = _psp_fit(_spectrum_db(pulses, PSP_NFFT, first_bins, rfft_mag), 0.01)
    late = np.flatnonzero(~stopped)
    if late.size:
        a[late] = _psp_fit(_spectrum_db(pulses[late], PSP_NFFT, PSP_NFFT // 8, rfft_mag), 0.01)[0]
    return a


def _spectrum_db(pulses: np.ndarray, nfft: int, n_bins: int, rfft_mag=None) -> np.ndarray:
    return 20 * np.log10((rfft_mag or _rfft_mag)(pulses, nfft, n_bins) + 1e-9)


def cycle_params(
    g: np.ndarray, dg: np.ndarray, gcis: np.ndarray, fs: int, f0_range_hz: tuple[float, float], chunk: int = 128,
    rfft_mag=None,
) -> dict:
    """NAQ, QOQ, PSP per cycle [gci_k, gci_k+1]; 'centre' is each cycle's midpoint in samples.

    Cycles are measured in chunks of `chunk` (each chunk's (cycles, width) arrays stay in cache: about 1.5x faster
    on a minute of speech); every step is per cycle over the same `width` samples, so the chunking changes no bit.
    `rfft_mag`: the spectrum kernel (`_rfft_mag`, or the torch backend's)."""
    start, length = gcis[:-1], np.diff(gcis)
    keep = (length >= fs / f0_range_hz[1] * 0.8) & (length <= fs / f0_range_hz[0] * 1.2)
    start, length = start[keep], length[keep]
    shift = round(0.0005 * fs)  # d_peak may sit just after the closing GCI (sample rounding)
    width = int(length.max(initial=1)) + shift + 1
    naq, qoq, a = (np.empty(start.size) for _ in range(3))
    n_bins = PSP_NFFT // 8
    for c in range(0, start.size, chunk):
        part = slice(c, c + chunk)
        naq[part], qoq[part], a[part] = _cycle_chunk(g, dg, start[part], length[part], width, shift, n_bins,
                                                   rfft_mag)
    uniq, inv = np.unique(length, return_inverse=True)
    boxes = (np.arange(int(uniq.max(initial=1)))[None] < uniq[:, None]) / uniq[:, None]
    a_max = psp_a(_spectrum_db(boxes, PSP_NFFT, n_bins, rfft_mag))[inv]
    psp = a / a_max
    # A pulse whose spectrum falls faster near DC than a flat (DC) flow of the same length has more of its mass at
    # the cycle's edges than inside: no glottal pulse (a GCI off the closed phase). Undefined, not clipped.
    psp[psp > 1] = np.nan
    return {
        "centre": start + length / 2,
        "naq": naq,
        "qoq": qoq,
        "psp": psp,
    }


def _cycle_chunk(
    g: np.ndarray, dg: np.ndarray, start: np.ndarray, length: np.ndarray, width: int, shift: int, n_bins: int,
    rfft_mag=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(NAQ, QOQ, PSP's parabola coefficient before normalisation) of the cycles starting at `start`."""
    n = np.arange(width)
    inside = n[None] <= length[:, None]
    d_seg = windows(dg, start, width)
    seg = windows(g, start, width)
    drift = seg[:, :1] + (seg[np.arange(len(start)), length] - seg[:, 0])[:, None] * n / length[:, None]
    comp = np.where(inside, seg - drift, -np.inf)  # flow with the zero-line drift removed (as COVAREP)
    # the flow's minimum follows the GCI by up to the return phase (breathy voice): measure from it, not from the line
    comp = comp - np.where(inside, comp, np.inf).min(axis=1, keepdims=True)
    f_ac, i_max = comp.max(axis=1), comp.argmax(axis=1)
    d_peak = np.where((n >= 1) & (n[None] <= (length + shift)[:, None]), -d_seg, -np.inf).max(axis=1)
    below = ~(comp > 0.5 * f_ac[:, None])
    left = np.where(below & (n < i_max[:, None]), n, -1).max(axis=1)
    right = np.where(below & (n > i_max[:, None]), n, width).min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        naq = f_ac / (d_peak * length)
        pulse = np.where(inside, comp / f_ac[:, None], 0.0)  # the drift-free pulse scaled to [0, 1]
    return naq, (right - left) / length, psp_a(_spectrum_db(pulse, PSP_NFFT, n_bins, rfft_mag))


def harmonic_params(dg: np.ndarray, f0_rows: np.ndarray, rows: np.ndarray, hop: int, fs: int, rfft_mag=None) -> dict:
    """H1-H2 (dB) and HRF (dB) for `rows` from a 3-period Hamming-windowed flow derivative centred on each row;
    `rfft_mag` as in cycle_params."""
    f0 = f0_rows[rows]
    lengths = np.round(3 * fs / f0).astype(int)
    return harmonics_at(dg, rows * hop + hop // 2 - lengths // 2, lengths, f0, fs, rfft_mag)


def harmonics_at(
    dg: np.ndarray, starts: np.ndarray, lengths: np.ndarray, f0: np.ndarray, fs: int, rfft_mag=None,
    search: float = 0.25, nfft: int = SPEC_NFFT, max_hz: float = HRF_MAX_HZ, chunk: int = 256,
) -> dict:  # fmt: skip
    """H1-H2 and HRF (dB) of Hamming-windowed segments dg[start : start + length]: harmonic k's amplitude is the
    spectrum's maximum within +-search*F0 of k*F0 (nfft points), harmonics up to max_hz (HRF's sum)."""
    half = np.maximum(1, np.round(search * f0 * nfft / fs)).astype(int)
    # bins above HRF_MAX_HZ plus the widest search half-width are never read: don't take their magnitude
    n_bins = min(nfft // 2 + 1, round(max_hz * nfft / fs) + int(half.max(initial=1)) + 2)
    mag = np.empty((lengths.size, n_bins))
    for sel, spectra in _hamming_spectra(dg, starts, lengths, chunk):
        mag[sel] = (rfft_mag or _rfft_mag)(spectra, nfft, n_bins)
    for w in np.unique(half):  # harmonic amplitude = spectral maximum within +-search*F0 of k*F0
        sel = half == w
        mag[sel] = maximum_filter1d(mag[sel], 2 * w + 1, axis=1, mode="nearest")
    k = np.arange(1, max(2, int(max_hz / f0.min(initial=max_hz))) + 1)
    bins = np.minimum(np.round(k[None] * f0[:, None] * nfft / fs).astype(int), mag.shape[1] - 1)
    amp = np.where(k[None] * f0[:, None] <= max(max_hz, 2 * f0.max(initial=0)), np.take_along_axis(mag, bins, axis=1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "h1h2": 20 * np.log10(amp[:, 0] / amp[:, 1]),
            "hrf": 20 * np.log10(amp[:, 1:].sum(axis=1) / amp[:, 0]),
        }


def _hamming_spectra(dg: np.ndarray, starts: np.ndarray, lengths: np.ndarray, chunk: int):  # noqa: ANN202
    """(rows, Hamming-windowed segments dg[start : start + length]) in chunks of similar lengths (sorted), each as
    wide as its longest: a row's windowed segment, zero beyond its length, and so its spectrum are the same whatever
    the chunk."""
    order = np.argsort(lengths, kind="stable")
    for c in range(0, order.size, chunk):
        sel = order[c : c + chunk]
        width = int(lengths[sel].max())
        n = np.arange(width)
        uniq, inv = np.unique(lengths[sel], return_inverse=True)  # one Hamming window per distinct length
        ham = np.where(n < uniq[:, None], 0.54 - 0.46 * np.cos(2 * np.pi * n / np.maximum(uniq[:, None] - 1, 1)), 0)
        yield sel, windows(dg, starts[sel], width) * ham[inv]


def h1h2_at(
    dg: np.ndarray, starts: np.ndarray, lengths: np.ndarray, f0: np.ndarray, fs: int, rfft_mag=None,
    nfft: int = SPEC_NFFT, chunk: int = 256,
) -> np.ndarray:  # fmt: skip
    """H1-H2 (dB) as `harmonics_at(..., search=0.5, max_hz=2 * f0.max())` gives it, bit for bit, reading only what
    H1 and H2 need: each chunk's magnitudes up to its rows' last bin within F0/2 of 2 F0 (the full reading took the
    magnitude of every bin below twice the highest F0, a pitch-synchronous period of a few samples reaching 5 kHz),
    and each amplitude the maximum of the bins within +-F0/2 of k F0 (what the maximum filter gave there)."""
    half = np.maximum(1, np.round(0.5 * f0 * nfft / fs)).astype(int)
    max_hz = 2 * float(f0.max(initial=0))
    n_bins = min(nfft // 2 + 1, round(max_hz * nfft / fs) + int(half.max(initial=1)) + 2)
    k = np.arange(1, 3)
    bins = np.minimum(np.round(k[None] * f0[:, None] * nfft / fs).astype(int), n_bins - 1)
    need = np.minimum(n_bins, bins[:, 1] + half + 1)  # bins each row reads
    amp = np.empty((lengths.size, 2))
    for sel, spectra in _hamming_spectra(dg, starts, lengths, chunk):
        # a chunk's shortest segments may be periods of a few samples reaching far up: their rows apart, so that
        # the others read only their own few bins (`_rfft_mag`'s matrix product)
        far = need[sel] > DFT_MAX_BINS
        for rows in (np.flatnonzero(~far), np.flatnonzero(far)) if far.any() else (slice(None),):
            r = sel[rows]
            offsets = np.arange(-int(half[r].max()), int(half[r].max()) + 1)
            n_read = int(need[r].max())
            mag = (rfft_mag or _rfft_mag)(spectra[rows], nfft, n_read)
            idx = np.clip(bins[r, :, None] + offsets, 0, n_read - 1)  # the filter's "nearest" edge: clipped reads
            vals = mag[np.arange(len(r))[:, None, None], idx]
            amp[r] = np.where(np.abs(offsets) <= half[r, None, None], vals, -np.inf).max(axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 20 * np.log10(amp[:, 0] / amp[:, 1])


def covarep_h1h2(dg: np.ndarray, gcis: np.ndarray, fs: int, max_period: float, rfft_mag=None) -> np.ndarray:
    """H1-H2 per GCI as COVAREP's `get_vq_params` measures it: 3 periods (T0 = the gap to the previous GCI, or to
    the next where that is no period) of the pitch-synchronous IAIF derivative centred on the GCI, Hamming; each
    harmonic's amplitude is the spectral peak nearest k*F0 among peaks at least F0/2 apart, here the maximum
    within +-F0/2 of k*F0 on a 2048-point spectrum (7.8 Hz bins, against COVAREP's 1 Hz; the window's main lobe is
    4F0/3 wide, so the maximum is the harmonic's peak, sampled within ~0.1 dB)."""
    out = np.full(gcis.size, np.nan)
    gaps = np.diff(gcis).astype(float)
    prev = np.concatenate([[np.inf], gaps])
    t0 = np.where(prev <= max_period, prev, np.concatenate([gaps, [np.inf]]))
    ok = t0 <= max_period
    if not ok.any():
        return out
    half = np.round(1.5 * t0[ok]).astype(int)
    f0 = fs / t0[ok]
    out[ok] = h1h2_at(dg, gcis[ok] - half, 2 * half + 1, f0, fs, rfft_mag)
    return out


def wavelet_bands(x: np.ndarray, scales: list[int], nfft: int = 8192) -> np.ndarray:
    """Zero-phase filtering with -cos(pi n/s) exp(-(n/s)^2/2): octave bands centred at fs/(2s) (d'Alessandro 2011).

    Overlap-save with one FFT of the signal's segments shared by all bands (scipy's oaconvolve would transform the
    signal once per band); the wavelets are even, so their spectra are real. Returns a (len(scales), x.size) view
    of rows a little longer (the segments' whole length), each band written there once from its transform.
    """
    half = 5 * max(scales)
    nfft = max(nfft, 1 << (8 * half).bit_length())  # segments well longer than the widest wavelet
    step = nfft - 2 * half
    n_seg = max(1, -(-x.size // step))
    xp = np.pad(x, (half, n_seg * step - x.size + half))
    spec = rfft(np.lib.stride_tricks.sliding_window_view(xp, nfft)[::step], axis=1)
    out = np.empty((len(scales), n_seg * step))
    prod = np.empty_like(spec)
    for i, s in enumerate(scales):
        np.multiply(spec, _wavelet_spectrum(s, nfft), out=prod)
        out[i].reshape(n_seg, step)[:] = irfft(prod, nfft, axis=1)[:, half : half + step]
    return out[:, : x.size]


@functools.cache
def _wavelet_spectrum(s: int, nfft: int) -> np.ndarray:
    """The real nfft-point spectrum of `wavelet_bands`' wavelet of scale s (taps at negative lags wrapped)."""
    t = np.arange(5 * s + 1) / s
    kern = np.zeros(nfft)
    kern[: 5 * s + 1] = -np.cos(np.pi * t) * np.exp(-(t**2) / 2)
    kern[nfft - 5 * s :] = kern[5 * s : 0 : -1]  # taps at negative lags wrap to the end
    spec = rfft(kern).real
    spec.flags.writeable = False  # shared by every call
    return spec


MDQ_SCALES = (4, 8, 16, 32, 64)  # 2 kHz .. 125 Hz at 16 kHz


def mdq(residual: np.ndarray, gcis: np.ndarray, max_period: float, dispersion=None) -> np.ndarray:
    """Maxima dispersion quotient per GCI (Kane & Gobl 2013): mean |argmax - GCI| over 5 bands / T0, search 0.2*T0.
    `dispersion`: the kernel giving the mean |argmax - GCI| (`_mdq_dispersion`, or the torch backend's)."""
    out = np.full(gcis.size, np.nan)
    gaps = np.diff(gcis).astype(float)
    gaps[gaps > max_period] = np.nan  # a gap between voiced runs is no period
    t0 = np.concatenate([[np.nan], gaps])
    t0 = np.where(np.isnan(t0), np.concatenate([gaps, [np.nan]]), t0)  # else the period that follows
    ok_gci = np.isfinite(t0)
    if not ok_gci.any():
        return out
    gcis, t0 = gcis[ok_gci], t0[ok_gci]
    out[ok_gci] = (dispersion or _mdq_dispersion)(residual, gcis, np.round(0.2 * t0).astype(int)) / t0
    return out


def _mdq_dispersion(residual: np.ndarray, gcis: np.ndarray, search: np.ndarray) -> np.ndarray:
    """Per GCI: the mean over MDQ_SCALES' bands of |position of the band's maximum within +-search - GCI|."""
    bands = wavelet_bands(residual, list(MDQ_SCALES))
    offsets = np.arange(-search.max(), search.max() + 1)
    ok = np.abs(offsets)[None] <= search[:, None]
    dist = np.zeros(gcis.size)
    for band in bands:  # (the -cos wavelet turns the residual's negative closure peak into a maximum)
        vals = np.where(ok, windows(band, gcis - search.max(), offsets.size), -np.inf)
        dist += np.abs(offsets[vals.argmax(axis=1)])
    return dist / len(bands)


def peak_slope(x: np.ndarray, n_rows: int, hop: int) -> np.ndarray:
    """Per row: slope of the regression line of log10 band maxima (7 octave bands, 40 ms window) against band index."""
    bands = wavelet_bands(x, [64, 32, 16, 8, 4, 2, 1])  # low to high frequency
    sub = hop // 2  # maxima of |band| over half-hop chunks, then over the 8 chunks of each row's 40 ms window
    n_sub = 2 * n_rows + 8
    # chunk j holds samples [(j - 3) sub, (j - 2) sub) of x (zeros outside): |band|'s maximum as max(max, -min),
    # read from the bands in place (no |band| or zero-padded copy of seven whole bands)
    chunk = np.zeros((bands.shape[0], n_sub))
    usable = max(0, min(x.size, (n_sub - 3) * sub))
    full = usable // sub
    blocks = bands[:, : full * sub].reshape(bands.shape[0], full, sub)
    chunk[:, 3 : 3 + full] = np.maximum(blocks.max(axis=2, initial=-np.inf), -blocks.min(axis=2, initial=np.inf))
    if usable > full * sub:  # a last, partial chunk: the zeros after x count
        tail = bands[:, full * sub : usable]
        chunk[:, 3 + full] = np.maximum(np.maximum(tail.max(axis=1), -tail.min(axis=1)), 0.0)
    win = np.lib.stride_tricks.sliding_window_view(chunk, 8, axis=1)[:, 0 : 2 * n_rows : 2].max(axis=2)
    t = np.arange(1, bands.shape[0] + 1) - (bands.shape[0] + 1) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.log10(win)
        slope = (t[:, None] * (y - y.mean(axis=0))).sum(axis=0) / (t**2).sum()
    return np.where(np.isfinite(slope), slope, np.nan)


def to_rows(times: np.ndarray, values: np.ndarray, n_rows: int, hop: int, max_dist: np.ndarray) -> np.ndarray:
    """Per-cycle values (at sample `times`) onto row centres by linear interpolation; NaN where no cycle is near."""
    ok = np.isfinite(values)
    times, values = times[ok], values[ok]
    out = np.full(n_rows, np.nan)
    if times.size == 0:
        return out
    centres = np.arange(n_rows) * hop + hop // 2
    pos = np.clip(np.searchsorted(times, centres), 1, max(times.size - 1, 1))
    nearest = np.minimum(np.abs(centres - times[pos - 1]), np.abs(times[np.minimum(pos, times.size - 1)] - centres))
    near = nearest <= max_dist
    out[near] = np.interp(centres[near], times, values)
    return out


RD_GRID = np.round(np.arange(0.3, 2.7001, 0.05), 2)  # the range of Fant's (1995) regressions


def _lf_cycles(rd: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(len(rd), len(t)) LF flow-derivative cycles (Fant, Liljencrants & Lin 1985) of unit period and Ee = 1 at
    times t in [0, 1) from the opening, with (Ra, Rk, Rg) from Rd by Fant's (1995) regressions."""
    rd = np.asarray(rd, dtype=float)[:, None]
    ra, rk = (4.8 * rd - 1.0) / 100.0, (11.8 * rd + 22.4) / 100.0
    rg = rk / (4.0 * (0.11 * rd / (0.5 + 1.2 * rk) - ra))
    tp, ta = 1.0 / (2.0 * rg), ra
    te = tp * (1.0 + rk)
    tb = 1.0 - te
    eps = 1.0 / ta
    for _ in range(50):  # eps * ta = 1 - exp(-eps * tb): fixed point from 1/ta
        eps = (1.0 - np.exp(-eps * tb)) / ta
    wg = np.pi / tp

    def shape(alpha: np.ndarray, t: np.ndarray) -> np.ndarray:
        e0 = -1.0 / (np.exp(alpha * te) * np.sin(wg * te))  # Ee = 1 at te
        ret = -(np.exp(-eps * (t - te)) - np.exp(-eps * tb)) / (eps * ta)
        return np.where(t <= te, e0 * np.exp(alpha * t) * np.sin(wg * t), ret)

    coarse = np.arange(1000) / 1000  # the net flow's sign needs no fine grid
    lo, hi = np.full_like(rd, -10.0), np.full_like(rd, 60.0)  # alpha (per period): the net flow falls through 0
    for _ in range(50):
        mid = (lo + hi) / 2
        positive = shape(mid, coarse).mean(axis=1, keepdims=True) > 0
        lo, hi = np.where(positive, mid, lo), np.where(positive, hi, mid)
    return shape((lo + hi) / 2, t)


@functools.cache
def lf_naq() -> np.ndarray:
    """NAQ = f_ac / (d_peak * T0) of the LF cycle for each Rd of RD_GRID (increasing), computed once per process."""
    d = _lf_cycles(RD_GRID, np.arange(8000) / 8000)
    flow = np.cumsum(d, axis=1) / d.shape[1]
    return (flow.max(axis=1) - flow.min(axis=1)) / -d.min(axis=1)


def rd_from_naq(naq: np.ndarray) -> np.ndarray:
    """Rd of the LF cycle whose NAQ equals the measured one (Fant's definition of Rd, U0 F0 / (110 Ee) with U0/Ee
    in ms, made exact for the model), clipped to RD_GRID's range; NaN stays NaN."""
    return np.interp(naq, lf_naq(), RD_GRID)


# Rd by mean squared phase (Degottex, Roebel & Rodet, "Phase minimization for glottal model estimation", IEEE TASL
# 19(5), 2011), COVAREP's `rd_msp`: the LF derivative spectrum of the right Rd, divided out of a frame's harmonic
# spectrum, leaves a minimum-phase remainder (the vocal tract), so the remainder's phase minus that of its
# minimum-phase version has no curvature over the first harmonics.
MSP_RD = np.round(np.arange(0.3, 2.7001, 0.01), 2)  # Fant's range as RD_GRID (COVAREP: [0.3, 2.5]), its tolerance 0.01
MSP_HARMONICS = 8  # harmonics whose phase the error reads (COVAREP's o)
MSP_COARSE = 5  # the first pass tries every 5th Rd of MSP_RD
MSP_MAX_HZ = 8000.0  # harmonics up to this frequency make the amplitude spectrum (COVAREP's sin2shm)


@functools.cache
def _lf_params() -> tuple[np.ndarray, ...]:
    """`lf_params_for` each Rd of MSP_RD, computed once per process."""
    return lf_params_for(MSP_RD)


def lf_params_for(rds: np.ndarray) -> tuple[np.ndarray, ...]:
    """(te, ta, wg, e, a), each (len(rds), 1), of the LF model (unit period, Ee = 1) for each Rd, by Fant's (1995)
    regressions; e and a solve the model's two implicit equations (return-phase continuity, zero net flow)."""
    from scipy.optimize import brentq

    params = []
    for rd in np.asarray(rds, dtype=float):
        ra, rk = (-1 + 4.8 * rd) / 100, (22.4 + 11.8 * rd) / 100
        rg = 1 / (4 * ((0.11 * rd / (0.5 + 1.2 * rk)) - ra) / rk)
        tp = 1 / (2 * rg)
        te, ta = tp * (rk + 1), ra
        wg = np.pi / tp
        e = brentq(lambda e: 1 - np.exp(-e * (1 - te)) - e * ta, 1e-9, 10 / ta + 10)  # noqa: B023
        big_a = (1 - np.exp(-e * (1 - te))) / (e**2 * ta) - (1 - te) * np.exp(-e * (1 - te)) / (e * ta)

        def fa(a: float) -> float:
            return ((a**2 + wg**2) * np.sin(wg * te) * big_a + wg * np.exp(-a * te) + a * np.sin(wg * te)  # noqa: B023
                    - wg * np.cos(wg * te))  # noqa: B023  # fmt: skip

        grid = np.concatenate([-np.logspace(2, -3, 12), [0.0], np.logspace(-3, 3, 25)])
        vals = np.array([fa(a) for a in grid])
        j = int(np.flatnonzero(np.diff(np.sign(vals)))[0])
        params.append((te, ta, wg, e, brentq(fa, grid[j], grid[j + 1])))
    return tuple(np.array(v)[:, None] for v in zip(*params, strict=True))


@functools.cache
def lf_spectrum(n_harm: int) -> np.ndarray:
    """(len(MSP_RD), n_harm) LF flow-derivative spectrum (Fant, Liljencrants & Lin 1985; closed form of Doval,
    d'Alessandro & Henrich 2003, as COVAREP's `gfm_spec_lf`) at harmonics 1..n_harm of a unit period. Only its
    phase and relative amplitudes matter to the MSP error."""
    return lf_spectrum_for(_lf_params(), n_harm)


def lf_spectrum_for(params: tuple[np.ndarray, ...], n_harm: int) -> np.ndarray:
    """`lf_spectrum` for the Rds whose `lf_params_for` are given."""
    te, ta, wg, e, a = params
    f = np.arange(1, n_harm + 1, dtype=float)[None]
    e0 = -1 / (np.exp(a * te) * np.sin(wg * te))
    s = a - 2j * np.pi * f
    p1 = e0 / (s**2 + wg**2)
    p2 = wg + np.exp(s * te) * (s * np.sin(wg * te) - wg * np.cos(wg * te))
    p3 = np.exp(-2j * np.pi * f * te) / ((e * ta * 2j * np.pi * f) * (e + 2j * np.pi * f))
    p4 = e * (1 - e * ta) * (1 - np.exp(-2j * np.pi * f * (1 - te))) - e * ta * 2j * np.pi * f
    return p1 * p2 + p3 * p4


def _min_phase(mag: np.ndarray, n_out: int) -> np.ndarray:
    """Phase of the minimum-phase spectrum with magnitudes `mag` at harmonics 0..h (last axis; the full spectrum
    is their mirror, 2h bins, as COVAREP's `hspec2spec`), by the folded real cepstrum; bins 0..n_out-1."""
    h = mag.shape[-1] - 1
    with np.errstate(divide="ignore"):
        log_full = np.log(np.concatenate([mag, mag[..., -2:0:-1]], axis=-1))
    rcc = np.fft.irfft(log_full[..., : h + 1], 2 * h, axis=-1)  # a real, even spectrum's cepstrum
    fold = np.concatenate([rcc[..., :1], 2 * rcc[..., 1:h], rcc[..., h : h + 1]], axis=-1)
    return np.fft.fft(fold, 2 * h, axis=-1).imag[..., :n_out]


def harmonic_spectrum(x: np.ndarray, centres: np.ndarray, f0: np.ndarray, fs: int, n_harm: int) -> np.ndarray:
    """(len(centres), n_harm) complex amplitudes of harmonics 1..n_harm, phase relative to the centre, from a
    3-period Blackman window centred on each centre (COVAREP's `sin_analysis` window; it picks the spectral peak
    nearest each harmonic, which on a window this long lies at the harmonic's own frequency): the windowed
    frame's spectrum zero-padded to at least twice its length, read at k*F0 by linear interpolation (within ~3 %
    and 0.05 rad of the exact DTFT on white noise, closer on a harmonic spectrum)."""
    half = np.round(1.5 * fs / f0).astype(int)
    width = 2 * int(half.max(initial=1)) + 1
    nfft = 1 << int(2 * width - 1).bit_length()
    n = np.arange(width)[None] - half[:, None]  # sample offsets from each centre
    frames = windows(x, centres - half, width)
    win = np.where(np.abs(n) <= half[:, None], 0.42 + 0.5 * np.cos(np.pi * n / half[:, None])
                   + 0.08 * np.cos(2 * np.pi * n / half[:, None]), 0.0)  # MATLAB's blackman(2 half + 1)  # fmt: skip
    win /= win.sum(axis=1, keepdims=True)
    buf = np.zeros((len(centres), nfft))  # each row's centre at index 0 (its phases relative to it), wrapped
    np.put_along_axis(buf, (np.arange(width)[None] - half[:, None]) % nfft, frames * win, axis=1)
    spec = rfft(buf, axis=1)
    pos = np.arange(1, n_harm + 1)[None] * f0[:, None] * nfft / fs
    lo = np.minimum(np.floor(pos).astype(int), spec.shape[1] - 2)
    frac = pos - lo
    r = np.arange(len(centres))[:, None]
    return (1 - frac) * spec[r, lo] + frac * spec[r, lo + 1]


@functools.cache
def _lf_phase(n_harm: int, conjugate: bool = False) -> np.ndarray:
    """(len(MSP_RD), MSP_HARMONICS) the LF spectrum's phase minus its minimum phase at harmonics 1..MSP_HARMONICS;
    `conjugate`: of the conjugated spectrum (the time-reversed pulse), the model COVAREP's `rd_msp` ends up fitting
    (see `rd_covarep`)."""
    g = lf_spectrum(n_harm)
    if conjugate:
        g = np.conj(g)
    return np.angle(g[:, :MSP_HARMONICS]) - _min_phase(_edge_mags(g), MSP_HARMONICS + 1)[:, 1:]


def _edge_mags(z: np.ndarray) -> np.ndarray:
    """|z| at harmonics 0..h from harmonics 1..h: |DC| = |h1| and |h_last| = |h_last-1|, as COVAREP's `rd_msp`."""
    a = np.abs(z)
    return np.concatenate([a[..., :1], a[..., :-1], a[..., -2:-1]], axis=-1)


def _msp_error(frame: np.ndarray, model: np.ndarray) -> np.ndarray:
    """MSP errors (rows, candidates) from the frame's (rows, MSP_HARMONICS) and the candidates' (rows, candidates,
    MSP_HARMONICS) phases minus their minimum phases: the mean squared wrapped second difference of the remainder's
    phase over harmonics 0..MSP_HARMONICS (DC: phase 0), less its linear part (harmonic 1's phase)."""
    p = frame[:, None] - model
    p = np.concatenate([np.zeros(p.shape[:2] + (1,)), p], axis=-1)
    d2 = np.diff(p, axis=-1)[..., 1:] - p[..., 1:2]
    return np.mean((np.mod(d2 + np.pi, 2 * np.pi) - np.pi) ** 2, axis=-1)


def _msp_fit(frame: np.ndarray, model: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into MSP_RD, error) per row of the smallest MSP error: every MSP_COARSE-th Rd first, then the 0.01
    grid around the best of them (a quarter of the full grid's work)."""

    def error(idx: np.ndarray) -> np.ndarray:  # (rows, candidates) for the Rd indices idx (rows, candidates)
        return _msp_error(frame, model[idx])

    coarse = np.tile(np.arange(0, MSP_RD.size, MSP_COARSE), (len(frame), 1))
    err = error(coarse)
    centre = coarse[0, np.argmin(np.where(np.isfinite(err), err, np.inf), axis=1)]
    fine = np.clip(centre[:, None] + np.arange(-MSP_COARSE + 1, MSP_COARSE), 0, MSP_RD.size - 1)
    err = np.where(np.isfinite(e := error(fine)), e, np.inf)
    j = np.argmin(err, axis=1)
    rows = np.arange(len(frame))
    return fine[rows, j], err[rows, j]


def rd_msp(x: np.ndarray, centres: np.ndarray, f0: np.ndarray, fs: int) -> tuple[np.ndarray, np.ndarray]:
    """(Rd, confidence 1 - sqrt(error)/pi) per centre by MSP (above): the harmonic spectrum up to MSP_MAX_HZ
    divided by each candidate's LF spectrum, its phase compared with its minimum-phase version over harmonics
    0..MSP_HARMONICS, the error the mean squared wrapped second difference of that phase (the paper's MSP with the
    LF pulse as it is, and the smallest error over MSP_RD's 0.01 grid: it recovers LF-model vowels' Rd; COVAREP's
    `rd_msp` as its features run it, which fits the time-reversed pulse by Brent's method, is `rd_covarep`).

    Log magnitudes divide into differences and the minimum phase is linear in them, so the remainder's minimum
    phase is the frame's minus the model's: each computed once, not once per candidate. COVAREP sets the remainder's
    DC and last harmonic to the magnitude of their neighbours; so is each factor here. The error depends on the
    signal's polarity (an inverted signal adds pi to every harmonic but DC): x must be upright (`polarity`)."""
    rd, conf = np.full(centres.size, np.nan), np.full(centres.size, np.nan)
    n_h = np.floor(MSP_MAX_HZ / f0).astype(int)
    k = MSP_HARMONICS + 1
    for h in np.unique(n_h):
        if h < k:
            continue  # too few harmonics for the phase error (F0 above ~890 Hz)
        sel = np.flatnonzero(n_h == h)
        m = harmonic_spectrum(x, centres[sel], f0[sel], fs, int(h))  # (rows, h)
        frame = np.angle(m[:, : k - 1]) - _min_phase(_edge_mags(m), k)[:, 1:]  # (rows, k-1)
        idx, err = _msp_fit(frame, _lf_phase(int(h)))
        rd[sel], conf[sel] = MSP_RD[idx], 1 - np.sqrt(err) / np.pi
    return rd, conf


# Rd as COVAREP's features compute it (`COVAREP_feature_extraction.m` -> `sin_analysis` -> `rd_msp`, read at
# covarep/covarep 5a2be5d6 to learn the method; written here from that description):
# - one analysis frame every 10 ms at SRH's frame instants, which fall on our row boundaries k * 10 ms; a row's
#   value is interpolated half-way between its two boundary frames, i.e. their mean;
# - Brent's bounded minimisation (MATLAB's `fminbnd`: Forsythe, Malcolm & Moler 1977) of the MSP error over Rd in
#   [0.3, 2.5] with TolX 0.01 and at most 32 iterations: a local minimum, where the error curve has several;
# - the harmonic spectrum reaches the phase error through `sin2shm` and `hspec2spec`, which take a column
#   vector's conjugate transpose (`'`): the two conjugations leave the frame's phases as they are but conjugate the
#   model's, so the LF pulse fitted is the time-reversed one. That is what the published Rd column holds; against
#   COVAREP's output it is what agrees (docs/acoustic.md, "Agreement with COVAREP"). `rd_msp` above is the paper's
#   MSP (the pulse as it is), which recovers LF-model vowels' Rd.
COVAREP_RD_RANGE = (0.3, 2.5)  # rd_msp's Rdrg bounds
BRENT_TOL = 0.01  # fminbnd's TolX in rd_msp
BRENT_MAX_ITER = 32  # fminbnd's MaxIter in rd_msp


def brent_min_rows(f, n: int, lo: float, hi: float, xtol: float, max_iter: int, xp=np, device=None):  # noqa: ANN001
    """(x, f(x)) per row: Brent's bounded minimisation (golden section with parabolic steps; Forsythe, Malcolm &
    Moler, "Computer methods for mathematical computations", 1977, the algorithm of MATLAB's `fminbnd` and scipy's
    `fminbound`) run on n rows at once. `f(x)` maps (n,) abscissae to (rows,) values; each row stops on its own
    criterion (|x - midpoint| <= 2 tol - (b - a) / 2, tol = sqrt(eps) |x| + xtol / 3) or after max_iter steps, and
    then keeps its x (later evaluations of it are discarded).

    `xp` is the array namespace, numpy or torch (the torch backend passes torch and its `device`): only `full`,
    `where`, `abs` and `maximum` are used, which both spell alike, so both backends run this one loop step for step.
    No array is changed in place (each update makes a new one), so x, v and w may start as the same array."""
    golden_c = 0.5 * (3.0 - float(np.sqrt(5.0)))
    sqrt_eps = float(np.sqrt(np.finfo(float).eps))

    def full(value: float):  # noqa: ANN202
        return xp.full((n,), value, dtype=xp.float64, device=device)

    a, b = full(lo), full(hi)
    one, zero = full(1.0), full(0.0)
    x = full(lo + golden_c * (hi - lo))
    fx = f(x)
    v, w, fv, fw = x, x, fx, fx
    d, e = zero, zero
    for _ in range(max_iter):
        xm = 0.5 * (a + b)
        tol1 = sqrt_eps * xp.abs(x) + xtol / 3.0
        tol2 = 2.0 * tol1
        active = xp.abs(x - xm) > tol2 - 0.5 * (b - a)
        if not bool(active.any()):
            break
        # parabola through (x, w, v), accepted when it falls inside the bracket and moves less than half the step
        # before last
        r = (x - w) * (fx - fv)
        q = (x - v) * (fx - fw)
        p = (x - v) * q - (x - w) * r
        q = 2.0 * (q - r)
        p = xp.where(q > 0, -p, p)
        q = xp.abs(q)
        try_parab = xp.abs(e) > tol1
        with np.errstate(divide="ignore", invalid="ignore"):  # numpy's warnings on rows not taken; torch has none
            parab = try_parab & (xp.abs(p) < xp.abs(0.5 * q * e)) & (p > q * (a - x)) & (p < q * (b - x))
            step_p = xp.where(parab, p / xp.where(q == 0, one, q), zero)
        u_p = x + step_p
        near_edge = ((u_p - a) < tol2) | ((b - u_p) < tol2)
        sign_m = xp.where(xm - x >= 0, one, -one)
        step_p = xp.where(near_edge, tol1 * sign_m, step_p)
        e_golden = xp.where(x >= xm, a - x, b - x)
        e_new = xp.where(parab, xp.where(try_parab, d, e), e_golden)  # e takes the last step before d is replaced
        d_new = xp.where(parab, step_p, golden_c * e_golden)
        sign_d = xp.where(d_new >= 0, one, -one)
        u = x + sign_d * xp.maximum(xp.abs(d_new), tol1)
        fu = f(u)
        e, d = xp.where(active, e_new, e), xp.where(active, d_new, d)
        better = active & (fu <= fx)
        worse = active & ~better
        a = xp.where(better, xp.where(u >= x, x, a), xp.where(worse & (u < x), u, a))
        b = xp.where(better, xp.where(u >= x, b, x), xp.where(worse & (u >= x), u, b))
        to_w = worse & ((fu <= fw) | (w == x))
        to_v = worse & ~to_w & ((fu <= fv) | (v == x) | (v == w))
        v_new = xp.where(better | to_w, w, xp.where(to_v, u, v))
        fv_new = xp.where(better | to_w, fw, xp.where(to_v, fu, fv))
        w_new = xp.where(better, x, xp.where(to_w, u, w))
        fw_new = xp.where(better, fx, xp.where(to_w, fu, fw))
        x, fx = xp.where(better, u, x), xp.where(better, fu, fx)
        v, fv, w, fw = v_new, fv_new, w_new, fw_new
    return x, fx


def _interp_rows(table: np.ndarray, rd: np.ndarray, which: np.ndarray | None = None) -> np.ndarray:
    """(rows, MSP_HARMONICS) model phases at continuous Rd: linear between MSP_RD's 0.01 steps of `table`
    ((len(MSP_RD), MSP_HARMONICS), unwrapped along Rd; or (tables, len(MSP_RD), MSP_HARMONICS) with `which` naming
    each row's table); within 1e-3 rad of the model computed at that Rd, `tests/extractors/test_covarep_rd.py`."""
    pos = np.clip((rd - MSP_RD[0]) / 0.01, 0, MSP_RD.size - 1 - 1e-9)
    j = pos.astype(int)
    t = (pos - j)[:, None]
    if which is None:
        return (1 - t) * table[j] + t * table[j + 1]
    return (1 - t) * table[which, j] + t * table[which, j + 1]


@functools.cache
def _lf_phase_unwrapped(n_harm: int) -> np.ndarray:
    return np.unwrap(_lf_phase(n_harm, conjugate=True), axis=0)


def rd_frames(f0: np.ndarray, voiced: np.ndarray, fs: int) -> tuple[np.ndarray, ...]:
    """The frames `rd_covarep` fits, in both backends: (the voiced rows' boundaries `rd_boundaries` gives, the
    indices `sel` of those with enough harmonics, their harmonic counts, F0, Blackman half-lengths and DFT lengths).
    Frames of fewer than MSP_HARMONICS + 1 harmonics (F0 above ~890 Hz) have no phase error to fit. Each harmonic
    count's DFT length is twice its widest window (as `harmonic_spectrum` called per count chose it), so the
    frames can be transformed together per length rather than per count (~80 counts a block: fewer calls)."""
    bounds, fb = rd_boundaries(f0, voiced)
    n_h = np.floor(MSP_MAX_HZ / fb).astype(int)
    sel = np.flatnonzero(n_h >= MSP_HARMONICS + 1)
    hs, fsel = n_h[sel], fb[sel]
    half = np.round(1.5 * fs / fsel).astype(int)
    nfft_of = {h: 1 << int(2 * (2 * int(half[hs == h].max()) + 1) - 1).bit_length() for h in np.unique(hs)}
    return bounds, sel, hs, fsel, half, np.array([nfft_of[h] for h in hs], dtype=int)


def rd_covarep(x: np.ndarray, f0: np.ndarray, voiced: np.ndarray, fs: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """(Rd, MSP error) per row, NaN on unvoiced rows, as COVAREP's features compute Rd (the comment above): frames on
    the boundaries of voiced rows (F0: the mean of the voiced rows either side), 3-period Blackman windows and
    harmonics as `harmonic_spectrum`, the time-reversed LF model, Brent over [0.3, 2.5]; a row is the mean of its
    two boundaries. x in COVAREP's orientation (the LP residual's skewness positive, `covarep_cycles`)."""
    n_rows = voiced.size
    if not voiced.any():
        return np.full(n_rows, np.nan), np.full(n_rows, np.nan)
    bounds, sel, hs, fsel, half, nfft = rd_frames(f0, voiced, fs)
    rd_b, err_b = np.full(n_rows + 1, np.nan), np.full(n_rows + 1, np.nan)
    k = MSP_HARMONICS + 1
    if sel.size:
        counts = np.unique(hs)
        frame = np.empty((sel.size, k - 1))
        for size in np.unique(nfft):
            part = np.flatnonzero(nfft == size)
            m = _harmonic_spectra(x, bounds[sel[part]] * hop, fsel[part], half[part], fs, int(hs[part].max()),
                                  int(size))  # fmt: skip
            for h in np.unique(hs[part]):
                mine = np.flatnonzero(hs[part] == h)
                mm = m[mine, :h]
                frame[part[mine]] = np.angle(mm[:, : k - 1]) - _min_phase(_edge_mags(mm), k)[:, 1:]
        which = np.searchsorted(counts, hs)  # one search for every frame, the model table chosen by its count
        table = np.stack([_lf_phase_unwrapped(int(h)) for h in counts])

        def error(rd: np.ndarray) -> np.ndarray:
            return _msp_error(frame, _interp_rows(table, rd, which)[:, None])[:, 0]

        rd_b[bounds[sel]], err_b[bounds[sel]] = brent_min_rows(
            error, sel.size, *COVAREP_RD_RANGE, BRENT_TOL, BRENT_MAX_ITER
        )
    return rd_rows_of(voiced, rd_b, err_b)


def _harmonic_spectra(
    x: np.ndarray, centres: np.ndarray, f0: np.ndarray, half: np.ndarray, fs: int, n_harm: int, nfft: int,
    chunk: int = 256,
) -> np.ndarray:  # fmt: skip
    """`harmonic_spectrum` with each row's Blackman half-length `half` and one DFT length nfft for all rows:
    (rows, n_harm) complex amplitudes at harmonics 1..n_harm, phase relative to the centre. A row's window is zero
    beyond its half-length, so the rows share one placement in the nfft-point buffer; the windows are computed once
    per distinct half-length."""
    hb = int(half.max())
    n = np.arange(-hb, hb + 1)
    uh, inv = np.unique(half, return_inverse=True)
    win = np.where(np.abs(n)[None] <= uh[:, None], 0.42 + 0.5 * np.cos(np.pi * n / uh[:, None])
                   + 0.08 * np.cos(2 * np.pi * n / uh[:, None]), 0.0)  # MATLAB's blackman(2 half + 1)  # fmt: skip
    win /= win.sum(axis=1, keepdims=True)
    col = n % nfft  # each row's centre at index 0 (its phases relative to it), wrapped
    k = np.arange(1, n_harm + 1)[None]
    out = np.empty((len(centres), n_harm), dtype=complex)
    for i in range(0, len(centres), chunk):
        part = slice(i, i + chunk)
        buf = np.zeros((len(centres[part]), nfft))
        buf[:, col] = windows(x, centres[part] - hb, n.size) * win[inv[part]]
        spec = rfft(buf, axis=1)
        pos = k * f0[part, None] * nfft / fs
        lo = np.minimum(np.floor(pos).astype(int), spec.shape[1] - 2)
        frac = pos - lo
        r = np.arange(len(buf))[:, None]
        out[part] = (1 - frac) * spec[r, lo] + frac * spec[r, lo + 1]
    return out


def rd_boundaries(f0: np.ndarray, voiced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`rd_covarep`'s frames, for both backends: the row boundaries k (sample k * hop) next to a voiced row, and
    each one's F0, the mean of the voiced rows either side."""
    fv = np.where(voiced, f0, 0.0)
    w = voiced.astype(float)
    num = np.concatenate([[0.0], fv]) + np.concatenate([fv, [0.0]])
    den = np.concatenate([[0.0], w]) + np.concatenate([w, [0.0]])
    bounds = np.flatnonzero(den > 0)
    return bounds, num[bounds] / den[bounds]


def rd_rows_of(voiced: np.ndarray, rd_b: np.ndarray, err_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Rd, MSP error) per row from the values on its two boundaries (their mean), NaN on unvoiced rows."""
    rd_rows, err_rows = np.full(voiced.size, np.nan), np.full(voiced.size, np.nan)
    rows = np.flatnonzero(voiced)
    rd_rows[rows] = (rd_b[rows] + rd_b[rows + 1]) / 2
    err_rows[rows] = (err_b[rows] + err_b[rows + 1]) / 2
    return rd_rows, err_rows
