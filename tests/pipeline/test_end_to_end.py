"""Every feature of the sample config through the Ray pipeline on the tiny dataset, then read back the way
model code reads it: known face seconds, transcript words, the 10 ms acoustic grid, A2 batches from a
two-worker DataLoader, and the inspect picture."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import load_config
from pipeline.run import run_extract
from store.reader import open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_store(tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("e2e") / "tiny.zarr"
    report = run_extract("tiny", tiny_root_template, out, load_config("sample"))
    return out, report


def test_every_feature_completes(tiny_store) -> None:
    out, report = tiny_store
    assert report.failures == []
    for feature in ("frames", "faces", "transcript", "qa", "acoustic"):
        assert report.counts[feature]["done"] == 3, (feature, report.counts)
    assert open_store(out).feature_attrs("frames")["weights"] == "random"


def test_faces_follow_the_seconds_the_photo_was_shown(tiny_store, tiny_root_template: Path) -> None:
    out, report = tiny_store
    truth = json.loads((tiny_root_template / "siq2/sample_truth.json").read_text())
    store = open_store(out)
    for vid, t in truth.items():
        faces = store.read("faces", vid)
        count = np.asarray(faces.extras["count"][:])
        assert np.flatnonzero(count > 0).tolist() == list(t["face_seconds"]), vid
        assert faces.attrs["face_ratio"] == pytest.approx(len(t["face_seconds"]) / len(count))
    assert store.items("faces") == ["tiny-a"]  # tiny-b (1 of 2 s) and tiny-c (none) are below 0.8
    assert set(report.filtered["faces"]) == {"tiny-b", "tiny-c"}
    # the reason in the faces extractor's words (MTCNNFaces.filter_reason), in the run report and its summary
    assert report.filtered["faces"]["tiny-c"] == "face_ratio 0.00 < 0.80 (faces policy)"
    assert "FILTERED faces/tiny-b: face_ratio 0.50 < 0.80 (faces policy)" in report.summary()


def test_transcript_words_and_acoustic_grid(tiny_store, tiny_root_template: Path) -> None:
    out, _ = tiny_store
    truth = json.loads((tiny_root_template / "siq2/sample_truth.json").read_text())
    store = open_store(out)
    words = store.read("transcript", "tiny-b")
    assert list(words.extras["words"][:]) == ["I", "don't", "know."]
    start, end, _ = truth["tiny-b"]["cues"][0]
    assert words.intervals[0, 0] == pytest.approx(start, abs=1e-3)
    assert words.intervals[-1, 1] == pytest.approx(end, abs=1e-3)
    assert words.features.shape[0] == 3
    acoustic = store.read("acoustic", "tiny-c")
    n = acoustic.features.shape[0]
    assert n == math.ceil(round(acoustic.attrs["duration_s"] / 0.01, 6))
    assert acoustic.intervals[1].tolist() == pytest.approx([0.01, 0.02])
    names = [c.lower() for c in acoustic.columns]  # COVAREP's "F0", "VUV" (version 8), or "f0", "vuv" (mfcc23)
    f0 = np.asarray(acoustic.features[:, names.index("f0")])
    vuv = np.asarray(acoustic.features[:, names.index("vuv")])
    speech = truth["tiny-c"]["cues"][0]
    inside = (acoustic.intervals[:, 0] > speech[0] + 0.1) & (acoustic.intervals[:, 1] < speech[1] - 0.1)
    assert vuv[inside].mean() > 0.5 and np.isnan(f0[vuv == 0]).all()
    assert vuv[acoustic.intervals[:, 1] < speech[0] - 0.1].sum() == 0  # silence before the speech


def test_a2_batches_from_the_pipeline_store(tiny_store) -> None:
    from torch.utils.data import DataLoader

    from reading.datasets import SocialIQA2, collate_qa

    out, _ = tiny_store
    ds = SocialIQA2(out, split="train", modalities=("frames", "acoustic"), exclude_filtered=False)
    assert len(ds) == 2 * 2 * 4  # 2 train clips × 2 questions × 4 answers
    labels = sorted(int(ds[i]["label"]) for i in range(len(ds)))
    assert labels == [0] * 12 + [1] * 4
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate_qa,
                        multiprocessing_context="spawn")
    batches = list(loader)
    assert sum(len(b["qid"]) for b in batches) == len(ds)
    frames = batches[0]["modalities"]["frames"]
    assert frames["x"].shape[-1] == 2208 and frames["mask"].any()


def test_inspect_picture_of_a_pipeline_item(tiny_store, tmp_path: Path) -> None:
    from PIL import Image

    from reading.inspect import render_item

    out, _ = tiny_store
    png = render_item(out, "tiny-a", tmp_path / "a.png")
    assert Image.open(png).size == (1600, 1000)
