"""`make bench-store` runs end to end at small sizes: plan and open + items in processes of their own, the
reads on warmed readers, and the table of per-item costs with the ratio of the largest size to the smallest."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_store_prints_every_measure_for_each_size(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.store", "--items", "300,600", "--tokens-max", "300",
                          "--repeats", "1", "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    table = {line.split("  ")[0].strip(): line.split()[-3:] for line in out.splitlines()[-12:] if "  " in line}
    for measure in ("plan us/item", "open+items us/item", "read pooled single/s", "read pooled batched 64/s"):
        first, last, ratio = (float(x.replace(",", "")) for x in table[measure])
        assert first > 0 and last > 0 and 0 < ratio < 100, (measure, table[measure])  # figures, not timings
    assert table["read tokens batched 64/s"][1] == "-"  # tokens only up to --tokens-max items
    assert not list(tmp_path.iterdir())  # the stores are removed
