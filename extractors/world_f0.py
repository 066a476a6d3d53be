"""WORLD's DIO and StoneMask F0 estimators in torch, batched, float64, on a CPU or CUDA device.

DIO: Morise, Kawahara & Katayose, "Fast and reliable F0 estimation method based on the period extraction of vocal
fold vibration of singing voice and speech", AES 35th Conference, 2009. StoneMask: the instantaneous-frequency
refinement of WORLD (Morise, Yokomori & Ozawa, "WORLD: a vocoder-based high-quality speech synthesis system for
real-time applications", IEICE Trans. Inf. & Syst. E99-D(7), 2016). This is the algorithm as WORLD's C++ runs it
(mmorise/World src/dio.cpp, src/stonemask.cpp, as pyworld 0.3.5 wraps them; read, then written anew here for arrays):
the reference is pyworld (`extractors.acoustic` calls it), and docs/acoustic.md ("F0 in torch") gives the
tolerances this module is held to and why.

Where WORLD loops, this module batches:
- DIO's candidate bands (1 + log2(ceil/floor) * channels_in_octave, 7 for 60-500 Hz): one FFT of the decimated
  signal, the bands' low-pass filters applied as one batched inverse FFT; the four zero-crossing series of every
  band (negative- and positive-going crossings, peaks, dips) found and interpolated to the frames as one ragged
  batch (`torch.searchsorted` over padded rows).
- The decimation filter (a recursion in WORLD: Chebyshev I, order 3, forward and backward) as FFT convolutions with
  its impulse response, truncated where it has decayed below float64's resolution.
- DIO's contour fixing: steps 1-2 are sliding-window tests over frames; steps 3-4 walk from each voiced section's
  end into its neighbours, each step depending on the last two. The walks run in parallel (one step of every walk
  per iteration); a walk's only input from another is its start, which the walk before it may rewrite, so walks
  whose start changed run again until none does: the result is the sequential one's.
- StoneMask: every frame's two windowed spectra as one batched FFT per FFT size (4 sizes at most).

Arithmetic follows WORLD's operation by operation (its rounding to integers, its window offsets, its ln 2 constant,
even its handling of the two spectrum bins next to Nyquist in the band filter) so that what remains between the two
is floating-point summation order and the FFT algorithm.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import scipy.fft
import torch
from scipy.signal import cheby1, lfilter

LOG2 = 0.69314718055994529  # WORLD's ln 2: the band count int(log(ceil/floor) / LOG2 * channels) is an integer cut
CUTOFF_HZ = 50.0  # DIO's low-cut filter
SAFE = 1e-12  # WORLD's guard against a zero division
MAX_SCORE = 100000.0  # the score of a band without a candidate
STONEMASK_FLOOR_HZ = 40.0  # StoneMask leaves F0 at or below this (and above fs / 12) unrefined: 0
DECIMATE_PAD = 9  # samples reflected about each end before the decimation filter
CHUNK_ELEMENTS = 1 << 24  # StoneMask frames x FFT points per batch: bounds memory on long blocks


def matlab_round(x: torch.Tensor) -> torch.Tensor:
    """Half away from zero, as WORLD's matlab_round (an int cast truncates toward zero)."""
    return torch.where(x > 0, torch.trunc(x + 0.5), torch.trunc(x - 0.5))


def _round(x: float) -> int:
    return int(x + 0.5) if x > 0 else int(x - 0.5)


def _pow2_above(n: int) -> int:
    """WORLD's GetSuitableFFTSize: the power of two above n (2n when n is one)."""
    return int(2.0 ** (int(math.log(n) / LOG2) + 1))


@functools.cache
def _decimation_response(r: int) -> np.ndarray:
    """Impulse response of WORLD's decimation low-pass for ratio r: MATLAB decimate's Chebyshev type I design at
    order 3 (0.05 dB ripple, cutoff 0.8 / r; WORLD tabulates these coefficients), cut where it has decayed below
    1e-20 of its peak, so a convolution with it equals the recursion to float64 rounding."""
    b, a = cheby1(3, 0.05, 0.8 / r)
    n = 256
    while True:
        h = lfilter(b, a, np.eye(1, n)[0])
        tail = np.flatnonzero(np.abs(h) >= 1e-20 * np.abs(h).max())[-1] + 1
        if tail < n // 2:
            return h[:tail]
        n *= 2


