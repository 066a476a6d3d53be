"""Social-IQ A2 training reads at full size: `python -m bench.store_siq [--items 1000]`.

A synthetic Social-IQ-shaped store of `--items` 60 s clips (frames 2208-d at 1 fps, faces at 1 fps,
acoustic 74-d at 100 Hz, transcript words 768-d at ~2.5 words/s, 6 questions of 4 answers each with pooled
QA rows), committed as a run's committer does. Then `SocialIQA2` with the 4 modalities aligned to the
transcript's words, shuffled, num_workers=0: through the materialised view (made once, timed) one sample at
a time and through a DataLoader (batch 32), and, for comparison, aligning on read (a subset of samples).

    python -m bench.store_siq [--items 1000] [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.store import with_store
from extractors.qa import qa_rows
from manifests.records import MediaItem, QAItem
from media.kinds.qa import qa_text
from rows import FeatureRows
from store.writer import StoreWriter
from testing.synthetic_store import (
    ACOUSTIC_COLUMNS,
    FACE_COLUMNS,
    _acoustic_rows,
    _faces_rows,
    _feature,
    _frames_rows,
    _transcript_rows,
)

MODS = ("frames", "faces", "acoustic", "transcript")
DUR_S, QA_DIM = 60.0, 768


def _truth(rng: np.random.Generator) -> dict:
    starts = np.sort(rng.uniform(0, DUR_S - 3, 30))
    cues = [(float(s), float(s) + 2.0, " ".join(f"w{k}" for k in range(5))) for s in starts]
    faces = [k for k in range(int(DUR_S)) if rng.random() < 0.95]
    return {"duration_s": DUR_S, "height": 360, "width": 640, "cues": cues, "face_seconds": faces}


def _qa(item: str) -> list[QAItem]:
    return [QAItem(qid=f"{item}-q{k}", item_id=item, dataset="bench", split="train", question=f"why {k}?",
                   answers=tuple(f"answer {k}.{a}" for a in range(4)), correct=(True, False, False, False))
            for k in range(6)]


def _qa_rows(questions: list[QAItem], rng: np.random.Generator) -> FeatureRows:
    plan = qa_rows(qa_text(questions))
    n = len(plan)
    extras = {"role": np.asarray([r.role for r in plan], np.int8), "a_index": np.asarray([r.a_index for r in plan], np.int32),
              "qid": np.asarray([r.qid for r in plan], np.str_), "text": np.asarray([r.text for r in plan], np.str_),
              "tokens": np.zeros((n, 1, QA_DIM), np.float16), "token_mask": np.ones((n, 1), bool)}
    return FeatureRows(rng.standard_normal((n, QA_DIM)).astype(np.float32), np.zeros((n, 2)), extras)


def build(out: Path, n_items: int) -> float:
    from pipeline.committer import Committer

    rng = np.random.default_rng(0)
    items = [MediaItem(id=f"clip{k:05d}", dataset="bench") for k in range(n_items)]
    qa = [q for m in items for q in _qa(m.id)]
    t0 = time.perf_counter()
    with StoreWriter(out, "bench") as w:
        w.write_manifests(items, qa)
        for name, ext, cols, rate in (("frames", "densenet161", [f"d{i:04d}" for i in range(2208)], 1.0),
                                      ("faces", "mtcnn", FACE_COLUMNS, 1.0), ("acoustic", "covarep", ACOUSTIC_COLUMNS, 100.0),
                                      ("transcript", "bert_words", [f"h{i:04d}" for i in range(QA_DIM)], None),
                                      ("qa", "bert_qa", [f"h{i:04d}" for i in range(QA_DIM)], None)):
            _feature(w, name, ext, cols, rate)
        c = Committer(w)
        for m in items:
            truth = _truth(rng)
            attrs = {"duration_s": DUR_S, "fingerprint": "-"}
            for name, rows in (("frames", _frames_rows(DUR_S, 2208)), ("faces", _faces_rows(truth)),
                               ("acoustic", _acoustic_rows(truth, rng)), ("transcript", _transcript_rows(truth, QA_DIM, rng)),
                               ("qa", _qa_rows(_qa(m.id), rng))):
                c.put(name, m.id, rows, {**attrs, "spec_hash": f"synthetic-{name}"})
        assert all(o.error is None for o in c.close())
    return time.perf_counter() - t0


def measure(out: Path) -> None:
    from torch.utils.data import DataLoader

    from reading.datasets import SocialIQA2, collate_qa

    opts = {"split": None, "modalities": MODS, "to": "transcript", "exclude_filtered": False, "text": "pooled"}
    t0 = time.perf_counter()
    ds = SocialIQA2(out, materialized=True, **opts)
    print(f"SocialIQA2 with the view: {len(ds):,} samples; construction incl. materialising {time.perf_counter() - t0:.1f} s",
          flush=True)
    t0 = time.perf_counter()
    SocialIQA2(out, materialized=True, **opts)
    print(f"construction again (view and plan up to date): {time.perf_counter() - t0:.2f} s", flush=True)
    order = np.random.default_rng(0).permutation(len(ds))
    t0 = time.perf_counter()
    for i in order:
        ds[int(i)]
    print(f"A2, 4 modalities aligned to words, view, one at a time shuffled (0 workers, first epoch: parts load): "
          f"{len(ds) / (time.perf_counter() - t0):,.0f} samples/s", flush=True)
    t0 = time.perf_counter()
    n = sum(len(b["qid"]) for b in DataLoader(ds, batch_size=32, shuffle=True, collate_fn=collate_qa))
    print(f"A2 view, DataLoader batch 32 shuffled (0 workers, second epoch): {n / (time.perf_counter() - t0):,.0f} samples/s",
          flush=True)
    direct = SocialIQA2(out, **opts)
    k = min(len(direct), 1000)
    t0 = time.perf_counter()
    for i in order[:k]:
        direct[int(i)]
    print(f"A2 aligning on read, one at a time shuffled (0 workers, {k} samples): "
          f"{k / (time.perf_counter() - t0):,.0f} samples/s", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    def made(out: Path) -> str:
        build(out, args.items)
        return f"{args.items} items x 5 features ({5 * args.items} pairs)"

    with_store(args.out, args.keep, made, measure)


if __name__ == "__main__":
    main()
