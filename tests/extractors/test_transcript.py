"""`bert_words` against the HF model run directly, with the bundled MiniLM (BERT architecture, 384-d)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from extractors.base import Words, get_extractor, parse_config
from extractors.text_model import BUNDLED_MINILM, resolve_model_dir
from extractors.transcript import TranscriptExtractor, most_central_window, window_starts
from extractors.weights import WeightsMissingError

TOL = 1e-5
# Caption words the pre-tokenizer splits into several pieces: contractions, hyphens, numbers, accents, emoji.
TRICKY = ["I", "don't", "think", "it's", "3.5", "well-known", "café", "naïve", "😀", "U.S.", "$1,000", "e-mail",
          "C'est", "ça", "10:30pm", "rock'n'roll", "Zoë's", "co-operate", "...", "hello"]


@pytest.fixture(scope="module")
def hf() -> tuple:
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model_dir(BUNDLED_MINILM)
    return AutoTokenizer.from_pretrained(path, local_files_only=True), AutoModel.from_pretrained(path).eval()


@pytest.fixture(scope="module")
def ext() -> TranscriptExtractor:
    return get_extractor("bert_words")(parse_config({"extractor": "bert_words", "model": BUNDLED_MINILM}))


def _words(ws: list[str]) -> Words:
    t = np.arange(len(ws), dtype=float) * 0.3
    return Words(tuple(ws), np.stack([t, t + 0.25], 1))


def _combine(out, layers: str) -> np.ndarray:
    if layers == "last":
        return out.last_hidden_state[0].numpy()
    hs = [h[0].numpy() for h in out.hidden_states[1:]]
    return sum(hs[-4:]) if layers == "sum_last4" else np.concatenate(hs, axis=-1)


def reference(hf: tuple, ws: list[str], layers: str = "last") -> np.ndarray:
    """The model on the whole word list in one pass; each word = mean of its sub-word states."""
    tok, model = hf
    enc = tok(ws, is_split_into_words=True, return_tensors="pt")
    with torch.inference_mode():
        states = _combine(model(**enc, output_hidden_states=True), layers)
    word_ids = np.array([-1 if w is None else w for w in enc.word_ids()])
    return np.stack([states[word_ids == i].mean(0) for i in range(len(ws))])


def test_words_equal_direct_model_run(hf: tuple, ext: TranscriptExtractor) -> None:
    pieces = [len(hf[0].tokenize(w)) for w in TRICKY]
    assert max(pieces) >= 4 and sum(p > 1 for p in pieces) >= 8  # the test exercises multi-piece words
    rows = ext.extract(_words(TRICKY))
    assert rows.features.shape == (len(TRICKY), 384) and rows.features.dtype == np.float32
    np.testing.assert_allclose(rows.features, reference(hf, TRICKY), atol=TOL, rtol=0)
    assert rows.extras["words"].tolist() == TRICKY
    np.testing.assert_array_equal(rows.intervals, _words(TRICKY).intervals)


@pytest.mark.parametrize(("layers", "dim"), [("sum_last4", 384), ("concat_all", 6 * 384)])
def test_layer_options(hf: tuple, layers: str, dim: int) -> None:
    cfg = parse_config({"extractor": "bert_words", "model": BUNDLED_MINILM, "layers": layers})
    ext = TranscriptExtractor(cfg)
    rows = ext.extract(_words(TRICKY[:8]))
    assert rows.features.shape == (8, dim) and len(TranscriptExtractor.columns(cfg)) == dim
    np.testing.assert_allclose(rows.features, reference(hf, TRICKY[:8], layers), atol=TOL * 4, rtol=0)


def test_word_with_no_tokens_gets_unknown_token(hf: tuple, ext: TranscriptExtractor) -> None:
    ws = ["so", "\u200b", "what"]  # a zero-width space tokenises to nothing
    rows = ext.extract(_words(ws))
    np.testing.assert_allclose(rows.features, reference(hf, ["so", hf[0].unk_token, "what"]), atol=TOL, rtol=0)


def test_empty_transcript_gives_zero_rows(ext: TranscriptExtractor) -> None:
    rows = ext.extract(Words((), np.zeros((0, 2))))
    assert rows.features.shape == (0, 384) and rows.intervals.shape == (0, 2)
    assert rows.extras["words"].shape == (0,)


def _long_words(n: int) -> list[str]:
    return [TRICKY[(7 * i) % len(TRICKY)] for i in range(n)]


def _windowed(max_tokens: int, stride: int | None = None) -> TranscriptExtractor:
    cfg = {"extractor": "bert_words", "model": BUNDLED_MINILM, "max_tokens": max_tokens, "batch_size": 3}
    if stride:
        cfg["window_stride_tokens"] = stride
    return TranscriptExtractor(parse_config(cfg))


def _brute_force_windows(hf: tuple, ws: list[str], content: int, stride: int) -> np.ndarray:
    """Each window through the model on its own; each token from the window where it is most central."""
    tok, model = hf
    enc = tok(ws, is_split_into_words=True, add_special_tokens=False)
    ids, wid = enc["input_ids"], np.array(enc.word_ids())
    n = len(ids)
    starts = sorted({*range(0, max(n - content, 0), stride), max(n - content, 0)})
    vec = np.zeros((n, 384))
    for t in range(n):
        best = min((s for s in starts if s <= t < s + content), key=lambda s: abs(t - (s + (content - 1) / 2)))
        window = [tok.cls_token_id, *ids[best : best + content], tok.sep_token_id]
        with torch.inference_mode():
            vec[t] = model(input_ids=torch.tensor([window])).last_hidden_state[0, 1 + t - best].numpy()
    return np.stack([vec[wid == i].mean(0) for i in range(len(ws))])


def test_long_transcript_windows_match_one_pass_per_window(hf: tuple) -> None:
    ws = _long_words(30)
    n_tokens = len(hf[0](ws, is_split_into_words=True, add_special_tokens=False)["input_ids"])
    ext = _windowed(max_tokens=18)  # 16 content tokens, stride 8
    rows = ext.extract(_words(ws))
    assert rows.attrs["n_windows"] > 3 and rows.attrs["n_tokens"] == n_tokens
    assert rows.extras["words"].tolist() == ws  # nothing dropped, nothing doubled, order kept
    np.testing.assert_allclose(rows.features, _brute_force_windows(hf, ws, 16, 8), atol=TOL, rtol=0)


@pytest.mark.parametrize("extra", [0, 1])
def test_window_edge_one_token_over_the_limit(hf: tuple, extra: int) -> None:
    ws = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"][: 6 + extra]
    n = len(hf[0](ws, is_split_into_words=True, add_special_tokens=False)["input_ids"])
    ext = _windowed(max_tokens=n - extra + 2, stride=3)  # exactly fits, or one token over
    rows = ext.extract(_words(ws))
    assert rows.attrs["n_windows"] == 1 + extra
    expected = reference(hf, ws) if extra == 0 else _brute_force_windows(hf, ws, n - 1, 3)
    np.testing.assert_allclose(rows.features, expected, atol=TOL, rtol=0)


def test_transcript_that_fits_is_one_pass(hf: tuple) -> None:
    ws = _long_words(30)
    rows = _windowed(max_tokens=200).extract(_words(ws))
    assert rows.attrs["n_windows"] == 1
    np.testing.assert_allclose(rows.features, reference(hf, ws), atol=TOL, rtol=0)


def test_batch_across_items_equals_one_by_one(hf: tuple) -> None:
    ext = _windowed(max_tokens=18)
    items = [_words(_long_words(25)), Words((), np.zeros((0, 2))), _words(TRICKY[:5]), _words(_long_words(9))]
    batched = ext.extract_batch(items)
    for item, got in zip(items, batched, strict=True):
        alone = ext.extract(item)
        assert got.extras["words"].tolist() == list(item.words)
        np.testing.assert_allclose(got.features, alone.features, atol=TOL, rtol=0)


@given(st.integers(1, 300), st.integers(2, 40), st.data())
def test_windows_cover_every_token_once(n: int, window: int, data: st.DataObject) -> None:
    stride = data.draw(st.integers(1, window))
    starts = window_starts(n, window, stride)
    assert starts[0] == 0 and starts[-1] + window >= n and np.all(np.diff(starts) > 0)
    which = most_central_window(n, starts, window)
    t = np.arange(n)
    assert np.all((starts[which] <= t) & (t < starts[which] + window))


def test_config_columns_and_weights_id() -> None:
    cfg = parse_config({"extractor": "bert_words", "model": BUNDLED_MINILM, "weights_dir": "/somewhere"})
    assert TranscriptExtractor.weights_id(cfg) == BUNDLED_MINILM
    assert len(TranscriptExtractor.columns(cfg)) == 384
    assert "weights_dir" not in cfg.canonical() and cfg.canonical()["layers"] == "last"
    with pytest.raises(ValueError):
        parse_config({"extractor": "bert_words", "modle": "typo"})


def test_missing_weights_says_where_and_how(tmp_path: Path) -> None:
    cfg = parse_config({"extractor": "bert_words", "weights_dir": str(tmp_path)})  # default bert-base-uncased
    with pytest.raises(WeightsMissingError, match=rf"{tmp_path}/bert-base-uncased.*make weights"):
        TranscriptExtractor(cfg)
