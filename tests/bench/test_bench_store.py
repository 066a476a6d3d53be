"""`make bench-store` runs end to end at small sizes: plan and open + items in processes of their own, the
reads on warmed readers, the table of per-item costs with the ratio of the largest size to the smallest, and
the table of what chunk checksums cost (a twin store without them), and its paired figures."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_store_prints_every_measure_for_each_size(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.store", "--items", "300,600", "--tokens-max", "300",
                          "--repeats", "1", "--pairs", "9", "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    main, sums, paired = out.split("\nchunk checksums")
    table = {line.split("  ")[0].strip(): line.split()[-3:] for line in main.splitlines()[-12:] if "  " in line}
    for measure in ("plan us/item", "open+items us/item", "read pooled single/s", "read pooled batched 64/s"):
        first, last, ratio = (float(x.replace(",", "")) for x in table[measure])
        assert first > 0 and last > 0 and 0 < ratio < 100, (measure, table[measure])  # figures, not timings
    assert table["read tokens batched 64/s"][1] == "-"  # tokens only up to --tokens-max items
    costs = {line.split("  ")[0].strip(): line.split()[-6:] for line in sums.splitlines()[2:] if line}
    for measure in ("commit pooled us/item", "read pooled cold single/s", "read pooled lazy single/s",
                    "read tokens lazy single/s"):
        on, off, cost = (float(x.replace(",", "")) for x in costs[measure][:3])
        assert on > 0 and off > 0 and cost == pytest.approx(on / off if "us/" in measure else off / on, rel=0.01)
    assert costs["read tokens cold single/s"][3:] == ["-", "-", "-"]
    pairs = {line.split("  ")[0].strip(): line.split()[-5:] for line in paired.splitlines()[2:] if line}
    assert set(pairs) == {"decode pooled chunk us, 300 items", "decode tokens chunk us, 300 items",
                          "decode pooled chunk us, 600 items", "commit pooled us/item", "commit tokens us/item"}
    for measure, (on, off, cost, spread, n) in pairs.items():
        q1, q3 = (float(x) for x in spread.split("-"))
        on, off, cost = float(on.replace(",", "")), float(off.replace(",", "")), float(cost)
        # the median ratio lies between its quartiles; a checksum costs something but not a second decode
        assert on > 0 and off > 0 and q1 <= cost <= q3 and 0.5 < cost < 2 and n == "9", (measure, pairs[measure])
    assert not list(tmp_path.iterdir())  # the stores are removed


def test_the_paired_decode_times_the_stores_own_chunks_checked_and_not(tmp_path: Path) -> None:
    """`decode_pairs` decompresses the real chunks of a part, a shard's inner chunks cut out by its index: they
    decode to what zarr reads from the part, the store's carry a checksum the decoder checks (a flipped byte
    fails), the twin's none."""
    import numcodecs
    import numpy as np
    import zarr

    from bench.store import _stored_chunks, build

    paths = {on: tmp_path / f"{on}.zarr" for on in (True, False)}
    for on, path in paths.items():
        build(path, 600, 512, tokens=True, checksums=on)
    part = sorted((paths[True] / "tokens/parts").iterdir())[0]
    assert "sharding_indexed" in (part / "features/zarr.json").read_text()  # the shard path is the one tried
    zstd = numcodecs.Zstd()
    chunks = {on: _stored_chunks(path, "tokens", limit=1000) for on, path in paths.items()}
    assert len(chunks[True]) == len(chunks[False]) > 1
    rows = np.concatenate([np.frombuffer(zstd.decode(c), np.float16).reshape(-1, 384) for c in chunks[True]])
    expected = []  # each part's rows as zarr reads them, its last inner chunk filled up to the chunk's shape
    for part in sorted((paths[True] / "tokens/parts").iterdir()):
        a = zarr.open_array(part / "features", mode="r")
        expected.append(np.concatenate([a[...], np.zeros((-a.shape[0] % a.chunks[0], 384), a.dtype)]))
    np.testing.assert_array_equal(rows, np.concatenate(expected))
    bad = bytearray(chunks[True][1])
    bad[len(bad) // 2] ^= 0x10
    with pytest.raises(RuntimeError, match="checksum"):
        zstd.decode(bytes(bad))
    bad = bytearray(chunks[False][1])
    bad[len(bad) // 2] ^= 0x10
    zstd.decode(bytes(bad))  # no checksum: the damage decodes (why the store writes them)
