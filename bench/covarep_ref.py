"""Agreement of the `covarep` extractor with COVAREP's own output (../shared/realdata/covarep-ref), per column and file.

Run: `.venv/bin/python -m bench.covarep_ref [field=value ...]` (config fields override the default, e.g.
`harmonic_filter=same`). tests/extractors/test_covarep_ref.py asserts the bars on the same figures (docs/acoustic.md,
"Agreement with COVAREP").

The reference is what COVAREP_feature_extraction.m writes: one row per 10 ms sampled at 0.005 + 0.01 k s, the centre
of our row k, so rows pair by index. COVAREP writes every undefined value as 0 and interpolates its per-GCI glottal
measures linearly across unvoiced gaps (it never masks them with VUV), so:

- VUV: F1 of our voiced rows against COVAREP's (COVAREP as truth).
- F0: |difference| in cents on rows both call voiced (median and share of gross errors, > 20 %).
- per-voicing measures (`VOICED_MEASURES`, ours NaN on unvoiced rows): Spearman rank correlation on rows both call
  voiced where COVAREP's value is not its 0 for "undefined" and ours is finite; the median relative difference says
  how far the scales differ.
- every other column both sides have (peak slope, and whatever columns the extractor adds that COVAREP writes:
  creak, MCEP, HMPD): Pearson and Spearman on rows where both are defined (ours finite).

Columns pair by name, compared case- and underscore-blind (`peak_slope` is COVAREP's `peakSlope`), so a column the
extractor gains under COVAREP's name is compared without a change here.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import pearsonr, spearmanr

from extractors.acoustic import FS_HZ, Covarep, CovarepConfig
from extractors.base import Audio

FILES = ("arctic_a0007", "amfm_sample", "covarep_0011.arctic_bdl1", "covarep_DB-cresc-a-D4-m1",
         "covarep_glottalized-m1")  # fmt: skip
VOICED_MEASURES = ("naq", "qoq", "h1h2", "psp", "mdq", "rd", "rdconf", "creak")
GROSS = 1.2  # a gross F0 error is more than 20 % off


def key(name: str) -> str:
    """Column names compared case- and underscore-blind: `peak_slope` is `peakSlope`, `MCEP_0` is `mcep_0`."""
    return name.replace("_", "").lower()


def read_reference(path: Path) -> dict[str, np.ndarray]:
    """COVAREP's columns by `key`, from the reference CSV (a header, then one row per 10 ms)."""
    with path.open() as f:
        rows = list(csv.reader(f))
    head = rows[0]  # an empty cell: a column COVAREP could not compute for the file (its README)
    values = np.array([[float(v) if v else np.nan for v in r] for r in rows[1:]])
    return {key(h): values[:, i] for i, h in enumerate(head) if h != "time_s"}


def speech_16k(realdata: Path, name: str) -> np.ndarray:
    """The recording as COVAREP was given it: 16 kHz mono, other rates resampled with soxr_hq (the reference's README)."""
    import librosa
    from scipy.io import wavfile

    rate, pcm = wavfile.read(realdata / "speech" / f"{name}.wav")
    x = pcm.astype(np.float64) / 32768.0
    return x if rate == FS_HZ else librosa.resample(x, orig_sr=rate, target_sr=FS_HZ, res_type="soxr_hq")


def ours(x: np.ndarray, cfg: CovarepConfig) -> dict[str, np.ndarray]:
    rows = Covarep(cfg).extract(Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ))
    return {key(c): rows.features[:, i].astype(float) for i, c in enumerate(Covarep.columns(cfg))}


@dataclass
class Pair:
    """One file's columns, ours and COVAREP's, cut to the rows both have."""

    name: str
    ours: dict[str, np.ndarray]
    ref: dict[str, np.ndarray]

    @property
    def both_voiced(self) -> np.ndarray:
        return (self.ours["vuv"] == 1) & (self.ref["vuv"] == 1)


