"""The covarep extractor against COVAREP's own output (../shared/realdata/covarep-ref: COVAREP_feature_extraction.m
run under Octave on five recordings of ../shared/realdata/speech; its README says how). Skips where that folder is
absent. The figures and how rows and columns are paired: bench/covarep_ref.py and docs/acoustic.md, "Agreement with
COVAREP" (`.venv/bin/python -m bench.covarep_ref` prints the table).

Bars (issue 51), on all five files' rows pooled, COVAREP as the reference:
- VUV F1 >= 0.95. COVAREP's SRH voicing is itself an estimate (against Praat ours is at 0.975 pooled), so the bar
  is agreement between two trackers, not an error rate; per file it is not asserted (COVAREP calls 10 rows of the
  0.26 s creaky file voiced, so one row moves its F1 by ~0.06).
- F0 median |difference| <= 10 cents on rows both call voiced, gross errors (> 20 %) <= 2 %. SRH picks F0 on a 1 Hz
  grid (up to 10 cents at 90 Hz) from 100 ms frames, so a few cents is the floor of any agreement with it.
- peak slope Spearman >= 0.95 on every row we define: the same wavelet method (Kane & Gobl 2011) on the same row
  grid, differing only in the high-pass and edge handling.
- NAQ, QOQ, PSP, MDQ: Spearman >= 0.8 on rows both call voiced (rank correlation: a monotone agreement is what a
  model trained on the published features needs) and the same scale (median relative difference within 0.15;
  0.01-0.08 measured). Version 7 measured 0.38-0.76 and fails each; version 8 measures its cycles as COVAREP
  does (0.81-0.94).
- H1H2: `harmonic_filter="covarep"` (COVAREP's measure) >= 0.8 (0.96). The default stays GFM's H1-H2 (0.68),
  which the LF-model truth holds within 0.5 dB at 110 Hz; COVAREP's measure fails all six LF-vowel cases (the
  first Rd beyond each bound reads 0.5-1.9 dB off).
- Rd (0.33, by COVAREP's own MSP method) and the default's H1H2: below 0.8, each a strict xfail at 0.8 (it turns
  into a failure once met, so the marker cannot outlive the gap) plus a floor 0.05 under today's figure.
- Any column COVAREP writes that the extractor adds under COVAREP's name (MCEP_*, HMPD*, creak, Rd_conf) is
  compared too; MCEP columns are held to the issue's Pearson >= 0.95 per column once they exist.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import covarep_ref
from extractors.acoustic import CovarepConfig

GLOTTAL_BAR = 0.8
MET = ("naq", "qoq", "psp", "mdq")
# not met by the default yet: today's pooled Spearman minus 0.05 (measured: h1h2 0.68 from GFM, rd 0.33)
FLOOR = {"h1h2": 0.63, "rd": 0.28}


@pytest.fixture(scope="module")
def pairs(realdata: Path) -> list[covarep_ref.Pair]:
    if not (realdata / "covarep-ref").is_dir():
        pytest.skip(f"COVAREP's reference output not found: {realdata / 'covarep-ref'} is absent")
    return covarep_ref.pairs(realdata)


def test_reference_rows_pair_with_ours(pairs: list[covarep_ref.Pair]) -> None:
    """Every file has the columns and enough rows both call voiced to compare (a broken pairing would not)."""
    for p in pairs:
        assert {"f0", "vuv", "naq", "peakslope"} <= set(covarep_ref.compared_columns(p)), p.name
        assert p.both_voiced.sum() >= 5, p.name


def test_voicing_agrees(pairs: list[covarep_ref.Pair]) -> None:
    assert covarep_ref.stats(pairs, "vuv")["f1"] >= 0.95


def test_f0_agrees(pairs: list[covarep_ref.Pair]) -> None:
    s = covarep_ref.stats(pairs, "f0")
    assert s["cents"] <= 10.0, s
    assert s["gross"] <= 0.02, s


def test_peak_slope_agrees(pairs: list[covarep_ref.Pair]) -> None:
    assert covarep_ref.stats(pairs, "peakslope")["spearman"] >= 0.95


@pytest.mark.parametrize("col", MET)
def test_glottal_measure_agrees(pairs: list[covarep_ref.Pair], col: str) -> None:
    s = covarep_ref.stats(pairs, col)
    assert s["spearman"] >= GLOTTAL_BAR, s
    assert abs(s["reldiff"]) <= 0.15, s  # the same scale: 0.01-0.08 today


@pytest.mark.parametrize("col", sorted(FLOOR))
def test_glottal_measure_no_worse(pairs: list[covarep_ref.Pair], col: str) -> None:
    assert covarep_ref.stats(pairs, col)["spearman"] >= FLOOR[col]


@pytest.mark.parametrize("col", sorted(FLOOR))
@pytest.mark.xfail(strict=True, reason="issue 51: the default H1H2 and Rd below 0.8 Spearman against COVAREP (docs/acoustic.md)")
def test_glottal_measure_reaches_the_bar(pairs: list[covarep_ref.Pair], col: str) -> None:
    assert covarep_ref.stats(pairs, col)["spearman"] >= GLOTTAL_BAR


def test_covarep_h1h2_agrees(realdata: Path) -> None:
    if not (realdata / "covarep-ref").is_dir():
        pytest.skip(f"COVAREP's reference output not found: {realdata / 'covarep-ref'} is absent")
    s = covarep_ref.stats(covarep_ref.pairs(realdata, CovarepConfig(harmonic_filter="covarep")), "h1h2")
    assert s["spearman"] >= GLOTTAL_BAR and abs(s["reldiff"]) <= 0.15, s


# MCEP is not compared here row by row: COVAREP spreads its MCEP frames evenly over the file rather than at their
# own times (covarep-ref's README), so row k of its MCEP is not row k of ours. tests/extractors/test_covarep74.py holds our
# MCEP at COVAREP's frame placement.


def test_column_pairing_is_name_blind() -> None:
    assert covarep_ref.key("peakSlope") == covarep_ref.key("peak_slope")
    assert covarep_ref.key("MCEP_0") == covarep_ref.key("mcep_0") != covarep_ref.key("mcep_1")
    assert covarep_ref.key("H1H2") == "h1h2"


def test_undefined_cells_read_as_nan(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("time_s,F0,HMPDM_0\n0.005,0.0,\n0.015,120.5,0.25\n")
    ref = covarep_ref.read_reference(path)
    assert list(ref) == ["f0", "hmpdm0"]
    np.testing.assert_array_equal(ref["f0"], [0.0, 120.5])
    assert np.isnan(ref["hmpdm0"][0]) and ref["hmpdm0"][1] == 0.25
