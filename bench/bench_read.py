"""Read-side throughput: aligned A2 samples per second, and the vectorised collapse against pairwise loops.

    /work/main/.venv/bin/python -m bench.bench_read [--store build/sample.zarr] [--raw build/sample]

Uses the store of `make extract` when given (or when build/sample.zarr exists); otherwise it generates the
sample dataset into a temporary folder and writes a store of the same shape with
`testing.synthetic_store.build_synthetic_store` (2208-column frames, 74-column acoustic at 100 Hz, per-word
transcript rows, real `bert_qa` rows).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from reading.align import collapse, overlaps, reference_for
from rows import fixed_rate_intervals
from testing.synthetic_store import build_synthetic_store


def pairwise_python(ref: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The naive alignment: a Python loop over every (reference, row) pair, then a NaN-aware mean."""
    out = np.full((len(ref), values.shape[1]), np.nan)
    for j in range(len(ref)):
        hits = [i for i in range(len(rows)) if overlaps(ref[j : j + 1], rows[i : i + 1])[0]]
        if hits:
            v = values[hits].astype(np.float64)
            ok = np.isfinite(v)
            with np.errstate(invalid="ignore"):
                out[j] = np.where(ok, v, 0).sum(0) / ok.sum(0)
    return out


def per_reference_loop(ref: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The CMU SDK's pattern: a loop over reference intervals, each tested against all rows at once."""
    out = np.full((len(ref), values.shape[1]), np.nan)
    for j in range(len(ref)):
        hit = overlaps(np.repeat(ref[j : j + 1], len(rows), 0), rows)
        if hit.any():
            v = values[hit].astype(np.float64)
            ok = np.isfinite(v)
            with np.errstate(invalid="ignore"):
                out[j] = np.where(ok, v, 0).sum(0) / ok.sum(0)
    return out


def _timed(fn, *args, repeats: int = 1) -> float:
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn(*args)
    return (time.perf_counter() - t0) / repeats


def bench_dataset(store: Path, modalities: tuple[str, ...], to: str | float) -> None:
    from torch.utils.data import DataLoader

    from reading.datasets import SocialIQA2, collate_qa

    for cache in (0, 8):
        ds = SocialIQA2(store, split=None, modalities=modalities, to=to, exclude_filtered=False, cache_items=cache)
        ds[0]  # opens the store: what a worker pays once
        t0 = time.perf_counter()
        for i in range(len(ds)):
            ds[i]
        dt = time.perf_counter() - t0
        print(f"A2 to={to!r:>12} cache_items={cache}: {len(ds)} samples in {dt:.2f} s = {len(ds) / dt:7.1f} samples/s")
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate_qa)
    t0 = time.perf_counter()
    n = sum(len(b["qid"]) for b in loader)
    dt = time.perf_counter() - t0
    print(f"A2 to={to!r:>12} DataLoader(2 workers, batch 8, incl. worker start): {n / dt:7.1f} samples/s")


def bench_collapse(store: Path) -> None:
    from store import open_store

    s = open_store(store)
    for feature, to in (("acoustic", "transcript"), ("frames", "transcript"), ("acoustic", 1.0)):
        t_vec = t_ref = t_py = 0.0
        pairs = 0
        for item in s.items(feature, include_filtered=True):
            ref = reference_for(s, item, to, [feature])
            r = s.read(feature, item)
            rows, values = r.intervals, np.asarray(r.features[:])
            t_vec += _timed(collapse, ref, rows, values, "mean", repeats=5)
            t_ref += _timed(per_reference_loop, ref, rows, values)
            t_py += _timed(pairwise_python, ref, rows, values) if len(ref) * len(rows) < 400_000 else np.nan
            pairs += len(ref) * len(rows)
            np.testing.assert_allclose(collapse(ref, rows, values)[0], per_reference_loop(ref, rows, values),
                                       rtol=1e-5, atol=1e-5, equal_nan=True)
        print(f"collapse {feature:>10} -> {to!r:>12}: vectorised {t_vec * 1e3:8.2f} ms | per-reference loop "
              f"{t_ref * 1e3:8.1f} ms (x{t_ref / t_vec:5.1f}) | all-pairs Python loop {t_py * 1e3:9.1f} ms "
              f"(x{t_py / t_vec:7.1f}) | {pairs} pairs tested by the loops")


def bench_scaling() -> None:
    """Longer clips than the sample's: 74-column acoustic rows at 100 Hz onto 3 words a second."""
    rng = np.random.default_rng(0)
    for minutes in (1, 10):
        dur = 60.0 * minutes
        rows = fixed_rate_intervals(dur, 100.0)
        values = rng.normal(size=(len(rows), 74)).astype(np.float32)
        starts = np.sort(rng.uniform(0, dur - 0.5, int(3 * dur)))
        ref = np.stack([starts, starts + rng.uniform(0.1, 0.5, len(starts))], axis=1)
        t_vec = _timed(collapse, ref, rows, values, "mean", repeats=3)
        t_ref = _timed(per_reference_loop, ref, rows, values)
        print(f"collapse {minutes:>2} min acoustic ({len(rows)} rows) -> {len(ref)} words: vectorised "
              f"{t_vec * 1e3:7.1f} ms | per-reference loop {t_ref * 1e3:8.1f} ms (x{t_ref / t_vec:5.1f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=None, help="a store from `make extract` (default: build/sample.zarr)")
    args = p.parse_args()
    store = args.store or (Path("build/sample.zarr") if Path("build/sample.zarr/zarr.json").exists() else None)
    with tempfile.TemporaryDirectory() as tmp:
        if store is None:
            from manifests.sample import make_sample

            t0 = time.perf_counter()
            raw = make_sample(Path(tmp) / "raw")
            store = build_synthetic_store(raw, Path(tmp) / "sample.zarr")
            print(f"built the synthetic sample store in {time.perf_counter() - t0:.1f} s (no --store given)")
        print(f"store: {store}")
        bench_dataset(store, ("frames", "acoustic", "faces"), "transcript")
        bench_dataset(store, ("frames", "acoustic", "faces"), 1.0)
        bench_collapse(store)
    bench_scaling()


if __name__ == "__main__":
    main()
