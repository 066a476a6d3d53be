"""`make bench-store`: the store alone (no models) at growing item counts (docs/design.md, "Store").

Per item count N (default 35,000 and 1,000,000) a fresh store gets N synthetic items of a `pooled`
feature (one 384-d float32 row, a SocialIQA question's vector) and, up to `--tokens-max` items, a `tokens`
feature (20..60 rows of 384-d float16 each). Measured, each as a per-item cost so that N can be compared:
- commit: `StoreWriter.commit_batch` in batches of `--batch` items (what the run's committer does; once,
  while the store is built);
- plan: `make_plan` over every item (all up to date: the cost of a re-run deciding it has nothing to do);
- open + items: a fresh `Store`, its index loaded and `items()` listed (what dataset construction reads);
- reads: 20,000 random single items (`read(...).features[...]`), one at a time, and batched (`Store.rows`,
  64 items per call), on one `Store` per N opened and warmed (a pass over the same items) beforehand;
- files and bytes on disk.
All stores are built first and kept until the end; then plan, open + items and the reads are measured
`--repeats` times, the sizes interleaved within each repeat (N1, N2, N1, N2, ...) so that a change in the
machine's load (it is shared) hits every size alike, and each figure is the median of its repeats. Prints a
table and the ratio of each per-item cost at the largest N to the smallest (reads: the ratio of rates, so
below 1 when reads slow down; a cost ratio of 1.5 is a rate ratio of 0.67).

    python -m bench.store [--items 35000,1000000] [--batch 512] [--tokens-max 35000] [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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


def _picks(n: int) -> list[str]:
    rng = np.random.default_rng(1)
    return [f"q{k:07d}" for k in rng.integers(0, n, min(READS, n))]


def _warm(s: Store, feature: str, picks: list[str]) -> None:
    """A pass over the items read later: their parts loaded, the batched path's structures built."""
    for item in picks:
        s.read(feature, item).features[...]
    for k in range(0, len(picks), 64):
        s.rows(feature, "features", [(item, 0) for item in picks[k:k + 64]])


def _reads(s: Store, feature: str, picks: list[str]) -> dict[str, float]:
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


def build(path: Path, n: int, batch: int, tokens: bool) -> dict[str, float]:
    """The store of `n` items, with its commit costs, files and bytes."""
    out: dict[str, float] = {"items": n}
    out.update(_commit(path, n, batch, tokens))
    files, size = _disk(path)
    out["files"], out["MB"] = files, size / 1e6
    out["files per 1000 pairs"] = files / (n * (2 if tokens else 1)) * 1000
    return out


def measure_once(path: Path, n: int, features: list[str], readers: dict[str, Store],
                 picks: list[str]) -> dict[str, float]:
    """One repeat of the per-item costs that do not change the store: plan, open + items, reads."""
    out: dict[str, float] = {}
    wanted = [Wanted("pooled", f"q{k:07d}", f"fp{k}") for k in range(n)]
    t0 = time.perf_counter()
    plan = make_plan(path, wanted)
    out["plan us/item"] = (time.perf_counter() - t0) / n * 1e6
    assert not plan.todo and len(plan.skipped) == n
    t0 = time.perf_counter()
    listed = Store(path).items("pooled")
    out["open+items us/item"] = (time.perf_counter() - t0) / n * 1e6
    assert len(listed) == n
    for f in features:
        out.update(_reads(readers[f], f, picks))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", default="35000,1000000")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--tokens-max", type=int, default=35_000, help="the tokens feature only up to this many items")
    p.add_argument("--repeats", type=int, default=3, help="repeats of plan, open and reads (medians)")
    p.add_argument("--dir", default=None, help="where the stores go (default: a temporary folder, removed)")
    args = p.parse_args(argv)
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-store-"))
    sizes = [int(x) for x in args.items.split(",")]
    results = []
    try:
        built, readers = {}, {}
        for n in sizes:
            path = base / f"store-{n}.zarr"
            shutil.rmtree(path, ignore_errors=True)
            built[n] = build(path, n, args.batch, n <= args.tokens_max)
            features = ["pooled", *(["tokens"] if n <= args.tokens_max else [])]
            readers[n] = {f: Store(path) for f in features}
            for f in features:
                _warm(readers[n][f], f, _picks(n))
            print(f"built {n:,} items: " + "  ".join(f"{k} {v:,.1f}" for k, v in built[n].items()), flush=True)
        repeats: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
        for rep in range(args.repeats):
            for n in sizes:
                got = measure_once(base / f"store-{n}.zarr", n, list(readers[n]), readers[n], _picks(n))
                repeats[n].append(got)
                print(f"repeat {rep + 1} {n:,} items: " + "  ".join(f"{k} {v:,.1f}" for k, v in got.items()),
                      flush=True)
        for n in sizes:
            r = dict(built[n])
            r.update({k: statistics.median(x[k] for x in repeats[n]) for k in repeats[n][0]})
            results.append(r)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
        else:
            for n in sizes:
                shutil.rmtree(base / f"store-{n}.zarr", ignore_errors=True)
    keys = [k for k in results[0] if k != "items"]
    print(f"\n{'measure':<30}" + "".join(f"{int(r['items']):>14,}" for r in results) + f"{'ratio last/first':>18}")
    for k in keys:
        vals = [r.get(k) for r in results]
        row = "".join(f"{v:>14,.1f}" if v is not None else f"{'-':>14}" for v in vals)
        ratio = vals[-1] / vals[0] if None not in (vals[0], vals[-1]) and vals[0] else float("nan")
        print(f"{k:<30}{row}{ratio:>18.2f}")


if __name__ == "__main__":
    main()
