"""The covarep feature on more real speech copied into tests/data/speech (see that folder's README.md), so these run
everywhere: six CMU ARCTIC utterances (slt, female; jmk, male: speakers the other real-speech tests do not have) and
six recordings of the `phonlab` package, four of them with a weak fundamental (a microphone that cuts the bass),
one with a simultaneous electroglottograph.

References and their definitions are those of tests/extractors/test_acoustic_real.py (Praat at our row centres and F0 range;
EGG F0 = cycles / span of the EGG closures within +-10 ms of the row centre minus the larynx delay; GCI hits after
removing the median delay). The slt files are also checked against glottal closure instants that Matousek & Tihelka
detected on slt's simultaneous electroglottograph (Multi-Phase Algorithm; ARTIC-TTS-experiments/2021-ICASSP). That
repository states no licence, so those three small `.pm` files are read from ../shared/realdata/speech like the
COVAREP files, and that test skips, saying why, where they are absent.

Figures in the comments: main at version 5 (scratch script `measure.py` of helper i12-realegg prints them; docs/acoustic.md,
"More real speech"). Where a bound is looser than the issue's acceptance, the comment says so and why.
"""

from __future__ import annotations

from pathlib import Path

import librosa
import numpy as np
import pytest
from scipy.io import wavfile
from scipy.signal import butter, find_peaks, sosfiltfilt

from extractors import acoustic, glottal
from extractors.acoustic import FS_HZ, HOP, Covarep, CovarepConfig
from extractors.base import Audio
from testing.realdata import realdata_dir
from testing.speech import GROSS_CENTS, cents, f1, read_wav, row_centres_s
from tests.extractors.test_acoustic_real import cycle_f0, praat_f0

DATA = Path(__file__).parents[1] / "data" / "speech"
SLT = ("slt_arctic_a0001", "slt_arctic_a0002", "slt_arctic_a0003")
FILES = (*SLT, "jmk_arctic_a0001", "jmk_arctic_a0002", "jmk_arctic_a0003")
PHONLAB = ("phonlab_F1_bha24_1", "phonlab_two_plus_two", "phonlab_three_plus_five", "phonlab_sf3_cln",
           "phonlab_FR_bon_beau", "phonlab_might_have_a_class")  # fmt: skip


def features(x: np.ndarray, cfg: CovarepConfig | None = None) -> np.ndarray:
    return Covarep(cfg or CovarepConfig(layout="mfcc23")).extract(Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ)).features


