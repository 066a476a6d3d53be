"""A dataset with nothing left after its filters raises with the reasons counted, and one that left out most of
what it was asked for warns (issue 49, point 2): a training loop never runs zero batches in silence."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
from reading.datasets import DroppedWarning, SocialIQA2, SocialIQA3, SocialIQA4, SocratisReactions
from testing.qa_store import write_qa_store
from testing.synthetic_store import build_synthetic_store

FILTERED = "item filtered by a policy (faces: too few faces)"
MISSING = "item missing, incomplete or damaged in a needed feature"


@pytest.fixture(scope="module")
def tiny(tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-a (train, 2 questions) kept by the faces rule; tiny-b (train) and tiny-c (val) filtered, 2 each."""
    return build_synthetic_store(tiny_root_template, tmp_path_factory.mktemp("left") / "tiny.zarr", 8, 16)


@pytest.fixture(scope="module")
def dev_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SocialIQA store extracted with --split dev: the manifest has train's questions, the store no train item."""
    raw = tmp_path_factory.mktemp("siqa") / "raw"
    write_sample_socialiqa(raw, n=4)
    media, qa = read_socialiqa(raw)
    return write_qa_store(raw.parent / "s.zarr", media, qa, only={m.id for m in media if m.split == "val"})


@pytest.mark.parametrize("task", [SocialIQA2, SocialIQA4])
def test_every_item_filtered_raises_with_the_reasons_counted(tiny: Path, task: type) -> None:
    with pytest.raises(ValueError) as e:
        task(tiny, split="val", modalities=("frames",), to=1.0)
    assert str(e.value).startswith(f"{tiny}: {task.__name__} (split 'val'): nothing left: all 2 questions left out: "
                                   f"2 {FILTERED} (exclude_filtered=False keeps them)")
    assert len(task(tiny, split="val", modalities=("frames",), to=1.0, exclude_filtered=False)) > 0


@pytest.mark.parametrize("task", [SocialIQA3, SocialIQA2])
@pytest.mark.parametrize("split", ["train", None], ids=["train", "all-splits"])
def test_a_split_without_stored_items_raises(dev_only: Path, task: type, split: str | None) -> None:
    if split is None:  # all splits: dev's 2 questions are kept, train's 4 left out: most, a warning
        with pytest.warns(DroppedWarning, match=rf"{task.__name__} \(all splits\): 4 of 6 questions left out: 4 "
                                                rf"{MISSING}"):
            assert len({s.qid for s in task(dev_only, split=None, modalities=()).samples}) == 2
        return
    with pytest.raises(ValueError, match=rf"^{dev_only}: {task.__name__} \(split 'train'\): nothing left: all 4 "
                                         rf"questions left out: 4 {MISSING} \(`make extract` computes"):
        task(dev_only, split=split, modalities=())


def test_most_left_out_warns_with_the_counts(tiny: Path) -> None:
    with pytest.warns(DroppedWarning) as caught:
        ds = SocialIQA2(tiny, split=None, modalities=("frames",), to=1.0)
    assert {s.item for s in ds.samples} == {"tiny-a"}
    [w] = caught
    assert str(w.message) == (f"{tiny}: SocialIQA2 (all splits): 4 of 6 questions left out: 4 {FILTERED} "
                              "(exclude_filtered=False keeps them)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # half kept or more: no warning
        SocialIQA2(tiny, split="train", modalities=("frames",), to=1.0)


def test_socratis_with_no_complete_item_raises(tmp_path: Path) -> None:
    from manifests.records import MediaItem
    from rows import FeatureRows
    from store.writer import StoreWriter

    items = [MediaItem(id=f"p{k}", dataset="socratis", image=tmp_path / f"p{k}.jpg", caption="c") for k in range(3)]
    with StoreWriter(tmp_path / "s.zarr", "socratis") as w:
        w.write_manifests(items, [])
        for feature in ("frames", "faces", "caption", "reactions"):
            w.set_feature(feature, {"extractor": feature, "version": "0", "config": {}, "columns": ["a"],
                                    "rate_hz": None, "weights": "none", "spec_hash": "s"})
            if feature != "reactions":  # every item failed in reactions
                w.commit(feature, "p0", FeatureRows(np.zeros((1, 1), np.float32), np.zeros((1, 2))),
                         {"spec_hash": "s", "fingerprint": "-", "duration_s": None})
    with pytest.raises(ValueError, match=r"SocratisReactions: nothing left: all 3 items left out: 3 item missing or "
                                         r"failed in a feature"):
        SocratisReactions(tmp_path / "s.zarr")
