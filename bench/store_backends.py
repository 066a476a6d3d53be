"""The store on local disk beside the store on object storage, for `make bench-store` (bench/store.py): a local
S3 server (testing/s3server.py: moto's server mode on 127.0.0.1) started in a process of its own for the run and
stopped after it, and the PyTorch DataLoader figure over SocialIQA-shaped items on either backend.

The S3 server is a separate process because a real one is elsewhere: in the benchmark's own process its Python
(moto answers every request in Python) would hold the benchmark's interpreter lock while the client waits."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from extractors.qa import qa_rows
from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
from media.kinds.qa import qa_text
from rows import FeatureRows
from store import StoreWriter

BUCKET = "bench-store"
DIM = 384
QA_BATCH = 512  # items a commit, as the run's committer batches SocialIQA's one-question items


@contextmanager
def s3_server() -> Iterator[str]:
    """`s3://BUCKET`, on a moto server started now in a process of its own, with the process's AWS variables
    pointing at it (restored afterwards); the server is stopped when the block ends."""
    proc = subprocess.Popen([sys.executable, "-m", "testing.s3server", "--port", "0", "--bucket", BUCKET],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SESSION_TOKEN",
                                            "AWS_ENDPOINT_URL_S3")}
    try:
        said = []
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)
            if line.startswith("export "):
                break
        else:
            raise RuntimeError("the local S3 server did not start: " + "".join(said[-5:]).strip())
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            os.environ.pop(k, None)
        os.environ.update(dict(kv.split("=", 1) for kv in line.split()[1:]))
        print(f"S3: moto on {os.environ['AWS_ENDPOINT_URL']} (a process of its own), bucket {BUCKET}", flush=True)
        yield f"s3://{BUCKET}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _qa_rows(questions: list, rng: np.random.Generator) -> FeatureRows:
    """The `bert_qa` row plan of an item's questions with random 384-d pooled vectors: what the SocialIQA
    datasets read with text="pooled" (the token states, ~38 KB a row, are left out: a pooled DataLoader does
    not read them, and a moto server holds everything in its memory)."""
    plan = qa_rows(qa_text(questions))
    n = len(plan)
    extras = {
        "role": np.asarray([r.role for r in plan], np.int8), "q_index": np.asarray([r.q_index for r in plan], np.int32),
        "a_index": np.asarray([r.a_index for r in plan], np.int32), "label": np.asarray([r.label for r in plan], np.int8),
        "qid": np.asarray([r.qid for r in plan], np.str_), "text": np.asarray([r.text for r in plan], np.str_),
    }
    return FeatureRows(rng.standard_normal((n, DIM)).astype(np.float32), np.zeros((n, 2)), extras)


def qa_store(location: str | Path, questions: int) -> dict[str, float]:
    """A SocialIQA-shaped store at `location`: `questions` generated train questions (and half as many dev
    ones) in SocialIQA's layout (manifests.socialiqa.write_sample_socialiqa), their manifests and a `qa`
    feature of their row plans, committed in batches of QA_BATCH items. Its commit cost per item, µs."""
    with tempfile.TemporaryDirectory(prefix="bench-socialiqa-") as raw:
        write_sample_socialiqa(Path(raw), questions)
        media, qa = read_socialiqa(Path(raw))
    by_item: dict[str, list] = {}
    for q in qa:
        by_item.setdefault(q.item_id, []).append(q)
    rng = np.random.default_rng(0)
    spec = {"extractor": "bert_qa", "version": "bench", "config": {}, "rate_hz": None,
            "columns": [f"h{i:03d}" for i in range(DIM)], "weights": "random", "spec_hash": "bench"}
    items = [(item, _qa_rows(qs, rng), {"spec_hash": "bench", "fingerprint": f"fp-{item}", "duration_s": None,
                                        "source": {"qa": item}}) for item, qs in by_item.items()]
    t0 = time.perf_counter()
    with StoreWriter(location, "socialiqa") as w:
        w.write_manifests(media, qa)
        w.set_feature("qa", spec)
        for k in range(0, len(items), QA_BATCH):
            w.commit_batch("qa", items[k:k + QA_BATCH])
    return {"commit qa us/item": (time.perf_counter() - t0) / len(items) * 1e6}


def loader(location: str | Path, workers: int, epochs: int = 3) -> dict[str, Any]:
    """SocialIQA3 (train, text="pooled", no video modalities) over the store at `location` through a
    DataLoader (batch 64, shuffled, `workers` worker processes kept between epochs): samples/s of the first
    epoch (each worker opens the store and loads the parts it touches) and the median of the later ones (the
    parts then cached in every worker)."""
    import warnings

    import torch
    from torch.utils.data import DataLoader

    from reading.datasets import SocialIQA3, collate_qa

    t0 = time.perf_counter()
    ds = SocialIQA3(location, split="train", modalities=(), text="pooled")
    out: dict[str, Any] = {"dataset construction s": time.perf_counter() - t0}
    # 4 workers on 2 cores is what the figure asks for: torch's advice against it would only be noise here
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    # forkserver: a worker forked from a process that used object storage could not use it (objects.py)
    dl = DataLoader(ds, batch_size=64, shuffle=True, collate_fn=collate_qa, num_workers=workers,
                    persistent_workers=workers > 0, generator=torch.Generator().manual_seed(0),
                    multiprocessing_context="forkserver" if workers else None)
    rates = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        n = sum(len(b["qid"]) for b in dl)
        rates.append(n / (time.perf_counter() - t0))
    assert n == len(ds), (n, len(ds))
    del dl  # its workers end
    out[f"loader {workers} workers, epoch 1 samples/s"] = rates[0]
    out[f"loader {workers} workers, cached samples/s"] = float(np.median(rates[1:]))
    return out