@functools.lru_cache(maxsize=4)
def _decimation_spectrum(r: int, size: int, device: torch.device) -> torch.Tensor:
    return torch.fft.rfft(torch.as_tensor(_decimation_response(r), device=device), size)


def _causal_filter(x: torch.Tensor, r: int) -> torch.Tensor:
    """x through ratio r's decimation low-pass from rest, the first len(x) outputs (an FFT convolution long enough
    for no wrap-around)."""
    size = scipy.fft.next_fast_len(x.numel() + _decimation_response(r).size - 1, real=True)
    return torch.fft.irfft(torch.fft.rfft(x, size) * _decimation_spectrum(r, size, x.device), size)[: x.numel()]


def decimate(x: torch.Tensor, r: int, y_length: int) -> torch.Tensor:
    """WORLD's decimate: ends reflected about their end samples, zero-phase (forward, backward) low-pass, every
    r-th sample ending on the last; the y_length samples DIO keeps (one more than the decimated length where r
    divides len(x): WORLD's buffer then holds one sample of the filtered reflection, which DIO's mean includes)."""
    n = x.numel()
    k = torch.arange(DECIMATE_PAD, device=x.device)
    head = 2 * x[0] - x[DECIMATE_PAD - k]
    tail = 2 * x[-1] - x[n - 2 - k]
    y = _causal_filter(torch.cat([head, x, tail]), r).flip(0)
    y = _causal_filter(y, r).flip(0)
    n_out = (n - 1) // r + 1
    first = r - r * n_out + n
    idx = first + r * torch.arange(y_length, device=x.device)
    return torch.where(idx < n + DECIMATE_PAD, y[(idx + DECIMATE_PAD - 1).clamp(max=y.numel() - 1)], 0.0)


@functools.lru_cache(maxsize=4)
def _low_cut_spectrum(n: int, fft_size: int, device: torch.device) -> torch.Tensor:
    """DIO's low-cut filter: 1 - a normalised Hann of n taps, zero-phase (centred on sample 0, circularly)."""
    hann = 0.5 - 0.5 * np.cos(np.arange(1, n + 1) * 2.0 * math.pi / (n + 1))
    taps = -hann / hann.sum()
    half = (n - 1) // 2
    h = np.zeros(fft_size)
    h[: n - half] = taps[half:]
    h[fft_size - half :] = taps[:half]
    h[0] += 1.0
    return torch.fft.rfft(torch.as_tensor(h, device=device))


def _nuttall(n: int, device: torch.device) -> torch.Tensor:
    t = torch.arange(n, dtype=torch.float64, device=device) / (n - 1.0)
    return (0.355768 - 0.487396 * torch.cos(2.0 * math.pi * t) + 0.144232 * torch.cos(4.0 * math.pi * t)
            - 0.012604 * torch.cos(6.0 * math.pi * t))  # fmt: skip


@functools.lru_cache(maxsize=4)  # a clip's blocks share one FFT size, its last block another
def _band_filters(halves: tuple[int, ...], fft_size: int, device: torch.device) -> torch.Tensor:
    """(bands, fft_size // 2 + 1): spectra of the bands' Nuttall low-passes (4 * half taps each)."""
    lpf = torch.zeros((len(halves), fft_size), dtype=torch.float64, device=device)
    for i, h in enumerate(halves):  # the bands' windows differ in length: built one by one, transformed together
        lpf[i, : 4 * h] = _nuttall(4 * h, device)
    return torch.fft.rfft(lpf, dim=1)


