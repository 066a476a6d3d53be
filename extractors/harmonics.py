"""Harmonic analysis by peak picking, per row: the sinusoidal parameters HMPD and Rd_conf are computed from.

Method (McAulay & Quatieri 1986's peak picking, restricted to harmonics as COVAREP's `sin_analysis` with
`fharmonic` and without least squares; written from its documentation): on each row's 3-period Blackman spectrum
(`mcep.frame_spectra`, phase 0 at the window's centre), harmonic k = 1 … round((fs/2 − f0/2)/f0) takes the local
maximum of the log amplitude nearest to k·f0 within half a harmonic spacing, its position and value refined by a
parabola through the three bins; a harmonic with no such peak keeps the bin nearest k·f0. Its phase is the
spectrum's unwrapped phase read linearly at that position. Row 0 of the harmonic axis is DC (amplitude and phase of
bin 0). The harmonic frequencies are then replaced by multiples of the median spacing of the picked ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Harmonics:
    """(rows, 1 + h_max) arrays, harmonic 0 = DC; entries past a row's `count` are NaN."""

    freq: np.ndarray  # Hz: multiples of `spacing`
    amp: np.ndarray  # linear amplitude
    phase: np.ndarray  # rad, wrapped
    count: np.ndarray  # (rows,) harmonics per row, DC excluded
    spacing: np.ndarray  # (rows,) median spacing of the picked peaks, Hz


def concat(parts: list[Harmonics]) -> Harmonics:
    """The rows of several `pick` calls as one: each part's harmonic axis padded with NaN to the widest (entries
    past a row's count are NaN in every part), so the rows are those one call on all of them gives."""
    width = max(p.freq.shape[1] for p in parts)

    def pad(a: np.ndarray) -> np.ndarray:
        return np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=np.nan)

    return Harmonics(*(np.concatenate([pad(getattr(p, f)) for p in parts]) for f in ("freq", "amp", "phase")),
                     np.concatenate([p.count for p in parts]), np.concatenate([p.spacing for p in parts]))  # fmt: skip


def wrap(p: np.ndarray) -> np.ndarray:
    """Phase in [-π, π)."""
    return (p + np.pi) % (2 * np.pi) - np.pi


