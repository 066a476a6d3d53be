"""QA stores without a text model: the `bert_qa` row plan (extractors.qa.qa_rows) with zero vectors, or
with `text_vector(text)` (a vector drawn from the text's CRC-32) where a test must tell which text a
returned row embeds.

Enough for the datasets' planning and label checks, which read only the row plan (qid, role, a_index,
text), at a few milliseconds per item instead of a BERT pass: real-data tests build stores of thousands
of questions this way.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from extractors.qa import qa_rows
from manifests.records import MediaItem, QAItem
from media.kinds.qa import qa_text
from rows import FeatureRows
from store import StoreWriter, open_backend

DIM = 2


def text_vector(text: str) -> np.ndarray:
    """(DIM,) float32 standing for a text's embedding: equal texts, equal vectors; different texts, different."""
    return np.random.default_rng(zlib.crc32(text.encode())).standard_normal(DIM).astype(np.float32)


def zero_qa_rows(questions: list[QAItem], vectors: bool = False) -> FeatureRows:
    """`vectors`: each row's pooled vector and its one token state are `text_vector(text)`, else zeros."""
    rows = qa_rows(qa_text(questions))
    n = len(rows)
    pooled = np.stack([text_vector(r.text) for r in rows]) if vectors else np.zeros((n, DIM), np.float32)
    extras = {
        "tokens": pooled[:, None, :].copy(), "token_mask": np.ones((n, 1), bool),
        "role": np.asarray([r.role for r in rows], np.int8).reshape(n),
        "a_index": np.asarray([r.a_index for r in rows], np.int32).reshape(n),
        "qid": np.asarray([r.qid for r in rows], np.str_).reshape(n),
        "text": np.asarray([r.text for r in rows], np.str_).reshape(n),
    }
    return FeatureRows(pooled, np.zeros((n, 2)), extras)


def by_item(qa: Iterable[QAItem]) -> dict[str, list[QAItem]]:
    out: dict[str, list[QAItem]] = {}
    for q in qa:
        out.setdefault(q.item_id, []).append(q)
    return out


def write_qa_store(out: Path, items: list[MediaItem], qa: list[QAItem], only: set[str] | None = None,
                   vectors: bool = False) -> Path:
    """A store with a `qa` feature for every item with questions (or those in `only`)."""
    with StoreWriter(out, "test") as w:
        w.write_manifests(items, qa)
        w.set_feature("qa", {"extractor": "bert_qa", "version": "zero", "config": {}, "rate_hz": None,
                             "columns": [f"h{i}" for i in range(DIM)], "weights": "none", "spec_hash": "zero"})
        for item, qs in by_item(qa).items():
            if only is None or item in only:
                w.commit("qa", item, zero_qa_rows(qs, vectors), {"duration_s": None, "spec_hash": "zero", "fingerprint": "-"})
    return out


class _Read:
    def __init__(self, rows: FeatureRows) -> None:
        self.extras, self.features, self.intervals = rows.extras, rows.features, rows.intervals


class MemoryQAStore:
    """The reader's side the datasets plan with (index, part arrays, items, qa_items, read), held in memory:
    each item is a part of its own. `path`: where the plan cache goes (a test's tmp_path)."""

    def __init__(self, qa: list[QAItem], path: str | Path, vectors: bool = False) -> None:
        self.path, self._qa = Path(path), qa
        self.backend = open_backend(self.path)  # the folder's, as a Store's: the plan cache keys on its manifests
        self._rows = {item: zero_qa_rows(qs, vectors) for item, qs in by_item(qa).items()}
        entries = {item: SimpleNamespace(item=item, part=item, row0=0, n_rows=len(r.features))
                   for item, r in self._rows.items()}
        names = list(self._rows)  # the index's columns too, as `Index` has them (the plan reads those)
        self._index = SimpleNamespace(entries=entries, generation="memory", length=len(entries), part_names=names,
                                      pos={item: k for k, item in enumerate(names)},
                                      part=np.arange(len(names)), row0=np.zeros(len(names), np.int64),
                                      n_rows=np.array([len(self._rows[i].features) for i in names], np.int64))

    def features(self) -> list[str]:
        return ["qa"]

    def index(self, feature: str) -> SimpleNamespace:
        return self._index

    def items(self, feature: str, include_filtered: bool = False, **_: Any) -> list[str]:
        return sorted(self._rows) if feature == "qa" else []

    def filtered(self, feature: str) -> list[str]:
        return []

    def part_problem(self, feature: str, part: str, **_: Any) -> None:
        return None

    def part_problems(self, feature: str, **_: Any) -> dict[str, str]:
        return {}

    def part_array(self, feature: str, part: str, name: str) -> np.ndarray:
        return self._rows[part].extras[name]

    def qa_items(self) -> list[QAItem]:
        return list(self._qa)

    def read(self, feature: str, item: str) -> _Read:
        return _Read(self._rows[item])

    def rows(self, feature: str, name: str, picks: list[tuple[str, int]]) -> np.ndarray:
        """`Store.rows`: the rows `picks` (item, row) of array `name`, stacked in order."""
        arrays = {item: (r.features if name == "features" else r.extras[name]) for item, r in self._rows.items()}
        return np.stack([np.asarray(arrays[item][row]) for item, row in picks]) if picks else np.zeros((0,), np.float32)