def _band_signals(spectrum: torch.Tensor, halves: list[int], fft_size: int, y_length: int) -> torch.Tensor:
    """(bands, y_length): the decimated signal through each band's Nuttall low-pass (4 * half taps), delay removed.

    WORLD multiplies the spectra in place while mirroring each product to bin fft_size - i - 1, which overwrites
    bins fft_size/2 - 1 and fft_size/2 before they are read: both end up Y[N/2] * Y[N/2 - 1] * L[N/2 - 1]. Kept
    (it touches the two bins at Nyquist only, where the decimation filter's zeros leave next to nothing)."""
    device = spectrum.device
    prod = spectrum * _band_filters(tuple(halves), fft_size, device)
    m = fft_size // 2
    pair = spectrum[m] * prod[:, m - 1]
    prod[:, m - 1] = pair
    prod[:, m] = pair.real + 0j  # a real inverse transform reads the real part of DC and Nyquist alone
    prod[:, 0] = prod[:, 0].real + 0j
    filtered = torch.fft.irfft(prod, fft_size, dim=1)
    index = torch.as_tensor(halves, device=device)[:, None] * 2 + torch.arange(y_length, device=device)
    return filtered.gather(1, index)


def _going_down(v: torch.Tensor, sign: float) -> torch.Tensor:
    """(rows, len - 1): where sign * v goes from > 0 to <= 0 between sample i and i + 1 (sign -1: where v goes
    up through zero; negating the series as WORLD does gives the same instants bit for bit)."""
    if sign > 0:
        return (v[:, :-1] > 0) & (v[:, 1:] <= 0)
    return (v[:, :-1] < 0) & (v[:, 1:] >= 0)


def _crossing_intervals(values: torch.Tensor, mask: torch.Tensor, source: torch.Tensor, fs: float) -> tuple:
    """WORLD's ZeroCrossingEngine per series: series r's crossings are where mask[r] is set, between samples i and
    i + 1 of values[source[r]], linearly interpolated; returned as (locations in s, fs / interval, intervals per
    series), each series' row padded with +inf locations."""
    s = mask.shape[0]
    count = mask.sum(1)
    width = max(int(count.max()), 3)
    rows, cols = mask.nonzero(as_tuple=True)  # row-major: a row's crossings in order
    rank = torch.arange(rows.numel(), device=mask.device) - (count.cumsum(0) - count)[rows]
    before, after = values[source[rows], cols], values[source[rows], cols + 1]
    fine = torch.full((s, width), torch.inf, dtype=values.dtype, device=values.device)
    fine[rows, rank] = (cols + 1).to(values.dtype) - before / (after - before)
    n_int = (count - 1).clamp(min=0)
    valid = torch.arange(width - 1, device=values.device)[None] < n_int[:, None]
    intervals = torch.where(valid, fs / (fine[:, 1:] - fine[:, :-1]), 0.0)
    locations = torch.where(valid, (fine[:, :-1] + fine[:, 1:]) / 2.0 / fs, torch.inf)
    return locations, intervals, n_int