@pytest.fixture(scope="module")
def tracks() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per file: (signal, our features, Praat f0)."""
    out = {}
    for name in FILES:
        x, rate = read_wav(DATA / f"{name}.wav")
        assert rate == FS_HZ, (name, rate)
        feats = features(x)
        out[name] = (x, feats, praat_f0(x, feats.shape[0]))
    return out


def test_voicing_agrees_with_praat(tracks: dict) -> None:
    """Pooled F1 >= 0.93 (the acceptance; measured 0.932), each file >= 0.89 (0.951, 0.902, 0.960 slt; 0.905, 0.926,
    0.938 jmk: two files of running speech sit just above 0.90, as arctic_a0007 does in test_acoustic_real)."""
    ours = {name: feats[:, 1] == 1 for name, (_, feats, _) in tracks.items()}
    praat = {name: np.isfinite(p) for name, (_, _, p) in tracks.items()}
    per_file = {name: round(f1(ours[name], praat[name]), 3) for name in tracks}
    pooled = f1(np.concatenate(list(ours.values())), np.concatenate(list(praat.values())))
    assert pooled >= 0.93, (pooled, per_file)
    assert min(per_file.values()) >= 0.89, per_file


def test_f0_agrees_with_praat_where_both_voiced(tracks: dict) -> None:
    """Each file: gross errors <= 3 % and median <= 5 cents (the acceptance; measured 2.6, 2.3, 2.0 slt, 4.1, 4.2, 4.4
    jmk, gross 0-0.6 %); all rows: median <= 3.5 cents (3.07)."""
    errors = []
    for name, (_, feats, praat) in tracks.items():
        both = (feats[:, 1] == 1) & np.isfinite(praat)
        err = cents(feats[both, 0].astype(float), praat[both])
        assert np.mean(err > GROSS_CENTS) <= 0.03, (name, np.mean(err > GROSS_CENTS))
        assert np.median(err) <= 5.0, (name, np.median(err))
        errors.append(err)
    assert np.median(np.concatenate(errors)) <= 3.5, np.median(np.concatenate(errors))


def test_glottal_columns_are_plausible(tracks: dict) -> None:
    """Glottal columns NaN on unvoiced rows; on voiced rows at most 8 % NaN (no glottal cycle near the row: 0-0.5 % slt,
    2.9-5.2 % jmk; version 8: 0 % slt, 1.1-3.0 % jmk), PSP within [0, 1] (0.07-0.94; version 8 0.04-0.85), and the
    per-file medians of NAQ and Rd in the range of modal read speech (NAQ 0.145-0.178, Rd 1.27-1.62 measured; version
    8: NAQ 0.128-0.157, Rd by MSP 1.33-1.62 slt, 0.75-0.76 jmk; Alku et al. 2002 report NAQ ~0.1-0.2 for normal
    phonation). Version 8 with version 7's orientation for SEDREAMS read jmk's NAQ as 0.03: this test caught it."""
    names = Covarep.columns(CovarepConfig(layout="mfcc23"))
    cols = [names.index(c) for c in acoustic.GLOTTAL_COLUMNS]
    for name, (_, feats, _) in tracks.items():
        voiced = feats[:, 1] == 1
        assert np.isnan(feats[~voiced][:, cols]).all(), name
        g = feats[voiced][:, cols].astype(float)
        assert np.isnan(g).mean(axis=0).max() <= 0.08, (name, np.isnan(g).mean(axis=0))
        psp = g[:, acoustic.GLOTTAL_COLUMNS.index("psp")]
        assert np.nanmin(psp) >= 0.0 and np.nanmax(psp) <= 1.0, (name, np.nanmin(psp), np.nanmax(psp))
        naq = np.nanmedian(g[:, acoustic.GLOTTAL_COLUMNS.index("naq")])
        rd = np.nanmedian(g[:, acoustic.GLOTTAL_COLUMNS.index("rd")])
        assert 0.06 <= naq <= 0.25 and 0.5 <= rd <= 2.2, (name, naq, rd)


def test_mains_hum_in_pauses_stays_unvoiced(tracks: dict) -> None:
    """Speech in the wild carries hum. 100 Hz (2 x 50 Hz mains, with 0.3 / 0.1 of 2nd / 3rd harmonic) at -47 dBFS RMS,
    the level measured in the pauses of the STEM-E2VA recordings of speaker CXY, added to slt and jmk arctic_a0001.
    Rows that Praat and we both call unvoiced on the clean file: at most 5 % may become voiced (version 6, relative
    silence gate: 2.5 % slt, 1.2 % jmk; version 5: 33.9 %, 56.1 %). Measured against our own clean decision too,
    because our voicing and Praat's disagree on 2-6 % of Praat's unvoiced rows without any hum (voice onsets and
    offsets); against Praat alone the hummed files give 4.8 % / 5.7 % (clean: 2.4 % / 5.4 %; Praat on the hummed
    files: 0.0 %, 0.4 %)."""
    for name in ("slt_arctic_a0001", "jmk_arctic_a0001"):
        x, feats, praat = tracks[name]
        t = np.arange(x.size) / FS_HZ
        hum = sum(a * np.sin(2 * np.pi * k * 100.0 * t) for k, a in ((1, 1.0), (2, 0.3), (3, 0.1)))
        voiced = features(x + 10 ** (-47 / 20) * np.sqrt(2 / 1.1) * hum)[:, 1] == 1
        quiet = ~np.isfinite(praat) & (feats[:, 1] != 1)
        assert voiced[quiet].mean() <= 0.05, (name, voiced[quiet].mean())


def closure_offsets_s(ours_s: np.ndarray, closures_s: np.ndarray, voiced: np.ndarray) -> tuple:
    """(reference closures inside our GCIs' span and our voiced rows, our nearest GCI minus each, median of those)."""
    inside = closures_s[(closures_s > ours_s.min()) & (closures_s < ours_s.max())]
    inside = inside[voiced[np.minimum((inside / (HOP / FS_HZ)).astype(int), voiced.size - 1)]]
    offset = ours_s[np.argmin(np.abs(ours_s[None] - inside[:, None]), axis=1)] - inside
    return inside, offset, np.median(offset)


def our_gcis_s(x: np.ndarray, feats: np.ndarray, cfg: CovarepConfig) -> np.ndarray:
    """GCIs (s) as the extractor finds them (the pipeline of analyse_block, as test_acoustic_real does)."""
    n = feats.shape[0]
    voiced = feats[:, 1] == 1
    xb = np.zeros(n * HOP)
    xb[: min(x.size, xb.size)] = x[: xb.size]
    x_hp = glottal.highpass(xb, FS_HZ)
    f0, _ = acoustic.track(xb, x_hp, n, cfg, acoustic.relative_floor_dbfs(xb, n, cfg))
    return acoustic.glottal_flow(x_hp, f0, voiced, cfg)[1] / FS_HZ


def egg_reference(name: str) -> np.ndarray:
    root = realdata_dir()
    path = root / "speech" / f"{name}.pm" if root else None
    if path is None or not path.is_file():
        pytest.skip(
            f"EGG reference {name}.pm not in ../shared/realdata/speech (no licence to copy it into the project)"
        )
    lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return np.array([float(p[0]) for p in lines if p[-1] == "V"])


@pytest.mark.parametrize("name", SLT)
def test_against_egg_closures(tracks: dict, name: str) -> None:
    """slt against the closures on its EGG.
    - GCIs: >= 80 % within 0.25 ms and >= 92 % within 0.5 ms of the EGG closures inside our voiced rows (measured 87.6,
      85.9, 82.5 % and 93.7, 92.9, 94.8 %). The acceptance's 95 % within 0.25 ms is NOT met on running speech;
      REAPER scored the same way gets 86.2, 76.0, 77.5 %. Misses are mostly our GCI 0.3-0.9 ms early over whole
      vowels (a per-vowel offset the per-file median delay cannot remove) and at voicing onsets and offsets; the
      reference is quantised to 1/16,000 s.
    - Voicing: F1 against the rows with EGG cycles >= 0.89 (0.949, 0.906, 0.964; Praat 0.955, 0.936, 0.960; with
      the 3-cycle `cycle_f0` of branch i12-creak: 0.934, 0.925, 0.953; Praat 0.926, 0.913, 0.945).
    - F0: no gross errors; median <= 8.5 cents and at most 0.5 cent above Praat's own distance to the EGG (ours 7.6,
      7.1, 6.8; Praat 8.2, 9.7, 7.3; with the 3-cycle reference: ours 6.6, 6.0, 6.3, Praat 7.8, 8.4, 7.0). The
      acceptance's 3 cents is out of reach of both on running speech: the reference is the F0 of a few cycles (jitter,
      closures quantised to 1/16,000 s), the trackers average over windows. A 1 % F0 error (17 cents) fails this.
    """
    egg = egg_reference(name)
    x, feats, praat = tracks[name]
    n = feats.shape[0]
    voiced = feats[:, 1] == 1
    ours = our_gcis_s(x, feats, CovarepConfig(layout="mfcc23"))
    inside, offset, delay = closure_offsets_s(ours, egg, voiced)
    # this reference is already near speech time (delay -0.13 to -0.19 ms), unlike the raw EGGs of test_acoustic_real
    assert inside.size > 200 and abs(delay) < 0.0005, (inside.size, delay)
    hits = [np.mean(np.abs(offset - delay) <= tol) for tol in (0.00025, 0.0005)]
    assert hits[0] >= 0.80 and hits[1] >= 0.92, hits

    truth = cycle_f0(egg, row_centres_s(n) - delay)
    egg_voiced = np.isfinite(truth)
    assert f1(voiced, egg_voiced) >= 0.89, (f1(voiced, egg_voiced), f1(np.isfinite(praat), egg_voiced))
    both, praat_both = voiced & egg_voiced, np.isfinite(praat) & egg_voiced
    err = cents(feats[both, 0].astype(float), truth[both])
    praat_err = np.median(cents(praat[praat_both], truth[praat_both]))
    assert np.mean(err > GROSS_CENTS) == 0, np.mean(err > GROSS_CENTS)
    assert np.median(err) <= min(8.5, praat_err + 0.5), (np.median(err), praat_err)


def read_16k(name: str) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(microphone at 16 kHz, EGG channel at its own rate or None, that rate) of a tests/data/speech file."""
    rate, pcm = wavfile.read(DATA / f"{name}.wav")
    pcm = pcm.astype(np.float64) / 32768.0
    mic, egg = (pcm, None) if pcm.ndim == 1 else (pcm[:, 0], pcm[:, 1])
    if rate != FS_HZ:
        mic = librosa.resample(mic, orig_sr=rate, target_sr=FS_HZ, res_type="soxr_hq")
    return mic, egg, rate


@pytest.fixture(scope="module")
def phonlab_tracks() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    out = {}
    for name in PHONLAB:
        x, _, _ = read_16k(name)
        feats = features(x)
        out[name] = (x, feats, praat_f0(x, feats.shape[0]))
    return out


def pooled_against_praat(tracks: dict) -> tuple[float, float, float]:
    """(voicing F1, F0 median cents, F0 gross share) over all rows of the files."""
    ours = np.concatenate([f[:, 1] == 1 for _, f, _ in tracks.values()])
    praat = np.concatenate([p for _, _, p in tracks.values()])
    f0 = np.concatenate([f[:, 0] for _, f, _ in tracks.values()]).astype(float)
    both = ours & np.isfinite(praat)
    err = cents(f0[both], praat[both])
    return f1(ours, np.isfinite(praat)), float(np.median(err)), float(np.mean(err > GROSS_CENTS))


def test_weak_fundamental_recordings_against_praat(phonlab_tracks: dict) -> None:
    """The issue's acceptance on the phonlab files pooled: F1 >= 0.93, median <= 5 cents, gross <= 3 %. Version 7:
    F1 0.940, median 4.65 c, gross 2.2 % (12 of 545 rows); per file F1 0.906 F1_bha24_1, 0.968 two_plus_two, 0.881
    three_plus_five, 0.932 sf3_cln, 0.993 FR_bon_beau, 0.916 might_have_a_class. Version 6 (harmonic_check=False):
    gross 4.6 % (25 rows); the 13 more are all two_plus_two's, DIO's rows on the 4th harmonic of a 73-83 Hz voice,
    which the subharmonic test and the island rule of acoustic.harmonic_check move back. The 12 left: 8 rows
    of FR_bon_beau's creaky onset where Praat reads half our F0 (68 vs 135 Hz) and then jumps an octave up to join
    our track, 3 rows of F1_bha24_1 where its EGG confirms our F0 and Praat is an octave low (test below), and one
    onset row of two_plus_two where Praat itself jumps (105.7 Hz, then 81.6 Hz). Without the seeds (voiced runs
    grown from DIO's rows only): pooled F1 0.822 (version 5: 0.732)."""
    voicing_f1, median_cents, gross = pooled_against_praat(phonlab_tracks)
    assert voicing_f1 >= 0.93 and median_cents <= 5.0 and gross <= 0.03, (voicing_f1, median_cents, gross)


def test_harmonic_check_moves_the_harmonic_rows_only(tracks: dict, phonlab_tracks: dict) -> None:
    """acoustic.harmonic_check against the same extraction without it: on phonlab_two_plus_two it changes the 14 rows
    112-125 (13 voiced by DIO at 275-367 Hz; Praat 73-83 Hz): 13 are now voiced within 25 cents of Praat (measured
    2.4-18.1), row 112 is unvoiced, row 117 voiced; on the six CMU ARCTIC files and the other five phonlab files it
    changes no row at all."""
    for name, (x, feats, _) in {**tracks, **phonlab_tracks}.items():
        before = features(x, CovarepConfig(layout="mfcc23", harmonic_check=False))
        changed = (before[:, 1] != feats[:, 1]) | (np.nan_to_num(before[:, 0]) != np.nan_to_num(feats[:, 0]))
        if name != "phonlab_two_plus_two":
            assert not changed.any(), (name, np.flatnonzero(changed))
            continue
        assert np.array_equal(np.flatnonzero(changed), np.arange(112, 126)), np.flatnonzero(changed)
        praat = phonlab_tracks[name][2]
        rows = np.flatnonzero(changed & np.isfinite(praat))
        was = rows[before[rows, 1] == 1]  # row 117 was unvoiced: the regrown island voices it
        assert was.size == 13 and np.all(cents(before[was, 0].astype(float), praat[was]) > GROSS_CENTS)
        now = rows[feats[rows, 1] == 1]  # row 112 does not repeat at the neighbours' period: unvoiced
        assert now.size == 13 and np.all(cents(feats[now, 0].astype(float), praat[now]) <= 25), feats[now, 0]


def egg_closures_s(egg: np.ndarray, rate: int) -> np.ndarray:
    """test_acoustic_real.egg_gcis_s's definition (dEGG peaks, global threshold), on an array."""
    d = np.diff(sosfiltfilt(butter(2, 40, "highpass", fs=rate, output="sos"), egg))
    d *= 1 if np.percentile(d, 99.9) > -np.percentile(d, 0.1) else -1
    peaks, _ = find_peaks(d, height=0.2 * np.percentile(d, 99.5), distance=int(rate / 600))
    peaks = peaks[(peaks > 0) & (peaks < d.size - 1)]
    a, b, c = d[peaks - 1], d[peaks], d[peaks + 1]
    return (peaks + 0.5 + 0.5 * (a - c) / (a - 2 * b + c)) / rate


def test_egg_recording_with_weak_fundamental(phonlab_tracks: dict) -> None:
    """phonlab_F1_bha24_1 (0.72 s, EGG in channel 1). GCIs >= 72 % within 0.25 ms (measured 75.7 %; acceptance 95)
    and >= 80 % within 0.5 ms (83.8 %), larynx delay 0-3 ms (0.26): 37 closures in voiced rows; on the 30 in rows
    voiced without the autocorrelation seeds 83.3 / 93.3 % (82.1 / 92.9 % of 28 without them), on the 7 in rows the
    seeds added 3 hit (a weak fundamental makes the flow's closures weak too); F0 on rows voiced in both, leaving out the
    13 rows where Praat is an octave below the EGG (the waveform repeats every second cycle there; the seeds take that
    period too, 7 rows): no gross error, median <= 8 cents (3.9 over 15 rows); voicing F1 against the rows with EGG
    cycles >= 0.78: measured 0.828 where Praat gets 0.931 (0.667 without the seeds: DIO gives F0 = 0 on most rows of
    the weak fundamental, findings 13). With 37 closures this GCI check is coarse (GCIs jittered by +-4 samples still pass it on some draws); the slt test above is the sharp one."""
    x, feats, praat = phonlab_tracks["phonlab_F1_bha24_1"]
    _, egg, rate = read_16k("phonlab_F1_bha24_1")
    closures = egg_closures_s(egg, rate)
    n = feats.shape[0]
    voiced = feats[:, 1] == 1
    ours = our_gcis_s(x, feats, CovarepConfig(layout="mfcc23"))
    inside, offset, delay = closure_offsets_s(ours, closures, voiced)
    assert inside.size >= 20 and 0 < delay < 0.003, (inside.size, delay)
    hits = [np.mean(np.abs(offset - delay) <= tol) for tol in (0.00025, 0.0005)]
    assert hits[0] >= 0.72 and hits[1] >= 0.80, hits

    truth = cycle_f0(closures, row_centres_s(n) - delay)
    # rows where Praat is an octave off the EGG (0.29-0.37 s: the waveform repeats only every second glottal cycle,
    # so the acoustic period is ambiguous) are left out: the autocorrelation seeds take the acoustic period there
    ambiguous = np.isfinite(praat) & np.isfinite(truth)
    ambiguous[ambiguous] = cents(praat[ambiguous], truth[ambiguous]) > 600
    both = voiced & np.isfinite(truth) & ~ambiguous
    assert ambiguous.sum() <= 15, ambiguous.sum()
    err = cents(feats[both, 0].astype(float), truth[both])
    assert both.sum() >= 10 and np.mean(err > GROSS_CENTS) == 0 and np.median(err) <= 8.0, (both.sum(), err)
    assert f1(voiced, np.isfinite(truth)) >= 0.78, (
        f1(voiced, np.isfinite(truth)),
        f1(np.isfinite(praat), np.isfinite(truth)),
    )
