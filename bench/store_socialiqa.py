"""SocialIQA reads at full size without a text model: `python -m bench.store_socialiqa RAW`.

A store with the real SocialIQA questions of RAW (train and dev: 35,364) and the `bert_qa` row plan with
the real shapes (pooled (n, 384) float32, tokens (n, 25, 384) float32, the row plan's texts), random
values, committed as a run's committer does (batches of up to 512 items / 64 MiB). Then, as a user would:
`SocialIQA3(store, split="train", modalities=(), text="pooled")` construction (fresh store handle),
samples one at a time in shuffled order (num_workers=0), and a DataLoader with batch_size 64 (the
batched `__getitems__` path), pooled and tokens. Prints files and bytes of the store.

    python -m bench.store_socialiqa ../shared/realdata/socialiqa [--out DIR] [--keep]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.store import with_store
from extractors.qa import qa_rows
from manifests.socialiqa import read_socialiqa
from media.kinds.qa import qa_text
from rows import FeatureRows
from store.writer import StoreWriter

DIM, T = 384, 25


def _rows(questions: list, rng: np.random.Generator) -> FeatureRows:
    plan = qa_rows(qa_text(questions))
    n = len(plan)
    extras = {
        "tokens": rng.standard_normal((n, T, DIM), np.float32), "token_mask": np.ones((n, T), bool),
        "n_tokens": np.full(n, T, np.int32), "role": np.asarray([r.role for r in plan], np.int8),
        "q_index": np.asarray([r.q_index for r in plan], np.int32),
        "a_index": np.asarray([r.a_index for r in plan], np.int32), "label": np.asarray([r.label for r in plan], np.int8),
        "qid": np.asarray([r.qid for r in plan], np.str_), "text": np.asarray([r.text for r in plan], np.str_),
    }
    return FeatureRows(rng.standard_normal((n, DIM), np.float32), np.zeros((n, 2)), extras)


def build(raw: Path, out: Path) -> float:
    from pipeline.committer import Committer

    media, qa = read_socialiqa(raw)
    by_item: dict[str, list] = {}
    for q in qa:
        by_item.setdefault(q.item_id, []).append(q)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    with StoreWriter(out, "socialiqa") as w:
        w.write_manifests(media, qa)
        w.set_feature("qa", {"extractor": "bert_qa", "version": "bench", "config": {}, "rate_hz": None,
                             "columns": [f"h{i:03d}" for i in range(DIM)], "weights": "random", "spec_hash": "bench"})
        c = Committer(w)
        for item, qs in by_item.items():
            c.put("qa", item, _rows(qs, rng), {"spec_hash": "bench", "fingerprint": "-", "duration_s": None})
        assert all(o.error is None for o in c.close())
    return time.perf_counter() - t0


def measure(out: Path) -> None:
    import shutil

    import torch
    from torch.utils.data import DataLoader

    from reading.datasets import SocialIQA3, collate_qa
    from store import plancache

    for text in ("pooled", "tokens"):
        shutil.rmtree(out.joinpath(*plancache.FOLDER), ignore_errors=True)
        t0 = time.perf_counter()
        SocialIQA3(out, split="train", modalities=(), text=text)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ds = SocialIQA3(out, split="train", modalities=(), text=text)
        build_s = time.perf_counter() - t0
        order = np.random.default_rng(0).permutation(len(ds))
        n_single = min(len(ds), 20_000 if text == "pooled" else 2_000)
        t0 = time.perf_counter()
        for i in order[:n_single]:
            ds[int(i)]
        single = n_single / (time.perf_counter() - t0)
        loader = DataLoader(ds, batch_size=64, shuffle=True, collate_fn=collate_qa, num_workers=0,
                            generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        n = sum(len(b["qid"]) for b in loader)
        batched = n / (time.perf_counter() - t0)
        print(f"SocialIQA3 train, text={text}: {len(ds):,} samples; construction {first_s:.2f} s (plan made), {build_s:.2f} s (plan cached); "
              f"one at a time (shuffled, 0 workers) {single:,.0f} samples/s; DataLoader batch 64 "
              f"(shuffled, 0 workers) {batched:,.0f} samples/s", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("raw", type=Path)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--keep", action="store_true", help="keep the store (and reuse it next time)")
    args = p.parse_args(argv)
    with_store(args.out, args.keep, lambda out: f"SocialIQA train and dev ({build(args.raw, out):.0f} s of commits)",
               measure)


if __name__ == "__main__":
    main()
