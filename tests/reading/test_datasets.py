"""A2/A4 datasets over a store built from the tiny sample (real bert_qa rows, synthetic video features)."""

from __future__ import annotations

import json
import pickle
import pickletools
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from manifests.records import QAItem
from reading.datasets import SocialIQA2, SocialIQA4, a4_choice, collate_qa
from store.reader import open_store
from store.writer import StoreWriter
from testing.qa_store import DIM
from testing.synthetic_store import build_synthetic_store


@pytest.fixture(scope="module")
def store(tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_store(tiny_root_template, tmp_path_factory.mktemp("ds") / "tiny.zarr", 8, 16)


@pytest.fixture(scope="module")
def raw_qa(tiny_root_template: Path) -> dict[str, dict]:
    """qid -> the raw line of the sample QA files, read here with json only."""
    out = {}
    for path in (tiny_root_template / "siq2/qa").glob("qa_*.json"):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["qid"]] = row
    return out


def row_text(store: Path, item: str, row: int) -> str:
    return str(open_store(store).read("qa", item).extras["text"][row])


def test_a2_labels_match_the_sample_qa_file(store: Path, raw_qa: dict) -> None:
    ds = SocialIQA2(store, split=None, modalities=("frames",), to=1.0, exclude_filtered=False)
    assert len(ds) == 6 * 4  # 3 clips x 2 questions x 4 answers
    seen = set()
    for i, smp in enumerate(ds.samples):
        raw = raw_qa[smp.qid]
        text = row_text(store, smp.item, smp.answer_rows[0])
        k = [raw[f"a{j}"] for j in range(4)].index(text)
        seen.add((smp.qid, k))
        assert smp.label == int(k == raw["answer_idx"]), (smp.qid, text)
        out = ds[i]
        assert out["label"].item() == float(k == raw["answer_idx"])
        tokens = open_store(store).read("qa", smp.item).extras["tokens"]
        np.testing.assert_array_equal(out["answer"].numpy(), tokens[smp.answer_rows[0]])
        assert row_text(store, smp.item, smp.question_row) == raw["q"]
    assert len(seen) == 24


def test_a4_has_one_correct_at_the_label_and_is_seeded(store: Path, raw_qa: dict) -> None:
    ds = SocialIQA4(store, split="train", modalities=(), to=1.0, exclude_filtered=False, seed=0)
    assert len(ds) == 4  # tiny-a and tiny-b are train, 2 questions each
    for i, smp in enumerate(ds.samples):
        raw = raw_qa[smp.qid]
        texts = [row_text(store, smp.item, r) for r in smp.answer_rows]
        assert sorted(texts) == sorted(raw[f"a{j}"] for j in range(4))
        assert texts[smp.label] == raw[f"a{raw['answer_idx']}"]
        out = ds[i]
        assert out["answers"].shape[:2] == (4, 25) and out["label"].dtype == torch.long
    again = SocialIQA4(store, split="train", modalities=(), to=1.0, exclude_filtered=False, seed=0)
    assert again.samples == ds.samples
    orders = {s for seed in range(6) for s in [a4_choice("q", (True, False, False, False), seed)]}
    assert len(orders) > 1  # the seed changes the order
    assert a4_choice("q", (True, False, False), 0) is None  # fewer than three incorrect answers


def test_aligned_modalities_fill_and_masks(store: Path, tiny_root_template: Path) -> None:
    truth = json.loads((tiny_root_template / "siq2/sample_truth.json").read_text())["tiny-a"]
    ds = SocialIQA2(store, split=None, modalities=("frames", "acoustic"), to=1.0, exclude_filtered=False)
    out = ds[0]
    assert out["item"] == "tiny-a"
    frames = out["modalities"]["frames"]
    n = int(np.ceil(truth["duration_s"]))
    assert len(out["ref_intervals"]) == n and frames["mask"].all()  # 1 Hz steps over the clip
    np.testing.assert_allclose(frames["x"][:, 0].numpy(), np.arange(n))  # synthetic frame k holds k
    f0 = out["modalities"]["acoustic"]
    voiced = f0["valid"][:, 0].numpy()
    assert not voiced.all() and voiced.any()  # F0 is NaN in the silent seconds
    assert (f0["x"][~f0["valid"]] == 0.0).all() and torch.isfinite(f0["x"]).all()  # filled, never NaN/inf
    words = SocialIQA2(store, split=None, modalities=("acoustic",), to="transcript", exclude_filtered=False)[0]
    assert words["modalities"]["acoustic"]["mask"].all()  # every word overlaps acoustic rows
    assert words["modalities"]["acoustic"]["valid"][:, 0].all()  # words are voiced: F0 defined


