"""`make bench-store` runs end to end at small sizes: plan and open + items in processes of their own, the
reads on warmed readers, the table of per-item costs with the ratio of the largest size to the smallest, and
the table of what chunk checksums cost (a twin store without them)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_bench_store_prints_every_measure_for_each_size(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.store", "--items", "300,600", "--tokens-max", "300",
                          "--repeats", "1", "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    main, sums = out.split("\nchunk checksums")
    table = {line.split("  ")[0].strip(): line.split()[-3:] for line in main.splitlines()[-12:] if "  " in line}
    for measure in ("plan us/item", "open+items us/item", "read pooled single/s", "read pooled batched 64/s"):
        first, last, ratio = (float(x.replace(",", "")) for x in table[measure])
        assert first > 0 and last > 0 and 0 < ratio < 100, (measure, table[measure])  # figures, not timings
    assert table["read tokens batched 64/s"][1] == "-"  # tokens only up to --tokens-max items
    costs = {line.split("  ")[0].strip(): line.split()[-6:] for line in sums.splitlines()[2:]}
    for measure in ("commit pooled us/item", "read pooled cold single/s", "read pooled lazy single/s",
                    "read tokens lazy single/s"):
        on, off, cost = (float(x.replace(",", "")) for x in costs[measure][:3])
        assert on > 0 and off > 0 and cost == pytest.approx(on / off if "us/" in measure else off / on, rel=0.01)
    assert costs["read tokens cold single/s"][3:] == ["-", "-", "-"]
    assert not list(tmp_path.iterdir())  # the stores are removed
