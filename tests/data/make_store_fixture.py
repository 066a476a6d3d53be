"""Recreates tests/data/store_fixture/store (and expected.json): a small store written by the store code of
commit fb9982b (the format before one module owned it: every index line kept fingerprint, spec_hash,
filtered and duration_s both as columns and inside its attributes). tests/test_store_fixture.py reads it and compares with
`expected.json` beside it, written by the same code, so that stores written before a change of the format
code keep reading identically. Run from the repository root at that commit:

    git worktree add /tmp/fb9982b fb9982b && cd /tmp/fb9982b && python tests/data/make_store_fixture.py tests/data/store_fixture/store

(this file was added later: copy it there first). Deterministic but for part names and the log's generation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from manifests.records import MediaItem
from rows import FeatureRows
from store.reader import Store
from store.writer import StoreWriter

SPEC = {"extractor": "synthetic", "version": "1", "config": {"dim": 3}, "columns": ["a", "b", "c"],
        "rate_hz": 2.0, "weights": "none", "spec_hash": "fixture-spec-1"}


def _rows(rng: np.random.Generator, n: int, dtype: str, **extras: np.ndarray) -> FeatureRows:
    t = np.arange(n, dtype=np.float64) / 2.0
    return FeatureRows(rng.standard_normal((n, 3)).astype(dtype), np.stack([t, t + 0.5], 1), extras)


def build(out: Path) -> None:
    rng = np.random.default_rng(7)
    with StoreWriter(out, "fixture") as w:
        w.write_manifests([MediaItem(id=f"v{k}", dataset="fixture", split="val") for k in range(4)], [])
        w.set_feature("frames", SPEC)
        w.set_feature("faces", {**SPEC, "spec_hash": "fixture-spec-2"})

        def attrs(k: int, **more: object) -> dict:
            return {"fingerprint": f"fp{k}", "spec_hash": "fixture-spec-1", "duration_s": 1.5 + k, **more}

        w.commit_batch("frames", [(f"v{k}", _rows(rng, 2 + k, "float32"), attrs(k)) for k in range(3)])
        w.commit_batch("frames", [("v1", _rows(rng, 4, "float32"), attrs(11)),  # supersedes v1
                                  ("v3", _rows(rng, 0, "float32"), {**attrs(3), "duration_s": None})])
        w.commit_batch("frames", [("v9", _rows(rng, 1, "float16"), attrs(9, note="other dtype"))])

        def face(k: int, n: int, filtered: bool) -> tuple:
            rows = _rows(rng, n, "float16", boxes=rng.random((n, 4)).astype("float32"),
                         words=np.array([f"w{j}" for j in range(n)]))
            return f"v{k}", rows, {"fingerprint": f"ff{k}", "spec_hash": "fixture-spec-2", "filtered": filtered,
                                   "face_ratio": 0.25 * k, "duration_s": 2.0}

        w.commit_batch("faces", [face(0, 3, False), face(1, 1, True), face(2, 2, False)])
        w.commit_batch("faces", [("v5", FeatureRows(np.zeros((2, 3), "float32"), np.array([[0, 1], [1, 2.0]]),
                                                     {"probs": np.arange(5, dtype="float32")}),
                                  {"fingerprint": "ff5", "spec_hash": "fixture-spec-2"})])  # a non-row-aligned extra
    (out.parent / "expected.json").write_text(json.dumps(expected(out), sort_keys=True) + "\n")


def expected(path: Path) -> dict:
    """What a reader sees through its public calls: every feature's items (filtered and stale too), their
    attributes and rows."""
    s = Store(path)
    out: dict = {"attrs": s.attrs, "features": {}}
    for f in s.features():
        items = {}
        for item in s.items(f, include_filtered=True, include_stale=True):
            r = s.read(f, item)
            items[item] = {"attrs": r.attrs, "features": np.asarray(r.features[...], np.float64).round(6).tolist(),
                           "dtype": str(r.features[...].dtype), "intervals": r.intervals.tolist(),
                           "extras": {k: np.asarray(v[...]).tolist() for k, v in sorted(r.extras.items())}}
        out["features"][f] = {"attrs": s.feature_attrs(f), "items": items, "listed": s.items(f),
                              "filtered": s.filtered(f)}
    s.close()
    return out


if __name__ == "__main__":
    build(Path(sys.argv[1]))
