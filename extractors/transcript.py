"""`bert_words`: one row per transcript word, the mean of its sub-word tokens' hidden states.

The word -> token mapping comes from the fast tokenizer's word ids on the caption's own word list
(`is_split_into_words=True`), so a caption word such as "don't" or "3.5", which BERT's pre-tokenizer splits
into several pieces, is still one row whose vector averages all its pieces. Transcripts longer than the
model's limit are embedded in overlapping windows; each token takes its state from the window in which it
is most central (see docs/text.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from extractors.base import SdkSequence, Words, register
from extractors.batched import Units
from extractors.text_model import TextModelConfig, TextModelExtractor
from rows import FeatureRows


class TranscriptConfig(TextModelConfig):
    extractor: Literal["bert_words"] = "bert_words"
    window_stride_tokens: int | None = Field(None, ge=1)  # step between windows; None: half a window


def window_starts(n_tokens: int, window: int, stride: int) -> np.ndarray:
    """Start offsets of windows of `window` tokens covering [0, n_tokens); the last one ends exactly at n."""
    if window <= 0 or stride <= 0 or stride > window:
        raise ValueError(f"need 0 < stride <= window, got {stride = }, {window = }")
    if n_tokens <= window:
        return np.zeros(1, dtype=np.int64)
    starts = list(range(0, n_tokens - window, stride)) + [n_tokens - window]
    return np.asarray(starts, dtype=np.int64)


def most_central_window(n_tokens: int, starts: np.ndarray, window: int) -> np.ndarray:
    """For each token, the index of the window (among those holding it) whose centre is nearest; ties: earlier."""
    t = np.arange(n_tokens)[:, None]
    inside = (t >= starts[None, :]) & (t < starts[None, :] + window)
    dist = np.abs(t - (starts[None, :] + (window - 1) / 2.0))
    return np.argmin(np.where(inside, dist, np.inf), axis=1)


@register
class TranscriptExtractor(TextModelExtractor[TranscriptConfig]):
    name: ClassVar[str] = "bert_words"
    version: ClassVar[str] = "3"  # 3: caption conformance (issue 11): overlapping cues keep their times, SIQ2 trims
    # 2: caption rules (timing lines start cues, repeats after a pause, format chars)
    config_type = TranscriptConfig
    input_kind = "transcript"
    sdk_sequence = SdkSequence("SOCIAL_IQ_TRANSCRIPT_RAW_CHUNKS_BERT")

    def units(self, x: Words) -> Units:
        """The transcript's windows of token ids, with the ids, each token's word and the window starts for `pack`."""
        ids, word_ids = tokenize_words(self.tokenizer, x.words)
        window = self.max_content_tokens
        stride = self.config.window_stride_tokens or max(1, window // 2)
        starts = window_starts(len(ids), window, min(stride, window)) if len(ids) else np.zeros(0, np.int64)
        return Units([ids[s : s + window].tolist() for s in starts], (ids, word_ids, starts))

    def pack(self, words: Words, units: Units, states: list[np.ndarray]) -> FeatureRows:
        ids, word_ids, starts = units.plan
        dim = self.dim
        vecs = np.zeros((len(ids), dim), dtype=np.float64)
        if len(ids):
            which = most_central_window(len(ids), starts, self.max_content_tokens)
            for w, s in enumerate(starts):
                tok = np.flatnonzero(which == w)
                vecs[tok] = states[w][tok - s]
        sums = np.zeros((len(words.words), dim), dtype=np.float64)
        np.add.at(sums, word_ids, vecs)
        counts = np.bincount(word_ids, minlength=len(words.words))
        features = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
        attrs = {**words.attrs, "n_windows": len(starts), "n_tokens": len(ids)}
        extras = {"words": np.asarray(words.words, dtype=np.str_).reshape(len(words.words))}
        return FeatureRows(features, words.intervals.astype(np.float64), extras, attrs)


def tokenize_words(tokenizer: object, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Sub-word ids of a word list and, per id, the index of its word (no special tokens).

    A word the tokenizer turns into nothing (zero-width or control characters only) is given the unknown
    token, so every word gets a row and a vector.
    """
    if not words:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    enc = tokenizer(list(words), is_split_into_words=True, add_special_tokens=False, verbose=False)
    ids = np.asarray(enc["input_ids"], dtype=np.int64)
    word_ids = np.asarray(enc.word_ids(), dtype=np.int64)
    missing = np.setdiff1d(np.arange(len(words)), word_ids)
    if len(missing):
        # Insert an [UNK] where each empty word sits, keeping token order = word order.
        pos = np.searchsorted(word_ids, missing)
        ids = np.insert(ids, pos, tokenizer.unk_token_id)
        word_ids = np.insert(word_ids, pos, missing)
    return ids, word_ids
