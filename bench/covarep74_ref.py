"""The 74-column layout's own columns (Rd_conf, MCEP, HMPD) against COVAREP's output in ../shared/realdata/covarep-ref.

Run: `.venv/bin/python -m bench.covarep74_ref` (prints the table of docs/acoustic.md, "74 columns"). The older
columns (F0, VUV, NAQ … Rd) are compared by tests/extractors/test_covarep_ref.py.

How rows are paired:
- MCEP: COVAREP computes its envelope frames at its F0 tracker's instants (sample 800 + 160 j at 16 kHz, half a
  row off our row centres) and then spreads them evenly over the whole file before sampling them every 10 ms, so
  its row k holds frame j(k) (fractional), up to ±5 rows away from the row's own time near the ends. The method is
  compared: our MCEP kernel (`spectral_rows`' window and F0 choices) at COVAREP's frame instants, placed as COVAREP
  places them ("method" in the table); "rows" pairs the extractor's own rows with COVAREP's by index, what a user
  comparing stored rows with the released file sees.
- HMPD and Rd_conf: COVAREP resamples them to its rows' own times; rows are paired by index.
- HMPD on rows both call voiced (COVAREP's VUV and ours), from row 6 on and 6 rows before the end (COVAREP has no
  frame nearer the ends); Rd_conf on every row where COVAREP's is not 0 (undefined).
PDM columns are phases: circular correlation (Fisher & Lee 1983); constant columns (the bands below F0, 0 in both)
are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from extractors import acoustic, glottal, mcep
from extractors.acoustic import COVAREP74_COLUMNS, FS_HZ, HOP, Covarep, CovarepConfig
from extractors.base import Audio

FILES = ("arctic_a0007", "amfm_sample", "covarep_0011.arctic_bdl1", "covarep_DB-cresc-a-D4-m1",
         "covarep_glottalized-m1")  # fmt: skip
MCEP = [f"MCEP_{i}" for i in range(25)]
PDM = [f"HMPDM_{i}" for i in range(25)]
PDD = [f"HMPDD_{i}" for i in range(13)]
EDGE_ROWS = 6


@dataclass
class FileResult:
    name: str
    rows: int
    mcep: np.ndarray  # per-column Pearson correlation, the method at COVAREP's frame instants
    mcep_rows: np.ndarray  # the same, the extractor's rows paired by index
    pdm: np.ndarray  # circular correlation per band (NaN: constant band)
    pdd: np.ndarray
    rd_conf_r: float
    rd_conf_median_diff: float
    hmpd_dist: np.ndarray  # (38,) median |difference| per HMPD column on the rows of pdm / pdd (HMPDM: wrapped)


def read_reference(root: Path, name: str) -> dict[str, np.ndarray]:
    import pandas as pd

    df = pd.read_csv(root / "covarep-ref" / f"{name}.csv")
    return {c: df[c].to_numpy(float) for c in df.columns}


def mcep_as_covarep_places_it(x: np.ndarray, n_rows: int) -> np.ndarray:
    """(n_rows, 25): our MCEP at COVAREP's frame instants (0-based sample 800 + 160 j, its SRH frames), the frames
    placed at round(linspace(1, len(x), M)) and read at samples 80 + 160 k, as COVAREP_feature_extraction.m does."""
    cfg = CovarepConfig()
    n = x.size // HOP
    block = x[: n * HOP].astype(float)
    f0, voiced = acoustic.track(block, glottal.highpass(block, FS_HZ), n, cfg)
    m = (x.size - 799 - 800) // 160 + 1
    centres = 800 + 160 * np.arange(m)
    row = np.minimum(centres // HOP, n - 1)
    f0w = acoustic.window_f0(x, f0, voiced, centres, row, srh_median=acoustic.srh_track(x)[2])
    frames = mcep.mcep_rows(mcep.frame_spectra(x, centres, f0w, FS_HZ), f0w, FS_HZ)
    placed = np.round(np.linspace(1, x.size, m))
    at = 80 + 160 * np.arange(n_rows)
    return np.column_stack([np.interp(at, placed, frames[:, i]) for i in range(frames.shape[1])])


def circular_corr(a: np.ndarray, b: np.ndarray) -> float:
    sa = np.sin(a - np.angle(np.mean(np.exp(1j * a))))
    sb = np.sin(b - np.angle(np.mean(np.exp(1j * b))))
    den = np.sqrt(np.sum(sa**2) * np.sum(sb**2))
    return float(np.sum(sa * sb) / den) if den > 1e-12 else float("nan")


def distance(column: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| per row; for the PDM columns (phases) the wrapped difference."""
    if column in PDM:
        return np.abs(np.angle(np.exp(1j * (a - b))))
    return np.abs(a - b)


def corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1]) if np.std(a) > 1e-12 and np.std(b) > 1e-12 else float("nan")


def ours(x: np.ndarray, cfg: CovarepConfig | None = None) -> dict[str, np.ndarray]:
    rows = Covarep(cfg or CovarepConfig()).extract(Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ))
    return {c: rows.features[:, i].astype(float) for i, c in enumerate(COVAREP74_COLUMNS)}


def compare(name: str, x: np.ndarray, ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> FileResult:
    n = min(len(ref["F0"]), len(got["F0"]))
    placed = mcep_as_covarep_places_it(x, n)
    mcep_method = np.array([corr(placed[:, i], ref[c][:n]) for i, c in enumerate(MCEP)])
    mcep_rows = np.array([corr(got[c][:n], ref[c][:n]) for c in MCEP])
    both = (got["VUV"][:n] == 1) & (ref["VUV"][:n] == 1)
    both[:EDGE_ROWS] = both[n - EDGE_ROWS :] = False
    pdm = np.array([circular_corr(got[c][:n][both], ref[c][:n][both]) for c in PDM]) if both.sum() > 10 else \
        np.full(len(PDM), np.nan)  # fmt: skip
    pdd = np.array([corr(got[c][:n][both], ref[c][:n][both]) for c in PDD]) if both.sum() > 10 else \
        np.full(len(PDD), np.nan)  # fmt: skip
    dist = np.array([np.median(distance(c, got[c][:n][both], ref[c][:n][both])) if both.any() else np.nan
                     for c in PDM + PDD])  # fmt: skip
    defined = (ref["Rd_conf"][:n] != 0) & np.isfinite(got["Rd_conf"][:n])
    rc_r = corr(got["Rd_conf"][:n][defined], ref["Rd_conf"][:n][defined])
    rc_d = float(np.median(got["Rd_conf"][:n][defined] - ref["Rd_conf"][:n][defined]))
    return FileResult(name, n, mcep_method, mcep_rows, pdm, pdd, rc_r, rc_d, dist)


def run(root: Path, names: tuple[str, ...] = FILES) -> list[FileResult]:
    from testing.speech import speech_16k

    out = []
    for name in names:
        if not (root / "covarep-ref" / f"{name}.csv").is_file():
            continue
        x = speech_16k(root, name)
        out.append(compare(name, x, read_reference(root, name), ours(x)))
    return out


def _fmt(v: np.ndarray) -> str:
    return " ".join("  . " if np.isnan(a) else f"{a:4.2f}" for a in v)


def main() -> None:
    from testing.realdata import realdata_dir

    root = realdata_dir()
    if root is None:
        raise SystemExit("../shared/realdata (or SIQ_REALDATA) not found: nothing to compare with")
    results = run(root)
    if not results:
        raise SystemExit(f"no COVAREP reference CSVs in {root / 'covarep-ref'}")
    for r in results:
        print(f"{r.name} ({r.rows} rows)")
        print(f"  MCEP_0..24 r method {_fmt(r.mcep)}   min {np.nanmin(r.mcep):.3f}")
        print(f"  MCEP_0..24 r rows   {_fmt(r.mcep_rows)}   min {np.nanmin(r.mcep_rows):.3f}")
        if not np.isnan(r.pdm).all():
            print(f"  HMPDM_0..24 circ. r {_fmt(r.pdm)}")
            print(f"  HMPDD_0..12 r       {_fmt(r.pdd)}")
        print(f"  Rd_conf r {r.rd_conf_r:.3f}, median difference {r.rd_conf_median_diff:+.3f}")


if __name__ == "__main__":
    main()
