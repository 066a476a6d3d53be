"""F0 by SRH, the summation of residual harmonics (Drugman & Alwan, "Joint robust voicing detection and pitch
estimation based on residual harmonics", Interspeech 2011), as COVAREP's `pitch_srh` computes it (read at
covarep/covarep 5a2be5d6 to learn the method; written here from that description).

Used for the F0 of the 74-column layout's frames COVAREP windows by SRH: HMPD's, at SRH's own instants (every frame,
`acoustic.hmpd_columns`), and the 3-period windows of rows we call unvoiced (`acoustic.window_f0`). With the block's
median F0 there instead, MCEP's worst column agreed with COVAREP's at r 0.93-0.94 on the ARCTIC files, with SRH's
0.98-0.99 (docs/acoustic.md, "74 columns").

Per frame: the LP residual (order round(0.75 fs/1000), 25 ms frames every 5 ms), 100 ms of it (1598 samples at
16 kHz, samples c - 800 … c + 797 for an instant c = t·fs) under a Blackman window, its mean removed, the magnitude
spectrum on a 1 Hz grid (an fs-point DFT) divided by its norm over 0 … fs/2, and SRH(f) = sum_{k=1..5} E(k f) -
sum_{k=1..4} E((k + 1/2) f) for integer f, F0 = its argmax. As in COVAREP, E(g) is read at bin g - 1 (MATLAB's
1-based index g is frequency g - 1 Hz), (k + 1/2) f and the range's ends are rounded as MATLAB rounds (halves up),
and pitch_srh's two passes set the range (`srh_track`): [50, 500] Hz first, then [round(F0med / 2), round(2 F0med)]
where that is inside it, F0med the first pass's median F0 over the frames whose SRH exceeds 0.1. Measured against
COVAREP's pitch_srh under Octave on the five recordings of ../shared/realdata/speech: the same F0 on 99.7-100 % of
its frames (the rest 1 Hz off: its LPC's last digits) and the same median; version 10 (numpy's rounding, the range
from our tracker's median) 86-99 % (docs/acoustic.md, "HMPD").
"""

from __future__ import annotations

import numpy as np
from scipy.fft import rfft

from extractors import glottal

F0_MIN_HZ, F0_MAX_HZ = 50, 500  # COVAREP_feature_extraction.m's F0min / F0max
N_HARMONICS = 5
FRAME_S = 0.1
ITER_THRESHOLD = 0.1  # pitch_srh's SRHiterThresh: frames whose SRH exceeds it set the median of its second pass
CHUNK = 32  # frames per DFT batch: 32 x (fs/2) complex64 stays in cache


def matlab_round(v: float) -> int:
    """MATLAB's round (halves away from zero; the values here are positive), not Python's (halves to even)."""
    return int(np.floor(v + 0.5))


def search_range(f0_median: float | None) -> tuple[int, int]:
    """pitch_srh's range after its adjustment to the median F0 (none: the full range)."""
    lo, hi = F0_MIN_HZ, F0_MAX_HZ
    if f0_median is not None and np.isfinite(f0_median):
        if matlab_round(0.5 * f0_median) > lo:
            lo = matlab_round(0.5 * f0_median)
        if matlab_round(2 * f0_median) < hi:
            hi = matlab_round(2 * f0_median)
    return lo, max(lo, hi)


def frame_length(fs: int) -> int:
    """pitch_srh's frame: 100 ms minus 2 samples, even; frame i covers samples centre - length/2 - 1 … centre +
    length/2 - 2 (its 1-based instants are COVAREP's t·fs)."""
    return matlab_round((matlab_round(FRAME_S * fs) - 2) / 2) * 2