def test_filtered_items_are_left_out(store: Path) -> None:
    with pytest.warns(UserWarning, match="4 of 6 questions left out"):  # most left out: said
        ds = SocialIQA2(store, split=None, modalities=("frames",), to=1.0)
    assert {s.item for s in ds.samples} == {"tiny-a"}  # tiny-b (1 of 2 s with a face) and tiny-c (none): filtered
    assert ds.dropped == {"item filtered by a policy (faces: too few faces)": 4}


def test_dataloader_with_two_spawned_workers(store: Path) -> None:
    ds = SocialIQA2(store, split=None, modalities=("frames", "acoustic"), to="transcript", exclude_filtered=False)
    ds[0]
    strings = {str(arg) for op, arg, _ in pickletools.genops(pickle.dumps(ds)) if isinstance(arg, str)}
    assert not any(m.startswith("zarr") for m in strings), strings  # no open handle travels to workers
    loader = DataLoader(ds, batch_size=5, num_workers=2, collate_fn=collate_qa, multiprocessing_context="spawn")
    qids = []
    for batch in loader:
        qids += batch["qid"]
        b, t = batch["modalities"]["frames"]["mask"].shape
        assert batch["modalities"]["acoustic"]["x"].shape == (b, t, 74)
        assert batch["question"].shape == (b, 25, 384) and batch["label"].shape == (b,)
        pad = torch.arange(t)[None, :] >= batch["lengths"][:, None]
        assert not batch["modalities"]["frames"]["mask"][pad].any()
        assert batch["modalities"]["frames"]["mask"][~pad].all()
    assert sorted(qids) == sorted(s.qid for s in ds.samples)


