"""Read-side throughput: aligned A2 samples per second, and the vectorised collapse against pairwise loops.

    /work/main/.venv/bin/python -m bench.bench_read [--store build/sample.zarr] [--raw build/sample]

Uses the store of `make extract` when given (or when build/sample.zarr exists); otherwise it generates the
sample dataset into a temporary folder and writes a store of the same shape with `build_synthetic_store`:
synthetic frames (2208 columns, 1 fps), faces (1 fps), acoustic (74 columns, 100 Hz, with NaN) and
transcript rows (per word, from the sample's own cues), and real `bert_qa` rows from the bundled MiniLM.
Tests use `build_synthetic_store` too: its values are known, so alignment results can be checked.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from extractors.acoustic import COVAREP74_COLUMNS
from reading.align import collapse, overlaps, reference_for
from rows import FeatureRows, fixed_rate_intervals
from store import StoreWriter

ACOUSTIC_COLUMNS = list(COVAREP74_COLUMNS)  # COVAREP's 74 (random values): exported under the SDK's name
FACE_COLUMNS = ["count", "max_prob", "largest_area_frac", "largest_cx", "largest_cy", "largest_w", "largest_h"]


def _feature(w: StoreWriter, name: str, extractor: str, columns: list[str], rate_hz: float | None) -> None:
    w.set_feature(name, {"extractor": extractor, "version": "synthetic", "config": {}, "columns": columns,
                         "rate_hz": rate_hz, "weights": "synthetic", "spec_hash": f"synthetic-{name}"})


def _frames_rows(duration_s: float, dim: int) -> FeatureRows:
    """Row k, column j = k + j / dim: the second is readable from any column."""
    iv = fixed_rate_intervals(duration_s, 1.0)
    x = np.arange(len(iv), dtype=np.float32)[:, None] + np.arange(dim, dtype=np.float32)[None, :] / dim
    return FeatureRows(x.astype(np.float16 if dim > 64 else np.float32), iv)


def _faces_rows(truth: dict) -> FeatureRows:
    """The face patch make_sample pastes: side 0.7 H, bottom-centred, shifted by (second % 3 - 1) * 8 px."""
    iv = fixed_rate_intervals(truth["duration_s"], 1.0)
    h, w, side = truth["height"], truth["width"], int(truth["height"] * 0.7)
    feats = np.full((len(iv), 7), np.nan, np.float32)
    boxes, probs = np.full((len(iv), 1, 4), np.nan, np.float32), np.full((len(iv), 1), np.nan, np.float32)
    mask, count = np.zeros((len(iv), 1), bool), np.zeros(len(iv), np.int32)
    feats[:, 0] = 0
    for k in truth["face_seconds"]:
        top, left = h - side - 4, (w - side) // 2 + (k % 3 - 1) * 8
        boxes[k, 0] = [left, top, left + side, top + side]
        probs[k, 0], mask[k, 0], count[k] = 0.99, True, 1
        feats[k] = [1, 0.99, side * side / (w * h), (left + side / 2) / w, (top + side / 2) / h, side / w, side / h]
    ratio = float(np.count_nonzero(count) / len(iv))
    extras = {"boxes": boxes, "probs": probs, "landmarks": np.full((len(iv), 1, 5, 2), np.nan, np.float32),
              "mask": mask, "count": count}
    return FeatureRows(feats, iv, extras, {"face_ratio": ratio, "filtered": ratio < 0.8, "min_face_ratio": 0.8})


def _acoustic_rows(truth: dict, rng: np.random.Generator) -> FeatureRows:
    """100 Hz rows; F0 = 150 + 30 sin during speech, NaN where unvoiced; some columns +-inf now and then."""
    iv = fixed_rate_intervals(truth["duration_s"], 100.0)
    t = iv[:, 0]
    voiced = np.zeros(len(t), bool)
    for start, end, _ in truth["cues"]:
        voiced |= (t >= start) & (t < end)
    x = rng.normal(size=(len(t), len(ACOUSTIC_COLUMNS))).astype(np.float32)
    x[:, 0] = np.where(voiced, 150 + 30 * np.sin(2 * np.pi * 0.5 * t), np.nan)
    x[:, 1] = voiced
    x[rng.random(len(t)) < 0.01, 5] = np.inf
    return FeatureRows(x, iv)


def _transcript_rows(truth: dict, dim: int, rng: np.random.Generator) -> FeatureRows:
    """Each cue's words spread evenly over the cue; vectors random."""
    words, spans = [], []
    for start, end, text in truth["cues"]:
        parts = text.split()
        edges = np.linspace(start, end, len(parts) + 1)
        words += parts
        spans += list(zip(edges[:-1], edges[1:], strict=True))
    iv = np.asarray(spans, np.float64).reshape(-1, 2)
    x = rng.normal(size=(len(words), dim)).astype(np.float32)
    return FeatureRows(x, iv, {"words": np.asarray(words, dtype=np.str_).reshape(len(words))})


def build_synthetic_store(raw: Path, out: Path, frames_dim: int = 2208, words_dim: int = 768) -> Path:
    """A store for the sample dataset at `raw` (made by manifests.sample.make_sample): see the module doc."""
    from extractors.qa import QAConfig, QAExtractor
    from extractors.text_model import BUNDLED_MINILM
    from manifests.socialiq import read_siq2
    from media.kinds.qa import qa_text

    items, qa = read_siq2(raw)
    truths = json.loads(next(raw.glob("**/sample_truth.json")).read_text())
    w = StoreWriter(out, "sample")
    w.write_manifests(items, qa)
    for name, ext, cols, rate in (("frames", "densenet161", [f"d{i:04d}" for i in range(frames_dim)], 1.0),
                                  ("faces", "mtcnn", FACE_COLUMNS, 1.0), ("acoustic", "covarep", ACOUSTIC_COLUMNS, 100.0),
                                  ("transcript", "bert_words", [f"h{i:04d}" for i in range(words_dim)], None)):
        _feature(w, name, ext, cols, rate)
    config = QAConfig(model=BUNDLED_MINILM)
    _feature(w, "qa", "bert_qa", QAExtractor.columns(config), None)
    rng = np.random.default_rng(0)
    for item in items:
        truth = truths[item.id]
        dur = float(truth["duration_s"])
        for name, rows in (("frames", _frames_rows(dur, frames_dim)), ("faces", _faces_rows(truth)),
                           ("acoustic", _acoustic_rows(truth, rng)), ("transcript", _transcript_rows(truth, words_dim, rng))):
            w.commit(name, item.id, rows, {"duration_s": dur, "spec_hash": f"synthetic-{name}", "fingerprint": "-"})
    by_item: dict[str, list] = {}
    for q in qa:
        by_item.setdefault(q.item_id, []).append(q)
    extractor = QAExtractor(config)
    texts = [qa_text(by_item[i]) for i in sorted(by_item)]
    for item_id, rows in zip(sorted(by_item), extractor.extract_batch(texts), strict=True):
        w.commit("qa", item_id, rows, {"duration_s": None, "spec_hash": "synthetic-qa", "fingerprint": "-"})
    return out


# ---- the bench --------------------------------------------------------------------------------------


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
