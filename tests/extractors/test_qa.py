"""`bert_qa` against the HF model run directly on each text, and the SocialIQA reader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from extractors.base import QAText, get_extractor, parse_config
from extractors.qa import QAExtractor
from extractors.text_model import BUNDLED_MINILM, resolve_model_dir
from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
from rows import ROLE_ANSWER, ROLE_CONTEXT, ROLE_QUESTION

TOL = 1e-5

ITEM = QAText(
    qids=("vid1-q0", "vid1-q1"),
    questions=("Why does the man in the red shirt laugh?", "How does the woman feel when he leaves?"),
    answers=(
        ("He finds the joke funny.", "He's nervous about the interview.", "He didn't hear her."),
        ("Relieved.", "She's upset and well-known for hiding it.", "Happy that it's 3.5 hours early.", ""),
    ),
    correct=((True, False, False), (False, True, False, False)),
    context="Two friends talk in a café about a job interview.",
)


@pytest.fixture(scope="module")
def hf() -> tuple:
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model_dir(BUNDLED_MINILM)
    return AutoTokenizer.from_pretrained(path, local_files_only=True), AutoModel.from_pretrained(path).eval()


@pytest.fixture(scope="module")
def ext() -> QAExtractor:
    return get_extractor("bert_qa")(parse_config({"extractor": "bert_qa", "model": BUNDLED_MINILM}))


def direct(hf: tuple, text: str) -> np.ndarray:
    """The text's own token states (no [CLS]/[SEP]) from one unpadded forward pass."""
    tok, model = hf
    enc = tok(text, return_tensors="pt")
    with torch.inference_mode():
        return model(**enc).last_hidden_state[0, 1:-1].numpy()


def test_pooled_and_token_embeddings_equal_direct_run(hf: tuple, ext: QAExtractor) -> None:
    rows = ext.extract(ITEM)
    texts = rows.extras["text"].tolist()
    assert texts == [ITEM.context, ITEM.questions[0], *ITEM.answers[0], ITEM.questions[1], *ITEM.answers[1]]
    for i, text in enumerate(texts):
        states = direct(hf, text)
        k = min(len(states), 25)
        assert rows.extras["n_tokens"][i] == len(states)
        np.testing.assert_array_equal(rows.extras["token_mask"][i], np.arange(25) < k)
        np.testing.assert_allclose(rows.extras["tokens"][i, :k], states[:k], atol=TOL, rtol=0)
        assert not rows.extras["tokens"][i, k:].any()
        expected = states.mean(0) if len(states) else np.zeros(384)  # the empty answer: zeros, empty mask
        np.testing.assert_allclose(rows.features[i], expected, atol=TOL, rtol=0)
    assert rows.attrs["n_empty_texts"] == 1


