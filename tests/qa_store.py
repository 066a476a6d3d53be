"""QA stores without a text model: the `bert_qa` row plan (extractors.qa.qa_rows) with zero vectors.

Enough for the datasets' planning and label checks, which read only the row plan (qid, role, a_index,
text), at a few milliseconds per item instead of a BERT pass: real-data tests build stores of thousands
of questions this way.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from extractors.base import FeatureRows
from extractors.qa import qa_rows
from manifests.records import MediaItem, QAItem
from pipeline.decode import qa_text
from store.writer import StoreWriter

DIM = 2


def zero_qa_rows(questions: list[QAItem]) -> FeatureRows:
    rows = qa_rows(qa_text(questions))
    n = len(rows)
    extras = {
        "tokens": np.zeros((n, 1, DIM), np.float32), "token_mask": np.ones((n, 1), bool),
        "role": np.asarray([r.role for r in rows], np.int8).reshape(n),
        "a_index": np.asarray([r.a_index for r in rows], np.int32).reshape(n),
        "qid": np.asarray([r.qid for r in rows], np.str_).reshape(n),
        "text": np.asarray([r.text for r in rows], np.str_).reshape(n),
    }
    return FeatureRows(np.zeros((n, DIM), np.float32), np.zeros((n, 2)), extras)


def by_item(qa: Iterable[QAItem]) -> dict[str, list[QAItem]]:
    out: dict[str, list[QAItem]] = {}
    for q in qa:
        out.setdefault(q.item_id, []).append(q)
    return out


def write_qa_store(out: Path, items: list[MediaItem], qa: list[QAItem], only: set[str] | None = None) -> Path:
    """A store with a `qa` feature for every item with questions (or those in `only`)."""
    with StoreWriter(out, "test") as w:
        w.write_manifests(items, qa)
        w.set_feature("qa", {"extractor": "bert_qa", "version": "zero", "config": {}, "rate_hz": None,
                             "columns": [f"h{i}" for i in range(DIM)], "weights": "none", "spec_hash": "zero"})
        for item, qs in by_item(qa).items():
            if only is None or item in only:
                w.commit("qa", item, zero_qa_rows(qs), {"duration_s": None, "spec_hash": "zero", "fingerprint": "-"})
    return out


class _Read:
    def __init__(self, rows: FeatureRows) -> None:
        self.extras, self.features, self.intervals = rows.extras, rows.features, rows.intervals


class MemoryQAStore:
    """The reader calls the datasets plan with (features, items, qa_items, read), held in memory."""

    def __init__(self, qa: list[QAItem], path: str = "memory") -> None:
        self.path, self._qa = Path(path), qa
        self._rows = {item: zero_qa_rows(qs) for item, qs in by_item(qa).items()}

    def features(self) -> list[str]:
        return ["qa"]

    def items(self, feature: str, include_filtered: bool = False, **_: Any) -> list[str]:
        return sorted(self._rows) if feature == "qa" else []

    def qa_items(self) -> list[QAItem]:
        return list(self._qa)

    def read(self, feature: str, item: str) -> _Read:
        return _Read(self._rows[item])