def _median_head(d: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(rows,) median of each row's first n values (the rest NaN): np.nanmedian's result ((lo + hi) / 2 of the two
    middle values of an even count) without its masked arrays, which cost more than the rest of `pick`'s gathers."""
    srt = np.sort(d, axis=1)  # NaN sorts last
    r = np.arange(d.shape[0])
    return (srt[r, (n - 1) // 2] + srt[r, n // 2]) / 2


def pick(spec: np.ndarray, f0: np.ndarray, fs: int) -> Harmonics:
    """Harmonics of complex half spectra (rows, dftlen/2 + 1) at per-row F0 (Hz)."""
    rows, n_bins = spec.shape
    dftlen = 2 * (n_bins - 1)
    mag = np.maximum(np.abs(spec), 1e-300)
    count = np.round((fs / 2 - f0 / 2) / f0).astype(int)
    h_max = int(count.max())
    k = np.arange(1, h_max + 1)[None, :]
    step = dftlen * f0[:, None] / fs  # bins per harmonic
    nominal = step * k
    # local maxima (interior bins) of the amplitude: the log amplitude's, whose log is taken only where read (over
    # the whole spectrum it cost a third of `pick`). The log can round two nearly equal amplitudes to one value and
    # so hide or make a peak that the amplitudes order: none in 150,000 peaks of 60 s of speech
    peak = np.zeros_like(mag, dtype=bool)
    peak[:, 1:-1] = (mag[:, 1:-1] > mag[:, :-2]) & (mag[:, 1:-1] >= mag[:, 2:])
    valid_h = k <= count[:, None]
    # the harmonics rows have, flattened (row-major): every step below is per harmonic, and rows of a high F0 have
    # far fewer than the block's most (h_max), so the (rows, h_max) grid would mostly be read and thrown away
    r = np.nonzero(valid_h)[0]
    nominal, step = nominal[valid_h], step[r, 0]
    base = np.clip(np.floor(nominal).astype(int), 0, n_bins - 1)
    row0 = r * n_bins  # gathers by flat index: numpy's 2-d fancy indexing costs about twice as much

    def at(a: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.take(a.reshape(-1), row0 + c)

    # the nearest peak at or below `base` and at or above base + 1 (-1 / n_bins where the row has none): a binary
    # search of the peaks' flat indices, between sentinels that lie outside every row, for the harmonics only
    # (running max / min scans over every bin cost 3x more)
    flat = np.concatenate([[-1], np.flatnonzero(peak), [rows * n_bins]])
    below = flat[np.searchsorted(flat, row0 + base, side="right") - 1]
    cand_l = np.where(below >= row0, below - row0, -1)
    above = flat[np.searchsorted(flat, row0 + np.minimum(base + 1, n_bins - 1), side="left")]
    cand_r = np.where(above < row0 + n_bins, above - row0, n_bins)

    def refined(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Parabolic refinement (position, log amplitude) at bins c, read only where a candidate is (the whole
        spectrum's would cost more); the outermost bins' neighbours wrap around, as np.roll's."""
        here = np.log(at(mag, c))
        left, right = np.log(at(mag, (c - 1) % n_bins)), np.log(at(mag, (c + 1) % n_bins))
        b = 0.5 * (right - left)
        a = here - b - left
        safe = np.where(a > 0, a, 1.0)
        return c + np.where(a > 0, 0.5 * b / safe, 0.0), here + np.where(a > 0, 0.25 * b**2 / safe, 0.0)

    pos_l, val_l = refined(np.maximum(cand_l, 0))
    pos_r, val_r = refined(np.minimum(cand_r, n_bins - 1))
    pos_l = np.where(cand_l >= 0, pos_l, np.inf)
    pos_r = np.where(cand_r < n_bins, pos_r, np.inf)
    d_l, d_r = np.abs(pos_l - nominal), np.abs(pos_r - nominal)
    use_r = d_r < d_l
    best_pos = np.where(use_r, pos_r, pos_l)
    best_val = np.where(use_r, val_r, val_l)
    found = np.minimum(d_l, d_r) < step / 2
    nearest_bin = np.clip(np.round(nominal).astype(int), 0, n_bins - 1)
    hpos = np.where(found, best_pos, nominal)
    hpos_c = np.clip(hpos, 0, n_bins - 1)
    i0 = np.minimum(np.floor(hpos_c).astype(int), n_bins - 2)
    frac = hpos_c - i0
    # the unwrapped phase read linearly between two bins: only their difference needs unwrapping
    p0 = np.angle(at(spec, i0))  # the phase of the bins read only: atan2 over the whole spectrum would cost more
    hamp, hph, freq_picked = (np.full((rows, h_max), np.nan) for _ in range(3))
    hamp[valid_h] = np.where(found, np.exp(best_val), at(mag, nearest_bin))
    hph[valid_h] = wrap(p0 + frac * wrap(np.angle(at(spec, i0 + 1)) - p0))
    freq_picked[valid_h] = hpos * fs / dftlen
    with_dc = np.concatenate([np.zeros((rows, 1)), freq_picked], axis=1)
    spacing = _median_head(np.diff(with_dc, axis=1), count)
    kk = np.arange(h_max + 1)[None, :]
    inside = kk <= count[:, None]
    freq = np.where(inside, spacing[:, None] * kk, np.nan)
    amp = np.where(inside, np.concatenate([mag[:, :1], hamp], axis=1), np.nan)
    phase = np.where(inside, np.concatenate([np.angle(spec[:, :1]), hph], axis=1), np.nan)
    return Harmonics(freq, amp, phase, count, spacing)