def test_row_layout(ext: QAExtractor) -> None:
    rows = ext.extract(ITEM)
    x = rows.extras
    assert x["role"].tolist() == [ROLE_CONTEXT, ROLE_QUESTION] + [ROLE_ANSWER] * 3 + [ROLE_QUESTION] + [ROLE_ANSWER] * 4
    assert x["q_index"].tolist() == [-1, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert x["a_index"].tolist() == [-1, -1, 0, 1, 2, -1, 0, 1, 2, 3]
    assert x["label"].tolist() == [-1, -1, 1, 0, 0, -1, 0, 1, 0, 0]
    assert x["qid"].tolist() == [""] + ["vid1-q0"] * 4 + ["vid1-q1"] * 5
    assert rows.attrs["question_rows"] == [[1, 5], [5, 10]]
    for q, (a, b) in enumerate(rows.attrs["question_rows"]):  # one slice = one question with its answers
        assert x["text"][a] == ITEM.questions[q] and x["text"][a + 1 : b].tolist() == list(ITEM.answers[q])
    np.testing.assert_array_equal(rows.intervals, np.zeros((10, 2)))  # QAText has no question span
    assert all(len(v) == 10 for v in x.values())


def test_unlabelled_and_no_context(ext: QAExtractor) -> None:
    item = QAText(qids=("q",), questions=("What happens next?",), answers=(("a", "b"),), correct=())
    rows = ext.extract(item)
    assert rows.extras["label"].tolist() == [-1, -1, -1] and rows.extras["role"][0] == ROLE_QUESTION


def test_token_rows_cut_at_max_text_tokens(hf: tuple) -> None:
    cfg = parse_config({"extractor": "bert_qa", "model": BUNDLED_MINILM, "max_text_tokens": 4, "dtype": "float16"})
    rows = QAExtractor(cfg).extract(ITEM)
    assert rows.extras["tokens"].shape == (10, 4, 384) and rows.features.dtype == np.float16
    long = rows.extras["text"].tolist().index(ITEM.answers[1][1])
    states = direct(hf, ITEM.answers[1][1])
    assert rows.extras["token_mask"][long].all() and rows.extras["n_tokens"][long] == len(states) > 4
    np.testing.assert_allclose(rows.extras["tokens"][long].astype(np.float32), states[:4], atol=2e-2, rtol=1e-2)
    np.testing.assert_allclose(rows.features[long].astype(np.float32), states.mean(0), atol=2e-2, rtol=1e-2)
    assert rows.attrs["n_cut_texts"] == int(np.sum(rows.extras["n_tokens"] > 4)) > 0


def test_batch_equals_one_by_one(ext: QAExtractor) -> None:
    other = QAText(qids=("x",), questions=("Is she joking?",), answers=(("yes", "no"),), correct=((False, True),))
    for item, got in zip([ITEM, other], ext.extract_batch([ITEM, other]), strict=True):
        alone = ext.extract(item)
        np.testing.assert_allclose(got.features, alone.features, atol=TOL, rtol=0)
        np.testing.assert_allclose(got.extras["tokens"], alone.extras["tokens"], atol=TOL, rtol=0)


def test_mismatched_labels_are_rejected(ext: QAExtractor) -> None:
    bad = QAText(qids=("x",), questions=("?",), answers=(("a", "b"),), correct=((True,),))
    with pytest.raises(ValueError, match="2 answers but 1 labels"):
        ext.extract(bad)


# --- SocialIQA ------------------------------------------------------------------------------------------------


def test_socialiqa_sample_round_trip(tmp_path: Path, ext: QAExtractor) -> None:
    write_sample_socialiqa(tmp_path, n=12)
    media, qa = read_socialiqa(tmp_path)
    assert len(media) == len(qa) == 18
    assert media[0].id == "siqa-train-000000" and media[-1].id == "siqa-dev-000005"
    assert {m.split for m in media} == {"train", "val"} and all(m.video is None for m in media)
    lines = (tmp_path / "train.jsonl").read_text().splitlines()
    labels = (tmp_path / "train-labels.lst").read_text().split()
    for k in (0, 5, 11):
        row, q = json.loads(lines[k]), qa[k]
        assert q.item_id == media[k].id and q.context == row["context"] and q.question == row["question"]
        assert q.answers == (row["answerA"], row["answerB"], row["answerC"])
        assert q.correct.index(True) == int(labels[k]) - 1 and sum(q.correct) == 1
    assert len({q.context for q in qa}) >= 10  # varied text
    item = QAText((qa[0].qid,), (qa[0].question,), (qa[0].answers,), (qa[0].correct,), context=qa[0].context)
    rows = ext.extract(item)
    assert rows.features.shape == (5, 384) and rows.extras["label"].tolist()[2:] == list(map(int, qa[0].correct))


def test_socialiqa_release_folder_and_unlabelled_test(tmp_path: Path) -> None:
    write_sample_socialiqa(tmp_path / "socialiqa-train-dev", n=2)
    (tmp_path / "socialiqa-train-dev" / "test.jsonl").write_text(
        json.dumps({"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c"}) + "\n"
    )
    media, qa = read_socialiqa(tmp_path)
    assert [m.split for m in media] == ["train", "train", "val", "test"] and qa[-1].correct == ()


@pytest.mark.parametrize(
    ("jsonl", "labels", "match"),
    [
        ('{"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c"}\n', "4\n",
         r"train-labels\.lst:1: label must be 1, 2 or 3"),
        ('{"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c"}\n', "1\n2\n",
         r"has 2 labels but .*train\.jsonl has 1 entries"),
        ('{"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c"}\n{oops\n', "1\n1\n",
         r"train\.jsonl:2: not JSON"),
        ('{"context": "c", "question": "q", "answerA": "a", "answerB": "b"}\n', "1\n",
         r"train\.jsonl:1: missing or non-text fields \['answerC'\]"),
    ],
)
def test_socialiqa_errors_name_the_file_and_line(tmp_path: Path, jsonl: str, labels: str, match: str) -> None:
    (tmp_path / "train.jsonl").write_text(jsonl)
    (tmp_path / "train-labels.lst").write_text(labels)
    with pytest.raises(ValueError, match=match):
        read_socialiqa(tmp_path)


def test_socialiqa_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no SocialIQA files"):
        read_socialiqa(tmp_path)
    (tmp_path / "dev.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="dev-labels.lst not found"):
        read_socialiqa(tmp_path)
