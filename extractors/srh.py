"""F0 by SRH, the summation of residual harmonics (Drugman & Alwan, "Joint robust voicing detection and pitch
estimation based on residual harmonics", Interspeech 2011), as COVAREP's `pitch_srh` computes it (read at
covarep/covarep 5a2be5d6 to learn the method; written here from that description).

Used for one thing: the F0 of the 74-column layout's 3-period windows on rows we call unvoiced. COVAREP windows
every frame of its MCEP, HMPD and Rd_conf analysis by SRH's F0, which SRH gives on unvoiced frames too; with the
block's median F0 there instead, MCEP's worst column agreed with COVAREP's at r 0.93-0.94 on the ARCTIC files (0.85-
0.87 on their unvoiced rows alone, 0.98 on the voiced), with this 0.98-0.99 (docs/acoustic.md, "74 columns").

Per frame: the LP residual (order round(0.75 fs/1000), 25 ms frames every 5 ms), 100 ms of it (1598 samples at
16 kHz, the frame's centre at sample 799) under a Blackman window, its mean removed, the magnitude spectrum on a 1 Hz
grid (an fs-point DFT) divided by its norm over 0 … fs/2, and SRH(f) = sum_{k=1..5} E(k f) - sum_{k=1..4}
E((k + 1/2) f) for integer f, F0 = its argmax. As in COVAREP, E(g) is read at bin g - 1 (MATLAB's 1-based index g is
frequency g - 1 Hz), and the search range [50, 500] Hz is narrowed to [round(F0med / 2), round(2 F0med)] where
that is inside it. COVAREP takes F0med from a first SRH pass (the median F0 of frames whose SRH exceeds 0.1); here
it is the block's median voiced F0 from our tracker, which saves that pass.
"""

from __future__ import annotations

import numpy as np
from scipy.fft import rfft

from extractors import glottal

F0_MIN_HZ, F0_MAX_HZ = 50, 500  # COVAREP_feature_extraction.m's F0min / F0max
N_HARMONICS = 5
FRAME_S = 0.1
CHUNK = 32  # frames per DFT batch: 32 x (fs/2) complex64 stays in cache


def search_range(f0_median: float | None) -> tuple[int, int]:
    """pitch_srh's range after its adjustment to the median F0 (none: the full range)."""
    lo, hi = F0_MIN_HZ, F0_MAX_HZ
    if f0_median is not None and np.isfinite(f0_median):
        if round(0.5 * f0_median) > lo:
            lo = round(0.5 * f0_median)
        if round(2 * f0_median) < hi:
            hi = round(2 * f0_median)
    return lo, max(lo, hi)


def srh_f0(x: np.ndarray, centres: np.ndarray, fs: int, f0_median: float | None) -> np.ndarray:
    """(len(centres),) SRH F0 in Hz (integers) of the frames centred on `centres` (samples of x; beyond its ends
    x reads as zeros)."""
    centres = np.asarray(centres, dtype=int)
    out = np.full(centres.size, np.nan)
    if centres.size == 0:
        return out
    res = glottal.lp_residual(np.asarray(x, np.float64), fs, order=round(0.75 * fs / 1000))
    length = round((round(FRAME_S * fs) - 2) / 2) * 2  # pitch_srh's frame: 100 ms minus 2 samples, even
    half = length // 2
    n = np.arange(length)
    win = 0.42 - 0.5 * np.cos(2 * np.pi * n / (length - 1)) + 0.08 * np.cos(4 * np.pi * n / (length - 1))
    lo, hi = search_range(f0_median)
    f = np.arange(lo, hi + 1)
    plus = np.arange(1, N_HARMONICS + 1)[:, None] * f[None] - 1  # E at k f: bin k f - 1 (the 1-based index)
    minus = np.round((np.arange(1, N_HARMONICS)[:, None] + 0.5) * f[None]).astype(int) - 1
    n_bins = int(plus.max()) + 1
    for i in range(0, centres.size, CHUNK):
        frames = glottal.windows(res, centres[i : i + CHUNK] - half, length) * win
        frames -= frames.mean(axis=1, keepdims=True)
        # the norm over bins 0 … fs/2 - 1 of the fs-point DFT by Parseval (the mean is gone: bin 0 is 0), so only
        # the bins SRH reads are transformed
        alt = frames @ np.where(n % 2 == 0, 1.0, -1.0)  # the bin at fs/2
        norm = np.sqrt(np.maximum(0.5 * (fs * np.einsum("fn,fn->f", frames, frames) - alt**2), 1e-300))
        spec = np.abs(rfft(frames.astype(np.float32), fs, axis=1)[:, :n_bins]) / norm[:, None]
        value = spec[:, plus].sum(axis=1) - spec[:, minus].sum(axis=1)  # (frames, len(f))
        out[i : i + CHUNK] = f[np.argmax(value, axis=1)]
    return out
