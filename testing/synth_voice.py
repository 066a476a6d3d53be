"""Ground-truth vowels for the acoustic tests: Liljencrants–Fant (LF) glottal pulses through formant resonators.

The LF flow derivative (Fant, Liljencrants & Lin 1985) is parametrised by Rd (Fant 1995, "The LF-model revisited"):
Rd -> (Ra, Rk, Rg) by Fant's regressions, then (tp, te, ta) per period. Everything the tests compare against
(F0 per row, GCIs, the flow and its derivative) comes back from here, so expected values are measured on the
synthetic signal itself, never from formulas the extractor also uses.

Regenerate nothing: every signal is made in milliseconds from the arguments below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.signal import lfilter

FS_HZ = 16000
VOWEL_A = ((730.0, 60.0), (1090.0, 100.0), (2440.0, 120.0), (3400.0, 175.0), (4500.0, 250.0))
# The resonances above F5 that a cascade of five formants leaves out. A vocal tract of ~17.5 cm has about one
# resonance per kHz (a uniform tube closed at the glottis: (2k - 1) c / 4L = 0.5, 1.5, ... 7.5 kHz), so a 16 kHz
# vowel has eight below Nyquist; without them the spectrum falls ~60 dB per octave above F5 and the 4-8 kHz band of
# the /a/ below sits 67-76 dB under its 0-1 kHz band (at the 1e-4 noise floor), where recorded speech has it 22-53 dB
# under (CMU ARCTIC, COVAREP's recordings; docs/acoustic.md, "LF vowels and limits"). Klatt (JASA 67(3), 1980) adds a
# "higher-pole correction" to his 5-formant cascade for the same reason. Bandwidths widen with frequency.
HIGHER_FORMANTS = ((5500.0, 300.0), (6500.0, 350.0), (7500.0, 400.0))


@dataclass(frozen=True)
class Voice:
    speech: np.ndarray  # (S,) float32: what the extractor sees
    dg: np.ndarray  # (S,) float64 true glottal flow derivative (0 outside voiced spans)
    period_starts: np.ndarray  # (P,) sample positions where each LF period starts (glottal opening)
    period_lengths: np.ndarray  # (P,) period lengths in samples (float)
    gcis: np.ndarray  # (P,) sample positions of the instants of maximal excitation (te)


def lf_timing(rd: float, t0_s: float) -> tuple[float, float, float]:
    """(tp, te, ta) in seconds from Rd via Fant's (1995) regressions for Ra, Rk, Rg."""
    ra = (-1.0 + 4.8 * rd) / 100.0
    rk = (22.4 + 11.8 * rd) / 100.0
    rg = rk / (4.0 * (0.11 * rd / (0.5 + 1.2 * rk) - ra))
    tp = t0_s / (2.0 * rg)
    return tp, tp * (1.0 + rk), ra * t0_s


def lf_derivative(t: np.ndarray, t0_s: float, rd: float) -> np.ndarray:
    """One LF period of the flow derivative at times t in [0, t0_s), negative peak Ee = -1 at te."""
    tp, te, ta = lf_timing(rd, t0_s)
    wg, tb = np.pi / tp, t0_s - te
    eps = brentq(lambda e: e * ta - 1.0 + np.exp(-e * tb), 1e-3 / tb, 1e3 / ta)
    ret_area = -(1.0 / (eps * ta)) * ((1.0 - np.exp(-eps * tb)) / eps - tb * np.exp(-eps * tb))

    def area(alpha: float | np.ndarray) -> float | np.ndarray:  # flow at the end of the period: must be 0
        e0 = -1.0 / (np.exp(alpha * te) * np.sin(wg * te))
        open_area = e0 * (np.exp(alpha * te) * (alpha * np.sin(wg * te) - wg * np.cos(wg * te)) + wg)
        return open_area / (alpha**2 + wg**2) + ret_area

    grid = np.linspace(-20.0 / t0_s, 200.0 / t0_s, 2000)
    vals = area(grid)  # the whole grid in one call: a Python call per point cost ~4 s per 1 s vowel
    k = int(np.flatnonzero(np.sign(vals[:-1]) != np.sign(vals[1:]))[0])
    alpha = brentq(area, grid[k], grid[k + 1])
    e0 = -1.0 / (np.exp(alpha * te) * np.sin(wg * te))
    opening = e0 * np.exp(alpha * t) * np.sin(wg * t)
    closing = -(1.0 / (eps * ta)) * (np.exp(-eps * (t - te)) - np.exp(-eps * tb))
    return np.where(t <= te, opening, closing)


def _periods(f0_hz: Callable[[np.ndarray], np.ndarray], start_s: float, end_s: float) -> list[tuple[float, float]]:
    """(start, length) in seconds; each length is 1/F0 at the period's own midpoint."""
    out, t = [], start_s
    while True:
        length = 1.0 / float(f0_hz(np.array(t)))
        for _ in range(3):
            length = 1.0 / float(f0_hz(np.array(t + length / 2)))
        if t + length > end_s:
            return out
        out.append((t, length))
        t += length


def synth_vowel(
    duration_s: float,
    f0_hz: Callable[[np.ndarray], np.ndarray],
    rd: float | Callable[[np.ndarray], np.ndarray],
    voiced_spans_s: list[tuple[float, float]] | None = None,
    formants: tuple[tuple[float, float], ...] = VOWEL_A,
    noise_rms: float = 1e-4,
    seed: int = 0,
) -> Voice:
    """A vowel with F0 contour `f0_hz(t)`, Rd (constant or `rd(t)`), voiced only inside `voiced_spans_s`."""
    n = round(duration_s * FS_HZ)
    dg = np.zeros(n)
    starts, lengths, gcis = [], [], []
    for span_start, span_end in voiced_spans_s or [(0.0, duration_s)]:
        for p_start, p_len in _periods(f0_hz, span_start, span_end):
            rd_p = float(rd(np.array(p_start)) if callable(rd) else rd)
            first, last = int(np.ceil(p_start * FS_HZ)), int(np.ceil((p_start + p_len) * FS_HZ))
            t = np.arange(first, min(last, n)) / FS_HZ - p_start
            dg[first : first + t.size] = lf_derivative(t, p_len, rd_p)
            starts.append(p_start * FS_HZ)
            lengths.append(p_len * FS_HZ)
            gcis.append((p_start + lf_timing(rd_p, p_len)[1]) * FS_HZ)
    speech = dg.copy()
    for freq, bw in formants:  # unity-DC-gain resonators: the vocal tract
        r, theta = np.exp(-np.pi * bw / FS_HZ), 2 * np.pi * freq / FS_HZ
        a = np.array([1.0, -2 * r * np.cos(theta), r * r])
        speech = lfilter([a.sum()], a, speech)
    speech = 0.5 * speech / max(np.abs(speech).max(), 1e-12)
    speech += noise_rms * np.random.default_rng(seed).standard_normal(n)
    return Voice(speech.astype(np.float32), dg, np.array(starts), np.array(lengths), np.array(gcis))


def naq_per_period(voice: Voice) -> np.ndarray:
    """NAQ = f_ac / (d_peak * T0) measured on the true flow (running sum of the true derivative), per period."""
    flow = np.cumsum(voice.dg)
    out = []
    for start, length in zip(voice.period_starts, voice.period_lengths, strict=True):
        lo, hi = int(np.ceil(start)), int(np.ceil(start + length))
        f_ac = flow[lo:hi].max() - flow[lo:hi].min()
        out.append(f_ac / (-voice.dg[lo:hi].min() * length))
    return np.array(out)
