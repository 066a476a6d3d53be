"""`bert_caption` and `bert_reactions`: the short texts an item carries (Socratis), one row per text.

Each text is split into words at whitespace and the words go through the fast tokenizer with
`is_split_into_words=True` (as in `bert_words`), so every sub-word token knows the word it came from.
Per row (all extras row-aligned, first dimension N, so any slice of rows reads lazily):

| array | shape | meaning |
| --- | --- | --- |
| `features` | (N, D) | pooled: mean of the text's token states (no [CLS]/[SEP]), all tokens up to the model's limit |
| `tokens` | (N, T, D) | the first T token states (T = `max_text_tokens`), zero-padded; `token_mask` (N, T) |
| `token_word` | (N, T) int32 | index into the row's `words` of each token's word; -1 in the padding |
| `words` | (N, W) str | the text's words (W = the item's most), "" padded; `n_words`, `n_tokens` (N,) |
| `text` | (N,) str | the embedded text |

`bert_caption` embeds the caption (one row). `bert_reactions` embeds each reaction as "<emotion>: <reason>"
and keeps `emotion`, `reason` (str) and `worker` (int, the worker entry it came from) beside the vectors.
Intervals are [0, 0]: these texts belong to the whole (timeless) item, like its still image.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from extractors.base import Texts, register
from extractors.batched import Units
from extractors.text_model import TextModelConfig, TextModelExtractor, pool_and_pad
from extractors.transcript import tokenize_words
from rows import FeatureRows


class _TextsConfig(TextModelConfig):
    max_text_tokens: int = Field(64, ge=1)  # token rows kept per text (captions and reasons are a sentence or two)
    dtype: Literal["float32", "float16"] = "float32"  # of features and tokens


class CaptionConfig(_TextsConfig):
    extractor: Literal["bert_caption"] = "bert_caption"


class ReactionsConfig(_TextsConfig):
    extractor: Literal["bert_reactions"] = "bert_reactions"


def reaction_text(emotion: str, reason: str) -> str:
    """What `bert_reactions` embeds for one reaction: the emotion word, then the reason for it."""
    return f"{emotion}: {reason}"


class _TextsExtractor(TextModelExtractor[_TextsConfig]):
    version: ClassVar[str] = "1"

    def units(self, x: Texts) -> Units:
        """Each text's token ids (cut at the model's limit), with its words and each token's word for `pack`."""
        limit = self.max_content_tokens
        plan = [(ws, *tokenize_words(self.tokenizer, ws)) for ws in map(str.split, x.texts)]
        return Units([ids[:limit].tolist() for _, ids, _ in plan], plan)

    def pack(self, x: Texts, units: Units, states: list[np.ndarray]) -> FeatureRows:
        plan = units.plan
        n, t_max, dtype = len(plan), self.config.max_text_tokens, np.dtype(self.config.dtype)
        w_max = max([1, *(len(words) for words, _, _ in plan)])
        pooled, tokens, mask = pool_and_pad(states, self.dim, t_max, dtype)
        token_word = np.full((n, t_max), -1, np.int32)
        words = np.full((n, w_max), "", dtype=object)
        for i, ((ws, _ids, word_ids), s) in enumerate(zip(plan, states, strict=True)):
            m = min(len(s), t_max)
            token_word[i, :m] = word_ids[:m]
            words[i, : len(ws)] = ws
        extras = {
            "tokens": tokens, "token_mask": mask, "token_word": token_word,
            "words": words.astype(np.str_).reshape(n, w_max),
            "n_words": np.asarray([len(p[0]) for p in plan], np.int32).reshape(n),
            "n_tokens": np.asarray([len(p[1]) for p in plan], np.int32).reshape(n),
            "text": np.asarray(x.texts, dtype=np.str_).reshape(n),
        }
        for name, values in x.labels.items():
            extras[name] = np.asarray(values).reshape(n)  # (n,) also for n = 0
        attrs = {"max_text_tokens": t_max, "n_cut_texts": int(sum(len(p[1]) > t_max for p in plan))}
        return FeatureRows(pooled.astype(dtype), np.zeros((n, 2)), extras, attrs)


@register
class CaptionExtractor(_TextsExtractor):
    name: ClassVar[str] = "bert_caption"
    config_type = CaptionConfig
    input_kind = "caption"


@register
class ReactionsExtractor(_TextsExtractor):
    name: ClassVar[str] = "bert_reactions"
    config_type = ReactionsConfig
    input_kind = "reactions"
