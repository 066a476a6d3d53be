"""Rd_conf: how well the best LF model explains a row's harmonic phases (COVAREP's `rd_msp` confidence).

Method: Degottex, Roebel & Rodet, "Phase minimization for glottal model estimation", IEEE TASLP 2011 (mean squared
phase, MSP), and Degottex's thesis (2010) eq. 5.9 for the confidence, written from their description: for each Rd of
the LF model (Fant 1995's regressions; `glottal._lf_cycles`), divide the row's harmonic spectrum (`harmonics.pick`)
by the model's, remove the minimum phase of the quotient (what a vocal tract explains), and measure the residual's
phase distortion PD_k = P_k − P_{k−1} − P_1 on harmonics 2 … 8; err(Rd) = mean PD_k². Rd_conf = 1 − sqrt(min err)/π
(1: the phases are those of an LF pulse through a minimum-phase filter; lower: less so). Defined on every row, as
COVAREP computes it wherever its F0 tracker gives a frame.

The minimum phase is linear in the log amplitude, so the model's share of each P_k is computed once per harmonic
count and Rd (`_model_terms`, cached) and a row costs one cepstrum. Rd is searched on a 0.01 grid over 0.3 … 2.5
(global minimum); COVAREP's bounded Brent search (tolerance 0.01) can stop in a local one.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.fft import irfft, rfft

from extractors import glottal
from extractors.harmonics import Harmonics

RD_SEARCH = np.round(np.arange(0.3, 2.5001, 0.02), 2)
N_PD = 8  # harmonics whose phase distortion is measured
LF_SAMPLES = 8192  # samples of the unit-period LF cycle whose DFT gives the model's harmonics


@functools.cache
def _lf_spectrum(max_harmonic: int = 400) -> np.ndarray:
    """(len(RD_SEARCH), max_harmonic + 1) LF flow-derivative spectrum at harmonics 0 … max_harmonic (Ee = 1)."""
    d = glottal._lf_cycles(RD_SEARCH, np.arange(LF_SAMPLES) / LF_SAMPLES)
    # conjugated, as COVAREP's comparison ends up: its harmonic spectrum passes a column vector through
    # hspec2spec, whose `'` is MATLAB's conjugate transpose, so it fits the time-reversed pulse. Against COVAREP's
    # Rd_conf the plain DFT gives r 0.49 / -0.04 / 0.71 on three read-speech files, this 0.82 / 0.68 / 0.86; on LF
    # vowels (Rd 0.5, 1, 2) the plain DFT gives 0.91 each, this 0.43 / 0.67 / 0.76 (docs/acoustic.md)
    return np.conj(rfft(d, axis=1)[:, : max_harmonic + 1] / LF_SAMPLES)


def _min_phase(log_amp: np.ndarray, n_out: int) -> np.ndarray:
    """Phase of the minimum-phase spectrum at bins 0 … n_out-1 of half log amplitudes (..., H + 1) on a 2H grid."""
    n = 2 * (log_amp.shape[-1] - 1)
    cep = irfft(log_amp, n=n, axis=-1)
    fold = np.zeros_like(cep[..., : n // 2 + 1])
    fold[..., 0] = cep[..., 0]
    fold[..., 1 : n // 2] = 2 * cep[..., 1 : n // 2]
    fold[..., n // 2] = cep[..., n // 2]
    return rfft(fold, n=n, axis=-1).imag[..., :n_out]


def _edges(log_amp: np.ndarray) -> np.ndarray:
    """COVAREP's N(1) = |N(2)|, N(end) = |N(end-1)|: the DC and the last harmonic take their neighbours' level."""
    out = log_amp.copy()
    out[..., 0] = out[..., 1]
    out[..., -1] = out[..., -2]
    return out


@functools.cache
def _model_terms(h: int) -> np.ndarray:
    """(len(RD_SEARCH), N_PD + 1): the LF model's part of P_k, k = 0 … N_PD, for rows with h harmonics."""
    g = _lf_spectrum(max(400, h))[:, : h + 1]
    mp = _min_phase(_edges(np.log(np.maximum(np.abs(g), 1e-300))), N_PD + 1)
    ph = np.angle(g[:, : N_PD + 1])
    ph[:, 0] = 0.0
    if h <= N_PD:
        ph[:, h:] = 0.0
    return ph - mp


