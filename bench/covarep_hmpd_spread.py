"""COVAREP's own run-to-run spread of its HMPD columns, and ours against COVAREP measured in units of it.

COVAREP's HMPD fills the phases of bins above the last harmonic (and empty PDM bands) at random, a new draw each
run, so its HMPD columns are not a fixed target: this measures how far two COVAREP runs differ, per column, on the
reference recordings, and how far our HMPD is from COVAREP's output (`../shared/realdata/covarep-ref`, one run with
`rand('state', 0)`) in units of that spread (docs/acoustic.md, "COVAREP's HMPD run to run").

- `python -m bench.covarep_hmpd_spread --runs DIR`: DIR holds COVAREP's HMPD of each recording for several seeds,
  `<name>.seed<k>.csv` (38 comma-separated columns, HMPDM_0..24 then HMPDD_0..12, one line per 10 ms row, undefined
  as 0: what `COVAREP_feature_extraction.m` writes in those columns, run as docs/acoustic.md says). Writes the
  spread to tests/data/covarep_hmpd_spread.json, then prints the table.
- `python -m bench.covarep_hmpd_spread`: the table from that JSON and our extractor (needs ../shared/realdata).

Per column, on the rows COVAREP calls voiced, 6 rows in from each end (the rows the HMPD comparison of
bench.covarep74_ref reads, less our own VUV, so that the spread depends on COVAREP alone): for each pair of runs
the median |difference| over rows (HMPDM: the wrapped phase difference) and Spearman's rho between the runs; the
spread is the median over pairs. Our distance is the same median |difference| between our rows and COVAREP's
reference run on the rows both call voiced (bench.covarep74_ref's `hmpd_dist`).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bench.covarep74_ref import EDGE_ROWS, FILES, PDD, PDM, distance, read_reference, run

SPREAD_JSON = Path(__file__).resolve().parents[1] / "tests" / "data" / "covarep_hmpd_spread.json"
COLUMNS = PDM + PDD


def covarep_rows(ref: dict[str, np.ndarray], n: int) -> np.ndarray:
    rows = ref["VUV"][:n] == 1
    rows[:EDGE_ROWS] = rows[n - EDGE_ROWS :] = False
    return rows


def spread(runs: list[np.ndarray], rows: np.ndarray) -> dict[str, dict[str, float]]:
    """Per column: median over pairs of runs of the median |difference| (`spread`), its largest pair
    (`spread_max`), and the median and smallest Spearman rho between runs (NaN where a column is constant)."""
    out = {}
    for i, c in enumerate(COLUMNS):
        cols = [r[rows, i] for r in runs]
        d = [float(np.median(distance(c, a, b))) for a, b in itertools.combinations(cols, 2)]
        rho = [float(spearmanr(a, b)[0]) if np.ptp(a) > 0 and np.ptp(b) > 0 else np.nan
               for a, b in itertools.combinations(cols, 2)]  # fmt: skip
        out[c] = {"spread": float(np.median(d)), "spread_max": float(np.max(d)),
                  "rho": float(np.nanmedian(rho)) if np.isfinite(rho).any() else None,
                  "rho_min": float(np.nanmin(rho)) if np.isfinite(rho).any() else None}  # fmt: skip
    return out


def measure(runs_dir: Path, root: Path) -> dict:
    files = {}
    for name in FILES:
        paths = sorted(runs_dir.glob(f"{name}.seed*.csv"))
        if len(paths) < 2:
            continue
        runs = [np.loadtxt(p, delimiter=",", ndmin=2) for p in paths]
        ref = read_reference(root, name)
        n = min(len(ref["VUV"]), *(len(r) for r in runs))
        rows = covarep_rows(ref, n)
        files[name] = {"runs": len(runs), "seeds": [int(p.name.split(".seed")[1].split(".")[0]) for p in paths],
                       "rows": int(rows.sum()), "columns": spread([r[:n] for r in runs], rows)}  # fmt: skip
    return {
        "what": "COVAREP's HMPD run to run: per column, on rows COVAREP calls voiced (6 rows in from each end), the "
        "median over pairs of runs (different rand('state', seed)) of the median |difference| (HMPDM: wrapped), its "
        "largest pair, and Spearman's rho between runs (median, smallest)",
        "command": "python -m bench.covarep_hmpd_spread --runs DIR (docs/acoustic.md, \"COVAREP's HMPD run to run\")",
        "reference": "covarep/covarep 5a2be5d6 under GNU Octave 7.3.0, octave-signal 1.4.3",
        "files": files,
    }


def to_json(data: dict) -> str:
    """The JSON with one line per column (values to 5 significant digits): small and readable in a diff."""
    def fmt(v: float | None) -> float | None:
        return None if v is None or not np.isfinite(v) else float(f"{v:.5g}")

    lines = []
    for name, f in data["files"].items():
        cols = ",\n".join(f'    "{c}": ' + json.dumps({k: fmt(v) for k, v in s.items()}) for c, s in f["columns"].items())
        head = json.dumps({k: v for k, v in f.items() if k != "columns"})[1:-1]
        lines.append(f'  "{name}": {{{head}, "columns": {{\n{cols}\n  }}}}')
    top = json.dumps({k: v for k, v in data.items() if k != "files"}, indent=1)[:-2]
    return top + ',\n "files": {\n' + ",\n".join(lines) + "\n }\n}\n"


def main() -> None:
    from testing.realdata import realdata_dir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, help="COVAREP's HMPD per seed, <name>.seed<k>.csv (writes the JSON)")
    args = parser.parse_args()
    root = realdata_dir()
    if root is None:
        raise SystemExit("../shared/realdata (or SIQ_REALDATA) not found: nothing to compare with")
    if args.runs is not None:
        data = measure(args.runs, root)
        if not data["files"]:
            raise SystemExit(f"{args.runs}: no <name>.seed<k>.csv pairs for the reference recordings")
        SPREAD_JSON.write_text(to_json(data))
        print(f"wrote {SPREAD_JSON}")
    data = json.loads(SPREAD_JSON.read_text())
    ours = {r.name: dict(zip(COLUMNS, r.hmpd_dist, strict=True)) for r in run(root, tuple(data["files"]))}
    for name, f in data["files"].items():
        dist = ours[name]
        print(f"{name}: {f['runs']} COVAREP runs, {f['rows']} rows")
        print("  column     COVAREP spread (max pair)  rho between runs (min) | ours vs COVAREP  ratio")
        for c in COLUMNS:
            s = f["columns"][c]
            if s["spread"] == 0:
                continue
            print(f"  {c:9s}  {s['spread']:.4f} ({s['spread_max']:.4f})        {s['rho']:.3f} ({s['rho_min']:.3f})"
                  f"          | {dist[c]:.4f}          {dist[c] / s['spread']:6.1f}")
        still = [c for c in COLUMNS if f["columns"][c]["spread"] == 0]
        print(f"  no spread (identical in every run): {still[0]}..{still[-1]} ({len(still)} columns)" if still else "")


if __name__ == "__main__":
    main()
