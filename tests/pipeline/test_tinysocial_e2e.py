"""The sample-tinysocial preset through the Ray pipeline: a clip cut out of a whole video, a pre-cut clip, a clip
outside its video and a missing video; then A2/A4 samples read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from manifests.tinysocial import write_sample_tinysocial
from pipeline.config import load_config
from pipeline.run import run_extract
from store.reader import open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory):
    raw = write_sample_tinysocial(tmp_path_factory.mktemp("tinysocial-raw"))
    with (raw / "clips.csv").open("a") as f:
        f.write("ts-outside,crowd,x,6.0,9.0,video/ts-source-a.mp4\nts-missing,inhouse,y,,,\nbad id,crowd,z,0,1,\n")
    out = tmp_path_factory.mktemp("tinysocial-out") / "tinysocial.zarr"
    return raw, out, run_extract("sample-tinysocial", raw, out, load_config("sample-tinysocial"))


def test_clips_cut_and_whole_complete_and_bad_ones_fail_alone(extracted) -> None:
    raw, out, report = extracted
    for feat in ("frames", "faces", "acoustic"):
        assert (report.counts[feat]["done"], report.counts[feat]["failed"]) == (2, 2), (feat, report.counts)
    assert report.counts["transcript"] == {"done": 2, "skipped": 0, "failed": 0, "n/a": 2}
    assert report.counts["qa"] == {"done": 2, "skipped": 0, "failed": 0, "n/a": 2}
    errors = {(f["feature"], f["item"]): f["error"] for f in report.failures}
    assert "ts-source-a.mp4: clip [6, 9) s lies outside the video (duration 7.000 s)" in errors["frames", "ts-outside"]
    assert "ts-source-a.mp4: clip [6, 9) s lies outside the audio" in errors["acoustic", "ts-outside"]
    assert "ts-missing.mp4: video file does not exist" in errors["frames", "ts-missing"]
    assert [(n["kind"], n["file"]) for n in report.manifest] == [("dropped", f"{raw / 'clips.csv'}:6")]
    store = open_store(out)
    truth = json.loads((raw / "sample_truth.json").read_text())
    # the crowd clip is [2.5, 5.5) of the source: its rows' middles are the source's 3.0, 4.0 and 5.0 s
    faces = np.asarray(store.read("faces", "ts-crowd-01").extras["count"][:])
    source_face = set(truth["ts-source-a"]["face_seconds"])
    assert faces.tolist() == [int(s in source_face) for s in (3, 4, 5)] == [1, 1, 0]
    assert store.read("frames", "ts-crowd-01").intervals[:].tolist() == [[0, 1], [1, 2], [2, 3]]
    assert store.read("frames", "ts-inhouse-01").features.shape == (3, 2208)
    words = store.read("transcript", "ts-crowd-01")
    start, end, text = truth["ts-source-a"]["cues"][1]
    assert list(words.extras["words"][:]) == text.split()
    assert words.intervals[0, 0] == pytest.approx(start - 2.5, abs=1e-3)
    assert words.intervals[-1, 1] == pytest.approx(end - 2.5, abs=1e-3)
    assert store.read("acoustic", "ts-crowd-01").features.shape[0] == 300  # 3 s of 10 ms rows


def test_a2_and_a4_from_the_qa_files(extracted) -> None:
    from reading.datasets import SocialIQA2, SocialIQA4

    raw, out, _ = extracted
    labelled = {}
    for path in (raw / "qa").glob("qa_*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "answer_idx" in row:
                labelled[row["qid"]] = row
    a2 = SocialIQA2(out, split=None, modalities=("frames", "acoustic"), to=1.0)
    assert len(a2) == 4 * len(labelled) == 12
    assert a2.dropped["unlabelled"] == 1
    a4 = SocialIQA4(out, split=None, modalities=("frames",), to=1.0)
    assert sorted(s.qid for s in a4.samples) == sorted(labelled)
    store = open_store(out)
    for smp in a4.samples:
        texts = store.read("qa", smp.item).extras["text"]
        row = labelled[smp.qid]
        assert str(texts[smp.answer_rows[smp.label]]) == row[f"a{row['answer_idx']}"]