def _pd_terms(p: np.ndarray) -> np.ndarray:
    """(..., N_PD - 1): P_k+1 - P_k - P_1 for k = 1 … N_PD - 1 of phases (..., N_PD + 1)."""
    return np.diff(p[..., 1:], axis=-1) - p[..., 1:2]


@functools.cache
def _model_pd(h: int) -> np.ndarray:
    """(len(RD_SEARCH), N_PD - 1): `_pd_terms` of the LF model's part for rows with h harmonics."""
    return _pd_terms(_model_terms(h))


def rd_conf_rows(hm: Harmonics) -> np.ndarray:
    """(rows,) Rd_conf; NaN for rows with fewer than N_PD + 2 harmonics (F0 too high for the measure)."""
    rows = hm.count.size
    out = np.full(rows, np.nan)
    for h in np.unique(hm.count):
        if h < N_PD + 2:
            continue
        idx = np.flatnonzero(hm.count == h)
        amp = hm.amp[idx, : h + 1]
        m = amp * np.exp(1j * hm.phase[idx, : h + 1])
        mp = _min_phase(_edges(np.log(np.maximum(np.abs(m), 1e-300))), N_PD + 1)
        ph = np.angle(m[:, : N_PD + 1])
        ph[:, 0] = 0.0
        a = ph - mp  # (rows, N_PD + 1)
        # PD_k = P_k+1 - P_k - P_1 (k = 1 … N_PD - 1) with P = a - model: the row's part and each Rd's part are
        # formed apart and subtracted once (a (rows, rd, k) array per step cost 3x more; float-noise difference)
        err = min_mean_square(_pd_terms(a), _model_pd(int(h)))
        out[idx] = 1 - np.sqrt(err) / np.pi
    return out


def min_mean_square(row_pd: np.ndarray, model_pd: np.ndarray, chunk: int = 64) -> np.ndarray:
    """(rows,) min over the models of mean_k wrap(row_pd[:, k] - model_pd[:, k])², bit for bit what
    `np.mean(wrap(row_pd[:, None] - model_pd[None]) ** 2, axis=2).min(axis=1)` gives, 3x faster.

    Why: that expression spent its time in three (rows, Rd, k) temporaries (18 MB per 30 s block, page-faulted on
    every call) and in np.remainder (9 ns an element). Here a chunk of rows at a time stays in cache, k outermost
    so the sum over k adds whole (rows, Rd) planes in numpy's order (k = 0, 1, … sequentially), and the remainder
    y mod 2π (y = pd + π) is y - floor(y / 2π)·2π, which equals numpy's (fmod, then + 2π if negative) to the bit
    wherever floor(y / 2π) is in -2 … 2: 2π times those is exact, the fmod result is exact and y + 2π rounds
    once in both; should a quotient round up to the next integer, the remainder falls just below 0 and numpy's
    answer is exactly 2π more (a guard: not met in 10^6 draws). A chunk with a larger quotient (not seen on
    speech; the formula held there too on random draws, but without the proof) takes np.remainder."""
    rows, (n_rd, k) = row_pd.shape[0], model_pd.shape
    out = np.empty(rows)
    model_t = np.ascontiguousarray(model_pd.T)  # (k, Rd)
    buf = np.empty((k, min(chunk, rows), n_rd))
    for c in range(0, rows, chunk):
        part = row_pd[c : c + chunk]
        y = np.subtract(part.T[:, :, None], model_t[:, None, :], out=buf[:, : part.shape[0]])  # (k, rows, Rd)
        y += np.pi
        q = np.floor(y / (2 * np.pi))
        if q.min() >= -2 and q.max() <= 2:
            q *= 2 * np.pi
            y -= q
            np.add(y, 2 * np.pi, out=y, where=y < 0)
        else:
            np.remainder(y, 2 * np.pi, out=y)
        y -= np.pi  # harmonics.wrap's result
        np.square(y, out=y)
        total = y[0].copy()
        for j in range(1, k):
            total += y[j]
        out[c : c + chunk] = total.min(axis=1)
    return out / k  # the mean's division, after the min: dividing by k is monotonic, so the same value

