"""The covarep feature against ground truth (LF-model vowels), an independent tracker (Praat) and librosa itself."""

from __future__ import annotations

import shutil
import subprocess
import warnings

import librosa
import numpy as np
import pytest
from scipy.io import wavfile
from scipy.linalg import solve_toeplitz
from scipy.signal import butter, convolve, lfilter, sosfilt, welch

from extractors import glottal
from extractors.acoustic import (
    HOP,
    Covarep,
    CovarepConfig,
    analyse_block,
    f0_rows,
    glottal_flow,
    harmonic_check,
    long_term_spectrum,
    loud_rows,
    refine_f0,
    relative_floor_dbfs,
    rms_dbfs,
    voicing,
)
from extractors.base import Audio, get_extractor, parse_config
from testing.synth_voice import FS_HZ, HIGHER_FORMANTS, VOWEL_A, lf_derivative, naq_per_period, synth_vowel

RDS = (0.5, 1.0, 1.5, 2.0, 2.5)


def run(speech: np.ndarray, cfg: CovarepConfig | None = None, fs: int = FS_HZ) -> dict[str, np.ndarray]:
    cfg = cfg or CovarepConfig(layout="mfcc23", f0_method="dio")
    rows = Covarep(cfg).extract(Audio(speech.astype(np.float32), fs, speech.size / fs))
    return {name: rows.features[:, i].astype(float) for i, name in enumerate(Covarep.columns(cfg))}


def row_times(n: int) -> np.ndarray:
    return (np.arange(n) + 0.5) * 0.01


@pytest.fixture(scope="module")
def rd_sweep() -> dict[float, tuple[dict[str, np.ndarray], float]]:
    """Per Rd: the extracted columns of a 1 s vowel (F0 110->130 Hz) and the true median NAQ of its periods."""
    out = {}
    for rd in RDS:
        voice = synth_vowel(1.0, lambda t: 110 + 20 * t, rd)
        out[rd] = (run(voice.speech), float(np.median(naq_per_period(voice))))
    return out


def test_registry_columns_and_row_grid() -> None:
    cfg = parse_config({"extractor": "covarep", "layout": "mfcc23"})
    assert get_extractor("covarep") is Covarep and isinstance(cfg, CovarepConfig)
    cols = Covarep.columns(cfg)
    assert cols[:11] == ["f0", "vuv", "naq", "qoq", "h1h2", "hrf", "psp", "mdq", "rd", "peak_slope", "mfcc_0"]
    assert len(cols) == 10 + 13 and Covarep.rate_hz(cfg) == 100.0
    rows = Covarep(CovarepConfig(layout="mfcc23", f0_method="dio")).extract(Audio(np.zeros(1128, np.float32), FS_HZ, 0.0705))
    assert rows.features.shape == (8, len(cols)) and rows.features.dtype == np.float32
    np.testing.assert_allclose(rows.intervals[:, 0], np.arange(8) * 0.01)
    np.testing.assert_allclose(rows.intervals[-1], [0.07, 0.0705])
    with pytest.raises(ValueError, match="f0_floor_hz"):
        CovarepConfig(layout="mfcc23", f0_floor_hz=300, f0_ceil_hz=200)


@pytest.mark.parametrize("method", ["harvest", "dio"])
def test_f0_follows_glide(method: str) -> None:
    """100 -> 220 Hz linear glide: median F0 error < 1 % on rows voiced in truth and output."""
    voice = synth_vowel(1.2, lambda t: 100 + 100 * t, 1.0)
    cols = run(voice.speech, CovarepConfig(layout="mfcc23", f0_method=method))
    truth = 100 + 100 * row_times(120)
    both = (cols["vuv"] == 1)[5:-5]
    assert both.mean() > 0.95
    err = np.abs(cols["f0"][5:-5][both] / truth[5:-5][both] - 1)
    assert np.median(err) < 0.01, np.median(err)
    assert np.all(np.isnan(cols["f0"][cols["vuv"] == 0]))