def candidates(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(F0 candidates lo … hi, the bins read at their harmonics (N_HARMONICS, n), between them (N_HARMONICS - 1,
    n)). E(g) is read at bin g - 1 (MATLAB's 1-based index g is frequency g - 1 Hz), and (k + 1/2) f is rounded
    as MATLAB rounds, halves up (numpy's round takes halves to even: for half of the odd f it read the bin below,
    which moved F0 by 1 Hz on about a tenth of the frames)."""
    f = np.arange(lo, hi + 1)
    plus = np.arange(1, N_HARMONICS + 1)[:, None] * f[None] - 1
    minus = np.floor((np.arange(1, N_HARMONICS)[:, None] + 0.5) * f[None] + 0.5).astype(np.int64) - 1
    return f, plus, minus


def best(value: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(F0, SRH) of each row of `value` (SRH over the candidates f): the argmax. pitch_srh keeps the sums in a
    matrix whose rows for 1 … lo - 1 Hz are zero, so where no candidate is positive its F0 is 1 Hz and its SRH 0."""
    i = np.argmax(value, axis=1)
    v = value[np.arange(len(value)), i]
    return np.where(v > 0, f[i], 1).astype(float), np.maximum(v, 0.0)


def second_pass_median(f0: np.ndarray, value: np.ndarray) -> float | None:
    """The median F0 of the first pass's frames whose SRH exceeds ITER_THRESHOLD (None where none does)."""
    keep = value > ITER_THRESHOLD
    return float(np.median(f0[keep])) if keep.any() else None


def srh_values(x: np.ndarray, centres: np.ndarray, fs: int, lo: int, hi: int) -> np.ndarray:
    """(len(centres), hi - lo + 1): SRH(f) for f = lo … hi of the frames at `centres` (samples of x, as COVAREP's
    instants t·fs; beyond x's ends x reads as zeros)."""
    centres = np.asarray(centres, dtype=int)
    f, plus, minus = candidates(lo, hi)
    out = np.zeros((centres.size, f.size))
    if centres.size == 0:
        return out
    res = glottal.lp_residual(np.asarray(x, np.float64), fs, order=matlab_round(0.75 * fs / 1000))
    length = frame_length(fs)
    n = np.arange(length)
    win = 0.42 - 0.5 * np.cos(2 * np.pi * n / (length - 1)) + 0.08 * np.cos(4 * np.pi * n / (length - 1))
    n_bins = int(plus.max()) + 1
    # the frames zero-padded to fs samples in one buffer kept across chunks (rfft's own padding of each chunk cost
    # a fresh buffer every call); the samples past `length` stay 0
    padded = np.zeros((min(CHUNK, centres.size), fs), np.float32)
    # the magnitudes bins x frames: each candidate's bins are then whole rows to gather (the same sums in the same
    # order as strided slices of frames x bins, 1.5x faster)
    spec_t = np.empty((n_bins, padded.shape[0]), np.float32)
    # frames read from a strided view of the residual, zero-padded where a frame passes x's ends: one copy per frame
    # (glottal.windows assembles its rows in two); the frame at c covers samples c - length/2 - 1 … c + length/2 - 2
    lo_pad = max(0, length // 2 + 1 - int(centres.min()))
    hi_pad = max(0, int(centres.max()) + length // 2 - 1 - res.size)
    view = np.lib.stride_tricks.sliding_window_view(np.pad(res, (lo_pad, hi_pad)), length)
    first = centres - length // 2 - 1 + lo_pad
    for i in range(0, centres.size, CHUNK):
        frames = view[first[i : i + CHUNK]]
        frames *= win
        frames -= frames.mean(axis=1, keepdims=True)
        # the norm over bins 0 … fs/2 - 1 of the fs-point DFT by Parseval (the mean is gone: bin 0 is 0), so only
        # the bins SRH reads are transformed
        alt = frames @ np.where(n % 2 == 0, 1.0, -1.0)  # the bin at fs/2
        norm = np.sqrt(np.maximum(0.5 * (fs * np.einsum("fn,fn->f", frames, frames) - alt**2), 1e-300))
        buf, spec = padded[: frames.shape[0]], spec_t[:, : frames.shape[0]]
        buf[:, :length] = frames
        np.abs(rfft(buf, axis=1)[:, :n_bins].T, out=spec)
        out[i : i + CHUNK] = (harmonic_sum(spec, plus, minus) / norm).T  # normalised once per candidate
    return out


def harmonic_sum(spec: np.ndarray, plus: np.ndarray, minus: np.ndarray) -> np.ndarray:
    """SRH(f) (candidates, frames) of magnitude spectra on a 1 Hz grid (bins, frames), unnormalised: `candidates`'
    bins at the harmonics (plus) and between them (minus), each summed over k in float64 in pitch_srh's order (E(f)
    + E(2f) + …, then the difference)."""
    return np.add.reduce(spec[plus], axis=0, dtype=np.float64) - np.add.reduce(spec[minus], axis=0, dtype=np.float64)


def srh_f0(x: np.ndarray, centres: np.ndarray, fs: int, f0_median: float | None) -> np.ndarray:
    """(len(centres),) SRH F0 in Hz (integers) of the frames at `centres`, searched in the range pitch_srh narrows
    to around `f0_median` (None: the full range)."""
    lo, hi = search_range(f0_median)
    return best(srh_values(x, centres, fs, lo, hi), np.arange(lo, hi + 1))[0]


def srh_track(x: np.ndarray, centres: np.ndarray, fs: int, values=srh_values) -> tuple[np.ndarray, float | None]:
    """(SRH F0 of the frames at `centres`, the median that narrowed its range) by pitch_srh's two passes: the
    full range, then the range around the median F0 of the frames whose SRH exceeds ITER_THRESHOLD. SRH(f) does not
    depend on the range, so the second pass is the first's sums read over the narrower range: one set of spectra
    (one LP residual and one `values` call; `values`: a backend's `srh_values`)."""
    value = values(x, np.asarray(centres, dtype=int), fs, F0_MIN_HZ, F0_MAX_HZ)
    return narrowed(value, np.arange(F0_MIN_HZ, F0_MAX_HZ + 1))


def narrowed(value: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, float | None]:
    """srh_track's two passes on SRH over the full range (value: (frames, len(f)))."""
    f0, v = best(value, f)
    if not v.size or v.max() <= ITER_THRESHOLD:
        return f0, None
    median = second_pass_median(f0, v)
    lo, hi = search_range(median)
    return best(value[:, lo - f[0] : hi - f[0] + 1], f[lo - f[0] : hi - f[0] + 1])[0], median
