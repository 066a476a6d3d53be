"""`bert_qa`: embeddings of an item's QA texts, one row per text (context, question, answer).

Layout (docs/text.md): rows come in question order, each question's row followed by its answers' rows, so
one question with its answers is one contiguous slice (`attrs["question_rows"]`); a context, when the item
has one, is row 0. `features` hold the pooled embedding (mean of the text's sub-word token states, special
tokens excluded); `extras["tokens"]` the token states themselves, cut or padded to `max_text_tokens` with
`extras["token_mask"]`. Every extra is row-aligned, so any slice of rows reads lazily and stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from extractors.base import QAText, register
from extractors.batched import Units
from extractors.text_model import TextModelConfig, TextModelExtractor, pool_and_pad
from rows import ROLE_ANSWER, ROLE_CONTEXT, ROLE_QUESTION, FeatureRows


class QAConfig(TextModelConfig):
    extractor: Literal["bert_qa"] = "bert_qa"
    max_text_tokens: int = Field(25, ge=1)  # token rows kept per text, as in the CMU SDK's Social-IQ QA export
    dtype: Literal["float32", "float16"] = "float32"  # of features and tokens


@dataclass
class _Row:
    text: str
    role: int
    q_index: int
    a_index: int
    label: int
    qid: str
    interval: tuple[float, float]


def qa_rows(x: QAText) -> list[_Row]:
    """The row plan of one item: [context], then per question its question row and answer rows."""
    if not (len(x.qids) == len(x.questions) == len(x.answers)):
        raise ValueError(f"QAText: {len(x.qids)} qids, {len(x.questions)} questions, {len(x.answers)} answer lists")
    # A question's span (QAItem.ts) when the dataset gives one; [0, 0] means "not known".
    spans = x.ts or (None,) * len(x.qids)
    rows = [] if x.context is None else [_Row(x.context, ROLE_CONTEXT, -1, -1, -1, "", (0.0, 0.0))]
    for q, (qid, question, answers) in enumerate(zip(x.qids, x.questions, x.answers, strict=True)):
        correct = x.correct[q] if q < len(x.correct) else ()
        if correct and len(correct) != len(answers):
            raise ValueError(f"QAText {qid}: {len(answers)} answers but {len(correct)} labels")
        span = tuple(map(float, spans[q])) if spans[q] is not None else (0.0, 0.0)
        rows.append(_Row(question, ROLE_QUESTION, q, -1, -1, qid, span))
        for a, answer in enumerate(answers):
            label = int(correct[a]) if correct else -1
            rows.append(_Row(answer, ROLE_ANSWER, q, a, label, qid, span))
    return rows


@register
class QAExtractor(TextModelExtractor[QAConfig]):
    name: ClassVar[str] = "bert_qa"
    version: ClassVar[str] = "1"
    config_type = QAConfig
    input_kind = "qa"

    def units(self, x: QAText) -> Units:
        """Each row's text as token ids (cut at the model's limit), with the row plan and full lengths for `pack`."""
        rows = qa_rows(x)
        full = self.tokenizer([r.text for r in rows], add_special_tokens=False)["input_ids"] if rows else []
        return Units([ids[: self.max_content_tokens] for ids in full], (rows, [len(ids) for ids in full]))

    def pack(self, x: QAText, units: Units, states: list[np.ndarray]) -> FeatureRows:
        rows, n_tokens = units.plan
        n, t_max, dtype = len(rows), self.config.max_text_tokens, np.dtype(self.config.dtype)
        pooled, tokens, mask = pool_and_pad(states, self.dim, t_max, dtype)
        extras = {
            "tokens": tokens,
            "token_mask": mask,
            "n_tokens": np.asarray(n_tokens, dtype=np.int32).reshape(n),
            "role": np.asarray([r.role for r in rows], dtype=np.int8).reshape(n),
            "q_index": np.asarray([r.q_index for r in rows], dtype=np.int32).reshape(n),
            "a_index": np.asarray([r.a_index for r in rows], dtype=np.int32).reshape(n),
            "label": np.asarray([r.label for r in rows], dtype=np.int8).reshape(n),
            "qid": np.asarray([r.qid for r in rows], dtype=np.str_).reshape(n),
            "text": np.asarray([r.text for r in rows], dtype=np.str_).reshape(n),
        }
        intervals = np.asarray([r.interval for r in rows], dtype=np.float64).reshape(n, 2)
        attrs = {
            "question_rows": _question_rows(rows),
            "max_text_tokens": t_max,
            "n_cut_texts": int(sum(k > t_max for k in n_tokens)),
            "n_empty_texts": int(sum(k == 0 for k in n_tokens)),
        }
        return FeatureRows(pooled.astype(dtype), intervals, extras, attrs)


def _question_rows(rows: list[_Row]) -> list[list[int]]:
    """[start, end) row range of each question with its answers."""
    bounds: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        if r.q_index >= 0:
            bounds.setdefault(r.q_index, [i, i + 1])[1] = i + 1
    return [bounds[q] for q in sorted(bounds)]
