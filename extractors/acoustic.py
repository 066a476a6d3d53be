"""The `covarep` feature: COVAREP-like acoustic rows every 10 ms, in Python (pyworld, librosa, numpy/scipy).

Social-IQ's acoustic baseline used COVAREP (Degottex, Kane, Drugman, Raitio & Scherer, ICASSP 2014). This module
rebuilds its content; the glottal measures live in `extractors.glottal`, whose docstring cites each one.

- F0 and voicing: WORLD (Morise, Yokomori & Ozawa, IEICE 2016) via pyworld: DIO + StoneMask by default (the torch
  backend: extractors/world_f0.py, the same algorithm batched), Harvest (Morise, Interspeech 2017) as an option. A row is voiced when WORLD gives F0 > 0 inside [floor, ceiling], its 25 ms
  RMS is above `silence_dbfs` and the signal is periodic at that F0 (`voicing`); voiced runs grow into loud rows
  that repeat at the neighbour's period (`grow_voicing`), and loud rows with a strong normalised autocorrelation
  peak (Boersma 1993) start new runs where the tracker found no F0 (`seed_voicing`); segments tracked on a harmonic
  move to the fundamental (`harmonic_check`). (COVAREP itself uses SRH, Drugman & Alwan, Interspeech 2011.)
- Glottal source (voiced rows only, NaN elsewhere): IAIF flow (Alku 1992), GCIs, NAQ (Alku et al. 2002), QOQ, H1-H2,
  HRF, PSP (Alku et al. 1997), MDQ (Kane & Gobl 2013). Peak slope (Kane & Gobl 2011) is a spectral-tilt measure
  defined on every row with signal, as in COVAREP.
- MFCC: librosa on 25 ms Hann windows (n_fft 512), 10 ms hop, `n_mels` Slaney mel bands between `mfcc_fmin_hz` and
  8 kHz, power in dB without top-dB clipping (which would depend on the whole clip), DCT-II ortho.

Rows: N = ceil(duration_s / 0.01) rows; row i covers [i*0.01, (i+1)*0.01) s (the last one clipped to duration_s) and
every analysis is centred on (i + 0.5) * 0.01 s (COVAREP samples at the same instants). Audio shorter than
N * 10 ms is padded with zeros. Long clips are analysed in blocks of `block_s` with `block_margin_s` of context on
each side, so memory stays bounded and rows away from the clip's edges do not depend on the block size, with one
deliberate exception: the flow's polarity is voted per block, so a block whose vote is close to even may flip (a
spliced video whose sources differ in polarity is then right in each part).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import librosa
import numpy as np
from pydantic import Field, model_validator
from scipy.fft import irfft, next_fast_len, rfft
from scipy.ndimage import maximum_filter1d
from scipy.signal import get_window, lfilter, welch

from extractors import glottal, harmonics, hmpd, lp_jit, mcep, rd_conf, srh
from extractors.base import Audio, Extractor, ExtractorConfig, SdkSequence, register
from extractors.weights import Weights
from rows import FeatureRows, rate_intervals

FS_HZ = 16000
HOP_S = 0.01
HOP = round(FS_HZ * HOP_S)
PEAK_SLOPE_WINDOW_S = 0.04
HMPD_CHUNK = 512  # HMPD frames per batch of 4096-point spectra and harmonic picking (17 MB of spectra: `hmpd_columns`)
F0_REFINE_PERIODS = 3.0  # refinement segment in tracked periods: chosen on LF vowels (2, 2.5, 3, 3.5 measured)
GROW_SEARCH = 0.06  # a row grown from its neighbour may differ from it by up to 6 % in period (1 semitone per 10 ms)
SEED_DIVISOR_SLACK = 0.02  # a peak at an integer part of the best lag this close to it wins (seed_voicing)
SEED_MIN_ROWS = 2
SEGMENT_JUMP_OCTAVES = 0.3  # consecutive voiced rows further apart than this in F0 start a new segment
SUBHARMONIC_MARGIN = 0.03  # a segment moves to k periods when its median NCCF there beats the tracked period's by this
SUBHARMONIC_SLACK = 0.02  # ... to the smallest such k whose median is within this of the best k's
SUBHARMONIC_MIN = 0.7  # ... and only where that median shows a strongly periodic signal (seed_acf's default)
SUBHARMONIC_ROWS = 9  # rows per segment the subharmonic test looks at (spread evenly; a segment is one pitch level)
ISLAND_OCTAVES = 0.7  # a segment this far above both neighbours ...
ISLAND_GAP_ROWS = 2  # ... within this many rows of it is unvoiced and the neighbours grow into its rows
F0_REFINE_STEPS = 2  # how far (samples) the refined period may move from the tracked one
GLOTTAL_COLUMNS = ["naq", "qoq", "h1h2", "hrf", "psp", "mdq", "rd"]
# COVAREP's 74 columns, its names and order (COVAREP_feature_extraction.m), the layout of the SDK's SOCIAL_IQ_COVAREP
COVAREP74_COLUMNS = [
    "F0", "VUV", "NAQ", "QOQ", "H1H2", "PSP", "MDQ", "peakSlope", "Rd", "Rd_conf", "creak",
    *(f"MCEP_{i}" for i in range(mcep.ORDER + 1)), *(f"HMPDM_{i}" for i in range(hmpd.PDM_ORDER + 1)),
    *(f"HMPDD_{i}" for i in range(hmpd.PDD_ORDER + 1)),
]  # fmt: skip
# where the 74 columns come from in this module's own names
COVAREP74_SOURCES = {"F0": "f0", "VUV": "vuv", "NAQ": "naq", "QOQ": "qoq", "H1H2": "h1h2", "PSP": "psp", "MDQ": "mdq",
                     "peakSlope": "peak_slope", "Rd": "rd"}


class CovarepConfig(ExtractorConfig):
    extractor: Literal["covarep"] = "covarep"
    f0_method: Literal["dio", "harvest"] = "dio"
    # DIO's decimation (pyworld's `speed`): 2 halves DIO's cost; the refinement then sets voiced rows' F0 (see docs)
    dio_speed: int = Field(2, ge=1, le=12)
    f0_floor_hz: float = Field(60.0, gt=30.0)
    f0_ceil_hz: float = Field(500.0, le=1000.0)
    silence_dbfs: float = -60.0  # rows quieter than this (25 ms RMS re full scale) are unvoiced
    # ... and rows more than this many dB below the loudest row within +-relative_window_s (Praat's silence
    # threshold, 0.03 of the peak; None = the absolute floor alone, version 5's behaviour). Keeps low steady sounds
    # in pauses (mains hum at 100/120 Hz, a fan, distant music) from being voiced.
    relative_silence_db: float | None = Field(30.0, gt=0.0)
    relative_window_s: float = Field(5.0, gt=0.0)
    # a row is voiced only if the signal repeats itself one tracked period later: normalised cross-correlation at
    # the period >= this (0.45 is Praat's default voicing threshold; 0 keeps every row the tracker calls voiced)
    voicing_nccf: float = Field(0.45, ge=0.0, lt=1.0)
    # voiced runs grow by up to this many rows on each side into loud rows the tracker left unvoiced, where the
    # signal repeats itself at the neighbour's period (grow_voicing; 0 = off, version 5's behaviour)
    grow_rows: int = Field(50, ge=0)
    # loud rows the tracker left unvoiced whose normalised autocorrelation (Boersma 1993) peaks at >= this anywhere
    # in [1/ceiling, 1/floor] are voiced at that lag (seed_voicing; runs then grow from them too; 0 = off)
    seed_acf: float = Field(0.7, ge=0.0, lt=1.0)
    # voiced segments on a harmonic (the signal repeats better at 2-4 tracked periods) move to the fundamental, and short
    # segments far above both neighbours are re-grown from them (harmonic_check; False = version 6)
    harmonic_check: bool = True
    f0_refine: bool = True  # voiced rows' F0 from the cross-correlation peak at sub-sample precision (refine_f0)
    iaif_leak: float = Field(0.99, gt=0.9, lt=1.0)  # leaky integrator pole (COVAREP: 0.99)
    lpc_method: Literal["autocorrelation", "burg"] = "autocorrelation"  # burg = librosa.lpc, ~15x slower
    # vocal-tract inverse filter for the glottal columns: IAIF, or quasi-closed-phase weighted LP (QCP) whose weights
    # come from the GCIs found on IAIF's flow derivative (docs/acoustic.md, "QCP"); version 7's cycles only
    inverse_filter: Literal["iaif", "qcp"] = "iaif"
    # inverse filter whose flow derivative H1-H2 and HRF are read from: GFM-IAIF (3rd-order glottis model) keeps the
    # source's low-frequency tilt that IAIF's tract fit partly takes; "same" = the one above (version 5);
    # "covarep" = H1-H2 as COVAREP measures it (per GCI, on the pitch-synchronous IAIF derivative of glottal_cycles
    # "sedreams"; HRF stays GFM's): agrees with COVAREP's column (Spearman 0.96) but misses the LF model's truth by
    # up to 0.5-1.9 dB where GFM's holds 0.5 dB. Default by layout (`_layout_defaults`): "covarep" for "covarep74"
    # (COVAREP's published column; version 9), "gfm" otherwise (docs/acoustic.md, "Agreement with COVAREP")
    harmonic_filter: Literal["gfm", "same", "covarep"] = "covarep"
    # the glottal cycles NAQ, QOQ, PSP, Rd and MDQ are measured on: "sedreams" = COVAREP's (SEDREAMS GCIs on the LP
    # residual, pitch-synchronous IAIF flow, get_vq_params' cycle measures; version 8); "f0" = version 7's (the
    # F0-guided GCIs on the row-wise IAIF flow, which the EGG tests hold)
    glottal_cycles: Literal["sedreams", "f0"] = "sedreams"
    # Rd: "covarep" = as COVAREP's features compute it (mean squared phase of the time-reversed LF model, Brent's
    # search over 0.3-2.5, frames on the row boundaries; version 9: docs/acoustic.md, "Agreement with COVAREP");
    # "msp" = the paper's mean squared phase on the 0.01 grid (version 8; recovers LF-model vowels' Rd, which
    # "covarep" does not); "naq" = the Rd whose LF cycle has the cycle's NAQ (version 7). Default by layout
    # (`_layout_defaults`): "covarep" for "covarep74", "msp" otherwise
    rd_method: Literal["covarep", "msp", "naq"] = "covarep"
    # "covarep74": COVAREP's 74 columns (version 8); "mfcc23": version 7's 10 voice-quality columns + n_mfcc MFCCs
    layout: Literal["covarep74", "mfcc23"] = "covarep74"
    n_mfcc: int = Field(13, ge=1, le=40)
    n_mels: int = Field(40, ge=8, le=128)
    mfcc_fmin_hz: float = Field(20.0, ge=0.0)
    block_s: float = Field(30.0, ge=1.0)
    block_margin_s: float = Field(1.0, ge=0.5)  # below 0.5 s, rows next to block edges start to differ
    # where the array kernels run (`Kernels`): the numpy/scipy/librosa reference, or torch batched on `device`
    # ("auto": CUDA when the pipeline places the extractor on a GPU, else the CPU). Not in the fingerprint: the
    # torch backend's rows equal the reference's within the tolerances of docs/acoustic.md ("Torch backend"),
    # as a model's on CPU and GPU do, so a store may be resumed with either.
    backend: Literal["numpy", "torch"] = Field("numpy", exclude=True)
    device: Literal["auto", "cpu", "cuda"] = Field("auto", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _layout_defaults(cls, data: object) -> object:
        """harmonic_filter and rd_method, where not given, follow the layout: "covarep74" is COVAREP's published
        set, so its H1H2 and Rd are measured as COVAREP measures them; "mfcc23" keeps the measures that hold the
        LF model's truth (GFM's H1-H2, the paper's MSP). Resolved here, so the fingerprint holds the value used."""
        if isinstance(data, dict):
            data = dict(data)
            published = data.get("layout", "covarep74") == "covarep74"
            sedreams = data.get("glottal_cycles", "sedreams") == "sedreams"
            data.setdefault("harmonic_filter", "covarep" if published and sedreams else "gfm")
            data.setdefault("rd_method", "covarep" if published else "msp")
        return data

    @model_validator(mode="after")
    def _check(self) -> CovarepConfig:
        if self.f0_floor_hz >= self.f0_ceil_hz:
            raise ValueError(f"f0_floor_hz ({self.f0_floor_hz}) must be below f0_ceil_hz ({self.f0_ceil_hz})")
        if self.inverse_filter == "qcp" and self.glottal_cycles != "f0":
            raise ValueError('inverse_filter "qcp" needs glottal_cycles "f0" (its weights come from version 7\'s GCIs)')
        if self.harmonic_filter == "covarep" and self.glottal_cycles != "sedreams":
            raise ValueError('harmonic_filter "covarep" reads the cycles of glottal_cycles "sedreams"')
        if self.n_mfcc > self.n_mels:
            raise ValueError(f"n_mfcc ({self.n_mfcc}) cannot exceed n_mels ({self.n_mels})")
        return self


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # pyworld 0.3.5 imports pkg_resources (setuptools < 81, pinned in the lock)
    import pyworld as pw