def _interp1(x: torch.Tensor, y: torch.Tensor, n: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """WORLD's interp1 per row (n points each, padded): linear, extrapolated from the end segments."""
    k = torch.searchsorted(x, t.expand(x.shape[0], -1).contiguous(), right=True)
    k = torch.minimum(k, (n - 1).clamp(min=1)[:, None]).clamp(min=1)
    x0, x1 = x.gather(1, k - 1), x.gather(1, k)
    y0, y1 = y.gather(1, k - 1), y.gather(1, k)
    return y0 + (t - x0) / (x1 - x0) * (y1 - y0)


def _candidates(bands: torch.Tensor, boundaries: torch.Tensor, fs: float, t: torch.Tensor, f0_floor: float,
                f0_ceil: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(candidates, scores), each (bands, frames): the mean of the four zero-crossing series' F0 at each frame and
    their spread re that mean (DIO's "fundamental-ness"), 0 and MAX_SCORE / SAFE where out of the band's range."""
    b = bands.shape[0]
    deriv = -bands[:, :-1] - -bands[:, 1:]  # WORLD differentiates the negated signal: its rounding kept
    values = torch.cat([bands, torch.nn.functional.pad(deriv, (0, 1))])
    pad = (0, 1)  # the derivative is a sample shorter
    mask = torch.cat([_going_down(bands, 1.0), _going_down(bands, -1.0),  # negative-, positive-going crossings,
                      torch.nn.functional.pad(_going_down(deriv, 1.0), pad),  # peaks,
                      torch.nn.functional.pad(_going_down(deriv, -1.0), pad)])  # dips  # fmt: skip
    source = torch.arange(b, device=bands.device).repeat(4) + b * (torch.arange(4 * b, device=bands.device) >= 2 * b)
    loc, iv, n_int = _crossing_intervals(values, mask, source, fs)
    f0s = _interp1(loc, iv, n_int, t[None]).reshape(4, b, -1)
    enough = (n_int.reshape(4, b) > 2).all(0)[:, None]
    cand = (f0s[0] + f0s[1] + f0s[2] + f0s[3]) / 4.0
    score = torch.sqrt(((f0s[0] - cand) ** 2 + (f0s[1] - cand) ** 2 + (f0s[2] - cand) ** 2
                        + (f0s[3] - cand) ** 2) / 3.0)  # fmt: skip
    edge = boundaries[:, None]
    out = ~enough | (cand > edge) | (cand < edge / 2.0) | (cand > f0_ceil) | (cand < f0_floor)
    cand = torch.where(out, 0.0, cand)
    score = torch.where(out, MAX_SCORE, score)
    return cand, score / (cand + SAFE)


def _select(cur: torch.Tensor, past: torch.Tensor, cand: torch.Tensor, allowed: float) -> torch.Tensor:
    """DIO's SelectBestF0 per walk: the candidate closest to the contour extrapolated by half its last step, 0
    where that is more than `allowed` (relative) away. cand: (bands, walks)."""
    ref = (cur * 3.0 - past) / 2.0
    best = cand.gather(0, (ref - cand).abs().argmin(0, keepdim=True))[0]
    return torch.where((1.0 - best / ref).abs() > allowed, 0.0, best)


def _walks(f0: torch.Tensor, cand: torch.Tensor, starts: torch.Tensor, limits: torch.Tensor,
           allowed: float) -> torch.Tensor:  # fmt: skip
    """DIO's FixStep3: from each start (the last voiced frame of a section, ascending) set the next frames one by
    one by `_select` until it gives 0 or the walk reaches its limit (the next start). Walks write disjoint ranges
    (start, limit]; a walk reads the two frames at its start, which the walk before may have rewritten: all run
    in parallel, then those whose start changed run again from the restored contour, until none did."""
    n = f0.numel()
    out = torch.cat([f0, f0.new_zeros(1)])  # the last slot takes the writes of finished walks
    todo = torch.arange(starts.numel(), device=f0.device)
    span = torch.arange(n, device=f0.device)
    used = torch.stack([f0[starts], f0[starts - 1]])  # the start each walk ran from
    while todo.numel():
        s, lim = starts[todo], limits[todo]
        region = ((span[None] > s[:, None]) & (span[None] <= lim[:, None])).any(0)
        out[:n] = torch.where(region, f0, out[:n])
        used[:, todo] = torch.stack([out[s], out[s - 1]])
        cur, past, j = used[0, todo], used[1, todo], s.clone()
        alive = j < lim
        while bool(alive.any()):
            for _ in range(8):  # steps between checks: a check waits for the device
                nxt = (j + 1).clamp(max=n - 1)
                val = _select(cur, past, cand[:, nxt], allowed)
                out.scatter_(0, torch.where(alive, nxt, n), torch.where(alive, val, 0.0))
                past, cur = torch.where(alive, cur, past), torch.where(alive, val, cur)
                j = torch.where(alive, j + 1, j)
                alive = alive & (val != 0) & (j < lim)
        todo = torch.nonzero((out[starts] != used[0]) | (out[starts - 1] != used[1])).flatten()
    return out[:n]


def fix_contour(best: torch.Tensor, cand: torch.Tensor, frame_period: float, f0_floor: float,
                allowed: float) -> torch.Tensor:  # fmt: skip
    """DIO's FixF0Contour: frames next to the ends and jumps of more than `allowed` dropped, frames within a window
    of a dropped one dropped, then the voiced sections extended forward and backward through the candidates."""
    n = best.numel()
    vrm = int(0.5 + 1000.0 / frame_period / f0_floor) * 2 + 1
    if n <= vrm:
        return torch.zeros_like(best)
    base = best.clone()
    base[:vrm] = 0.0
    base[n - vrm :] = 0.0
    step1 = torch.zeros_like(best)
    jump = ((base[vrm:] - base[vrm - 1 : -1]) / (SAFE + base[vrm:])).abs()
    step1[vrm:] = torch.where(jump < allowed, base[vrm:], 0.0)
    c = (vrm - 1) // 2
    zero = (step1 == 0).to(best.dtype)[None, None]
    near = torch.nn.functional.max_pool1d(zero, 2 * c + 1, stride=1, padding=c)[0, 0] > 0
    inside = (torch.arange(n, device=best.device) >= c) & (torch.arange(n, device=best.device) < n - c)
    step2 = torch.where(near & inside, 0.0, step1)
    voiced = step2 != 0
    ends = torch.nonzero(~voiced[1:] & voiced[:-1]).flatten()  # last frame of a section
    begins = torch.nonzero(voiced[1:] & ~voiced[:-1]).flatten() + 1  # first frame of one
    last = torch.tensor([n - 1], device=best.device)
    step3 = _walks(step2, cand, ends, torch.cat([ends[1:], last])[: ends.numel()], allowed)
    flipped = (n - 1 - begins).flip(0)  # FixStep4 walks backward from the starts: a forward walk on the reversal
    limits = torch.cat([flipped[1:], last - 1])[: flipped.numel()]
    return _walks(step3.flip(0), cand.flip(1), flipped, limits, allowed).flip(0)


def band_boundaries(f0_floor: float, f0_ceil: float, channels_in_octave: float) -> list[float]:
    """DIO's candidate bands: the upper edge of each, channels_in_octave per octave from one step above the floor
    (a band's candidates lie within [edge / 2, edge])."""
    n_bands = 1 + int(math.log(f0_ceil / f0_floor) / LOG2 * channels_in_octave)
    return [f0_floor * 2.0 ** ((i + 1) / channels_in_octave) for i in range(n_bands)]


def dio(x: torch.Tensor, fs: int, f0_floor: float, f0_ceil: float, frame_period: float = 5.0, speed: int = 1,
        channels_in_octave: float = 2.0, allowed_range: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """pyworld.dio(x, fs, ...) for a float64 tensor: (F0 per frame, 0 = unvoiced; frame times in s)."""
    boundaries = band_boundaries(f0_floor, f0_ceil, channels_in_octave)
    r = max(min(speed, 12), 1)
    n = x.numel()
    y_length = 1 + n // r
    actual_fs = fs / r
    fft_size = _pow2_above(y_length + _round(actual_fs / CUTOFF_HZ) * 2 + 1
                           + 4 * int(1.0 + actual_fs / boundaries[0] / 2.0))  # fmt: skip
    y = decimate(x, r, y_length) if r > 1 else torch.cat([x, x.new_zeros(1)])
    y = y - y.sum() / y_length
    spectrum = torch.fft.rfft(y, fft_size) * _low_cut_spectrum(_round(actual_fs / CUTOFF_HZ) * 2 + 1, fft_size,
                                                                x.device)  # fmt: skip
    f0_length = int(1000.0 * n / fs / frame_period) + 1
    t = torch.arange(f0_length, dtype=torch.float64, device=x.device) * frame_period / 1000.0
    halves = [_round(actual_fs / b / 2.0) for b in boundaries]
    bands = _band_signals(spectrum, halves, fft_size, y_length)
    cand, score = _candidates(bands, torch.tensor(boundaries, dtype=torch.float64, device=x.device), actual_fs, t,
                              f0_floor, f0_ceil)  # fmt: skip
    best = cand.gather(0, score.argmin(0, keepdim=True))[0]
    return fix_contour(best, cand, frame_period, f0_floor, allowed_range), t


def _fix_f0(power: torch.Tensor, numer: torch.Tensor, fft_size: int, fs: int, f0: torch.Tensor,
            harmonics: int) -> torch.Tensor:  # fmt: skip
    """StoneMask's FixF0: the amplitude-weighted mean of the instantaneous frequencies at the first `harmonics`
    harmonics' bins, each divided by its harmonic number."""
    h = torch.arange(1, harmonics + 1, dtype=torch.float64, device=f0.device)
    index = matlab_round(f0[:, None] * fft_size / fs * h).clamp(0.0, fft_size // 2).long()
    p, q = power.gather(1, index), numer.gather(1, index)
    freq = torch.where(p == 0.0, 0.0, index.to(torch.float64) * fs / fft_size + q / p * fs / 2.0 / math.pi)
    amp = torch.sqrt(p)
    return (amp * freq).sum(1) / ((amp * h).sum(1) + SAFE)


def _refine(x: torch.Tensor, fs: int, t: torch.Tensor, f0: torch.Tensor, half: torch.Tensor, fft_size: int
            ) -> torch.Tensor:  # fmt: skip
    """StoneMask's GetRefinedF0 for frames sharing one FFT size."""
    width = int(half.max()) * 2 + 1
    k = torch.arange(width, device=x.device)
    inside = k[None] < (2 * half + 1)[:, None]
    base_time = (k[None] - half[:, None]).to(torch.float64) / fs
    index = matlab_round((t[:, None] + base_time) * fs)
    length_s = (2.0 * half.double() + 1.0)[:, None] / fs
    phase = (index - 1.0) / fs - t[:, None]
    window = 0.42 + 0.5 * torch.cos(2.0 * math.pi * phase / length_s) + 0.08 * torch.cos(4.0 * math.pi * phase / length_s)
    window = torch.where(inside, window, 0.0)
    padded = torch.nn.functional.pad(window, (1, 1))
    diff = torch.where(inside, -(padded[:, 2:] - padded[:, :-2]) / 2.0, 0.0)
    samples = x[(index.long() - 1).clamp(0, x.numel() - 1)]
    main = torch.fft.rfft(samples * window, fft_size, dim=1)
    deriv = torch.fft.rfft(samples * diff, fft_size, dim=1)
    numer = main.real * deriv.imag - main.imag * deriv.real
    power = main.real * main.real + main.imag * main.imag
    tentative = _fix_f0(power, numer, fft_size, fs, f0, 2)
    rejected = (tentative <= 0.0) | (tentative > f0 * 2)
    mean = torch.where(rejected, 0.0, _fix_f0(power, numer, fft_size, fs, tentative, 6))
    return torch.where((mean - f0).abs() > f0 * 0.2, f0, mean)


def stonemask(x: torch.Tensor, f0: torch.Tensor, t: torch.Tensor, fs: int) -> torch.Tensor:
    """pyworld.stonemask(x, f0, t, fs): each frame's F0 from the instantaneous frequencies of its first harmonics
    in a Blackman window of 3 periods (+ 1 sample each side); 0 where F0 <= 40 Hz or > fs / 12."""
    out = torch.zeros_like(f0)
    ok = (f0 > STONEMASK_FLOOR_HZ) & (f0 <= fs / 12.0)
    safe = torch.where(ok, f0, 100.0)
    half = torch.floor(1.5 * fs / safe + 1.0).long()
    sizes = (2.0 ** (2 + torch.floor(torch.log(half.double() * 2.0 + 1.0) / LOG2))).long()
    for size in sizes[ok].unique().tolist():
        frames = torch.nonzero(ok & (sizes == size)).flatten()
        step = max(1, CHUNK_ELEMENTS // size)
        for c in range(0, frames.numel(), step):
            part = frames[c : c + step]
            out[part] = _refine(x, fs, t[part], f0[part], half[part], size)
    return out


def dio_stonemask(x: torch.Tensor, fs: int, f0_floor: float, f0_ceil: float, frame_period: float, speed: int = 1,
                  channels_in_octave: float = 2.0, allowed_range: float = 0.1) -> torch.Tensor:  # fmt: skip
    """F0 per frame as pyworld.stonemask(x, *pyworld.dio(x, ...), fs) gives it."""
    f0, t = dio(x, fs, f0_floor, f0_ceil, frame_period, speed, channels_in_octave, allowed_range)
    return stonemask(x, f0, t, fs)