def three_period_f0(gcis_s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Truth: mean F0 over 3 local periods centred on each time (cycle count interpolated linearly between the
    synthetic GCIs; local period = the cycle containing t); NaN near the ends."""
    i = np.searchsorted(gcis_s, t)
    out = np.full(t.size, np.nan)
    ok = (i >= 1) & (i < gcis_s.size)
    half = np.where(ok, 1.5 * (gcis_s[np.minimum(i, gcis_s.size - 1)] - gcis_s[np.maximum(i - 1, 0)]), 0.0)
    ok &= (t - half > gcis_s[0]) & (t + half < gcis_s[-1])
    cycles = np.arange(gcis_s.size, dtype=float)
    out[ok] = (np.interp(t[ok] + half[ok], gcis_s, cycles) - np.interp(t[ok] - half[ok], gcis_s, cycles)) / (
        2 * half[ok]
    )
    return out


@pytest.mark.parametrize("f0_hz", [120.0, 220.0])
def test_f0_follows_jittered_periods(f0_hz: float) -> None:
    """LF vowel whose periods jitter by 1 % (random, one value per period): F0 against the mean over 3 periods
    centred on each row, median <= 2 cents and 90th percentile <= 5 cents. Version 4 (StoneMask's F0 as it comes)
    gave 2.7 / 7.4 cents at 120 Hz and 3.7 / 9.7 at 220 Hz; the sub-sample NCCF refinement gives 1.3 / 3.2, 1.2 / 3.2."""
    steps = 1 + 0.01 * np.random.default_rng(int(f0_hz)).standard_normal(1000)
    voice = synth_vowel(1.0, lambda t: f0_hz * steps[np.minimum((np.asarray(t) * f0_hz).astype(int), 999)], 1.0,
                        noise_rms=1e-3)  # fmt: skip
    f0 = run(voice.speech, CovarepConfig(layout="mfcc23"))["f0"]
    truth = three_period_f0(voice.gcis / FS_HZ, row_times(f0.size))
    both = np.isfinite(f0) & np.isfinite(truth)
    assert both.sum() >= 90, both.sum()
    err = 1200 * np.abs(np.log2(f0[both] / truth[both]))
    assert np.median(err) <= 2.0 and np.percentile(err, 90) <= 5.0, (np.median(err), np.percentile(err, 90))


WEAK_SPANS = [(0.1, 0.6), (0.8, 1.4), (1.6, 1.9)]


def high_passed_vowels(f0_hz: float, order: int, cutoff_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """(2 s of LF vowels at f0_hz + 25 sin(3t) in WEAK_SPANS through a Butterworth high-pass, rows truly voiced)."""
    from scipy.signal import butter, sosfilt

    voice = synth_vowel(2.0, lambda t: f0_hz + 25 * np.sin(3 * t), 1.2, voiced_spans_s=WEAK_SPANS, noise_rms=3e-4)
    t = row_times(200)
    truth = np.any([(t >= a) & (t < b) for a, b in WEAK_SPANS], axis=0)
    return sosfilt(butter(order, cutoff_hz, "highpass", fs=FS_HZ, output="sos"), voice.speech), truth


def assert_voiced_where_voiced(cols: dict, f0_hz: float, truth: np.ndarray) -> None:
    """>= 97 % of the voiced rows voiced, none more than 20 ms from a span; F0 median <= 3 cents, no gross error."""
    t = row_times(200)
    away = np.all([(t < a - 0.02) | (t >= b + 0.02) for a, b in WEAK_SPANS], axis=0)
    voiced = cols["vuv"] == 1
    assert voiced[truth].mean() >= 0.97, voiced[truth].mean()
    assert not voiced[away].any()
    err = 1200 * np.abs(np.log2(cols["f0"][voiced & truth] / (f0_hz + 25 * np.sin(3 * t[voiced & truth]))))
    assert np.median(err) <= 3.0 and err.max() < 50, (np.median(err), err.max())


@pytest.mark.parametrize("f0_hz", [90.0, 110.0, 140.0])
def test_weak_fundamental_stays_voiced(f0_hz: float) -> None:
    """A voice whose fundamental the channel weakens (4th-order high-pass at 350 Hz, as a headset or a small
    loudspeaker does; not telephone band: the rest of the spectrum is there) is still voiced where it is voiced:
    DIO alone (grow_rows=0, seed_acf=0: version 5) leaves 10-29 % of its rows unvoiced; runs grown at the neighbours' period
    recover them (99.3-100 %) with F0 within 3 cents (median) and no gross error; rows more than 20 ms from a
    span's edge stay unvoiced."""
    x, truth = high_passed_vowels(f0_hz, 4, 350.0)
    assert_voiced_where_voiced(run(x), f0_hz, truth)
    if f0_hz == 110.0:  # what the test is about: the tracker alone loses this voice
        assert (run(x, CovarepConfig(layout="mfcc23", grow_rows=0, seed_acf=0))["vuv"][truth] == 1).mean() <= 0.9


@pytest.mark.parametrize("f0_hz", [110.0, 140.0])
def test_no_fundamental_left_for_the_tracker(f0_hz: float) -> None:
    """A channel that removes the fundamental and the next harmonics (8th-order high-pass at 600 Hz): DIO gives F0 = 0
    on every row, so no run has a seed to grow from (without seed_voicing nothing is voiced); the normalised
    autocorrelation still finds the period: >= 97 % of the voiced rows voiced, F0 median within 3 cents and no gross
    error (measured 100 %, 2.3-2.9 c, max 16-18 c), rows more than 20 ms from a span's edge unvoiced (the formant
    ringing on after each span stays out)."""
    x, truth = high_passed_vowels(f0_hz, 8, 600.0)
    assert not f0_rows(x.astype(np.float32).astype(np.float64), 200, CovarepConfig(layout="mfcc23")).any()
    assert not (run(x, CovarepConfig(layout="mfcc23", seed_acf=0))["vuv"] == 1).any()
    assert_voiced_where_voiced(run(x), f0_hz, truth)


def check_harmonics(
    x: np.ndarray, f0: np.ndarray, voiced: np.ndarray, refine: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(F0, refined unless `refine` is False; voiced) after harmonic_check, given a tracker's F0 and voicing."""
    cfg = CovarepConfig(layout="mfcc23")
    n = f0.size
    x = np.asarray(x[: n * HOP], dtype=np.float64)
    x_hp = glottal.highpass(x, FS_HZ)
    loud = loud_rows(x, n, cfg, relative_floor_dbfs(x, n, cfg))
    f0, voiced = harmonic_check(x_hp, f0, voiced, loud, cfg)
    return (refine_f0(x_hp, f0, voiced, cfg) if refine else f0), voiced


@pytest.mark.parametrize(("f0_hz", "k", "cutoff_hz"), [(75.0, 4, 350.0), (85.0, 3, 350.0), (120.0, 2, None)])
def test_segment_on_a_harmonic_moves_to_the_fundamental(f0_hz: float, k: int, cutoff_hz: float | None) -> None:
    """A tracker on the k-th harmonic for a whole vowel (F0 = k x truth on every row, as DIO gives on
    phonlab_two_plus_two's last vowel: 4x, where the microphone weakens the fundamental; here with and without a
    4th-order high-pass at 350 Hz): the signal repeats far better at k tracked periods than at one, so the segment
    moves to the fundamental: F0 median <= 3 cents from the truth and no row more than 20 cents off (refined), the
    voicing unchanged. Without the check every row stays 1,200-2,400 cents off."""
    spans = [(0.1, 0.5)]
    voice = synth_vowel(0.6, lambda t: f0_hz + 5 * np.sin(3 * t), 1.0, voiced_spans_s=spans, noise_rms=3e-4)
    x = voice.speech.astype(np.float64)
    if cutoff_hz is not None:
        x = sosfilt(butter(4, cutoff_hz, "highpass", fs=FS_HZ, output="sos"), x)
    t = row_times(60)
    true_f0 = f0_hz + 5 * np.sin(3 * t)
    tracked = (t >= 0.13) & (t < 0.47)
    f0, voiced = check_harmonics(x, np.where(tracked, k * true_f0, 0.0), tracked)
    assert np.array_equal(voiced, tracked)
    err = 1200 * np.abs(np.log2(f0[voiced] / true_f0[voiced]))
    assert np.median(err) <= 3.0 and err.max() < 20, (np.median(err), err.max())


@pytest.mark.parametrize("f0_hz", [130.0, 250.0, 330.0])
def test_segment_on_the_fundamental_stays(f0_hz: float) -> None:
    """The control: a vowel tracked right (F0 / 2 ... F0 / 4 within the floor, so the subharmonic test runs) keeps
    every row's F0 and voicing; at 2 or 3 true periods the signal repeats as well as at one, not better by 0.03."""
    voice = synth_vowel(0.6, lambda t: f0_hz + 5 * np.sin(3 * t), 1.0, voiced_spans_s=[(0.1, 0.5)], noise_rms=3e-4)
    t = row_times(60)
    tracked = (t >= 0.13) & (t < 0.47)
    f0_in = np.where(tracked, f0_hz + 5 * np.sin(3 * t), 0.0)
    f0, voiced = check_harmonics(voice.speech, f0_in, tracked, refine=False)
    assert np.array_equal(voiced, tracked) and np.array_equal(f0, f0_in)


def test_island_far_above_its_neighbours_is_regrown() -> None:
    """A few rows far above the rest of a vowel, with an unvoiced row on each side (phonlab_two_plus_two: 5 rows at
    275-367 Hz between rows at 99 and 73 Hz; DIO there is on no exact harmonic, 3.4-4.5x, so the subharmonic test
    cannot place them): the rows are unvoiced and the neighbours grow into them at their own period. The 5 rows come
    back voiced within 20 cents of the truth. The control: the same rows next to a lower run on one side only (the
    vowel ends after them) stay as they were (on phonlab_F1_bha24_1 such rows are the right ones, by its EGG)."""
    voice = synth_vowel(0.6, lambda t: 100 + 5 * np.sin(3 * t), 1.0, voiced_spans_s=[(0.1, 0.5)], noise_rms=3e-4)
    t = row_times(60)
    true_f0 = 100 + 5 * np.sin(3 * t)
    tracked = (t >= 0.13) & (t < 0.47)
    island = (t >= 0.28) & (t < 0.33)  # rows 28-32
    f0_in = np.where(island, 3.4 * true_f0, np.where(tracked, true_f0, 0.0))
    tracked_gaps = tracked.copy()
    tracked_gaps[[27, 33]] = False
    f0, voiced = check_harmonics(voice.speech, f0_in, tracked_gaps)
    assert voiced[island].all()
    err = 1200 * np.abs(np.log2(f0[voiced] / true_f0[voiced]))
    assert err.max() < 20, err.max()
    one_sided = tracked_gaps & (t < 0.33)  # nothing after the high rows
    f0, voiced = check_harmonics(voice.speech, np.where(one_sided, f0_in, 0.0), one_sided, refine=False)
    assert np.array_equal(voiced, one_sided) and np.array_equal(f0[one_sided], f0_in[one_sided])


@pytest.mark.parametrize("hum_hz", [100.0, 120.0])
def test_mains_hum_in_pauses_stays_unvoiced(hum_hz: float) -> None:
    """Vowels with pauses, and a mains hum (2nd harmonic of 50 / 60 Hz, with its own 2nd and 3rd) 36 dB below the
    vowels' loudest 25 ms RMS throughout: the pauses stay unvoiced (the relative gate); without it the steady,
    perfectly periodic hum is voiced in most pause rows (version 5: 77 % at 100 Hz, 87 % at 120 Hz)."""
    spans = [(0.1, 0.5), (0.8, 1.2), (1.5, 1.9)]
    voice = synth_vowel(2.0, lambda t: 120 + 30 * np.sin(3 * t), 1.2, voiced_spans_s=spans, noise_rms=3e-4)
    t_s = np.arange(voice.speech.size) / FS_HZ
    hum = sum(a * np.sin(2 * np.pi * k * hum_hz * t_s) for k, a in ((1, 1.0), (2, 0.3), (3, 0.1)))
    loudest_db = rms_dbfs(voice.speech.astype(np.float64), 200).max()
    hum *= 10 ** ((loudest_db - 36) / 20) / np.sqrt(np.mean(hum**2))
    t = row_times(200)
    truth = np.any([(t >= a) & (t < b) for a, b in spans], axis=0)
    pause = np.all([(t < a - 0.03) | (t >= b + 0.03) for a, b in spans], axis=0)
    cols = run(voice.speech + hum)
    assert np.mean(cols["vuv"][pause] == 1) <= 0.02, np.mean(cols["vuv"][pause] == 1)
    assert np.mean((cols["vuv"] == 1) == truth) >= 0.95
    ungated = run(voice.speech + hum, CovarepConfig(layout="mfcc23", relative_silence_db=None))
    assert np.mean(ungated["vuv"][pause] == 1) >= 0.5  # the hum is a real test: periodic and above -60 dBFS


@pytest.mark.parametrize("method", ["harvest", "dio"])
def test_voicing_alternation(method: str) -> None:
    spans = [(0.1, 0.5), (0.8, 1.2), (1.5, 1.9)]
    voice = synth_vowel(2.0, lambda t: 120 + 30 * np.sin(3 * t), 1.2, voiced_spans_s=spans, noise_rms=3e-4)
    cols = run(voice.speech, CovarepConfig(layout="mfcc23", f0_method=method))
    t = row_times(200)
    truth = np.any([(t >= a) & (t < b) for a, b in spans], axis=0)
    assert np.mean((cols["vuv"] == 1) == truth) >= 0.95
    for name in ("f0", "naq", "qoq", "h1h2", "hrf", "psp", "mdq", "rd"):
        assert np.all(np.isnan(cols[name][cols["vuv"] == 0])), name


def test_naq_matches_lf_truth(rd_sweep: dict) -> None:
    """NAQ within 15 % of the value measured on the synthetic flow, and increasing with Rd."""
    medians = []
    for rd, (cols, true_naq) in rd_sweep.items():
        est = np.nanmedian(cols["naq"][10:90])
        assert abs(est / true_naq - 1) < 0.15, (rd, est, true_naq)
        medians.append(est)
    assert np.all(np.diff(medians) > 0), medians


@pytest.mark.parametrize(
    ("name", "sign"), [("mdq", 1), ("peak_slope", -1), ("h1h2", 1), ("hrf", -1), ("qoq", 1), ("psp", 1)]
)
def test_voice_quality_direction(rd_sweep: dict, name: str, sign: int) -> None:
    """Pressed (Rd 0.5) to breathy (Rd 2.5): MDQ, H1-H2, QOQ, PSP rise; peak slope, HRF fall (docs/acoustic.md).
    MDQ measured as COVAREP does (version 8: its LP residual and SEDREAMS GCIs) rises up to Rd 2.0 and levels off
    above it on these vowels (0.113 -> 0.103 at 2.5); the breathiest vowel must still read above the pressed and
    modal ones."""
    medians = np.array([np.nanmedian(rd_sweep[rd][0][name][10:90]) for rd in RDS])
    if name == "mdq":
        assert np.all(np.diff(medians[:-1]) > 0) and medians[-1] > medians[:2].max(), (name, medians)
        return
    assert np.all(sign * np.diff(medians) > 0), (name, medians)


def test_gcis_match_lf_closures() -> None:
    voice = synth_vowel(1.0, lambda t: 100 + 60 * t, 1.0)
    x = voice.speech.astype(float)
    cfg = CovarepConfig(layout="mfcc23", f0_method="dio")
    f0 = f0_rows(x, 100, cfg)
    voiced = f0 > 0
    _, gcis, _ = glottal_flow(glottal.highpass(x, FS_HZ), f0, voiced, cfg)
    true = voice.gcis[(voice.gcis > 800) & (voice.gcis < 15200)]
    nearest = np.abs(gcis[np.argmin(np.abs(gcis[None] - true[:, None]), axis=1)] - true)
    assert np.mean(nearest <= 0.0005 * FS_HZ) >= 0.95, np.median(nearest)
    inside = gcis[(gcis > 800) & (gcis < 15200)]
    assert abs(inside.size - true.size) <= 2


VOWEL_E = ((530, 60), (1840, 100), (2480, 120), (3400, 175), (4500, 250))
VOWEL_U = ((300, 60), (870, 100), (2240, 120), (3400, 175), (4500, 250))


@pytest.mark.parametrize("formants", [None, VOWEL_E], ids=["a", "e"])
@pytest.mark.parametrize("rd_from_to", [(2.5, 0.5), (0.5, 2.5)], ids=["pressing", "relaxing"])
def test_gcis_within_quarter_ms_as_voice_quality_changes(formants: tuple | None, rd_from_to: tuple) -> None:
    """2 s vowels whose Rd sweeps between breathy and pressed while F0 rises 100 -> 140 Hz, noise at -40 dB re
    peak: >= 95 % of the true excitation instants within 0.25 ms once the clip's median offset is taken out (the
    EGG test's measure, where that offset is the larynx-to-microphone delay). Pressing / relaxing, version 4
    (minima of the 2 kHz low-passed derivative, not refined): /a/ 94.7 / 96.5 %, /e/ 89.5 / 93.4 %; version 5
    (refined at 1 kHz): 100 / 100 %, 99.1 / 100 %."""
    kw = {} if formants is None else {"formants": formants}
    rd0, rd1 = rd_from_to
    voice = synth_vowel(2.0, lambda t: 100 + 20 * t, lambda t: rd0 + (rd1 - rd0) * t / 2, noise_rms=5e-3, **kw)
    x = voice.speech.astype(float)
    cfg = CovarepConfig(layout="mfcc23")
    f0 = f0_rows(x, x.size // HOP, cfg)
    x_hp = glottal.highpass(x, FS_HZ)
    _, gcis, _ = glottal_flow(x_hp, f0, voicing(x, x_hp, f0, cfg), cfg)
    true = voice.gcis[(voice.gcis > 800) & (voice.gcis < x.size - 800)]
    offset = gcis[np.argmin(np.abs(gcis[None] - true[:, None]), axis=1)] - true
    hit = np.mean(np.abs(offset - np.median(offset)) <= 0.00025 * FS_HZ)
    assert hit >= 0.95, (hit, np.median(offset))


def test_inverted_polarity_gives_same_naq(rd_sweep: dict) -> None:
    voice = synth_vowel(1.0, lambda t: 110 + 20 * t, 1.0)
    flipped = np.nanmedian(run(-voice.speech)["naq"][10:90])
    assert flipped == pytest.approx(np.nanmedian(rd_sweep[1.0][0]["naq"][10:90]), rel=0.05)


def test_long_term_spectrum_equals_welch() -> None:
    """The band check's spectrum (one batch of segment FFTs) against scipy.signal.welch's, whose estimate it
    computes: same frequencies, densities within float rounding, also for a signal shorter than a segment."""
    rng = np.random.default_rng(3)
    for n in (700, 1024, 5000, 3 * FS_HZ + 17):
        x = rng.normal(size=n) * np.linspace(0.1, 1, n) + 0.05
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # welch's "nperseg is greater than the signal length"
            f, p = welch(x, FS_HZ, nperseg=1024, noverlap=0)
            g, q = long_term_spectrum(x)
        np.testing.assert_array_equal(g, f)
        np.testing.assert_allclose(q, p, rtol=1e-12, atol=0)


def test_mfcc_equal_direct_librosa_call() -> None:
    rng = np.random.default_rng(1)
    x = (0.1 * rng.standard_normal(16000) * np.sin(np.linspace(0, 9, 16000))).astype(np.float32)
    cols = run(x)
    y = x.astype(np.float64)[HOP // 2 :]  # rows are centred at (i + 0.5) * 10 ms
    mel = librosa.feature.melspectrogram(
        y=y, sr=16000, n_fft=512, hop_length=160, win_length=400, window="hann", center=True,
        pad_mode="constant", power=2.0, n_mels=40, fmin=20.0, fmax=8000.0,
    )  # fmt: skip
    ref = librosa.feature.mfcc(S=librosa.power_to_db(mel, top_db=None), n_mfcc=13)[:, :100].T
    got = np.column_stack([cols[f"mfcc_{i}"] for i in range(13)])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-3)


def test_blocks_match_one_pass() -> None:
    spans = [(0.2, 1.1), (1.4, 2.6), (2.9, 3.8)]
    voice = synth_vowel(4.0, lambda t: 110 + 40 * np.sin(2 * t), lambda t: 0.8 + 0.4 * t, voiced_spans_s=spans)
    whole = run(voice.speech, CovarepConfig(layout="mfcc23", f0_method="harvest"))
    blocks = run(voice.speech, CovarepConfig(layout="mfcc23", f0_method="harvest", block_s=1.0, block_margin_s=0.5))
    # everything but Harvest's F0 and the cycle measures is bit-identical; Harvest differs by < 0.1 %. The cycle
    # measures (version 8) read SEDREAMS GCIs, whose mean F0, orientation and relative GCI position are estimated
    # per block, as COVAREP estimates them per file: a few rows may differ (3 of 400 here, at a voiced run's end)
    for name, ref in whole.items():
        if name == "f0":
            np.testing.assert_allclose(blocks[name], ref, rtol=1e-3)
        elif name in ("naq", "qoq", "psp", "mdq"):
            same = (blocks[name] == ref) | (np.isnan(blocks[name]) & np.isnan(ref))
            assert same.mean() >= 0.98, (name, np.flatnonzero(~same))
            np.testing.assert_array_equal(np.isnan(blocks[name]), np.isnan(ref), err_msg=name)
        else:
            np.testing.assert_array_equal(blocks[name], ref, err_msg=name)


def test_silence_and_empty_input() -> None:
    cols = run(np.zeros(8000, np.float32))
    assert np.all(cols["vuv"] == 0)
    for name in ("f0", "naq", "qoq", "h1h2", "hrf", "psp", "mdq", "peak_slope"):
        assert np.all(np.isnan(cols[name])), name
    assert np.all(np.isfinite(cols["mfcc_0"]))
    with pytest.raises(ValueError, match="zero-length"):
        Covarep(CovarepConfig(layout="mfcc23")).extract(Audio(np.zeros(0, np.float32), FS_HZ, 0.0))
    corrupt = np.zeros(8000, np.float32)
    corrupt[[4000, 4100]] = [np.nan, np.inf]
    with pytest.raises(ValueError, match=r"2 non-finite audio samples .* first at 0\.250 s"):
        Covarep(CovarepConfig(layout="mfcc23")).extract(Audio(corrupt, FS_HZ, 0.5))
    with pytest.raises(ValueError, match="block_margin_s"):
        CovarepConfig(layout="mfcc23", block_margin_s=0.3)


def test_other_sample_rate_is_resampled_once() -> None:
    voice = synth_vowel(1.0, lambda t: 150 + 0 * t, 1.0)
    x22 = librosa.resample(voice.speech.astype(np.float64), orig_sr=FS_HZ, target_sr=22050).astype(np.float32)
    cols = run(x22, fs=22050)
    assert cols["f0"].size == 100
    assert np.nanmedian(np.abs(cols["f0"][5:-5] / 150 - 1)) < 0.01


def test_block_helpers_line_up() -> None:
    """rms gate and analyse_block see the same rows as extract (no half-hop shift between parts)."""
    x = np.zeros(1600)
    x[800:960] = 0.5  # row 5 only
    assert np.argmax(rms_dbfs(x, 10)) == 5
    assert analyse_block(x, CovarepConfig(layout="mfcc23", f0_method="dio")).shape == (10, 23)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng not installed")
def test_f0_agrees_with_praat_on_espeak_speech(tmp_path) -> None:
    parselmouth = pytest.importorskip("parselmouth")
    wav = tmp_path / "out.wav"
    text = "The quick brown fox jumps over the lazy dog, and then it rests for a while."
    subprocess.run(["espeak-ng", "-w", str(wav), text], check=True, capture_output=True)
    rate, pcm = wavfile.read(wav)
    y = librosa.resample(pcm.astype(np.float64) / 32768.0, orig_sr=rate, target_sr=FS_HZ, res_type="soxr_hq")
    cols = run(y, CovarepConfig(layout="mfcc23", f0_method="harvest", f0_floor_hz=60, f0_ceil_hz=400))
    pitch = parselmouth.Sound(y.astype(np.float64), FS_HZ).to_pitch(time_step=0.01, pitch_floor=60, pitch_ceiling=400)
    praat = np.array([pitch.get_value_at_time(t) for t in row_times(cols["f0"].size)], dtype=float)
    both = np.isfinite(praat) & (cols["vuv"] == 1)
    assert both.sum() > 100
    assert np.median(np.abs(cols["f0"][both] / praat[both] - 1)) < 0.02


# The fast paths in extractors/glottal.py against direct references (docs/acoustic.md, "Throughput").


@pytest.mark.parametrize("size", [1, 700, 20000])
def test_wavelet_bands_equal_direct_convolution(size: int) -> None:
    """Overlap-save with a shared signal FFT == direct 'same' convolution, also for inputs shorter than a segment."""
    x = np.random.default_rng(3).standard_normal(size)
    got = glottal.wavelet_bands(x, [1, 4, 64])
    for row, s in zip(got, [1, 4, 64], strict=True):
        t = np.arange(-5 * s, 5 * s + 1) / s
        ref = convolve(x, -np.cos(np.pi * t) * np.exp(-(t**2) / 2), mode="same", method="direct")
        np.testing.assert_allclose(row, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("order", [1, 8, 20])
def test_lpc_rows_solve_the_normal_equations(order: int) -> None:
    """Autocorrelation LPC == the Toeplitz solve on np.correlate of the Hann-windowed frame (up to the 1e-9 noise)."""
    frames = np.random.default_rng(4).standard_normal((5, 400))
    a = glottal.lpc_rows(frames, order)
    for row, frame in zip(a, frames * np.hanning(400), strict=True):
        r = np.correlate(frame, frame, "full")[399 : 400 + order]
        np.testing.assert_allclose(row, np.r_[1.0, solve_toeplitz(r[:order], -r[1:])], rtol=0, atol=1e-7)


def test_wlp_rows_solve_the_weighted_least_squares() -> None:
    """Weighted LP == lstsq on the explicitly weighted lagged matrix; with unit weights == autocorrelation LPC."""
    rng = np.random.default_rng(7)
    order, n = 12, 300
    frames, weights = rng.standard_normal((4, n)), rng.uniform(1e-5, 1.0, (4, n + order))
    a = glottal.wlp_rows(frames, weights, order)
    for row, frame, w in zip(a, frames * np.hanning(n), weights, strict=True):
        lagged = np.stack([np.r_[np.zeros(k), frame, np.zeros(order - k)] for k in range(order + 1)], axis=1)
        sw = np.sqrt(w)[:, None]
        coef = np.linalg.lstsq(lagged[:, 1:] * sw, -lagged[:, 0] * sw[:, 0], rcond=None)[0]
        np.testing.assert_allclose(row, np.r_[1.0, coef], rtol=0, atol=1e-6)
    ones = glottal.wlp_rows(frames, np.ones((4, n + order)), order)
    np.testing.assert_allclose(ones, glottal.lpc_rows(frames, order), rtol=0, atol=1e-6)


def test_gfm_filters_match_a_per_frame_reference() -> None:
    """GFM first stage == per frame: integrate, three cascaded 1st-order LPCs (np.convolve), cancel them (lfilter with
    the frame's past), order-20 LPC; each LPC the Toeplitz solve of np.correlate on the Hann-windowed frame."""

    def lpc(frame: np.ndarray, order: int) -> np.ndarray:
        w = frame * np.hanning(frame.size)
        r = np.correlate(w, w, "full")[w.size - 1 : w.size + order]
        return np.r_[1.0, solve_toeplitz(r[:order], -r[1:])]

    x = np.random.default_rng(9).standard_normal(4000)
    centres, length = np.array([600, 1777, 3000]), round(glottal.IAIF_FRAME_S * 16000)
    got = glottal.gfm_filters(x, centres, 16000, 0.99)
    gv = lfilter([1.0], [1.0, -0.99], x)
    for row, c in zip(got, centres, strict=True):
        lo = c - length // 2
        ag = lpc(gv[lo : lo + length], 1)
        for _ in range(2):
            ag = np.convolve(ag, lpc(lfilter(ag, [1.0], gv[lo - 3 : lo + length])[3:], 1))
        ref = lpc(lfilter(ag, [1.0], gv[lo - 3 : lo + length])[3:], 20)
        np.testing.assert_allclose(row, ref, rtol=0, atol=1e-6)


def test_ame_weight_attenuates_each_closure() -> None:
    """AME weight: d from (PQ + DQ) of a cycle to PQ of the next (ramps excluded), 1 in between and off cycles."""
    gcis = np.array([300, 400, 500, 600])
    w = glottal.ame_weight(900, gcis, 150.0, dq=0.7, pq=0.1, d=1e-5, ramp=3)
    for g in (200, *gcis):  # the cycle before the first GCI and after the last take their neighbour's period
        assert np.all(w[g + 13 : g + 77] == 1.0) and np.all(w[g + 80 : g + 100] == 1e-5), g
        assert np.all(w[g : g + 10] == 1e-5) and 1e-5 < w[g + 10] < w[g + 11] < w[g + 12] < 1.0, g  # ramp up
    assert np.all(w[:200] == 1.0) and np.all(w[700:] == 1.0)  # no cycle near: plain LP


@pytest.mark.parametrize("rd", [0.5, 0.9])
def test_qcp_recovers_naq_of_close_vowel(rd: float) -> None:
    """/u/ (F1 300 Hz) at 220 Hz: IAIF's tract fit takes F1 for the source (NAQ +229 %, +45 %); QCP is within 20 %."""
    voice = synth_vowel(1.0, lambda t: 220 * (1 + 0.05 * t), rd, formants=VOWEL_U)
    est = np.nanmedian(run(voice.speech, CovarepConfig(layout="mfcc23", inverse_filter="qcp", glottal_cycles="f0"))["naq"][10:90])
    true_naq = float(np.median(naq_per_period(voice)))
    assert abs(est / true_naq - 1) <= 0.2, (est, true_naq)


def test_inverse_filter_matches_per_sample_loop() -> None:
    """Time-varying FIR == per-sample filtering with coefficients interpolated between row centres (held at ends)."""
    rng = np.random.default_rng(5)
    hop, n_rows, taps = 8, 6, 3
    x, a_rows = rng.standard_normal(n_rows * hop), rng.standard_normal((n_rows, taps))
    centres = np.arange(n_rows) * hop + hop // 2
    ref = np.zeros(x.size)
    for t in range(x.size):
        coef = [np.interp(t, centres, a_rows[:, k]) for k in range(taps)]
        ref[t] = sum(coef[k] * x[t - k] for k in range(taps) if t - k >= 0)
    np.testing.assert_allclose(glottal.inverse_filter(x, a_rows, hop), ref, rtol=0, atol=1e-12)


def test_psp_early_stop_equals_full_fit() -> None:
    """Fitting the first 128 bins first and refitting only the rows that did not stop gives the full fit's numbers."""
    rng = np.random.default_rng(6)
    k = np.arange(256.0)
    smooth = 10 - 1e-3 * k**2 + 1e-4 * rng.standard_normal((20, 256))  # near-parabolic: stops late or never
    rough = 30 * np.log10(1 + 1 / (1 + k / rng.uniform(2, 20, (20, 1)))) + rng.standard_normal((20, 256))
    spec = np.concatenate([smooth, rough])
    stopped = glottal._psp_fit(spec[:, :128], 0.01)[1]
    assert stopped.any() and not stopped.all()
    np.testing.assert_array_equal(glottal.psp_a(spec), glottal.psp_a(spec, first_bins=256))


def test_harmonic_params_on_known_harmonics() -> None:
    """H1-H2 and HRF of a stationary sum of harmonics A_k = 1/k^2 (k f0 <= 5 kHz) within 0.1 dB of their values."""
    f0 = 150.0
    t = np.arange(FS_HZ) / FS_HZ
    amps = 1 / np.arange(1, 34) ** 2
    dg = sum(a * np.cos(2 * np.pi * (k + 1) * f0 * t + 0.3 * k) for k, a in enumerate(amps))
    got = glottal.harmonic_params(dg, np.full(100, f0), np.arange(20, 80), HOP, FS_HZ)
    np.testing.assert_allclose(got["h1h2"], 20 * np.log10(amps[0] / amps[1]), atol=0.1)
    np.testing.assert_allclose(got["hrf"], 20 * np.log10(amps[1:].sum() / amps[0]), atol=0.1)


@pytest.mark.parametrize(
    ("label", "x"),
    [
        ("dc only", np.full(8000, 0.3, np.float32)),
        ("one sample", np.array([0.5], np.float32)),
        ("-120 dBFS noise", 1e-6 * np.random.default_rng(7).standard_normal(8000).astype(np.float32)),
    ],
)
def test_peak_slope_needs_signal(label: str, x: np.ndarray) -> None:
    """No tilt is measured on DC, on input shorter than the 40 ms window, or below silence_dbfs: NaN, not a value."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # librosa warns that n_fft exceeds a 1-sample input
        cols = run(x, CovarepConfig(layout="mfcc23"))
    assert np.all(np.isnan(cols["peak_slope"])), (label, cols["peak_slope"][:5])
    noise = 0.03 * np.random.default_rng(8).standard_normal(8000).astype(np.float32)
    assert np.all(np.isfinite(run(noise, CovarepConfig(layout="mfcc23"))["peak_slope"]))


LF_RDS = (0.3, 0.5, 0.9, 1.3, 1.7, 2.1, 2.7)


def lf_harmonics(f0_hz: float, rd: float) -> np.ndarray:
    """Harmonic magnitudes (index k = k-th harmonic) of the periodic LF flow derivative of testing/synth_voice.py."""
    period_s = 1 / f0_hz
    return np.abs(np.fft.rfft(lf_derivative(np.arange(8192) / 8192 * period_s, period_s, rd)))


def lf_h1h2_db(f0_hz: float, rd: float) -> float:
    """H1-H2 of the LF flow derivative: its Fourier series, finely sampled."""
    harmonics = lf_harmonics(f0_hz, rd)
    return float(20 * np.log10(harmonics[1] / harmonics[2]))


def lf_hrf_db(f0_hz: float, rd: float) -> float:
    """HRF of the LF flow derivative: harmonics 2 .. 5 kHz summed, relative to the first (Childers & Lee 1991)."""
    harmonics = lf_harmonics(f0_hz, rd)
    return float(20 * np.log10(harmonics[2 : int(5000 / f0_hz) + 1].sum() / harmonics[1]))


# The LF-vowel grid: /a/ and /e/ through a whole vocal tract ("a", "e": F1-F5 and the resonances above,
# testing/synth_voice.py's HIGHER_FORMANTS), and through F1-F5 alone ("a5", "e5": a truncated cascade whose spectrum
# above 5 kHz sits at the noise floor, the harder case; docs/acoustic.md, "LF vowels and limits").
LF_TRACTS = {"a": VOWEL_A + HIGHER_FORMANTS, "e": VOWEL_E + HIGHER_FORMANTS, "a5": VOWEL_A, "e5": VOWEL_E}
LF_CASES = (("a", 110.0), ("a", 220.0), ("e", 110.0), ("a5", 110.0), ("a5", 220.0), ("e5", 110.0))


@pytest.fixture(scope="module")
def lf_grid() -> dict[tuple[str, float, float], tuple[dict[str, float], float]]:
    """(vowel, F0, Rd) -> (median of each column over the middle 0.8 s, true median NAQ); F0 rises 5 % over 1 s."""
    out = {}
    for vowel, f0 in LF_CASES:
        for rd in LF_RDS:
            voice = synth_vowel(1.0, lambda t, f0=f0: f0 * (1 + 0.05 * t), rd, formants=LF_TRACTS[vowel])
            cols = run(voice.speech, CovarepConfig(layout="mfcc23"))
            out[vowel, f0, rd] = ({k: float(np.nanmedian(v[10:90])) for k, v in cols.items()},
                                  float(np.median(naq_per_period(voice))))  # fmt: skip
    return out


@pytest.mark.parametrize(("vowel", "f0"), [("a", 110.0), ("a", 220.0), ("a5", 110.0), ("a5", 220.0)])
def test_rd_recovers_lf_vowels(lf_grid: dict, vowel: str, f0: float) -> None:
    """Rd within +-0.25 of the LF vowel's over 0.3..2.7, and increasing with it (docs/acoustic.md, "Rd"). Max |error|:
    0.21 / 0.12 on the whole tract, 0.21 / 0.17 on F1-F5 alone."""
    got = np.array([lf_grid[vowel, f0, rd][0]["rd"] for rd in LF_RDS])
    np.testing.assert_allclose(got, LF_RDS, atol=0.25)
    assert np.all(np.diff(got) > 0), got


@pytest.mark.parametrize(("vowel", "f0", "rd_from"), [("a", 110.0, 0.3), ("a", 220.0, 0.3), ("a5", 110.0, 0.3),
                                                      ("a5", 220.0, 0.5)])  # fmt: skip
def test_naq_on_lf_vowels(lf_grid: dict, vowel: str, f0: float, rd_from: float) -> None:
    """NAQ within 20 % of the true flow's from rd_from on. Whole tract: -14 .. -1 % at 110 Hz, -8 .. +7 % at 220 Hz.
    F1-F5 alone, pressed voice at 220 Hz reads +41 % (Rd 0.3): its return phase lives above 5 kHz, where that
    cascade leaves the signal under the noise floor (noise-free it reads +17 %; docs/acoustic.md, "Limits")."""
    for rd in LF_RDS:
        cols, true_naq = lf_grid[vowel, f0, rd]
        if rd >= rd_from:
            assert abs(cols["naq"] / true_naq - 1) <= 0.2, (rd, cols["naq"], true_naq)


@pytest.mark.parametrize(("vowel", "f0", "tol_db"), [("a", 110.0, 0.5), ("a", 220.0, 1.0), ("e", 110.0, 0.5),
                                                     ("a5", 110.0, 0.75), ("a5", 220.0, 1.5), ("e5", 110.0, 1.0)])  # fmt: skip
def test_h1h2_on_lf_vowels(lf_grid: dict, vowel: str, f0: float, tol_db: float) -> None:
    """H1-H2 within tol_db of the LF series' over Rd 0.3 .. 2.7 (the acceptance asks 1.5 dB). Version 6 reads it
    from a GFM flow derivative: max |error| 0.3 / 0.6 / 0.3 dB on the whole tract, 0.4 / 1.1 / 0.6 dB on F1-F5
    alone; version 5's IAIF read 1.7 / 2.5 / 1.7 dB low in breathy voice on F1-F5 and was asserted only up to Rd 1.3."""
    for rd in LF_RDS:
        ref_db = lf_h1h2_db(f0 * 1.025, rd)  # the median F0 over the middle 0.8 s
        got = lf_grid[vowel, f0, rd][0]["h1h2"]
        assert abs(got - ref_db) <= tol_db, (rd, got, ref_db)


@pytest.mark.parametrize(("vowel", "f0", "rd_from", "tol_db"), [("a", 110.0, 0.3, 3.0), ("a", 220.0, 0.5, 3.5),
                                                                ("a5", 110.0, 0.5, 3.0), ("a5", 220.0, 0.9, 4.0)])  # fmt: skip
def test_hrf_on_lf_vowels(lf_grid: dict, vowel: str, f0: float, rd_from: float, tol_db: float) -> None:
    """HRF within tol_db of the LF series' from rd_from on (/a/). Version 6 (GFM): whole tract -2.6 .. +2.5 dB at
    110 Hz, -3.2 .. +2.3 at 220 Hz from Rd 0.5; F1-F5 alone -2.4 .. +2.6 dB at 110 Hz from Rd 0.5, -3.7 .. +2.8 at
    220 Hz from Rd 0.9; version 5 (IAIF) read +4.3 .. +10.5 and +5.4 .. +10.8 dB high. Pressed voice reads low
    (F1-F5 alone: -4.5 dB at 110 Hz, -8.0 at 220 Hz for Rd 0.3: docs/acoustic.md, "Version 6")."""
    for rd in LF_RDS:
        if rd >= rd_from:
            got, ref_db = lf_grid[vowel, f0, rd][0]["hrf"], lf_hrf_db(f0 * 1.025, rd)
            assert abs(got - ref_db) <= tol_db, (rd, got, ref_db)


def test_windows_equal_zero_padded_slices() -> None:
    """glottal.windows against a slice-by-slice reference, windows inside, across either end and beyond x."""
    rng = np.random.default_rng(0)
    for n in (5, 50, 1000):
        x = rng.standard_normal(n)
        for length in (1, 7, 60, 400):
            starts = rng.integers(-length - 5, n + 5, size=40)
            ref = np.zeros((starts.size, length))
            for i, s in enumerate(starts):
                lo, hi = max(s, 0), min(s + length, n)
                if hi > lo:
                    ref[i, lo - s : hi - s] = x[lo:hi]
            np.testing.assert_array_equal(glottal.windows(x, starts, length), ref)
