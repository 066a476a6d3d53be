"""The covarep feature on more real speech: six CMU ARCTIC utterances copied into tests/data/speech (two speakers the
other real-speech tests do not have: slt, female; jmk, male; see that folder's README.md), so these run everywhere.

References and their definitions are those of tests/test_acoustic_real.py (Praat at our row centres and F0 range;
EGG F0 = cycles / span of the EGG closures within +-10 ms of the row centre minus the larynx delay; GCI hits after
removing the median delay). The slt files are also checked against glottal closure instants that Matousek & Tihelka
detected on slt's simultaneous electroglottograph (Multi-Phase Algorithm; ARTIC-TTS-experiments/2021-ICASSP). That
repository states no licence, so those three small `.pm` files are read from ../shared/realdata/speech like the
COVAREP files, and that test skips, saying why, where they are absent.

Figures in the comments: main at version 5 (`/tmp/i12-realegg/measure.py` prints them; docs/acoustic.md,
"More real speech"). Where a bound is looser than the issue's acceptance, the comment says so and why.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import realdata_dir

from extractors import acoustic, glottal
from extractors.acoustic import FS_HZ, HOP, Covarep, CovarepConfig
from extractors.base import Audio
from tests.test_acoustic_real import GROSS_CENTS, cents, cycle_f0, f1, praat_f0, read_wav, row_centres_s

DATA = Path(__file__).parent / "data" / "speech"
SLT = ("slt_arctic_a0001", "slt_arctic_a0002", "slt_arctic_a0003")
FILES = (*SLT, "jmk_arctic_a0001", "jmk_arctic_a0002", "jmk_arctic_a0003")


def features(x: np.ndarray, cfg: CovarepConfig | None = None) -> np.ndarray:
    return Covarep(cfg or CovarepConfig()).extract(Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ)).features


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
    2.9-5.2 % jmk), PSP within [0, 1] (0.07-0.94), and the per-file medians of NAQ and Rd in the range of modal read
    speech (NAQ 0.145-0.178, Rd 1.27-1.62 measured; Alku et al. 2002 report NAQ ~0.1-0.2 for normal phonation)."""
    names = Covarep.columns(CovarepConfig())
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


@pytest.mark.xfail(
    strict=True,
    reason="known failure (i12-realegg findings 6b): a 100 Hz mains-hum harmonic above "
    "silence_dbfs is periodic, so pauses are voiced at 100 Hz; Praat stays unvoiced (0-0.4 %)",
)
def test_mains_hum_in_pauses_stays_unvoiced(tracks: dict) -> None:
    """Speech in the wild carries hum. 100 Hz (2 x 50 Hz mains, with 0.3 / 0.1 of 2nd / 3rd harmonic) at -47 dBFS RMS,
    the level measured in the pauses of the STEM-E2VA recordings of speaker CXY, added to slt and jmk arctic_a0001:
    at most 5 % of the rows Praat calls unvoiced on the clean file may become voiced (measured 35 % slt, 58 % jmk;
    Praat itself on the hummed files: 0.0 %, 0.4 %). Strict: when fixed, this XPASSes and fails, to be made a test."""
    for name in ("slt_arctic_a0001", "jmk_arctic_a0001"):
        x, _, praat = tracks[name]
        t = np.arange(x.size) / FS_HZ
        hum = sum(a * np.sin(2 * np.pi * k * 100.0 * t) for k, a in ((1, 1.0), (2, 0.3), (3, 0.1)))
        voiced = features(x + 10 ** (-47 / 20) * np.sqrt(2 / 1.1) * hum)[:, 1] == 1
        assert voiced[~np.isfinite(praat)].mean() <= 0.05, (name, voiced[~np.isfinite(praat)].mean())


def our_gcis_s(x: np.ndarray, feats: np.ndarray, cfg: CovarepConfig) -> np.ndarray:
    """GCIs (s) as the extractor finds them (the pipeline of analyse_block, as test_acoustic_real does)."""
    n = feats.shape[0]
    voiced = feats[:, 1] == 1
    xb = np.zeros(n * HOP)
    xb[: min(x.size, xb.size)] = x[: xb.size]
    x_hp = glottal.highpass(xb, FS_HZ)
    f0 = acoustic.refine_f0(x_hp, acoustic.f0_rows(xb, n, cfg), voiced, cfg)
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
    - Voicing: F1 against the rows with EGG cycles >= 0.89 (0.949, 0.906, 0.964; Praat 0.955, 0.936, 0.960).
    - F0: no gross errors; median <= 8.5 cents and at most 0.5 cent above Praat's own distance to the EGG (ours 7.6,
      7.1, 6.8; Praat 8.2, 9.7, 7.3). The acceptance's 3 cents is out of reach of both: the reference is the
      instantaneous F0 of 2-4 cycles (jitter, quantised closures), the trackers average 3 periods. A 1 % F0 error
      (17 cents) fails this bound.
    """
    egg = egg_reference(name)
    x, feats, praat = tracks[name]
    n = feats.shape[0]
    voiced = feats[:, 1] == 1
    ours = our_gcis_s(x, feats, CovarepConfig())
    inside = egg[(egg > ours.min()) & (egg < ours.max())]
    inside = inside[voiced[np.minimum((inside / (HOP / FS_HZ)).astype(int), n - 1)]]
    offset = ours[np.argmin(np.abs(ours[None] - inside[:, None]), axis=1)] - inside
    delay = np.median(offset)
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
