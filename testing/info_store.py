"""A store with one of everything `info` and the report page tell apart, built without models or Ray.

The synthetic tiny store (testing/synthetic_store.py: three clips, every feature; qa rows of zeros) plus, by hand, what is known here
and nowhere else (the tests' independent reference):

- frames/tiny-b recomputed with 1.0-2.0 s missing: partial, and its first version's 2 rows superseded;
- faces/tiny-b and faces/tiny-c: filtered by the faces policy (face ratios 0.5 and 0.0, as synthesised);
- acoustic/tiny-c recommitted under another spec: stale;
- transcript/tiny-a: one byte appended to a file of its part: damaged;
- an item `tiny-x` whose caption, question, answers and failure message hold HTML, which no feature holds:
  the run report says frames/tiny-x failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from manifests.records import MediaItem, QAItem
from rows import FeatureRows
from store.reader import open_store
from store.writer import StoreWriter

SCRIPT = "<script>document.body.dataset.pwned='script'</script>"
IMG = "<img src=x onerror=\"document.body.dataset.pwned='img'\">"
RUN_ID = "20261127T120000Z-abc123"
EXPECTED = {  # feature -> counts, as built below
    "frames": {"items": 3, "partial": ["tiny-b"], "failed": ["tiny-x"], "filtered": [], "stale": [], "damaged": []},
    "faces": {"items": 1, "partial": [], "failed": [], "filtered": ["tiny-b", "tiny-c"], "stale": [], "damaged": []},
    "acoustic": {"items": 2, "partial": [], "failed": [], "filtered": [], "stale": ["tiny-c"], "damaged": []},
    "transcript": {"items": 2, "partial": [], "failed": [], "filtered": [], "stale": [], "damaged": ["tiny-a"]},
    "qa": {"items": 3, "partial": [], "failed": [], "filtered": [], "stale": [], "damaged": []},
}


def _synthetic_store(raw: Path, out: Path) -> Path:
    """testing/synthetic_store.py's synthetic store (8-d frames, 16-d words), its qa rows without the text model
    (testing/qa_store.py: what info counts is rows, not embeddings), which saves loading MiniLM."""
    from manifests.socialiq import read_siq2
    from testing import synthetic_store as b
    from testing.qa_store import by_item, zero_qa_rows

    items, qa = read_siq2(raw)
    truths = json.loads(next(raw.glob("**/sample_truth.json")).read_text())
    rng = np.random.default_rng(0)
    with StoreWriter(out, "sample") as w:
        w.write_manifests(items, qa)
        for name, ext, cols, rate in (("frames", "densenet161", [f"d{i}" for i in range(8)], 1.0),
                                      ("faces", "mtcnn", b.FACE_COLUMNS, 1.0),
                                      ("acoustic", "covarep", b.ACOUSTIC_COLUMNS, 100.0),
                                      ("transcript", "bert_words", [f"h{i}" for i in range(16)], None),
                                      ("qa", "bert_qa", ["h0", "h1"], None)):
            b._feature(w, name, ext, cols, rate)
        for item in items:
            truth = truths[item.id]
            dur = float(truth["duration_s"])
            for name, rows in (("frames", b._frames_rows(dur, 8)), ("faces", b._faces_rows(truth)),
                               ("acoustic", b._acoustic_rows(truth, rng)),
                               ("transcript", b._transcript_rows(truth, 16, rng))):
                w.commit(name, item.id, rows, {"duration_s": dur, "spec_hash": f"synthetic-{name}", "fingerprint": "-"})
        for item_id, qs in sorted(by_item(qa).items()):
            w.commit("qa", item_id, zero_qa_rows(qs), {"duration_s": None, "spec_hash": "synthetic-qa", "fingerprint": "-"})
    return out


def build_info_store(raw: Path, out: Path) -> Path:
    _synthetic_store(raw, out)
    s = open_store(out)
    items, qa = s.media_items(), s.qa_items()
    frames_b = s.read("frames", "tiny-b")
    rows_b = FeatureRows(np.asarray(frames_b.features[...]), frames_b.intervals)
    acoustic_c = s.read("acoustic", "tiny-c")
    rows_c = FeatureRows(np.asarray(acoustic_c.features[...]), acoustic_c.intervals)
    damaged_part = out / "transcript" / "parts" / s.index("transcript").entries["tiny-a"].part
    s.close()
    planted = MediaItem(id="tiny-x", dataset="sample", split="train", video=raw / "siq2/video/tiny-x.mp4",
                        caption=f"a caption {SCRIPT} and {IMG}")
    question = QAItem(qid="tiny-x-q0", item_id="tiny-x", dataset="sample", split="train",
                      question=f"Why {IMG}?", answers=(SCRIPT, "plain", "<b>bold</b>", "none"),
                      correct=(True, False, False, False))
    with StoreWriter(out, "sample") as w:
        w.write_manifests([*items, planted], [*qa, question])
        w.commit("frames", "tiny-b", rows_b, {"duration_s": 2.0, "spec_hash": "synthetic-frames", "fingerprint": "-",
                                               "missing_s": [[1.0, 2.0]], "source": {"path": str(raw / "b.mp4")}})
        w.commit("acoustic", "tiny-c", rows_c, {"duration_s": 3.0, "spec_hash": "an-older-spec", "fingerprint": "-"})
        counts = {f: {"done": 0, "skipped": 0, "failed": 0, "n/a": 0} for f in EXPECTED}
        counts["frames"].update(done=1, failed=1)
        w.write_run_report(RUN_ID, {
            "run_id": RUN_ID, "dataset": "sample", "store": str(out), "counts": counts, "seconds": 12.5,
            "failures": [{"item": "tiny-x", "feature": "frames", "stage": "decode:frames",
                          "file": str(raw / "siq2/video/tiny-x.mp4"), "error": f"InputError: bad {IMG} {SCRIPT}"}],
            "partial": [], "stages": {"decode": {"busy_s": 3.0}, "extract:frames": {"busy_s": 7.5}},
            "stopped": None})
    victim = next(p for p in sorted(damaged_part.rglob("*")) if p.is_file() and p.name != "zarr.json")
    with open(victim, "ab") as f:
        f.write(b"\0")
    return out


def info_json(store: Path) -> dict:
    import contextlib
    import io

    from pipeline.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["info", str(store), "--json"])
    data = json.loads(buf.getvalue())
    assert data["exit_code"] == code
    return data