def low_band(x: np.ndarray) -> dict:
    """Is the low band missing (telephone, 300-3,400 Hz)? Long-term spectrum (Welch, 64 ms segments): energy in
    60-250 Hz re 300-3,400 Hz below -25 dB AND a filter edge: 320-400 Hz more than 5 dB above 200-280 Hz. The edge
    keeps a voice whose own F0 is near 300 Hz (nothing below it either, but no edge) from being flagged."""
    f, p = long_term_spectrum(x)

    def level_db(lo: float, hi: float) -> float:
        return float(10 * np.log10(p[(f >= lo) & (f < hi)].sum() + 1e-30))

    low_db = level_db(60, 250) - level_db(300, 3400)
    edge_db = level_db(320, 400) - level_db(200, 280)
    limited = bool(low_db < -25 and edge_db > 5)
    # WORLD's trackers lose the missing fundamental (gross errors 100 % on band-passed ARCTIC speech): say so
    return {"low_band_db": round(low_db, 1), "band_limited": limited, "f0_reliable": not limited}


def long_term_spectrum(x: np.ndarray, nperseg: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(Hz, power density) of x: scipy.signal.welch(x, FS_HZ, nperseg=nperseg, noverlap=0)'s estimate (periodic Hann,
    each segment's mean removed, one-sided density), computed as one batch of segment FFTs. No overlap: a long-term
    average needs none. Why not welch itself: since scipy 1.15 it runs one FFT and one detrend call per segment,
    40 ms per minute of audio where the batch takes a sixth of that; equal to it within float rounding
    (tests/extractors/test_acoustic.py)."""
    n = x.size // nperseg
    if n == 0:  # shorter than a segment: welch's one shortened segment
        return welch(x, FS_HZ, nperseg=nperseg, noverlap=0)
    seg = np.asarray(x[: n * nperseg], dtype=np.float64).reshape(n, nperseg)
    window = get_window("hann", nperseg)  # periodic, as welch's default
    spec = rfft((seg - seg.mean(axis=1, keepdims=True)) * window, axis=1)
    p = (spec.real**2 + spec.imag**2).mean(axis=0) / (FS_HZ * (window**2).sum())
    p[1 : (nperseg + 1) // 2] *= 2  # one-sided: every bin but DC (and Nyquist for an even nperseg) counts twice
    return np.arange(p.size) * (FS_HZ / nperseg), p


def n_rows_for(duration_s: float) -> int:
    """ceil(duration / 10 ms), tolerant of float noise (0.07 s is 7 rows, not 8)."""
    return math.ceil(round(duration_s / HOP_S, 6))


def world_dio(y: np.ndarray, fs: int, f0_floor: float, f0_ceil: float, frame_period_ms: float, speed: int) -> np.ndarray:
    """F0 per frame (0 = unvoiced): pyworld's DIO (default channels_in_octave 2, allowed_range 0.1) + StoneMask."""
    f0, t = pw.dio(y, fs, f0_floor=f0_floor, f0_ceil=f0_ceil, frame_period=frame_period_ms, speed=speed)
    return pw.stonemask(y, f0, t, fs)


def f0_rows(x: np.ndarray, n_rows: int, cfg: CovarepConfig, kernels: Kernels | None = None) -> np.ndarray:
    """WORLD F0 (0 = unvoiced) at row centres: the signal starts half a hop late so WORLD's frames hit the centres.
    DIO + StoneMask are the backend's (`kernels.dio`); Harvest is pyworld's in every backend."""
    y = np.ascontiguousarray(x[HOP // 2 :], dtype=np.float64)
    if cfg.f0_method == "harvest":
        f0, _ = pw.harvest(y, FS_HZ, f0_floor=cfg.f0_floor_hz, f0_ceil=cfg.f0_ceil_hz, frame_period=HOP_S * 1000)
    else:
        f0 = (kernels or NUMPY_KERNELS).dio(y, FS_HZ, cfg.f0_floor_hz, cfg.f0_ceil_hz, HOP_S * 1000, cfg.dio_speed)
    out = np.zeros(n_rows)
    out[: min(n_rows, f0.size)] = f0[:n_rows]
    return out


def nccf(x_hp: np.ndarray, rows: np.ndarray, lag: np.ndarray, length: np.ndarray, offsets: tuple) -> np.ndarray:
    """(rows, offsets): normalised cross-correlation of each row's `length`-sample segment with the segment
    `lag + d` samples later, for each d in `offsets`; the two segments together are centred on the row centre
    (zero outside the signal; 0 where a segment has no energy).

    Compiled (extractors/lp_jit.py): each row's sums run over its own `length` samples, where the numpy
    formulation multiplied every row of a block out to the block's longest segment (5-9x the time)."""
    start = rows * HOP + HOP // 2 - (length + lag) // 2
    i64 = np.int64
    return lp_jit.nccf(np.ascontiguousarray(x_hp, dtype=np.float64), np.ascontiguousarray(start, dtype=i64),
                       np.ascontiguousarray(lag, dtype=i64), np.ascontiguousarray(length, dtype=i64),
                       np.asarray(offsets, dtype=i64))


def librosa_mfcc(y: np.ndarray, sr: int, hop: int, n_mels: int, fmin: float, n_mfcc: int) -> np.ndarray:
    """(frames, n_mfcc): the librosa call documented in docs/acoustic.md."""
    mel = librosa.feature.melspectrogram(
        y=np.asarray(y, dtype=np.float64), sr=sr, n_fft=512, hop_length=hop, win_length=round(0.025 * sr),
        window="hann", center=True, pad_mode="constant", power=2.0, n_mels=n_mels, fmin=fmin, fmax=sr / 2,
    )  # fmt: skip
    return librosa.feature.mfcc(S=librosa.power_to_db(mel, top_db=None), n_mfcc=n_mfcc).T


@dataclass(frozen=True)
class Kernels:
    """The array kernels the analysis spends most of its time in (docs/scale.md, "Issue 37"), one backend's
    versions: NUMPY_KERNELS (the reference) or extractors.acoustic_torch's. Everything between them (which rows,
    runs, segments, cycles; the NaN rules) is this module's and glottal's own code for every backend."""

    dio: Callable  # world_dio's signature: WORLD's DIO + StoneMask F0 per frame
    nccf: Callable  # (x_hp, rows, lag, length, offsets) -> (rows, offsets)
    iaif_filters: Callable
    gfm_filters: Callable
    lpc_rows: Callable
    inverse_filter: Callable
    rfft_mag: Callable  # glottal._rfft_mag: the per-cycle and per-row spectra
    mdq_dispersion: Callable
    peak_slope: Callable
    mfcc: Callable  # librosa_mfcc's signature
    frame_spectra: Callable = mcep.frame_spectra  # the 74-column layout's 3-period spectra
    mcep_rows: Callable = mcep.mcep_rows
    pdm_pdd: Callable = hmpd.pdm_pdd  # HMPD's time smoothing
    rd_conf_rows: Callable = rd_conf.rd_conf_rows
    srh_f0: Callable = srh.srh_f0  # the 3-period windows' F0 on rows we call unvoiced
    pick: Callable = harmonics.pick  # the rows' harmonics (HMPD, Rd_conf)
    pd_phasors: Callable = hmpd.pd_phasors  # HMPD's per-row phase distortion
    rd_covarep: Callable = glottal.rd_covarep  # COVAREP's Rd (Brent over the LF model)
    srh_values: Callable = srh.srh_values  # SRH's sums per frame and F0 (COVAREP's instants, unvoiced rows' windows)


NUMPY_KERNELS = Kernels(
    dio=world_dio, nccf=nccf, iaif_filters=glottal.iaif_filters, gfm_filters=glottal.gfm_filters,
    lpc_rows=glottal.lpc_rows, inverse_filter=glottal.inverse_filter, rfft_mag=glottal._rfft_mag, mdq_dispersion=glottal._mdq_dispersion,
    peak_slope=glottal.peak_slope, mfcc=librosa_mfcc,
)


def kernels_for(cfg: CovarepConfig, device: str = "cpu") -> Kernels:
    """The config's backend; `device`: where the pipeline placed the extractor (the torch backend's "auto")."""
    if cfg.backend == "numpy":
        return NUMPY_KERNELS
    from extractors import acoustic_torch  # torch only where asked for

    k = acoustic_torch.TorchKernels(acoustic_torch.resolve_device(cfg.device, device), HOP, FS_HZ)
    return Kernels(k.dio, k.nccf, k.iaif_filters, k.gfm_filters, k.lpc_rows, k.inverse_filter, k.rfft_mag,
                   k.mdq_dispersion, k.peak_slope, k.mfcc, k.frame_spectra, k.mcep_rows, k.pdm_pdd, k.rd_conf_rows,
                   k.srh_f0, k.pick, k.pd_phasors, k.rd_covarep, k.srh_values)


def periodicity(
    x_hp: np.ndarray, f0: np.ndarray, rows: np.ndarray, search: int = 2, kernels: Kernels = NUMPY_KERNELS
) -> np.ndarray:
    """Normalised cross-correlation of each row's 2-period (at least 10 ms) segment with the segment one tracked
    period later, maximised over lags within +-`search` samples of the period (integer lags; F0 is not rounded).

    On the high-passed signal: a DC offset or hum would correlate with itself at any lag.
    """
    if rows.size == 0:
        return np.zeros(0)
    lag = np.round(FS_HZ / f0[rows]).astype(int)
    r = kernels.nccf(x_hp, rows, lag, np.maximum(2 * lag, HOP), tuple(range(-search, search + 1)))
    return np.maximum(r.max(axis=1), 0.0)


def refine_f0(
    x_hp: np.ndarray, f0: np.ndarray, voiced: np.ndarray, cfg: CovarepConfig, kernels: Kernels = NUMPY_KERNELS
) -> np.ndarray:
    """F0 of the voiced rows from the peak of the normalised cross-correlation near the tracked period, at
    sub-sample precision (a parabola through the peak lag and its two neighbours), with a segment of
    F0_REFINE_PERIODS tracked periods (at least 10 ms). A row keeps the tracker's F0 when the peak is more than
    F0_REFINE_STEPS samples from the tracked period or not a strict interior maximum.

    Why: StoneMask's window is not the one a period measurement wants; on LF vowels with known periods
    (vibrato, jitter, intonation) this cuts the median error against the 3-period truth from 2.8 to 1.8 cents
    and on real speech brings every file within 3.2 cents of Praat (docs/acoustic.md, "Version 5")."""
    out = f0.copy()
    rows = np.flatnonzero(voiced)
    if rows.size == 0:
        return out
    period = FS_HZ / f0[rows]
    lag = np.round(period).astype(int)
    length = np.maximum(np.round(F0_REFINE_PERIODS * period).astype(int), HOP)
    r = kernels.nccf(x_hp, rows, lag, length, (-1, 0, 1))
    for _ in range(F0_REFINE_STEPS):  # walk to the peak where the tracked period is more than half a sample off
        step = np.where(r[:, 0] > r[:, 1], -1, np.where(r[:, 2] > r[:, 1], 1, 0))
        move = np.flatnonzero(step)
        if move.size == 0:
            break
        lag[move] += step[move]
        r[move] = kernels.nccf(x_hp, rows[move], lag[move], length[move], (-1, 0, 1))
    a, b, c = r.T
    curvature = a - 2 * b + c
    peak = (b > a) & (b > c) & (curvature < 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = lag + np.where(peak, 0.5 * (a - c) / curvature, 0.0)
    out[rows[peak]] = np.clip(FS_HZ / tau[peak], cfg.f0_floor_hz, cfg.f0_ceil_hz)
    return out


def voicing(
    x: np.ndarray, x_hp: np.ndarray, f0: np.ndarray, cfg: CovarepConfig, floor_dbfs: np.ndarray | float | None = None,
    kernels: Kernels = NUMPY_KERNELS, loud: np.ndarray | None = None,
) -> np.ndarray:
    """Voiced rows: F0 inside [floor, ceiling], 25 ms RMS above silence_dbfs and above `floor_dbfs` (per row: the
    relative gate of `relative_floor_dbfs`, computed on the whole clip), periodic at the tracked period. `loud`:
    `loud_rows(x, f0.size, cfg, floor_dbfs)` where the caller has it already."""
    if loud is None:
        loud = loud_rows(x, f0.size, cfg, floor_dbfs)
    voiced = (f0 >= cfg.f0_floor_hz) & (f0 <= cfg.f0_ceil_hz) & loud
    if cfg.voicing_nccf > 0:
        rows = np.flatnonzero(voiced)
        voiced[rows] = periodicity(x_hp, f0, rows, kernels=kernels) >= cfg.voicing_nccf
    return voiced


def loud_rows(x: np.ndarray, n_rows: int, cfg: CovarepConfig, floor_dbfs: np.ndarray | float | None) -> np.ndarray:
    """Rows whose 25 ms RMS is above silence_dbfs and above `floor_dbfs` (the relative gate)."""
    floor = cfg.silence_dbfs if floor_dbfs is None else np.maximum(cfg.silence_dbfs, floor_dbfs)
    return rms_dbfs(x, n_rows) > floor


def grow_voicing(
    x_hp: np.ndarray,
    f0: np.ndarray,
    voiced: np.ndarray,
    loud: np.ndarray,
    cfg: CovarepConfig,
    start: np.ndarray | None = None,
    kernels: Kernels = NUMPY_KERNELS,
) -> tuple[np.ndarray, np.ndarray]:
    """Voiced runs extended row by row into loud rows the tracker left unvoiced: a row next to a voiced one is
    voiced when the signal repeats itself (NCCF >= voicing_nccf) at a lag within GROW_SEARCH of the neighbour's
    period; its F0 is that lag's (refined later with the others).

    Why: DIO decides voicing from the fundamental; where the microphone or the channel weakens it (headsets,
    phone-like recordings) DIO returns 0 on most voiced rows (phonlab's example recordings: voicing F1 vs Praat
    0.35-0.67 on the weakest), while the waveform still repeats itself at the period of the neighbouring rows.
    Only rows next to rows the tracker and the NCCF test both accepted are tried, one row per step, so noise,
    hum below the relative gate and isolated periodic sounds stay as they were. `start`: the rows to grow from
    (default: every voiced row; a second pass from new seeds need not retry the runs' failed neighbours)."""
    f0, voiced = f0.copy(), voiced.copy()
    if cfg.grow_rows == 0:
        return f0, voiced
    n = voiced.size
    fresh = (voiced if start is None else start).copy()  # rows whose neighbours have not been tried from them yet (a failed try would fail again)
    for _ in range(cfg.grow_rows):
        left = np.zeros(n, bool)
        left[1:] = fresh[:-1]
        right = np.zeros(n, bool)
        right[:-1] = fresh[1:]
        rows = np.flatnonzero(~voiced & loud & (left | right))
        if rows.size == 0:
            break
        ref = np.where(left[rows], f0[np.maximum(rows - 1, 0)], f0[np.minimum(rows + 1, n - 1)])
        lag = np.round(FS_HZ / ref).astype(int)
        reach = np.ceil(GROW_SEARCH * lag).astype(int)
        offsets = tuple(range(-int(reach.max()), int(reach.max()) + 1))
        r = kernels.nccf(x_hp, rows, lag, np.maximum(2 * lag, HOP), offsets)
        r[np.abs(np.array(offsets))[None] > reach[:, None]] = -1.0
        best = r.argmax(axis=1)
        new_f0 = FS_HZ / (lag + np.array(offsets)[best])
        ok = (r[np.arange(rows.size), best] >= cfg.voicing_nccf) & (new_f0 >= cfg.f0_floor_hz) & (
            new_f0 <= cfg.f0_ceil_hz
        )
        if not ok.any():
            break
        voiced[rows[ok]] = True
        f0[rows[ok]] = new_f0[ok]
        fresh[:] = False
        fresh[rows[ok]] = True
    return f0, voiced


def seed_voicing(
    x_hp: np.ndarray, f0: np.ndarray, voiced: np.ndarray, loud: np.ndarray, cfg: CovarepConfig,
    kernels: Kernels = NUMPY_KERNELS,
) -> tuple[np.ndarray, np.ndarray]:
    """Loud rows the tracker left unvoiced, voiced where the signal is strongly periodic at some lag in
    [fs/ceiling, fs/floor]: the highest peak of the normalised autocorrelation (Boersma, "Accurate short-term analysis
    of the fundamental frequency and the harmonics-to-noise ratio of a sampled sound", IFA Proceedings 17, 1993: a
    Hann window of 3 floor periods, the windowed signal's autocorrelation divided by the window's) at >= seed_acf,
    and the row passes the NCCF test at that lag. The highest peak, with no preference for short lags: Praat's
    octave cost (0.01 per octave) or taking the shortest lag within 0.02-0.1 of the highest put more seeds on a
    harmonic on phonlab's recordings (gross errors 5.5 % -> 5.7-8.7 %).

    Why: where the fundamental is weak (headsets, laptops, small loudspeakers) DIO returns F0 = 0 on every row of
    some vowels, so grow_voicing has no seed there; the autocorrelation does not need the fundamental's energy,
    only the waveform's repetition. Threshold chosen on phonlab's six recordings (docs/acoustic.md, "Version 6:
    seeds")."""
    f0, voiced = f0.copy(), voiced.copy()
    near = voiced.copy()  # rows next to a run: growing from it failed there, so the run's period does not hold
    near[1:] |= voiced[:-1]
    near[:-1] |= voiced[1:]
    rows = np.flatnonzero(loud & ~near)
    if cfg.seed_acf == 0 or rows.size == 0:
        return f0, voiced
    lo, hi = int(FS_HZ / cfg.f0_ceil_hz), math.ceil(FS_HZ / cfg.f0_floor_hz)
    width = round(3 * FS_HZ / cfg.f0_floor_hz)
    seg = glottal.windows(x_hp, rows * HOP + HOP // 2 - width // 2, width)
    window = np.hanning(width + 2)[1:-1]
    n_fft = next_fast_len(width + hi + 1, real=True)  # no circular wrap up to lag hi
    r_seg = irfft(np.abs(rfft((seg - seg.mean(axis=1, keepdims=True)) * window, n_fft)) ** 2, n_fft)
    r_win = irfft(np.abs(rfft(window, n_fft)) ** 2, n_fft)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.nan_to_num((r_seg[:, lo : hi + 1] / r_seg[:, :1]) / (r_win[lo : hi + 1] / r_win[0]))
    peak = (r[:, 1:-1] > r[:, :-2]) & (r[:, 1:-1] >= r[:, 2:])
    lags = np.arange(lo + 1, hi)
    score = np.where(peak, r[:, 1:-1], -np.inf)
    best = score.argmax(axis=1)
    top = score[np.arange(rows.size), best]
    for k in (2, 3, 4, 5):  # the signal repeats at 2, 3, ... periods too: a peak at an integer part as high wins
        near = np.round(lags[best] / k).astype(int) - (lo + 1)
        for d in (-1, 0, 1):
            i = np.clip(near + d, 0, lags.size - 1)
            alt = (near + d >= 0) & (score[np.arange(rows.size), i] >= top - SEED_DIVISOR_SLACK)
            best = np.where(alt & (lags[i] < lags[best]), i, best)
    ok = top >= cfg.seed_acf
    rows, lag = rows[ok], lags[best[ok]]
    # seeds count only in runs of SEED_MIN_ROWS consecutive rows whose periods differ by <= GROW_SEARCH row to row,
    # and not next to a longer run at another period: shorter ones are transitions (a formant ringing on for
    # 10-30 ms after the voice stops, an onset's octave-low peak) more often than vowels
    joined = (np.diff(rows) == 1) & (np.abs(lag[1:] / lag[:-1] - 1) <= GROW_SEARCH)
    first = np.flatnonzero(np.concatenate([[True], ~joined]))[: rows.size]
    last = np.concatenate([first[1:] - 1, [rows.size - 1]])
    length = last - first + 1
    touch = rows[first[1:]] - rows[last[:-1]] == 1  # run j + 1 starts on the row after run j ends
    lost = length < SEED_MIN_ROWS
    lost[1:] |= touch & (length[1:] < length[:-1])
    lost[:-1] |= touch & (length[:-1] < length[1:])
    keep = np.repeat(~lost, length)
    rows, lag = rows[keep], lag[keep]
    trial = f0.copy()
    trial[rows] = FS_HZ / lag
    ok = periodicity(x_hp, trial, rows, kernels=kernels) >= cfg.voicing_nccf
    f0[rows[ok]] = trial[rows[ok]]
    voiced[rows[ok]] = True
    return f0, voiced


def f0_segments(f0: np.ndarray, voiced: np.ndarray) -> list[np.ndarray]:
    """Row indices of each voiced segment: consecutive voiced rows whose F0 moves <= SEGMENT_JUMP_OCTAVES row to row."""
    v = np.flatnonzero(voiced)
    if v.size == 0:
        return []
    cut = (np.diff(v) != 1) | (np.abs(np.log2(f0[v[1:]] / f0[v[:-1]])) > SEGMENT_JUMP_OCTAVES)
    return np.split(v, np.flatnonzero(cut) + 1)


def harmonic_check(
    x_hp: np.ndarray, f0: np.ndarray, voiced: np.ndarray, loud: np.ndarray, cfg: CovarepConfig,
    kernels: Kernels = NUMPY_KERNELS,
) -> tuple[np.ndarray, np.ndarray]:
    """Voiced segments tracked on a harmonic, moved to the fundamental. Two rules, per segment (`f0_segments`):

    1. Subharmonic test: the NCCF at k = 2, 3, 4 tracked periods (where F0 / k >= floor) against the NCCF at one,
       each row's segments 2 k_max periods long for every k (a fair comparison), at the best lag within +-2k samples
       of k periods, on SUBHARMONIC_ROWS rows spread over the segment (all of them when shorter). Where the
       segment's median at some k beats the median at one period by SUBHARMONIC_MARGIN and is >= SUBHARMONIC_MIN,
       the signal repeats at k periods and not at one: the tracker followed the k-th harmonic. The segment moves to
       the smallest k within SUBHARMONIC_SLACK of the best (at 2 true periods the signal repeats as well as at one).
       Without the minimum, rows on no harmonic at all, where neither lag fits, moved to a wrong period (a
       synthetic island at 3.4x: NCCF 0.56 at 3 periods vs 0.48 at one).
    2. Islands: a segment whose F0 at each end is ISLAND_OCTAVES or more above the neighbouring segment's across a
       gap of <= ISLAND_GAP_ROWS rows, on both sides, and no longer than the longer neighbour, is unvoiced; the
       neighbours then grow into its rows (`grow_voicing`), so its rows get the neighbours' period where the signal
       repeats at it and stay unvoiced where it does not. A voice does not leave and rejoin its pitch by a factor
       >= 1.6 within 30 ms. (Only both-sided islands: with one lower neighbour the high segment may be the right
       one; on phonlab_F1_bha24_1 the EGG shows 2 rows at 140 Hz after 7 rows that Praat and we put at 72 Hz.)

    Why: where the fundamental is weak, DIO sometimes follows the 2nd-4th harmonic for a whole vowel, and the NCCF
    voicing test passes there (the signal repeats at every multiple of its period too). On phonlab_two_plus_two 13
    rows sat at 4x (gross errors against Praat 15 %). A true period gives a median NCCF at 2 periods at least 0.005
    below the one at one period (every segment of the ARCTIC and realdata files; slt's closest -0.005 ... -0.018); a
    harmonic gives +0.09 (docs/acoustic.md, "Version 7")."""
    f0, voiced = f0.copy(), voiced.copy()
    segments = f0_segments(f0, voiced)
    if not segments:
        return f0, voiced
    # 1. subharmonic test, on up to SUBHARMONIC_ROWS rows spread over each segment, all segments in one call per k
    medians = [np.median(f0[s]) for s in segments]  # once per segment (per k, it was a third of this stage)
    k_max = np.array([max((k for k in (1, 2, 3, 4) if m / k >= cfg.f0_floor_hz), default=1) for m in medians])
    tested = [j for j in range(len(segments)) if k_max[j] > 1]
    if tested:
        picks = [np.unique(segments[j][np.linspace(0, segments[j].size - 1, SUBHARMONIC_ROWS).round().astype(int)])
                 for j in tested]  # fmt: skip
        rows = np.concatenate(picks)
        owner = np.repeat(np.arange(len(tested)), [p.size for p in picks])
        row_k = k_max[tested][owner]
        lag = np.round(FS_HZ / f0[rows]).astype(int)
        length = np.maximum(2 * row_k * lag, HOP)
        r = np.full((rows.size, 5), -np.inf)
        for k in (1, 2, 3, 4):
            at = np.flatnonzero(row_k >= k)
            if at.size:
                reach = 1 if k == 1 else 2 * k
                offsets = tuple(range(-reach, reach + 1))
                r[at, k] = kernels.nccf(x_hp, rows[at], k * lag[at], length[at], offsets).max(axis=1)
        bounds = np.cumsum([0] + [p.size for p in picks])
        for i, j in enumerate(tested):
            median = np.median(r[bounds[i] : bounds[i + 1]], axis=0)
            top = median[2 : k_max[j] + 1].max()
            if top - median[1] < SUBHARMONIC_MARGIN or top < SUBHARMONIC_MIN:
                continue
            k = min(k for k in range(2, k_max[j] + 1) if median[k] >= top - SUBHARMONIC_SLACK)
            seg = segments[j]
            seg_lag = np.round(FS_HZ / f0[seg]).astype(int)
            offsets = np.arange(-2 * k, 2 * k + 1)
            length = np.maximum(2 * k_max[j] * seg_lag, HOP)
            best = kernels.nccf(x_hp, seg, k * seg_lag, length, tuple(offsets)).argmax(axis=1)
            f0[seg] = np.clip(FS_HZ / (k * seg_lag + offsets[best]), cfg.f0_floor_hz, cfg.f0_ceil_hz)
    segments = f0_segments(f0, voiced)  # 2. islands, on the F0 after the subharmonic test
    island = np.zeros(voiced.size, bool)
    start = np.zeros(voiced.size, bool)
    for j, s in enumerate(segments):
        sides = []
        if j > 0 and s[0] - segments[j - 1][-1] - 1 <= ISLAND_GAP_ROWS:
            sides.append((f0[s[0]], segments[j - 1], segments[j - 1][-1]))
        if j + 1 < len(segments) and segments[j + 1][0] - s[-1] - 1 <= ISLAND_GAP_ROWS:
            sides.append((f0[s[-1]], segments[j + 1], segments[j + 1][0]))
        if len(sides) == 2 and all(np.log2(end / f0[edge]) >= ISLAND_OCTAVES for end, _, edge in sides) and (
            s.size <= max(n.size for _, n, _ in sides)
        ):
            island[s] = True
            start[[edge for _, _, edge in sides]] = True
    if island.any():
        voiced &= ~island
        start &= voiced
        f0, voiced = grow_voicing(x_hp, f0, voiced, loud, cfg, start=start, kernels=kernels)
    return f0, voiced


def relative_floor_dbfs(x: np.ndarray, n_rows: int, cfg: CovarepConfig) -> np.ndarray | None:
    """Per row: the loudest 25 ms RMS within +-relative_window_s, minus relative_silence_db (None when off).

    Praat's silence threshold works the same way against the whole sound's peak; a window keeps a loud laugh a
    minute away from silencing a quiet speaker. Computed on the whole clip before it is cut into blocks, so rows do
    not depend on the block size."""
    if cfg.relative_silence_db is None:
        return None
    half = round(cfg.relative_window_s / HOP_S)
    loudest = maximum_filter1d(rms_dbfs(x, n_rows), size=2 * half + 1, mode="nearest")
    return loudest - cfg.relative_silence_db


def rms_dbfs(x: np.ndarray, n_rows: int, win: int = 400) -> np.ndarray:
    """RMS in dB re full scale over `win` samples centred on each row."""
    # the running sum of the squares with `win` zeros on each side, a 0 first; written into place (the same sums
    # as np.concatenate([[0.0], np.cumsum(np.pad(x ** 2, (win, win)))]) without three copies of the block)
    sq = np.zeros(x.size + 2 * win)
    np.square(x, out=sq[win : win + x.size], dtype=np.float64)
    c = np.empty(sq.size + 1)
    c[0] = 0.0
    np.cumsum(sq, out=c[1:])
    start = np.arange(n_rows) * HOP + HOP // 2 - win // 2 + win
    return 10 * np.log10((c[start + win] - c[start]) / win + 1e-20)


def mfcc_rows(x: np.ndarray, n_rows: int, cfg: CovarepConfig, kernels: Kernels = NUMPY_KERNELS) -> np.ndarray:
    """(n_rows, n_mfcc): `librosa_mfcc` (or its torch twin) on the signal from half a hop on."""
    mfcc = kernels.mfcc(x[HOP // 2 :], FS_HZ, HOP, cfg.n_mels, cfg.mfcc_fmin_hz, cfg.n_mfcc)
    out = np.zeros((n_rows, cfg.n_mfcc))
    out[: min(n_rows, len(mfcc))] = mfcc[:n_rows]
    return out


def glottal_flow(
    x_hp: np.ndarray, f0: np.ndarray, voiced: np.ndarray, cfg: CovarepConfig, kernels: Kernels = NUMPY_KERNELS
) -> tuple[np.ndarray, np.ndarray, float]:
    """(flow derivative, GCI sample positions, polarity) for one block; the derivative is polarity-corrected."""
    n_rows = voiced.size
    centres = np.arange(n_rows) * HOP + HOP // 2
    near_voiced = voiced.copy()  # filters also for the rows bordering a run
    near_voiced[1:] |= voiced[:-1]
    near_voiced[:-1] |= voiced[1:]
    p_vt = 2 * round(FS_HZ / 2000) + 4
    a_vt = np.tile(np.eye(1, p_vt + 1), (n_rows, 1))
    if near_voiced.any():
        a_vt[near_voiced] = kernels.iaif_filters(x_hp, centres[near_voiced], FS_HZ, cfg.iaif_leak, cfg.lpc_method)
    dg = kernels.inverse_filter(x_hp, a_vt, HOP)
    polarity = glottal.polarity(dg, centres[voiced], FS_HZ)
    dg *= polarity
    gcis = glottal.detect_gcis(dg, f0, voiced, HOP, FS_HZ)
    if cfg.inverse_filter == "qcp" and gcis.size >= 2:
        weight = glottal.ame_weight(x_hp.size, gcis, 1.2 * FS_HZ / cfg.f0_floor_hz)
        # QCP's weights need GCIs: those found on IAIF's flow derivative (re-detecting them on QCP's output moved
        # NAQ by <= 4 points on the LF vowels and costs another pass: not done)
        a_vt[near_voiced] = glottal.qcp_filters(x_hp, centres[near_voiced], weight, FS_HZ)
        dg = polarity * kernels.inverse_filter(x_hp, a_vt, HOP)
    return dg, gcis, polarity


def covarep_cycles(
    x_hp: np.ndarray, f0: np.ndarray, voiced: np.ndarray, cfg: CovarepConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(flow, flow derivative, GCIs in voiced rows, LP residual, orientation: +-1 by which x_hp was multiplied) the
    way COVAREP's features measure glottal cycles:
    SEDREAMS on the block's LP residual with the block's median F0, GCIs in unvoiced rows dropped, and the flow by
    pitch-synchronous IAIF on those GCIs (docs/acoustic.md, "Agreement with COVAREP")."""
    x, sign = x_hp, 1.0
    residual = glottal.lp_residual(x, FS_HZ)
    if glottal.skewness(residual) < 0:
        # SEDREAMS takes the residual's positive peaks for closures: COVAREP orients the signal by the residual's
        # skewness (RESKEW, Drugman 2013); the flow-derivative vote of version 7 (`glottal.polarity`) disagrees
        # with it on some voices (CMU jmk, whose NAQ then read 0.03)
        x, residual, sign = -x, -residual, -1.0
    gcis = glottal.sedreams(x, residual, FS_HZ, float(np.median(f0[voiced])))
    gcis = gcis[voiced[np.minimum(gcis // HOP, voiced.size - 1)]]
    g, dg = glottal.iaif_gci(x, gcis, FS_HZ, cfg.iaif_leak, 1.2 * FS_HZ / cfg.f0_floor_hz)
    return g, dg, gcis, residual, sign


def glottal_rows(
    x_hp: np.ndarray, f0: np.ndarray, voiced: np.ndarray, cfg: CovarepConfig, kernels: Kernels = NUMPY_KERNELS
) -> dict[str, np.ndarray]:
    """NAQ, QOQ, H1-H2, HRF, PSP, MDQ, Rd per row (NaN where unvoiced or no glottal cycle is near the row)."""
    n_rows = voiced.size
    out = {name: np.full(n_rows, np.nan) for name in GLOTTAL_COLUMNS}
    if not voiced.any():
        return out
    t0 = np.where(voiced, FS_HZ / np.where(voiced, f0, 1.0), np.nan)
    max_dist = np.maximum(HOP, t0)
    skew_sign = None  # COVAREP's orientation (the LP residual's skewness positive), where computed
    if cfg.glottal_cycles == "sedreams":  # oriented by its own residual: version 7's row-wise flow is not needed
        g, dg, gcis, residual, skew_sign = covarep_cycles(x_hp, f0, voiced, cfg)
        # the 74-column layout's harmonic phases (HMPD, Rd_conf) in COVAREP's orientation, as COVAREP reads them
        # (version 9; version 8 took the row-wise IAIF derivative's vote: glottalized-m1's Rd_conf then read r -0.76
        # against COVAREP's, 0.74 with this, the other four files unchanged)
        polarity = skew_sign
    else:
        dg, gcis, polarity = glottal_flow(x_hp, f0, voiced, cfg, kernels)
        g = lfilter([1.0], [1.0, -cfg.iaif_leak], dg)
    out["polarity"] = np.full(n_rows, polarity)  # the harmonic phases of the 74-column layout read it
    dg_cycles = dg
    if gcis.size >= 3 and cfg.glottal_cycles == "sedreams":
        f0_range = (cfg.f0_floor_hz, cfg.f0_ceil_hz)
        cyc = glottal.covarep_cycle_params(g, dg, gcis, FS_HZ, f0_range, kernels.rfft_mag)
        for name in ("naq", "qoq", "psp"):
            out[name] = glottal.to_rows(cyc["centre"], cyc[name], n_rows, HOP, max_dist)
        out["rd"] = glottal.to_rows(cyc["centre"], glottal.rd_from_naq(cyc["naq"]), n_rows, HOP, max_dist)
        mdq = glottal.mdq(residual, gcis, FS_HZ / cfg.f0_floor_hz, kernels.mdq_dispersion)
        out["mdq"] = glottal.to_rows(gcis.astype(float), mdq, n_rows, HOP, max_dist)
    elif gcis.size >= 3:
        cyc = glottal.cycle_params(g, dg, gcis, FS_HZ, (cfg.f0_floor_hz, cfg.f0_ceil_hz), rfft_mag=kernels.rfft_mag)
        for name in ("naq", "qoq", "psp"):
            out[name] = glottal.to_rows(cyc["centre"], cyc[name], n_rows, HOP, max_dist)
        out["rd"] = glottal.to_rows(cyc["centre"], glottal.rd_from_naq(cyc["naq"]), n_rows, HOP, max_dist)
        centres = np.arange(n_rows) * HOP + HOP // 2
        a_lp = np.tile(np.eye(1, 19), (n_rows, 1))  # LP residual for MDQ: order fs/1000 + 2, 25 ms frames
        a_lp[voiced] = kernels.lpc_rows(glottal.windows(x_hp, centres[voiced] - 200, 400), 18, cfg.lpc_method)
        residual = polarity * kernels.inverse_filter(x_hp, a_lp, HOP)
        mdq = glottal.mdq(residual, gcis, FS_HZ / cfg.f0_floor_hz, kernels.mdq_dispersion)
        out["mdq"] = glottal.to_rows(gcis.astype(float), mdq, n_rows, HOP, max_dist)
    if cfg.rd_method == "covarep":  # in COVAREP's orientation, as COVAREP reads it
        if skew_sign is None:
            skew_sign = 1.0 if glottal.skewness(glottal.lp_residual(x_hp, FS_HZ)) >= 0 else -1.0
        out["rd"] = kernels.rd_covarep(skew_sign * x_hp, f0, voiced, FS_HZ, HOP)[0]
    elif cfg.rd_method == "msp":
        rows = np.flatnonzero(voiced)
        # the paper's MSP reads phases, so polarity matters: COVAREP's own orientation (the residual's skewness)
        # reads a pressed 220 Hz LF vowel upside down (Rd 2.14 for 0.3), so the row-wise IAIF flow derivative's
        # vote (version 7's) has the last word
        if cfg.glottal_cycles == "sedreams":
            vote = glottal.iaif_polarity(x_hp, rows * HOP + HOP // 2, FS_HZ, cfg.iaif_leak)
        else:
            vote = polarity
        centres = rows * HOP + HOP // 2
        out["rd"][rows] = glottal.rd_msp(vote * x_hp, centres, f0[rows], FS_HZ)[0]
    # HRF is not among COVAREP's 74 columns: with COVAREP's own H1H2 the 74-column layout needs no harmonic reading
    # of a per-row flow derivative at all (GFM-IAIF's filters are a tenth of the glottal stage)
    need_rows = cfg.harmonic_filter != "covarep" or cfg.layout != "covarep74"
    if need_rows and cfg.harmonic_filter in ("gfm", "covarep"):
        near_voiced = voiced.copy()  # filters also for the rows bordering a run, as in glottal_flow
        near_voiced[1:] |= voiced[:-1]
        near_voiced[:-1] |= voiced[1:]
        centres = np.arange(n_rows) * HOP + HOP // 2
        a_gfm = np.tile(np.eye(1, 2 * round(FS_HZ / 2000) + 5), (n_rows, 1))
        # fitted on every second row (the rows between take their neighbours' mean): the 32 ms frames overlap by
        # 22 ms, and on the LF vowels the summed H1-H2 / HRF errors moved by <= 0.3 dB; saves half the fits
        fit = near_voiced.copy()
        fit[1:] |= near_voiced[:-1]
        fit[:-1] |= near_voiced[1:]
        fit &= np.arange(n_rows) % 2 == 0
        a_gfm[fit] = kernels.gfm_filters(x_hp, centres[fit], FS_HZ, cfg.iaif_leak)
        mid = np.flatnonzero(near_voiced & ~fit)
        lo, hi = fit[mid - 1, None], fit[np.minimum(mid + 1, n_rows - 1), None]
        left, right = a_gfm[mid - 1], a_gfm[np.minimum(mid + 1, n_rows - 1)]
        a_gfm[mid] = np.where(lo & hi, (left + right) / 2, np.where(lo, left, right))
        dg = kernels.inverse_filter(x_hp, a_gfm, HOP)  # harmonic magnitudes: polarity does not matter
    if need_rows:
        harm = glottal.harmonic_params(dg, f0, np.flatnonzero(voiced), HOP, FS_HZ, kernels.rfft_mag)
        for name, values in harm.items():
            out[name][voiced] = values
    if cfg.harmonic_filter == "covarep":  # per GCI, as COVAREP: undefined without glottal cycles
        out["h1h2"] = np.full(n_rows, np.nan)
        if gcis.size >= 3:
            h1h2 = glottal.covarep_h1h2(dg_cycles, gcis, FS_HZ, 1.2 * FS_HZ / cfg.f0_floor_hz, kernels.rfft_mag)
            out["h1h2"] = glottal.to_rows(gcis.astype(float), h1h2, n_rows, HOP, max_dist)
    for name in GLOTTAL_COLUMNS:
        out[name][~voiced] = np.nan
    return out


def window_f0(
    x: np.ndarray, f0: np.ndarray, voiced: np.ndarray, centres: np.ndarray, rows: np.ndarray, srh_f0=srh.srh_f0, *,
    srh_median: float | None, srh_f0_rows: np.ndarray | None = None,
) -> np.ndarray:
    """F0 (Hz) of the 74-column layout's 3-period windows centred on `centres` (samples of the block x), each read
    from its row in `rows`: the row's F0 where voiced; elsewhere SRH's, as COVAREP windows every frame by its SRH
    tracker's F0 (`srh`): `srh_f0_rows` where the caller has it (`spectral_rows`: SRH's F0 at its own instants,
    `srh_instant_f0`), otherwise SRH run on the windows themselves, searched in the range pitch_srh's first pass
    narrows to around `srh_median` (`srh_track`'s median; before version 11, our tracker's median voiced F0).
    Clipped so a window fits the DFT. `srh_f0`: the backend's."""
    needs = srh_rows(f0, voiced, rows)
    out = np.where(needs, mcep.UNVOICED_F0_HZ, f0[rows])
    if srh_f0_rows is not None:
        if srh_f0_rows.shape != (int(needs.sum()),):
            raise ValueError(f"window_f0: {srh_f0_rows.shape} SRH F0 values for {int(needs.sum())} unvoiced windows")
        out[needs] = srh_f0_rows
    elif needs.any():
        out[needs] = srh_f0(x, centres[needs], FS_HZ, srh_median)
    return np.clip(out, 3.0 * FS_HZ / (mcep.DFTLEN - 2), None)


def srh_instant_f0(track: tuple[np.ndarray, np.ndarray, float | None], rows: np.ndarray) -> np.ndarray | None:
    """SRH's F0 for the windows on `rows` from `srh_track`'s own frames: the instant on each row's start boundary
    (k = row; rows before the first instant or past the last take that one), None where the block has no instant.
    COVAREP windows its MCEP and Rd frames at these instants with their SRH F0; a row centre lies 5 ms from the two
    instants around it. SRH run on the unvoiced rows' own windows instead (versions 9-12) cost another 100 ms frame
    and its 16000-point DFT per unvoiced row (40 % of the bench's SRH frames); measured against COVAREP on the five
    recordings, MCEP's rows and Rd_conf agree as before within the files' noise (docs/acoustic.md, "74 columns")."""
    k, f0k = track[0], track[1]
    if k.size == 0:
        return None
    return f0k[np.clip(np.asarray(rows) - k[0], 0, k.size - 1)]


def srh_rows(f0: np.ndarray, voiced: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Which of `window_f0`'s windows take SRH's F0: those on rows not voiced or without an F0."""
    return ~(voiced[rows] & (f0[rows] > 0))


def srh_instants(n_samples: int) -> np.ndarray:
    """The rows k whose boundaries k * HOP are pitch_srh's instants in a block of n_samples: its 100 ms frames'
    1-based centres run half + 1 … n - half in 10 ms steps, half = 799 at 16 kHz, so they fall on the row
    boundaries from 50 ms in to 50 ms before the end (COVAREP's t·fs = k * HOP)."""
    half = srh.frame_length(FS_HZ) // 2
    return np.arange(-(-(half + 1) // HOP), (n_samples - half) // HOP + 1)


def srh_track(x: np.ndarray, kernels: Kernels = NUMPY_KERNELS) -> tuple[np.ndarray, np.ndarray, float | None]:
    """(instants' rows k, SRH F0 there, the median pitch_srh's first pass found) of the block x: pitch_srh's two
    passes over [50, 500] Hz and around that median (`srh.srh_track`: one set of spectra for both)."""
    k = srh_instants(x.size)
    if k.size == 0:
        return k, np.zeros(0), None
    f0k, median = srh.srh_track(x, k * HOP, FS_HZ, values=kernels.srh_values)
    return k, f0k, median


def hmpd_columns(
    x: np.ndarray, f0: np.ndarray, voiced: np.ndarray, polarity: float, kernels: Kernels = NUMPY_KERNELS,
    track: tuple[np.ndarray, np.ndarray, float | None] | None = None,
) -> np.ndarray:
    """(rows, 38) HMPDM_*, HMPDD_* of a block, at COVAREP's instants and F0 (docs/acoustic.md, "HMPD"): its script
    analyses HMPD on SRH's frames, at 10 ms steps on the row boundaries (160 k samples) from 50 ms in to 50 ms
    before the end (`srh_instants`), each windowed by SRH's F0 after its two passes (`srh_track`, given as `track`
    or computed here; 100 Hz where SRH gives 0) whatever the voicing, and reads its rows at (k + 0.5) * 10 ms - 1
    sample by linear interpolation through a 5 ms grid (`hmpd.frames_to_rows`). The harmonics are picked on its
    4096-point DFT (`hmpd.SIN_DFTLEN`). Measured against COVAREP's own HMPD steps under Octave, feeding our kernels
    its instants and F0 reproduces its columns within its run-to-run spread; our refined F0 and row-centred frames
    put HMPDD 30-120 spreads away, the 1024-point DFT up to 20 more. Rows outside the frames' span are NaN (COVAREP
    writes 0 there). `f0`, `voiced`: unused since SRH gives every frame's F0; kept for the callers' signature."""
    n_rows = voiced.size
    k, f0k, _ = srh_track(x, kernels) if track is None else track
    out = np.full((n_rows, hmpd.PDM_ORDER + hmpd.PDD_ORDER + 2), np.nan)
    if k.size < 2:
        return out
    centres = k * HOP
    f0k = np.where(np.isfinite(f0k) & (f0k > 0), f0k, mcep.UNVOICED_F0_HZ)
    f0k = np.clip(f0k, 3.0 * FS_HZ / (hmpd.SIN_DFTLEN - 2), None)
    # the 4096-point spectra and their harmonics in chunks of frames: a block's spectra at once (100 MB per 30 s)
    # are past the size the allocator keeps for reuse, so every call paid their page faults again (~12 % of the
    # whole set); each frame's harmonics are its own, so the rows are the same
    xs = polarity * x
    h = harmonics.concat([
        kernels.pick(kernels.frame_spectra(xs, centres[c], f0k[c], FS_HZ, dftlen=hmpd.SIN_DFTLEN), f0k[c], FS_HZ)
        for c in (slice(i, i + HMPD_CHUNK) for i in range(0, centres.size, HMPD_CHUNK))
    ])
    frames = hmpd.hmpd_rows(h, f0k, FS_HZ, smooth=kernels.pdm_pdd, phasors=kernels.pd_phasors)
    rows = k[:-1]  # row j reads frames j and j + 1
    keep = (rows >= 0) & (rows < n_rows)
    # row j's time, (j + 0.5) * HOP - 1 samples, lies (HOP / 2 - 1) / (HOP / 2) of the way from frame j to the 5 ms
    # grid point between frames j and j + 1, which holds their mean
    out[rows[keep]] = hmpd.frames_to_rows(frames, (HOP / 2 - 1) / HOP)[keep]
    return out


def spectral_rows(
    x: np.ndarray, f0: np.ndarray, voiced: np.ndarray, polarity: float, kernels: Kernels = NUMPY_KERNELS,
    n_samples: int | None = None,
) -> dict[str, np.ndarray]:
    """Rd_conf, creak, MCEP_*, HMPDM_*, HMPDD_* of a block (docs/acoustic.md, "74 columns"); HMPD on its own
    frames (`hmpd_columns`), the others on one 3-period window per row, of the row's F0 where voiced and of SRH's
    elsewhere (`window_f0`; COVAREP windows every frame by its tracker's F0, which it estimates on unvoiced frames too); the signal in the flow's polarity (COVAREP
    corrects the polarity first: the harmonic phases depend on it). `n_samples`: x's samples of the clip itself
    (`analyse_block`): SRH's frames stop 50 ms before the clip's end, not the zeros that fill its last row, as
    COVAREP's on the file (one frame more moved the last rows' HMPD smoothing: amfm_sample's HMPDD 2.9 → 5.7 of
    COVAREP's run-to-run spread)."""
    n_rows = voiced.size
    centres = np.arange(n_rows) * HOP + HOP // 2
    rows = np.arange(n_rows)
    # one set of SRH frames: HMPD's F0, the median, and the F0 of the rows' windows that need SRH's; a clip's last
    # block, its last row filled with zeros, on the clip's own samples only
    track = srh_track(x if n_samples is None else x[:n_samples], kernels)
    f0w = window_f0(x, f0, voiced, centres, rows, kernels.srh_f0, srh_median=track[2],
                    srh_f0_rows=srh_instant_f0(track, rows[srh_rows(f0, voiced, rows)]))  # fmt: skip
    spec = kernels.frame_spectra(polarity * x, centres, f0w, FS_HZ)
    h = kernels.pick(spec, f0w, FS_HZ)
    pd = hmpd_columns(x, f0, voiced, polarity, kernels, track)
    out = {"Rd_conf": kernels.rd_conf_rows(h), "creak": np.full(n_rows, np.nan)}
    cols = np.concatenate([kernels.mcep_rows(spec, f0w, FS_HZ), pd], axis=1)
    # a window of digital silence has no envelope and no phases (COVAREP's log(0) becomes its 0 in the file)
    silent = np.abs(spec).max(axis=1) <= mcep.LOG_FLOOR
    cols[silent] = np.nan
    out["Rd_conf"][silent] = np.nan
    out.update(zip(COVAREP74_COLUMNS[11:], cols.T, strict=True))
    return out


def peak_slope_rows(x_hp: np.ndarray, n_rows: int, cfg: CovarepConfig, kernels: Kernels = NUMPY_KERNELS) -> np.ndarray:
    """Peak slope per row; a tilt needs signal: rows whose high-passed 25 ms RMS is below silence_dbfs (digital
    silence, DC, rumble) get NaN."""
    return np.where(rms_dbfs(x_hp, n_rows) > cfg.silence_dbfs, kernels.peak_slope(x_hp, n_rows, HOP), np.nan)


def track(
    x: np.ndarray, x_hp: np.ndarray, n_rows: int, cfg: CovarepConfig, floor_dbfs: np.ndarray | None = None,
    kernels: Kernels = NUMPY_KERNELS,
) -> tuple[np.ndarray, np.ndarray]:
    """(F0 in Hz, 0 where the tracker gave none; voiced mask) of a block: tracker, voicing decision, grown runs,
    autocorrelation seeds, grown runs, harmonic check, refinement. `floor_dbfs` as in analyse_block."""
    f0 = f0_rows(x, n_rows, cfg, kernels)
    if floor_dbfs is None:
        floor_dbfs = relative_floor_dbfs(x, n_rows, cfg)
    loud = loud_rows(x, n_rows, cfg, floor_dbfs)
    voiced = voicing(x, x_hp, f0, cfg, floor_dbfs, kernels, loud=loud)
    f0, voiced = grow_voicing(x_hp, f0, voiced, loud, cfg, kernels=kernels)
    if cfg.seed_acf > 0:
        f0, seeded = seed_voicing(x_hp, f0, voiced, loud, cfg, kernels)
        if (seeded & ~voiced).any():
            f0, voiced = grow_voicing(x_hp, f0, seeded, loud, cfg, start=seeded & ~voiced, kernels=kernels)
    if cfg.harmonic_check:
        f0, voiced = harmonic_check(x_hp, f0, voiced, loud, cfg, kernels)
    if cfg.f0_refine:
        f0 = refine_f0(x_hp, f0, voiced, cfg, kernels)
    return f0, voiced


def analyse_block(
    x: np.ndarray, cfg: CovarepConfig, floor_dbfs: np.ndarray | None = None, kernels: Kernels = NUMPY_KERNELS,
    n_samples: int | None = None,
) -> np.ndarray:
    """(len(x) // HOP, D) rows for one block whose first sample sits on a row boundary; `floor_dbfs`: the block's
    rows of `relative_floor_dbfs` (computed on the whole clip; None = computed on this block alone); `kernels`:
    the backend's (the default is the numpy reference, whatever cfg.backend says); `n_samples`: the block's samples
    of the clip itself, the rest being the zeros that fill its last row (None: all of x)."""
    n_rows = x.size // HOP
    x = np.asarray(x[: n_rows * HOP], dtype=np.float64)
    x_hp = glottal.highpass(x, FS_HZ)
    f0, voiced = track(x, x_hp, n_rows, cfg, floor_dbfs, kernels)
    cols = glottal_rows(x_hp, f0, voiced, cfg, kernels)
    cols["f0"] = np.where(voiced, f0, np.nan)
    cols["vuv"] = voiced.astype(float)
    cols["peak_slope"] = peak_slope_rows(x_hp, n_rows, cfg, kernels)
    if cfg.layout == "covarep74":
        polarity = float(cols.pop("polarity", np.ones(1))[0])
        cols.update(spectral_rows(x, f0, voiced, polarity, kernels, n_samples))
        return np.column_stack([cols[COVAREP74_SOURCES.get(c, c)] for c in COVAREP74_COLUMNS])
    mfcc = mfcc_rows(x, n_rows, cfg, kernels)
    names = Covarep.columns(cfg)
    return np.column_stack([cols[c] for c in names[: -cfg.n_mfcc]] + [mfcc])


@register
class Covarep(Extractor[CovarepConfig]):
    name = "covarep"
    version = "13"
    config_type = CovarepConfig
    input_kind = "audio"
    uses_gpu = False  # the reference; the torch backend asks for a GPU (`wants_gpu`)
    # the SDK's SOCIAL_IQ_COVAREP: COVAREP's 74 columns (layout "covarep74"), 0 where a value is undefined
    sdk_sequence = SdkSequence("SOCIAL_IQ_COVAREP", columns=tuple(COVAREP74_COLUMNS), undefined_as=0.0)

    @classmethod
    def weights(cls, config: CovarepConfig) -> tuple[Weights, ...]:
        return ()  # signal processing: nothing to load

    @classmethod
    def citation(cls, config: dict) -> str:
        return ("@inproceedings{degottex2014covarep, title={COVAREP: A collaborative voice analysis repository for "
                "speech technologies}, author={Degottex, Gilles and Kane, John and Drugman, Thomas and Raitio, Tuomo "
                "and Scherer, Stefan}, booktitle={ICASSP}, year={2014}} "  # and WORLD's, whose F0 tracker it uses
                "@article{morise2016world, title={WORLD: A Vocoder-Based High-Quality Speech Synthesis System for "
                "Real-Time Applications}, author={Morise, Masanori and Yokomori, Fumiya and Ozawa, Kenji}, "
                "journal={IEICE Transactions on Information and Systems}, volume={E99-D}, number={7}, year={2016}}")

    def __init__(self, config: CovarepConfig, device: str = "cpu") -> None:
        super().__init__(config, device)
        self.kernels = kernels_for(config, device)

    @classmethod
    def wants_gpu(cls, config: CovarepConfig) -> bool:
        return config.backend == "torch" and config.device != "cpu"

    @classmethod
    def columns(cls, config: CovarepConfig) -> list[str]:
        if config.layout == "covarep74":
            return list(COVAREP74_COLUMNS)
        return ["f0", "vuv", *GLOTTAL_COLUMNS, "peak_slope"] + [f"mfcc_{i}" for i in range(config.n_mfcc)]

    @classmethod
    def rate_hz(cls, config: CovarepConfig) -> float:
        return 1.0 / HOP_S

    def extract(self, x: Audio) -> FeatureRows:
        if x.samples.size == 0 or x.duration_s <= 0:
            raise ValueError(f"covarep: zero-length audio ({x.samples.size} samples, duration_s={x.duration_s})")
        bad = np.flatnonzero(~np.isfinite(x.samples))
        if bad.size:  # checked first: the F0 tracker would spend its time on them before librosa refuses them
            raise ValueError(f"covarep: {bad.size} non-finite audio samples (NaN or inf), the first at "
                             f"{bad[0] / x.sample_rate_hz:.3f} s; the decoded audio is corrupt")
        samples = x.samples
        if x.sample_rate_hz != FS_HZ:
            samples = librosa.resample(samples, orig_sr=x.sample_rate_hz, target_sr=FS_HZ, res_type="soxr_hq")
        n_rows = n_rows_for(x.duration_s)
        padded = np.zeros(n_rows * HOP)
        padded[: min(padded.size, samples.size)] = samples[: padded.size]
        features = np.empty((n_rows, len(self.columns(self.config))))
        step, margin = round(self.config.block_s / HOP_S), round(self.config.block_margin_s / HOP_S)
        floor_dbfs = relative_floor_dbfs(padded, n_rows, self.config)
        for r0 in range(0, n_rows, step):
            r1 = min(n_rows, r0 + step)
            a, b = max(0, r0 - margin), min(n_rows, r1 + margin)
            block_floor = None if floor_dbfs is None else floor_dbfs[a:b]
            own = min(samples.size, b * HOP) - a * HOP  # the block's samples of the clip, before the last row's fill
            block = analyse_block(padded[a * HOP : b * HOP], self.config, block_floor, self.kernels, own)
            features[r0:r1] = block[r0 - a : r1 - a]
        if x.duration_s < PEAK_SLOPE_WINDOW_S:  # shorter than one analysis window: the padding would be measured
            names = self.columns(self.config)
            features[:, names.index("peak_slope" if "peak_slope" in names else "peakSlope")] = np.nan
        intervals = rate_intervals(n_rows, FS_HZ / HOP, x.duration_s)  # from integers: no float-noise overlaps
        vuv = features[:, 1]
        return FeatureRows(
            features=features.astype(np.float32),
            intervals=intervals,
            attrs={
                "voiced_fraction": float(vuv.mean()),
                "sample_rate_hz": FS_HZ,
                "resampled": x.sample_rate_hz != FS_HZ,
                **low_band(padded),
            },
        )
