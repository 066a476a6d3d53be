"""HMPD: phase distortion mean (PDM, 25 coefficients) and deviation (PDD, 13) per row.

Method: Degottex & Obin, "Phase distortion statistics as a representation of the glottal source: application to
the classification of voice qualities", Interspeech 2014, and Degottex & Erro, "A uniform phase representation for
the harmonic model in speech synthesis applications", EURASIP JASMP 2014, with the parameters COVAREP's feature
script gives `hmpd_analysis_features` (written from their description here, not from COVAREP's code):

1. Harmonic phases (`harmonics.pick`) minus the phase of the minimum-phase envelope through the harmonic
   amplitudes (the vocal tract's contribution), DC phase set to 0.
2. Relative phase shift RPS_k = φ_k − k·φ_1; phase distortion PD_k = RPS_k − RPS_{k−1} (unwrapped over k).
3. PD moved from the harmonic axis to 513 frequency bins (1024-point DFT): linear in unwrapped phase between
   harmonics, 0 at DC and at 0.95·f0.
4. Over time, per bin: PDM = circular mean over a 25-row rectangular window applied forwards and backwards
   (6 periods at 4 analysis instants per period, COVAREP's window in rows); PDD = circular (Fisher) standard
   deviation sqrt(−2 ln R) over a 9-row window of PD minus its trend (a 9-row median then Hann smoothing of cos and
   sin).
5. Compression: PDM to 25 bands, linear up to bin 8 then logarithmic-like along a quadratic Bézier curve
   (circular mean of the bins of each band); PDD to a mel cepstrum of order 12 (`mcep.mel_cepstrum` of ln PDD).

The frames are COVAREP's (`acoustic.hmpd_columns`: SRH's instants and F0, harmonics on a 4096-point DFT), and the
rows are read between them (`frames_to_rows`) as COVAREP resamples them.

Bins above the highest harmonic have no phase. COVAREP fills them with random phases (a new draw each run): it
draws a random PD for every harmonic a frame lacks up to the file's highest count plus one and interpolates the
bins through them. For PDM the bins between a frame's last harmonic and the next hold the expected phasor of that
interpolation (e^{ia} sinc(w), `_phasors_on_bins`; version 11) and the bins past it no phasor (cos = sin = 0, the
expectation of a random phase: no part in PDM's band means). For PDD those bins get exp(E[ln PDD]) over draws of
COVAREP's filling (`expected_pdd`; version 12): HMPDD, a cepstrum of ln PDD, is then COVAREP's expected HMPDD.
PDD runs in float64 (`pdm_pdd`). `rng` makes one random filling as COVAREP does (for measuring its spread).
docs/acoustic.md, "74 columns", measures the difference.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.fft import irfft, rfft

from extractors import hmpd_jit, mcep
from extractors.harmonics import Harmonics, wrap

DFTLEN = 1024  # the bins PD is read on (hmpd_analysis' dftlen)
# the DFT the harmonics are picked on (COVAREP's script gives sin_analysis 4096): on 1024 points the parabola
# through coarser bins moves the peaks and their phases enough to put HMPDD ~20 run-to-run spreads off COVAREP's
SIN_DFTLEN = 4096
PDM_ROWS = 25  # round(6 periods * 4 instants / 2) * 2 + 1
PDD_ROWS = 9  # round(2 periods * 4 instants / 2) * 2 + 1
PDM_ORDER = 24
PDD_ORDER = 12
PDM_LINEAR_BANDS = 8
BLOCK_VALUES = 32768  # float64 values per block of rows in `_pdd`'s passes (256 KB: a block stays in L2)
# E[sqrt(-2 ln R)] of uniformly random phases through the PDD window (forward-backward 9-row mean after the trend):
# measured once with `pdm_pdd` itself on 10^6 draws (20,000 rows x 50 bins, numpy's default_rng(0)): the value a bin
# without harmonics gets
PDD_NO_PHASE = 1.509
# COVAREP's PDD is the mean of a random variable (its filling of the bins past the last harmonic): estimated as the
# mean of ln PDD (what HMPDD, a cepstrum of ln PDD, is linear in) over this many draws of that filling, from a fixed
# seed so that the output is deterministic. 8 draws: HMPDD 0.6-0.8 of COVAREP's run-to-run spread from its output on
# the reference files (the mean of 8 COVAREP runs: 0.6-0.7); docs/acoustic.md, "COVAREP's HMPD run to run"
PDD_DRAWS = 8
PDD_SEED = 20140914
# R within this of 1 is rounding (float64 sums of 9 unit phasors): PD does not vary there and PDD is 0 (then 0.001
# before the log, as COVAREP writes it). COVAREP's own arithmetic gives 0 or 1.5e-8 (one ulp below 1) in such cells
# by accident; real small deviations (1e-6 rad and up, where the PD of the bins under the lowest F0 around moves a
# little) stay, as in COVAREP
PDD_ROUNDING = 1e-14
LN_R_FLOOR = -2 * np.log(1e-300)  # -ln R² where R is 0: as R = 1e-300


@functools.cache
def pdm_bands(n_bins: int = DFTLEN // 2, order: int = PDM_ORDER + 1, linear: int = PDM_LINEAR_BANDS) -> np.ndarray:
    """(n_bins,) band number 1 … order of each bin 1 … n_bins (1-based, bin 1 = DC): identity up to `linear`,
    then along the quadratic Bézier curve through (linear, linear), (order, order), (n_bins, order)."""
    t = np.linspace(0.0, 1.0, 101)[:, None]
    p = np.array([[linear, linear], [order, order], [n_bins, order]], float)
    curve = (1 - t) ** 2 * p[0] + 2 * (1 - t) * t * p[1] + t**2 * p[2]
    h = np.arange(1, n_bins + 1, dtype=float)
    h[linear:] = np.interp(h[linear:], curve[:, 0], curve[:, 1])
    return np.round(h).astype(int)


def _phasors_on_bins(pd: np.ndarray, f0: np.ndarray, fs: int) -> np.ndarray:
    """(rows, DFTLEN/2 + 1) complex unit phasors of PD read on the bins; 0 where no harmonic spans the bin.
    pd: (rows, n) PD at f0 * (1 … n), NaN past each row's harmonics. Linear in the phase unwrapped over the
    harmonics; 0 at DC and at 0.95 f0; between the last harmonic and the next the expected phasor of COVAREP's
    random PD there. The per-bin steps compiled (`hmpd_jit.phasors_on_bins`), bit-identical to
    `_phasors_on_bins_numpy` in 60 % of its time (the cos and sin of every bin are most of it)."""
    rows, n = pd.shape
    count = np.sum(~np.isnan(pd), axis=1)
    ys = np.unwrap(np.where(np.isnan(pd), 0.0, pd), axis=1)  # the NaN tail is not read
    ys = np.concatenate([np.zeros((rows, 1)), ys], axis=1)  # index k: harmonic k (k = 0: the 0.95 f0 anchor)
    bins = np.arange(DFTLEN // 2 + 1) * fs / DFTLEN
    out = hmpd_jit.phasors_on_bins(ys, count, np.ascontiguousarray(f0, dtype=float), bins)
    return out.view(np.complex128)[..., 0]


def _phasors_on_bins_numpy(pd: np.ndarray, f0: np.ndarray, fs: int) -> np.ndarray:
    """`_phasors_on_bins` in numpy (the compiled kernel's reference)."""
    rows, n = pd.shape
    count = np.sum(~np.isnan(pd), axis=1)
    ys = np.unwrap(np.where(np.isnan(pd), 0.0, pd), axis=1)  # the NaN tail is masked below
    ys = np.concatenate([np.zeros((rows, 1)), ys], axis=1)  # index k: harmonic k (k = 0: the 0.95 f0 anchor)
    flat = ys.reshape(-1)  # gathers by flat index: about 2x faster
    bins = np.arange(DFTLEN // 2 + 1) * fs / DFTLEN
    # float64 phasors: PDD resolves deviations down to 1e-7 rad (`pdm_pdd`), which float32's rounding of the phase
    # (3e-8) would blur
    out = np.zeros((rows, bins.size), np.complex128)
    parts = out.view(np.float64).reshape(rows, bins.size, 2)  # cos and sin written straight into the phasors
    step = max(1, BLOCK_VALUES // bins.size)
    for r0 in range(0, rows, step):  # blocks of rows that stay in cache through every step (each row is its own)
        r1 = min(rows, r0 + step)
        u = bins[None, :] / f0[r0:r1, None]  # position in harmonics
        k = np.clip(np.floor(u).astype(np.intp), 0, n - 1)
        frac = np.clip(u - k, 0.0, 1.0)
        row0 = np.arange(r0, r1)[:, None] * (n + 1)
        low = np.take(flat, row0 + k)
        high = np.take(flat, row0 + np.minimum(k + 1, n))
        val = low + frac * (high - low)
        # between the anchor at 0.95 f0 (phase 0) and the first harmonic: only the bins below the highest f0
        m = int(np.searchsorted(u.min(axis=0) >= 1.0, True))  # u grows along the bins
        below = u[:, :m] < 1.0
        val[:, :m][below] = (ys[r0:r1, 1:2] * np.clip((u[:, :m] - 0.95) / 0.05, 0.0, 1.0))[below]
        c = count[r0:r1, None]
        inside = (u <= c) & (c >= 1)  # nearly every bin: the phasors of all, then the others' left 0
        np.copyto(parts[r0:r1, :, 0], np.cos(val), where=inside)
        np.copyto(parts[r0:r1, :, 1], np.sin(val), where=inside)
        # COVAREP draws a random PD for the harmonics count + 1 … n + 1 (n: the most any frame has) and
        # interpolates the bins through them as through the others: a bin w of the way from the last harmonic
        # (unwrapped PD a) to the next reads a + w (b - a) with b - a uniform over a turn, whose expected phasor is
        # e^{ia} sinc(w); past harmonic count + 1 it is 0 (sinc(1) = 0). Zero there instead put HMPDM_24 7 of
        # COVAREP's run-to-run spreads from it on DB-cresc (docs/acoustic.md, "COVAREP's HMPD run to run")
        w = u - c  # `random_cells`
        gap = (w > 0) & (w < 1) & (c >= 1)
        last = np.broadcast_to(ys[np.arange(r0, r1), count[r0:r1]][:, None], gap.shape)[gap]
        out[r0:r1][gap] = (np.cos(last) + 1j * np.sin(last)) * np.sinc(w[gap])
    return out


def random_cells(count: np.ndarray, f0: np.ndarray, fs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(w, gap, past), each (rows, DFTLEN/2 + 1): where COVAREP's PD on the bins is random. w: a bin's position past
    the frame's last harmonic, in harmonics; gap (0 < w < 1): between the last harmonic (PD a) and the first random
    one, a + w Δ with Δ uniform over a turn; past (w >= 1, or a frame without harmonics): uniformly random."""
    u = (np.arange(DFTLEN // 2 + 1) * fs / DFTLEN)[None, :] / np.asarray(f0, float)[:, None]
    c = np.asarray(count)[:, None]
    w = u - c
    return w, (w > 0) & (w < 1) & (c >= 1), (w >= 1) | ((c < 1) & (u > 0))


def _draw_filling(z: np.ndarray, w: np.ndarray, gap: np.ndarray, past: np.ndarray, draws: int,
                  rng: np.random.Generator) -> np.ndarray:
    """(rows, draws, bins) phasors: z with COVAREP's random filling drawn `draws` times (`random_cells`; the gap
    bins' a is z's angle there, whose phasor is e^{ia} sinc(w))."""
    rows, nb = z.shape
    delta = rng.uniform(-np.pi, np.pi, (rows, draws, 1))
    uniform = rng.uniform(-np.pi, np.pi, (rows, draws, nb))
    out = np.repeat(z[:, None, :], draws, axis=1)
    # the phases of the random cells only (a third of the bins drawn for): r, b their row and bin, every draw
    r, b = np.nonzero(gap | past)
    phase = np.where(past[r, b][:, None], uniform[r, :, b],
                     np.angle(z[r, b])[:, None] + w[r, b][:, None] * delta[r, :, 0])  # fmt: skip
    parts = out.view(np.float64).reshape(*out.shape, 2)
    parts[r, :, b, 0], parts[r, :, b, 1] = np.cos(phase), np.sin(phase)
    return out


def expected_pdd(z: np.ndarray, count: np.ndarray, f0: np.ndarray, fs: int, pdd: np.ndarray, smooth=None,
                 draws: int | None = None) -> np.ndarray:
    """pdd with the bins where COVAREP's PD is random (`random_cells`, in any row) replaced by exp(E[ln PDD]) over
    its random filling, estimated on `draws` draws (fixed seed): the HMPDD cepstrum of ln PDD is then COVAREP's
    expected HMPDD. Only those bins are smoothed again (the top ~20 of 513 on speech: the last harmonic is within
    one F0 of 8 kHz)."""
    draws = draws or PDD_DRAWS
    w, gap, past = random_cells(count, f0, fs)
    cols = np.flatnonzero((gap | past).any(axis=0))
    if cols.size == 0:
        return pdd
    zd = _draw_filling(z[:, cols], w[:, cols], gap[:, cols], past[:, cols], draws, np.random.default_rng(PDD_SEED))
    _, p = (smooth or pdm_pdd)(zd.reshape(z.shape[0], -1), with_pdm=False)
    p = p.reshape(z.shape[0], draws, cols.size)
    out = pdd.copy()
    out[:, cols] = np.exp(np.log(np.where(p == 0, 0.001, p)).mean(axis=1))  # 0 is written 0.001 before the log
    return out


def phase_distortion(h: Harmonics, f0: np.ndarray, fs: int) -> np.ndarray:
    """(rows, h_max) PD at harmonics 1 … count (NaN after), the vocal tract's minimum phase removed."""
    rows, n_h = h.amp.shape
    bins = np.arange(DFTLEN // 2 + 1) * fs / DFTLEN
    # the amplitude envelope: linear in log amplitude through the harmonics, flat at the ends; knots [0, f_1 … f_c]
    # and values [ln a_1, ln a_1 … ln a_c] read from rows of these
    xp, fp = h.freq.copy(), np.log(h.amp)
    xp[:, 0], fp[:, 0] = 0.0, fp[:, 1]
    # written straight into the real part of the complex array irfft reads, and the folded cepstrum straight into
    # the zero-padded array rfft reads: scipy's own conversion and padding allocate and copy them again
    log_env = np.zeros((rows, bins.size), complex)
    hmpd_jit.envelopes(bins, xp, fp, h.count, log_env.real)
    cep = irfft(log_env, axis=1)
    fold = np.zeros((rows, DFTLEN))
    fold[:, 0] = cep[:, 0]
    fold[:, 1 : DFTLEN // 2] = 2 * cep[:, 1 : DFTLEN // 2]
    fold[:, DFTLEN // 2] = cep[:, DFTLEN // 2]
    minphase = rfft(fold, axis=1).imag
    pos = np.clip(np.nan_to_num(h.freq, nan=fs) * DFTLEN / fs, 0, DFTLEN / 2)
    i0 = np.minimum(np.floor(pos).astype(int), DFTLEN // 2 - 1)
    frac = pos - i0
    r = np.arange(rows)[:, None]
    vtf = minphase[r, i0] * (1 - frac) + minphase[r, i0 + 1] * frac
    phi = wrap(h.phase - vtf)
    phi[:, 0] = 0.0
    k = np.arange(n_h)[None, :]
    rps = phi - k * phi[:, 1:2]
    inside = k <= h.count[:, None]
    rps = np.where(inside, rps, 0.0)
    pd = np.diff(np.unwrap(rps, axis=1), axis=1)
    return np.where(inside[:, 1:], wrap(pd), np.nan)


def pd_phasors(h: Harmonics, f0: np.ndarray, fs: int) -> np.ndarray:
    """(rows, DFTLEN/2 + 1) phasors of each row's phase distortion on the bins (`phase_distortion`, then
    `_phasors_on_bins`): the per-row part of HMPD, before the time smoothing."""
    return _phasors_on_bins(phase_distortion(h, f0, fs), f0, fs)


def pdm_pdd(z: np.ndarray, with_pdm: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """Per-bin PDM (phasors: unit where defined, 0 where no phase; None without `with_pdm`) and PDD of PD phasors
    (rows, bins). PDM in
    float32 (a phase: float32 is plenty); PDD's trend and deviation in float64, as COVAREP computes them: PDD =
    sqrt(-2 ln R) magnifies a rounding of R near 1 (float32's 6e-8 is a PDD of 3e-4, and ln PDD, which HMPDD is a
    cepstrum of, reads 1e-5 and 3e-4 as 3.4 apart; in float32 with those cells set to 0 HMPDD was 1-3 COVAREP
    run-to-run spreads from its output on the reference files)."""
    return (_pdm(z) if with_pdm else None), _pdd(z)


def _pdm(z: np.ndarray) -> np.ndarray:
    """(rows, bins) complex64 PDM phasors of PD phasors z: `hmpd_jit.pdm`, compiled, bit-identical to `_pdm_numpy`."""
    out = hmpd_jit.pdm(np.ascontiguousarray(z.real), np.ascontiguousarray(z.imag))
    return out.view(np.complex64)[..., 0]


def _pdm_numpy(z: np.ndarray) -> np.ndarray:
    """`_pdm` in numpy (the compiled kernel's reference). (rows, bins) complex64 PDM phasors of PD phasors z: their 25-row mean forwards and backwards (`_extend_ends`,
    `_box_twice`) normalised to 1, 0 where it is 0 (below 1e-6). In float32 (a phase: float32 is plenty), cos and
    sin side by side (the filters run along rows: each column is filtered as alone), in blocks of rows."""
    n, nb = z.shape
    half = PDM_ROWS - 1
    ext = np.empty((n + 2 * half, 2 * nb), np.float32)
    ext[half : half + n, :nb], ext[half : half + n, nb:] = z.real, z.imag
    _extend_ends(ext, n, half)
    out = np.empty((n, nb), np.complex64)
    parts = out.view(np.float32).reshape(n, nb, 2)
    rows = max(2 * half, 2 * BLOCK_VALUES // (2 * nb))  # float32: twice the rows of `_pdd`'s blocks
    acc, tmp = np.empty((rows, 2 * nb), np.float32), np.empty((rows + half, 2 * nb), np.float32)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        m = _box_twice(ext, PDM_ROWS, r0, r1, acc, tmp)
        c, s = m[:, :nb], m[:, nb:]
        mag = np.multiply(c, c, out=tmp[: r1 - r0, :nb])
        mag += np.multiply(s, s, out=tmp[: r1 - r0, nb:])
        np.sqrt(mag, out=mag)
        mag[mag <= 1e-6] = np.inf  # no direction: 0
        np.divide(c, mag, out=parts[r0:r1, :, 0])
        np.divide(s, mag, out=parts[r0:r1, :, 1])
    return out


def _pdd(z: np.ndarray) -> np.ndarray:
    """PDD of PD phasors (rows, bins) in float64: `hmpd_jit.pdd`, compiled, bit-identical to `_pdd_numpy` (a third
    of its time: each row's ~40 steps in one loop over its bins instead of a numpy pass per step)."""
    hann = np.hanning(PDD_ROWS)
    hann /= hann.sum()
    return hmpd_jit.pdd(np.ascontiguousarray(z.real), np.ascontiguousarray(z.imag), np.convolve(hann, hann[::-1]),
                        (1 - PDD_ROUNDING) ** 2, LN_R_FLOOR, PDD_NO_PHASE)


def _pdd_numpy(z: np.ndarray) -> np.ndarray:
    """`_pdd` in numpy (the compiled kernel's reference). PDD of PD phasors (rows, bins) in float64: the trend (9-row median, MATLAB's medfilt1 with zeros beyond the
    ends, `_median9`; then the Hann window forwards and backwards, `_symmetric`), the phasors times the trend's
    conjugate, their 9-row mean forwards and backwards (`_box_twice`), sqrt(-ln R²). In three passes over blocks of
    rows that stay in cache, each pass's elementwise steps on a block right after its sums (each step over whole
    arrays went through memory: twice the time)."""
    n, nb = z.shape
    half, h9 = PDD_ROWS - 1, PDD_ROWS // 2  # the filters' reach (b's autocorrelation), the median's
    rows = max(2 * half, BLOCK_VALUES // (2 * nb))
    hann = np.hanning(PDD_ROWS)
    hann /= hann.sum()
    k_t = np.convolve(hann, hann[::-1])  # forwards and backwards: the window's autocorrelation
    # the median and the deviation phasors with `half` rows of filtfilt's padding at each end (`_extend_ends`)
    med, dev = np.empty((n + 2 * half, 2 * nb)), np.empty((n + 2 * half, 2 * nb))
    win = np.zeros((rows + 2 * h9, 2 * nb))
    acc, tmp = np.empty((rows, 2 * nb)), np.empty((rows + 8, 2 * nb))  # tmp: also `_box_twice`'s first sums
    blocks = [(r0, min(n, r0 + rows)) for r0 in range(0, n, rows)]
    for r0, r1 in blocks:  # the median, zeros beyond the ends
        lo, hi = max(0, r0 - h9), min(n, r1 + h9)
        w = win[: r1 - r0 + 2 * h9]
        w[:] = 0.0
        w[lo - r0 + h9 : hi - r0 + h9, :nb] = z.real[lo:hi]
        w[lo - r0 + h9 : hi - r0 + h9, nb:] = z.imag[lo:hi]
        _median9(w, r1 - r0, med[half + r0 : half + r1])
    _extend_ends(med, n, half)
    for r0, r1 in blocks:  # the trend, then the phasors times its conjugate
        trend = _symmetric(k_t, med, r0, r1, acc[: r1 - r0], tmp[: r1 - r0])
        tc, ts = trend[:, :nb], trend[:, nb:]
        # the first and last rows' trend is their median exactly (the odd reflection), and that median is 0 in cos
        # and sin where 1-4 of the 5 rows it reads are negative (zeros beyond the ends): the trend has no direction
        # there, and its angle is whatever the rounding of the sums gives (COVAREP's too, so its PDD of the first
        # and last ~9 rows varies with it: docs/acoustic.md). Here its phasor is 1 there (atan2(0, 0) = 0), in both
        # backends alike
        for r in {0, n - 1} & set(range(r0, r1)):
            undefined = (med[half + r, :nb] == 0) & (med[half + r, nb:] == 0)
            tc[r - r0, undefined], ts[r - r0, undefined] = 0.0, 0.0
        norm = _norm(tc, ts)
        flat = norm == 0  # atan2(0, 0) = 0: the trend's phasor is 1 there
        norm[flat] = 1.0
        cos_t = np.divide(tc, norm, out=tc)
        cos_t[flat] = 1.0
        sin_t = np.divide(ts, norm, out=ts)
        zc, zs = z.real[r0:r1], z.imag[r0:r1]
        dc, ds = dev[half + r0 : half + r1, :nb], dev[half + r0 : half + r1, nb:]
        np.multiply(zc, cos_t, out=dc)
        dc += zs * sin_t  # z times the trend's conjugate
        np.multiply(zs, cos_t, out=ds)
        ds -= zc * sin_t
    _extend_ends(dev, n, half)
    pdd = np.empty((n, nb))
    for r0, r1 in blocks:  # the deviation's 9-row mean forwards and backwards, then sqrt(-2 ln R)
        dm = _box_twice(dev, PDD_ROWS, r0, r1, acc, tmp)
        q = np.multiply(dm[:, :nb], dm[:, :nb], out=tmp[: r1 - r0, :nb])
        q += np.multiply(dm[:, nb:], dm[:, nb:], out=tmp[: r1 - r0, nb:])  # R², and -2 ln R = -ln R²
        rounding = q >= (1 - PDD_ROUNDING) ** 2
        with np.errstate(divide="ignore"):
            p = np.log(q, out=q)
        np.negative(p, out=p)
        np.clip(p, 0.0, LN_R_FLOOR, out=p)  # R = 0 (-ln 0 = inf) as R = 1e-300; R > 1 (rounding) as 1
        np.sqrt(p, out=p)
        p[rounding] = 0.0
        p[z[r0:r1] == 0] = PDD_NO_PHASE
        pdd[r0:r1] = p
    return pdd


def _norm(c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """sqrt(c² + s²): within an ulp of np.hypot at an eighth of its time (no overflow to guard against here)."""
    out = np.multiply(c, c)
    out += s * s
    return np.sqrt(out, out=out)


def _symmetric(k: np.ndarray, ext: np.ndarray, r0: int, r1: int, out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """out = the sum over i of k[i] * ext[r0 + i : r1 + i] for a symmetric k (an autocorrelation): the rows at
    equal distances from the centre added before their tap multiplies them (3 passes per pair of taps instead of
    4), zero taps skipped."""
    c = len(k) // 2
    np.multiply(ext[r0 + c : r1 + c], k[c], out=out)
    for i in range(1, c + 1):
        if k[c + i] != 0:
            np.add(ext[r0 + c - i : r1 + c - i], ext[r0 + c + i : r1 + c + i], out=tmp)
            tmp *= k[c + i]
            out += tmp
    return out


def _box_twice(ext: np.ndarray, length: int, r0: int, r1: int, out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """out = rows r0 … r1 - 1 of the `length`-row running mean forwards and backwards (the triangle 1 … length … 1
    / length²) of ext (`_extend_ends`' padding of length - 1 rows at each end): `_window_sums` twice, then
    / length². A fixed tree of sums per row: no drift along the rows (cumulative sums lost the last digits of long
    columns: float32 PDM angles off by up to 0.01 rad where the mean is small), rounding within a few ulps of the
    2·length - 1 taps', in a quarter of their passes."""
    m = r1 - r0
    _window_sums(ext[r0 : r1 + 2 * (length - 1)], length, tmp[: m + length - 1])
    _window_sums(tmp[: m + length - 1], length, out[:m])
    out[:m] /= length * length
    return out[:m]


def _window_sums(x: np.ndarray, length: int, out: np.ndarray) -> np.ndarray:
    """out[j] = x[j] + … + x[j + length - 1] for the rows j of out (x: len(out) + length - 1 rows): sums of 2, 4, 8 …
    rows by pairs, then those of `length`'s binary digits added (9 = 8 + 1: 4 passes; 25 = 16 + 8 + 1: 6)."""
    n = out.shape[0]
    sums, p, size = {1: x}, x, 1
    while 2 * size <= length:
        p = p[:-size] + p[size:]
        size *= 2
        sums[size] = p
    offset = 0
    for size in sorted(sums, reverse=True):
        if length & size:
            if offset == 0:
                np.copyto(out, sums[size][:n])
            else:
                out += sums[size][offset : offset + n]
            offset += size
    return out


def _extend_ends(ext: np.ndarray, n: int, half: int) -> None:
    """Fill the `half` rows at each end of ext (rows half … half + n - 1 hold x) as the zero-phase filters read x
    beyond its ends: MATLAB's filtfilt reflects 3·half rows oddly (x_0 - (x_i - x_0)), and with that many its initial
    conditions do not reach the rows kept (for shorter x: the n - 1 rows there are, then the outermost repeated)."""
    pad = min(3 * half, n - 1)
    first, last = ext[half], ext[half + n - 1]
    for i in range(1, half + 1):
        j = min(i, pad)
        ext[half - i] = 2 * first - ext[half + j] if pad else first
        ext[half + n - 1 + i] = 2 * last - ext[half + n - 1 - j] if pad else last


def _median9(p: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """out = the median of rows j … j + 8 of p (n + 8 rows), j < n: Paeth's 19-exchange network, elementwise. Its
    first 9 exchanges sort the triples (0, 1, 2), (3, 4, 5), (6, 7, 8): the triple of rows j … j + 2 is sorted once
    and read by the three windows containing it; of the other exchanges only the min or the max that a later one
    reads is computed (12 passes instead of 20). Exchanges only select values: the median exactly."""
    t = [p[i : n + 6 + i].copy() for i in range(3)]  # the triples (j, j + 1, j + 2), sorted once for 3 windows
    spare = np.empty_like(t[0])
    for a, c in ((1, 2), (0, 1), (1, 2)):
        np.minimum(t[a], t[c], out=spare)
        np.maximum(t[a], t[c], out=t[c])
        t[a], spare = spare, t[a]
    q = [t[i % 3][3 * (i // 3) : 3 * (i // 3) + n] for i in range(9)]
    mn, mx = np.minimum, np.maximum
    # the exchanges (0 3) (5 8) (4 7) (3 6) (1 4) (2 5) (4 7) (4 2) (6 4) (4 2), by the values they leave
    e3, e5 = mx(q[0], q[3]), mn(q[5], q[8])
    e4, e7 = mn(q[4], q[7]), mx(q[4], q[7])
    e6 = mx(e3, q[6], out=e3)
    e4 = mx(q[1], e4, out=e4)
    e2 = mn(q[2], e5, out=e5)
    e4 = mn(e4, e7, out=e4)
    e4, e2 = mn(e4, e2), mx(e4, e2, out=e2)
    e4 = mx(e6, e4, out=e4)
    return mn(e4, e2, out=out)


def compress(pdm: np.ndarray, pdd: np.ndarray, fs: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """(rows, 25 + 13): PDM band means (angle; an empty band gets 0, or a random phase with `rng`) and PDD's mel
    cepstrum."""
    bands = pdm_bands()
    onehot = (bands[:, None] == np.arange(1, PDM_ORDER + 2)[None, :]).astype(float)
    sums = pdm[:, : bands.size] @ onehot
    out_m = np.angle(sums)
    empty = np.abs(sums) < 1e-9
    if rng is not None and empty.any():
        out_m[empty] = wrap(2 * np.pi * rng.random(int(empty.sum())))
    else:
        out_m[empty] = 0.0
    x = pdd.copy()
    x[:, 0] = x[:, 1]
    x[x == 0] = 0.001
    out_d = mcep.mel_cepstrum(np.log(x), fs, PDD_ORDER)
    return np.concatenate([out_m, out_d], axis=1)


def frames_to_rows(frames: np.ndarray, w: float) -> np.ndarray:
    """(frames - 1, 38) rows between consecutive frames of `hmpd_rows`: (1 - w) of frame j plus w of frame j + 1,
    the PDM phases along the shorter arc (COVAREP interpolates them unwrapped over time), PDD's cepstra linearly."""
    a, b = frames[:-1], frames[1:]
    m = PDM_ORDER + 1
    pdm = wrap(a[:, :m] + w * wrap(b[:, :m] - a[:, :m]))
    return np.concatenate([pdm, (1 - w) * a[:, m:] + w * b[:, m:]], axis=1)


def hmpd_rows(
    h: Harmonics, f0: np.ndarray, fs: int, rng: np.random.Generator | None = None, smooth=None, phasors=None
) -> np.ndarray:
    """(rows, 38): HMPDM_0..24, HMPDD_0..12 for consecutive rows (the time smoothing runs along them); `smooth` and
    `phasors`: the backend's `pdm_pdd` and `pd_phasors` (the reference's by default). PDM from the expected phasors
    of COVAREP's random filling, PDD its expected ln (`expected_pdd`); with `rng` one random filling as COVAREP
    makes it (PDM and PDD from the same draw, an empty PDM band a random phase), for measuring its spread."""
    z = (phasors or pd_phasors)(h, f0, fs)
    if rng is not None:  # COVAREP's filling, one draw
        w, gap, past = random_cells(h.count, f0, fs)
        pdm, pdd = (smooth or pdm_pdd)(_draw_filling(z, w, gap, past, 1, rng)[:, 0])
    else:
        pdm, pdd = (smooth or pdm_pdd)(z)
        pdd = expected_pdd(z, h.count, f0, fs, pdd, smooth)
    return compress(pdm, pdd, fs, rng)
