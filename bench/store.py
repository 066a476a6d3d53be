"""`make bench-store`: the store alone (no models) at growing item counts (docs/design.md, "Store").

Per item count N (default 35,000 and 1,000,000) a fresh store gets N synthetic items of a `pooled`
feature (one 384-d float32 row, a SocialIQA question's vector) and, up to `--tokens-max` items, a `tokens`
feature (20..60 rows of 384-d float16 each). Measured, each as a per-item cost so that N can be compared:
- commit: `StoreWriter.commit_batch` in batches of `--batch` items (what the run's committer does);
- plan: `make_plan` over every item (all up to date: the cost of a re-run deciding it has nothing to do);
- open + items: a fresh `Store`, its index loaded and `items()` listed (what dataset construction reads);
- reads: random single items (`read(...).features[...]`), one at a time, and batched (`Store.rows`, 64
  items per call), each after a warm-up pass over the same items;
- files and bytes on disk.
Prints a table and the ratio of each per-item cost at the largest N to the smallest.

    python -m bench.store [--items 35000,1000000] [--batch 512] [--tokens-max 35000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from extractors.base import FeatureRows
from store.plan import Wanted, make_plan
from store.reader import Store
from store.writer import StoreWriter

DIM = 384
READS = 20_000


def _spec(name: str) -> dict:
    return {"extractor": "synthetic", "version": "1", "config": {}, "columns": [f"h{i}" for i in range(DIM)],
            "rate_hz": None, "weights": "none", "spec_hash": f"bench-{name}"}


def _rows(rng: np.random.Generator, n_rows: int, dtype: str) -> FeatureRows:
    return FeatureRows(rng.standard_normal((n_rows, DIM)).astype(dtype), np.zeros((n_rows, 2)))


def _commit(path: Path, n: int, batch: int, tokens: bool) -> dict[str, float]:
    rng = np.random.default_rng(0)
    out = {}
    feats = ["pooled", *(["tokens"] if tokens else [])]
    with StoreWriter(path, "bench") as w:
        for f in feats:
            w.set_feature(f, _spec(f))
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                items = []
                for k in range(start, min(n, start + batch)):
                    rows = _rows(rng, 1, "float32") if f == "pooled" else _rows(rng, int(rng.integers(20, 61)), "float16")
                    items.append((f"q{k:07d}", rows, {"fingerprint": f"fp{k}", "spec_hash": f"bench-{f}",
                                                      "source": {"qa": f"{k:064x}"}, "duration_s": None}))
                w.commit_batch(f, items)
            out[f"commit {f} us/item"] = (time.perf_counter() - t0) / n * 1e6
    return out


def _reads(path: Path, n: int, feature: str) -> dict[str, float]:
    s = Store(path)
    rng = np.random.default_rng(1)
    picks = [f"q{k:07d}" for k in rng.integers(0, n, min(READS, n))]
    for item in picks:  # warm-up: the parts these items live in
        s.read(feature, item).features[...]
    t0 = time.perf_counter()
    for item in picks:
        s.read(feature, item).features[...]
    single = (time.perf_counter() - t0) / len(picks)
    t0 = time.perf_counter()
    for k in range(0, len(picks), 64):
        s.rows(feature, "features", [(item, 0) for item in picks[k:k + 64]])
    batched = (time.perf_counter() - t0) / len(picks)
    return {f"read {feature} single/s": 1 / single, f"read {feature} batched 64/s": 1 / batched}


def _disk(path: Path) -> tuple[int, int]:
    files = size = 0
    for folder, _, names in os.walk(path):
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(folder, name))
    return files, size


def with_store(base: Path | None, keep: bool, build: Callable[[Path], str], measure: Callable[[Path], None]) -> None:
    """`build` a store in `base/store.zarr` unless it is there (it prints what it built), `measure` it, and
    remove it afterwards unless `keep`."""
    folder = base or Path(tempfile.mkdtemp(prefix="bench-store-"))
    out = folder / "store.zarr"
    try:
        if not (out / "zarr.json").exists():
            t0 = time.perf_counter()
            what = build(out)
            files, size = _disk(out)
            print(f"built {out}: {what} in {time.perf_counter() - t0:.1f} s, {files} files, {size / 1e9:.2f} GB",
                  flush=True)
        measure(out)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def measure(path: Path, n: int, batch: int, tokens: bool) -> dict[str, float]:
    out: dict[str, float] = {"items": n}
    out.update(_commit(path, n, batch, tokens))
    wanted = [Wanted("pooled", f"q{k:07d}", f"fp{k}") for k in range(n)]
    t0 = time.perf_counter()
    plan = make_plan(path, wanted)
    out["plan us/item"] = (time.perf_counter() - t0) / n * 1e6
    assert not plan.todo and len(plan.skipped) == n
    t0 = time.perf_counter()
    listed = Store(path).items("pooled")
    out["open+items us/item"] = (time.perf_counter() - t0) / n * 1e6
    assert len(listed) == n
    out.update(_reads(path, n, "pooled"))
    if tokens:
        out.update(_reads(path, n, "tokens"))
    files, size = _disk(path)
    out["files"], out["MB"] = files, size / 1e6
    out["files per 1000 pairs"] = files / (n * (2 if tokens else 1)) * 1000
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", default="35000,1000000")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--tokens-max", type=int, default=35_000, help="the tokens feature only up to this many items")
    p.add_argument("--dir", default=None, help="where the stores go (default: a temporary folder, removed)")
    args = p.parse_args(argv)
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-store-"))
    results = []
    try:
        for n in (int(x) for x in args.items.split(",")):
            path = base / f"store-{n}.zarr"
            shutil.rmtree(path, ignore_errors=True)
            r = measure(path, n, args.batch, n <= args.tokens_max)
            results.append(r)
            print("  ".join(f"{k} {v:,.1f}" for k, v in r.items()), flush=True)
            shutil.rmtree(path, ignore_errors=True)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    keys = [k for k in results[0] if k != "items"]
    print(f"\n{'measure':<30}" + "".join(f"{int(r['items']):>14,}" for r in results) + f"{'ratio last/first':>18}")
    for k in keys:
        vals = [r.get(k) for r in results]
        row = "".join(f"{v:>14,.1f}" if v is not None else f"{'-':>14}" for v in vals)
        ratio = vals[-1] / vals[0] if None not in (vals[0], vals[-1]) and vals[0] else float("nan")
        print(f"{k:<30}{row}{ratio:>18.2f}")


if __name__ == "__main__":
    main()
