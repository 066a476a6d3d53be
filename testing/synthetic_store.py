"""A store of known values for the sample dataset: synthetic frames (1 fps, row k column j = k + j / dim), faces
(the patch manifests.sample pastes, where it pastes it), acoustic (COVAREP's 74 columns at 100 Hz, F0 following a
known curve, NaN where unvoiced, now and then +-inf), transcript rows (per word, spread over the sample's own
cues) and real `bert_qa` rows from the bundled MiniLM. Its values are known, so alignment and export results can
be checked against them; the read benchmark (bench/bench_read.py) uses it where no extracted store is given.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from extractors.acoustic import COVAREP74_COLUMNS
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
