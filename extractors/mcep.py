"""MCEP: the spectral envelope as a mel-frequency cepstrum (COVAREP's MCEP_0..24).

Method (COVAREP's `COVAREP_feature_extraction.m` with `env_te` and `hspec2fwcep`, reimplemented from the papers):

- Per row, an F0-synchronous window: Blackman of 3 periods (odd length round(3 fs / f0 / 2)·2 + 1), normalised to
  unit sum, centred on the row; its magnitude spectrum (`frame_spectra`).
- True envelope (Imai & Abe 1979; Röbel & Rodet, DAFx 2005; the smoothing window and its step factor from Röbel,
  Villavicencio & Rodet, Pattern Recognition Letters 2007): iterated cepstral smoothing of the log amplitude, each
  pass keeping the larger of the spectrum and the smoothed curve, until the curve is within 2 dB of every peak. The
  cepstral order is round(0.5 fs / f0) (half the harmonic spacing in quefrency), raised by 1.2 under a Hamming lifter;
  the lowest and highest bins first take a half-order envelope's values, so the DC and Nyquist regions, which carry
  no harmonic, do not pull the curve down.
- Mel-frequency cepstrum: the envelope resampled on a mel axis (1127 ln(1 + f/700), scaled to keep 0 … fs/2), the
  real cepstrum of its natural log, c_0 and 2·c_1 … 2·c_24.

Where COVAREP differs, by choice here (docs/acoustic.md, "74 columns"): it places its MCEP frames evenly over the
file rather than at their own instants (up to ±5 rows off near the ends), drops windows that overhang the file (the
rows here read zeros beyond the ends) and takes the window length from SRH's F0, which it estimates on unvoiced
frames too (here: the row's F0 where voiced, otherwise `UNVOICED_F0_HZ`).
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.fft import rfft

from extractors import glottal

ORDER = 24
DFTLEN = 1024  # holds a 3-period window down to 47 Hz; COVAREP's 4096 samples the same smooth spectrum 4x finer
UNVOICED_F0_HZ = 100.0  # the F0 COVAREP's script gives frames whose SRH F0 is 0
TE_PREC_DB = 2.0
TE_MAXIT = 200
TE_SMOOTHING = 1.2
LOG_FLOOR = 1e-12
SPECTRA_CHUNK_BINS = 1 << 18  # samples of zero-padded frames per DFT call in `frame_spectra` (2 MiB: cache)
TE_POOL = 2
TE_DTYPE = np.float32  # amplitude floor under the log: digital silence gives a finite (very low) envelope


def window_lengths(f0: np.ndarray, fs: int) -> np.ndarray:
    """Odd 3-period window length per row (f0 in Hz, > 0)."""
    return (np.round(3.0 * fs / f0 / 2.0) * 2 + 1).astype(int)


def frame_spectra(x: np.ndarray, centres: np.ndarray, f0: np.ndarray, fs: int, dftlen: int = DFTLEN) -> np.ndarray:
    """(rows, dftlen // 2 + 1) complex spectra of the 3-period Blackman windows centred on `centres`, with the
    window's delay removed (phase 0 at the centre); samples beyond the ends of `x` read as zeros."""
    lengths = window_lengths(f0, fs)
    half = int(lengths.max()) // 2
    if 2 * half + 1 > dftlen:
        raise ValueError(f"a 3-period window of {2 * half + 1} samples exceeds the {dftlen}-point DFT")
    offsets = np.arange(-half, half + 1)
    seg = glottal.windows(np.asarray(x, np.float64), centres - half, 2 * half + 1)
    # one window per distinct length (a few hundred for thousands of rows): the cosines are the windows' main cost
    uniq, inv = np.unique(lengths, return_inverse=True)
    m = (uniq[:, None] - 1) / 2.0
    arg = np.pi * offsets[None, :] / m
    win = np.where(np.abs(offsets)[None, :] <= m, 0.42 + 0.5 * np.cos(arg) + 0.08 * np.cos(2 * arg), 0.0)
    win /= win.sum(axis=1, keepdims=True)
    seg *= win[inv]
    # centre at sample 0 (negative offsets wrap to the end): the phase is the centre's, as COVAREP's delay2spec gives;
    # in chunks of rows, so the zero-padded frames stay in cache through their DFT (each row's DFT is its own)
    out = np.empty((centres.size, dftlen // 2 + 1), complex)
    chunk = max(1, SPECTRA_CHUNK_BINS // dftlen)
    frames = np.zeros((min(chunk, centres.size), dftlen))
    for i in range(0, centres.size, chunk):
        part = seg[i : i + chunk]
        f = frames[: part.shape[0]]
        f[:, : half + 1] = part[:, half:]
        f[:, dftlen - half :] = part[:, :half]
        out[i : i + chunk] = rfft(f, axis=1)
    return out


def _lifter(orders: np.ndarray, n_coef: int) -> np.ndarray:
    """(rows, n_coef) cepstral weights: the right half of a Hamming window up to each row's order, 0 above."""
    k = np.arange(n_coef)[None, :]
    o = orders[:, None].astype(float)
    return np.where(k <= o, 0.54 + 0.46 * np.cos(np.pi * k / np.maximum(o, 1)), 0.0)


def true_envelope(log_amp: np.ndarray, orders: np.ndarray, presmooth: bool = True, chunk: int = 256) -> np.ndarray:
    """True envelope of half log-amplitude spectra (rows, dftlen/2 + 1) at per-row cepstral orders; returns the
    log envelope, same shape. Rows converge independently; they iterate in chunks of `chunk` rows of similar
    orders (`_iterate`)."""
    n_bins = log_amp.shape[1]
    dftlen = 2 * (n_bins - 1)
    orders = np.minimum(np.round(TE_SMOOTHING * np.asarray(orders)), dftlen // 2 - 1).astype(int)
    a = log_amp.copy()
    if presmooth:
        pre = true_envelope(log_amp, np.round(orders / 2.0), presmooth=False, chunk=chunk)
        slim = np.round(0.25 * dftlen / orders).astype(int)
        k = np.arange(n_bins)[None, :]
        edge = (k < slim[:, None]) | (k > n_bins - slim[:, None])
        a = np.where(edge, pre, a)
    out = np.empty_like(a)  # in the input's precision, as the envelope always was
    by_order = np.argsort(orders, kind="stable")
    for c in range(0, by_order.size, chunk):
        sel = by_order[c : c + chunk]
        out[sel] = _iterate(a[sel], orders[sel], dftlen)
    return out


def _iterate(a: np.ndarray, orders: np.ndarray, dftlen: int) -> np.ndarray:
    """`true_envelope`'s iteration for rows of log amplitudes `a` at cepstral `orders` (after the smoothing factor).

    A pass needs only the cepstrum up to the chunk's highest order and the energy above each row's order, and sets
    the log spectrum from those coefficients alone, so both transforms are products with a cosine basis as wide as
    the chunk's order (`_te_basis`), and the energy above the order is the whole cepstrum's (Parseval: the log
    spectrum's over dftlen) less the energy up to it (the 512-point real DFTs of every pass, with their full-length
    outputs, took twice the time; the cosines' symmetry about bin dftlen/4, which halves the products, cost more in
    strided passes than it saved). Every step is per row, so which rows share a chunk changes nothing but the
    basis' width (the chunk's highest order + 1: coefficients above a row's order stay 0) and so the grouping of
    float sums. Chunks of similar orders keep the arrays in cache and narrow (about 1.4x faster than all rows at the
    block's highest order; 256 rows: 128 and 512 were slower)."""
    n_coef = int(orders.max()) + 1
    fwd, back = _te_basis(a.shape[1], n_coef)
    lifter = _lifter(orders, n_coef)
    inside = np.arange(n_coef)[None, :] <= orders[:, None]
    a = a.astype(float)  # float64 from here on, as the FFT path always ran after its first pass
    floor = a - np.log(10 ** (TE_PREC_DB / 20))  # done: the envelope within 2 dB of every bin of the input
    out = np.empty(a.shape)
    todo = np.arange(a.shape[0])
    cc = np.zeros((a.shape[0], n_coef))
    lv, keep = a, slice(None)
    for _ in range(TE_MAXIT):
        prod = a @ fwd  # [c0, 2 c1, …, 2 c_{n_coef-1}, c_{dftlen/2}]
        ccp = prod[:, :-1]
        c0_sq = ccp[:, 0] ** 2
        e_in_sq = np.einsum("ij,ij->i", np.where(inside, ccp, 0.0), ccp)
        # (2 c_k)^2 summed over k = 1 … dftlen/2 - 1 (Parseval: the whole cepstrum's energy is the log spectrum's,
        # bins 1 … n_bins - 2 counted twice, over dftlen), less the rows' own coefficients up to their order
        total = (2.0 * np.einsum("ij,ij->i", a, a) - a[:, 0] ** 2 - a[:, -1] ** 2) / dftlen
        e_out_sq = 2.0 * (total - c0_sq - prod[:, -1] ** 2) - (e_in_sq - c0_sq)
        e_in = np.sqrt(e_in_sq)
        lam = (e_in + np.sqrt(np.maximum(e_out_sq, 0.0))) / np.maximum(e_in, 1e-300)  # Röbel et al. 2007's step
        cc += lam[:, None] * lifter * (ccp - cc)
        lv = cc @ back
        np.maximum(a, lv, out=a)
        done = (lv >= floor).all(axis=1)
        if done.any():
            out[todo[done]] = lv[done]
            keep = ~done
            todo, a, floor, cc, lifter, inside = (v[keep] for v in (todo, a, floor, cc, lifter, inside))
            if todo.size == 0:
                return out
        else:
            keep = slice(None)
    out[todo] = lv[keep]  # the last pass is the answer for rows that never converge
    return out


@functools.cache
def _te_basis(n_bins: int, n_coef: int) -> tuple[np.ndarray, np.ndarray]:
    """(fwd (n_bins, n_coef + 1), back (n_coef, n_bins)) for half log spectra of n_bins bins (dftlen = 2 (n_bins -
    1)): a @ fwd is the one-sided real cepstrum [c0, 2 c1, …, 2 c_{n_coef-1}] (irfft's first outputs, doubled past
    c0), then c_{dftlen/2}; cc @ back is the log spectrum (the real part of the DFT) of a one-sided cepstrum cc."""
    dftlen = 2 * (n_bins - 1)
    j = np.arange(n_bins)[:, None]
    k = np.arange(n_coef)[None, :]
    weight = np.where((j == 0) | (j == n_bins - 1), 1.0, 2.0) / dftlen  # the bins between the ends stand for two
    cep = weight * np.cos(2 * np.pi * j * k / dftlen) * np.where(k == 0, 1.0, 2.0)
    half = weight[:, 0] * np.where(j[:, 0] % 2 == 0, 1.0, -1.0)
    fwd = np.ascontiguousarray(np.column_stack([cep, half]))
    return fwd, np.ascontiguousarray(np.cos(2 * np.pi * k.T * j.T / dftlen))


def mel_axis(n_bins: int, fs: int) -> np.ndarray:
    """Frequencies (Hz) of a linear grid of n_bins, each mapped to the linear frequency whose mel value it has."""
    f = np.linspace(0.0, fs / 2, n_bins)
    mel_max = np.log1p(fs / 2 / 700.0)
    return f, 0.5 * fs * np.log1p(f / 700.0) / mel_max


def mel_cepstrum(log_env: np.ndarray, fs: int, order: int = ORDER) -> np.ndarray:
    """(rows, order + 1) mel-frequency cepstrum of log envelopes (rows, dftlen/2 + 1): the envelope read at the
    frequencies whose mel values are evenly spaced, then c_0, 2 c_1 … 2 c_order of its real cepstrum."""
    n_bins = log_env.shape[1]
    f, f_mel = mel_axis(n_bins, fs)
    # the envelope at linear frequency f sits at position f_mel on the warped axis: read the warped axis evenly
    idx = np.interp(f, f_mel, np.arange(n_bins, dtype=float))
    i0 = np.minimum(idx.astype(int), n_bins - 2)
    frac = idx - i0
    # the amplitude, not its log, is interpolated, as in COVAREP's hspec2fwcep
    amp = np.exp(log_env)
    warped = np.log(np.take(amp, i0, axis=1) * (1 - frac) + np.take(amp, i0 + 1, axis=1) * frac)
    # the first order + 1 coefficients of its real cepstrum (irfft of a real, even spectrum) as one product with
    # their cosines: a full inverse DFT computes 1024 to keep 25
    cep = warped @ _cepstrum_basis(n_bins, order)
    cep[:, 1:] *= 2.0
    return cep


@functools.cache
def _cepstrum_basis(n_bins: int, order: int) -> np.ndarray:
    """(n_bins, order + 1): irfft's first order + 1 outputs as a matrix of a real half spectrum of n_bins bins."""
    n = 2 * (n_bins - 1)
    j = np.arange(n_bins)[:, None]
    weight = np.where((j == 0) | (j == n_bins - 1), 1.0, 2.0) / n  # the bins between the ends stand for two
    return weight * np.cos(2 * np.pi * j * np.arange(order + 1)[None] / n)


def mcep_rows(spec: np.ndarray, f0: np.ndarray, fs: int, order: int = ORDER) -> np.ndarray:
    """(rows, order + 1) MCEP of the rows' `frame_spectra`; f0: the F0 (Hz, > 0) their windows were cut for."""
    amp = np.abs(spec)
    if TE_POOL > 1:  # the envelope's grid: the largest of each TE_POOL bins keeps every peak's level
        n = (amp.shape[1] - 1) // TE_POOL
        pooled = np.empty((amp.shape[0], n + 1))
        pooled[:, 0] = amp[:, 0]
        # the maximum of TE_POOL strided slices: numpy's reduction over an axis of length 2 costs 5x more; taken
        # before the log (monotonic: the same values), which then runs on 1 / TE_POOL of the bins
        pooled[:, 1:] = functools.reduce(np.maximum, (amp[:, 1 + i : 1 + n * TE_POOL : TE_POOL] for i in range(TE_POOL)))
        amp = pooled
    log_amp = np.log(np.maximum(amp, LOG_FLOOR))
    env = true_envelope(log_amp.astype(TE_DTYPE), np.round(0.5 * fs / f0))
    return mel_cepstrum(env.astype(float), fs, order)