def test_a_store_stale_for_the_manifest_is_refused(store: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    s = open_store(copy)
    qa = [q.model_copy(update={"answers": ("changed", *q.answers[1:])}) if q.qid == "tiny-a-q0" else q
          for q in s.qa_items()]
    StoreWriter(copy, "sample").write_manifests(s.media_items(), [QAItem.model_validate(q.model_dump()) for q in qa])
    with pytest.raises(ValueError, match="tiny-a-q0: stored texts"):
        SocialIQA2(copy, split=None, modalities=(), to=1.0, exclude_filtered=False)


def test_a4_on_a_three_answer_dataset_is_an_error_and_a3_builds(tmp_path: Path) -> None:
    """SocialIQA has three answers: A4 says so instead of returning an empty dataset; A3 is its task."""
    from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
    from reading.datasets import SocialIQA3
    from testing.qa_store import write_qa_store

    write_sample_socialiqa(tmp_path / "raw", n=6)
    media, qa = read_socialiqa(tmp_path / "raw")
    store = write_qa_store(tmp_path / "siqa.zarr", media, qa)
    with pytest.raises(ValueError, match=r"A4 needs .* 1 correct and 3 incorrect .* \(6 questions with 3 answers\); "
                                         r"use SocialIQA3"):
        SocialIQA4(store, split="train", modalities=(), to=1.0)
    a3 = SocialIQA3(store, split="train", modalities=(), to=1.0)
    assert len(a3) == 6 and not a3.dropped
    truth = {q.qid: q for q in qa}
    s = open_store(store)
    for smp in a3.samples:
        texts = [str(s.read("qa", smp.item).extras["text"][r]) for r in smp.answer_rows]
        q = truth[smp.qid]
        assert sorted(texts) == sorted(q.answers) and texts[smp.label] == q.answers[q.correct.index(True)]
    batch = collate_qa([a3[0], a3[1]])
    assert batch["answers"].shape[:2] == (2, 3) and batch["label"].dtype == torch.long


@pytest.fixture(scope="module")
def siqa(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[QAItem]]:
    """A SocialIQA store whose qa rows hold text_vector(text): a returned row can be told by its text."""
    from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
    from testing.qa_store import write_qa_store

    root = tmp_path_factory.mktemp("siqa")
    write_sample_socialiqa(root / "raw", n=6)
    media, qa = read_socialiqa(root / "raw")
    return write_qa_store(root / "siqa.zarr", media, qa, vectors=True), qa


@pytest.mark.parametrize("text", ["tokens", "pooled"])
def test_a3_samples_carry_the_context_and_collate_keeps_it(siqa: tuple[Path, list[QAItem]], text: str) -> None:
    """SocialIQA's context is row 0 of each item's qa rows: returned with the question, in both text forms,
    and stacked by collate_qa (which drops no key a sample has)."""
    from reading.datasets import SocialIQA3
    from testing.qa_store import text_vector

    store, qa = siqa
    truth = {q.qid: q for q in qa}
    ds = SocialIQA3(store, split="train", modalities=(), text=text)
    assert len(ds) == 6
    for i in range(len(ds)):
        out, q = ds[i], truth[ds.samples[i].qid]
        assert out["context"].shape == (1, DIM) and out["context_mask"].tolist() == [True]
        np.testing.assert_array_equal(out["context"][0].numpy(), text_vector(q.context))
        np.testing.assert_array_equal(out["question"][0].numpy(), text_vector(q.question))
    batch = collate_qa([ds[0], ds[1], ds[2]])
    assert batch["context"].shape == (3, 1, DIM) and batch["context_mask"].shape == (3, 1)
    np.testing.assert_array_equal(batch["context"][2, 0].numpy(), text_vector(truth[ds.samples[2].qid].context))


def test_collate_qa_keeps_keys_it_does_not_know_and_refuses_a_ragged_batch(siqa: tuple[Path, list[QAItem]]) -> None:
    from reading.datasets import SocialIQA3

    ds = SocialIQA3(siqa[0], split="train", modalities=())
    a, b = ds[0], ds[1]
    batch = collate_qa([{**a, "extra": torch.ones(2), "note": "x"}, {**b, "extra": torch.zeros(2), "note": "y"}])
    assert batch["extra"].shape == (2, 2) and batch["note"] == ["x", "y"]
    with pytest.raises(ValueError, match="'extra'"):
        collate_qa([{**a, "extra": torch.ones(2)}, b])


def test_split_names_of_the_release_are_accepted_and_an_empty_split_names_the_others(
        siqa: tuple[Path, list[QAItem]]) -> None:
    """SocialIQA calls its validation split "dev" (stored as "val"): both names give the same samples;
    a split without questions is an error naming the splits that have some."""
    from reading.datasets import SocialIQA3

    store, _ = siqa
    dev = SocialIQA3(store, split="dev", modalities=())
    val = SocialIQA3(store, split="val", modalities=())
    assert len(dev) == 3 and dev.samples == val.samples and dev.split == "val"
    with pytest.raises(ValueError, match=r"no questions in split 'test'.*train \(6 questions\), val \(3 questions\)"):
        SocialIQA3(store, split="test", modalities=())
    with pytest.raises(ValueError, match=r"no questions in split 'bogus'.*train .*val"):
        SocialIQA2(store, split="bogus", modalities=())


def test_a_text_only_dataset_needs_no_reference_and_a_missing_one_says_what_to_pass(
        siqa: tuple[Path, list[QAItem]]) -> None:
    from reading.datasets import SocialIQA3

    store, _ = siqa
    ds = SocialIQA3(store, split="val", modalities=())  # default to="transcript": not in this store, not needed
    out = ds[0]
    assert out["modalities"] == {} and out["ref_intervals"].shape == (0, 2)
    batch = collate_qa([ds[0], ds[1]])
    assert batch["lengths"].tolist() == [0, 0] and batch["modalities"] == {}
    with pytest.raises(ValueError, match=r"no feature 'transcript' to align to .*present: \['qa'\].*to="):
        SocialIQA3(store, split="val", modalities=("qa",))
    with pytest.raises(ValueError, match=r"no feature 'frames' for modalities=\('frames',\); present: \['qa'\].*modalities=\(\)"):
        SocialIQA3(store, split="val", modalities=("frames",), to=1.0)


def test_dropped_tells_filtered_items_from_missing_ones(store: Path, tmp_path: Path) -> None:
    """tiny-b and tiny-c are filtered by the faces rule (2 questions each); tiny-a's frames are deleted here."""
    import shutil

    copy = tmp_path / "copy.zarr"
    shutil.copytree(store, copy)
    shutil.rmtree(copy / "frames" / "parts" / open_store(copy).index("frames").entries["tiny-a"].part)  # one part per item
    with pytest.raises(ValueError, match="nothing left: all 6 questions left out: 4 item filtered by a policy "
                                         r"\(faces: too few faces\) \(.*\); 2 item missing, incomplete or damaged"):
        SocialIQA2(copy, split=None, modalities=("frames",), to=1.0)  # nothing left: an error, not len 0
    kept = SocialIQA2(copy, split=None, modalities=("frames",), to=1.0, exclude_filtered=False)
    assert {s.item for s in kept.samples} == {"tiny-b", "tiny-c"}
    assert kept.dropped == {"item missing, incomplete or damaged in a needed feature": 2}