def pairs(realdata: Path, cfg: CovarepConfig | None = None, names: tuple[str, ...] = FILES) -> list[Pair]:
    out = []
    for name in names:
        ref = read_reference(realdata / "covarep-ref" / f"{name}.csv")
        mine = ours(speech_16k(realdata, name), cfg or CovarepConfig())
        n = min(len(next(iter(ref.values()))), len(mine["vuv"]))
        out.append(Pair(name, {k: v[:n] for k, v in mine.items()}, {k: v[:n] for k, v in ref.items()}))
    return out


def compared_columns(p: Pair) -> list[str]:
    """The columns both sides have, in COVAREP's order."""
    return [k for k in p.ref if k in p.ours]


def column_rows(p: Pair, col: str) -> np.ndarray:
    """The rows a column is compared on (see the module docstring)."""
    defined = np.isfinite(p.ours[col])
    if col in VOICED_MEASURES:
        return defined & p.both_voiced & (p.ref[col] != 0)
    return defined


def stats(ps: list[Pair], col: str) -> dict[str, float]:
    """The column's figures over the given files' rows pooled (one file: that file's)."""
    if col == "vuv":
        a = np.concatenate([p.ours["vuv"] == 1 for p in ps])
        b = np.concatenate([p.ref["vuv"] == 1 for p in ps])
        return {"f1": 2 * float(np.sum(a & b)) / max(1.0, float(a.sum() + b.sum())), "n": float(b.sum())}
    if col == "f0":
        a = np.concatenate([p.ours["f0"][p.both_voiced] for p in ps])
        b = np.concatenate([p.ref["f0"][p.both_voiced] for p in ps])
        c = 1200 * np.abs(np.log2(a / b))
        return {"cents": float(np.median(c)) if c.size else np.nan,
                "gross": float(np.mean(c > 1200 * np.log2(GROSS))) if c.size else np.nan, "n": float(c.size)}  # fmt: skip
    a = np.concatenate([p.ours[col][column_rows(p, col)] for p in ps])
    b = np.concatenate([p.ref[col][column_rows(p, col)] for p in ps])
    if a.size < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"spearman": np.nan, "pearson": np.nan, "reldiff": np.nan, "n": float(a.size)}
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.median((a - b) / np.abs(b))
    return {"spearman": float(spearmanr(a, b).statistic), "pearson": float(pearsonr(a, b).statistic),
            "reldiff": float(rel), "n": float(a.size)}  # fmt: skip


def cell(col: str, s: dict[str, float]) -> str:
    if col == "vuv":
        return f"{s['f1']:.3f}"
    if col == "f0":
        return f"{s['cents']:.1f} c, {100 * s['gross']:.1f} %"
    if col in VOICED_MEASURES:
        return f"{s['spearman']:.2f} ({s['reldiff']:+.2f})"
    return f"{s['spearman']:.2f} / {s['pearson']:.2f}"


def table(ps: list[Pair]) -> str:
    """Markdown: a row per column, a column per file and one for all files pooled."""
    short = [p.name.removeprefix("covarep_") for p in ps]
    lines = ["| column | what | " + " | ".join(short) + " | pooled |", "|---" * (len(ps) + 3) + "|"]
    for col in compared_columns(ps[0]):
        what = ("F1, COVAREP as truth" if col == "vuv" else "median abs. difference, gross > 20 %" if col == "f0"
                else "Spearman (median rel. diff.), both voiced" if col in VOICED_MEASURES
                else "Spearman / Pearson, rows we define")  # fmt: skip
        cells = [cell(col, stats([p], col)) for p in ps] + [f"**{cell(col, stats(ps, col))}**"]
        lines.append(f"| {col} | {what} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from testing.realdata import realdata_dir

    overrides = dict(a.split("=", 1) for a in (sys.argv[1:] if argv is None else argv))
    root = realdata_dir()
    if root is None or not (root / "covarep-ref").is_dir():
        print("covarep_ref: ../shared/realdata/covarep-ref not found (set SIQ_REALDATA): nothing compared")
        return 2
    cfg = CovarepConfig.model_validate(overrides)
    print(table(pairs(root, cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
