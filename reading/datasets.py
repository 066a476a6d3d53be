"""PyTorch datasets for the Social-IQ tasks (A2, A4, A3) and Socratis, read lazily from the store (docs/reading.md,
"Datasets for the Social-IQ tasks"). Video modalities are aligned with `reading.align`; an undefined step or
value reads `fill_value`, flagged by `mask` and `valid`, never by surprise."""

from __future__ import annotations

import bisect
import hashlib
import os
import warnings
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from manifests.records import SPLIT_NAMES, QAItem
from reading.align import How, Reference, align
from reading.views import materialize
from rows import ROLE_ANSWER, ROLE_CONTEXT, ROLE_QUESTION
from store import (
    FEATURES,
    INTERVALS,
    ItemFeature,
    Store,
    gc_paused,
    load_plan,
    location,
    open_store,
    plan_cache_key,
    save_plan,
)

Text = Literal["tokens", "pooled"]
FILTERED = "item filtered by a policy (faces: too few faces)"
MISSING = "item missing, incomplete or damaged in a needed feature"
# Part arrays up to this size are loaded whole by a dataset's reader (the store's default: 16 MiB): an epoch
# reads every item, so a whole part pays off, e.g. Social-IQ's pooled QA rows, ~47 MB per part of 512 items,
# read lazily per sample were 5 ms of a 6 ms sample. Token states (~100 MB per part) stay lazy.
READ_WHOLE_BYTES = 64 << 20
_NO_STEPS = torch.zeros((0, 2), dtype=torch.float64)  # a text-only sample's reference intervals (shared, never written)


class QASample(NamedTuple):
    """One sample's plan: plain ints and strings only, so the dataset pickles cheaply into workers (a named
    tuple: made ~3.5x faster than a frozen dataclass, which counts with 33k of them)."""

    qid: str
    item: str
    question_row: int
    answer_rows: tuple[int, ...]  # one for A2, four for A4
    label: int  # A2: 1 correct / 0 not; A4: index of the correct answer in answer_rows
    context_row: int = -1  # the item's context row (SocialIQA), -1 when it has none


_PLAN_ARRAYS = ("qid", "role", "a_index", "text")


def _qa_rows_many(store: Store, feature: str,
                  by_item: dict[str, list[QAItem]]) -> dict[str, dict[str, tuple[int, list[int], int]]]:
    """qid -> (question row, answer rows in manifest order, context row or -1) of each item's questions,
    checked against the texts the store embedded: each part's plan arrays read once, whole, as Python lists."""
    cols = store.index(feature)  # its columns: an `Entry` per item would cost a third of the planning
    by_part: dict[str, list[str]] = {}
    for item in by_item:  # usable items: all in the index
        by_part.setdefault(cols.part_names[cols.part.item(cols.pos[item])], []).append(item)
    out = {}
    for part, items in by_part.items():
        if store.part_problem(feature, part) is not None:
            for item in items:
                store.read(feature, item)  # DamagedItem naming the part
        arrays = {k: np.asarray(store.part_array(feature, part, k)).tolist() for k in _PLAN_ARRAYS}
        spans = {item: (cols.row0.item(k), cols.n_rows.item(k)) for item in items for k in [cols.pos[item]]}
        found = _match_part(store.path, feature, arrays, spans, by_item)
        for item in items if found is None else ():  # a row key twice in the part: item by item, precise errors
            row0, n = spans[item]
            out[item] = _match_rows(store.path, feature, item, by_item[item],
                                    {k: a[row0:row0 + n] for k, a in arrays.items()})
        out.update(found or {})
    return out


def _match_part(path: Path, feature: str, arrays: dict[str, list], spans: dict[str, tuple[int, int]],
                by_item: dict[str, list[QAItem]]) -> dict[str, dict[str, tuple[int, list[int], int]]] | None:
    """`_match_rows` of the items of one part (`spans`: item -> (row0, n_rows)) in one pass over its rows;
    None when a (qid, role, answer) key is on two rows of the part (then item by item decides)."""
    qids, roles, a_index, texts = (arrays[k] for k in _PLAN_ARRAYS)
    contexts = [k for k, r in enumerate(roles) if r == ROLE_CONTEXT]
    keys = [(q, r, a if r == ROLE_ANSWER else -1) for q, r, a in zip(qids, roles, a_index, strict=True)
            if r != ROLE_CONTEXT]
    where = dict(zip(keys, (k for k, r in enumerate(roles) if r != ROLE_CONTEXT), strict=True))
    if len(where) != len(keys):
        return None
    out = {}
    for item, (row0, n) in spans.items():
        lo = bisect.bisect_left(contexts, row0)
        context = _context_row(path, feature, item, contexts[lo:bisect.bisect_left(contexts, row0 + n)], texts,
                               by_item[item])
        context = context - row0 if context >= 0 else -1
        mine = out[item] = {}
        for q in by_item[item]:
            qid = q.qid
            q_row = where.get((qid, ROLE_QUESTION, -1), -1)
            a_rows = [where.get((qid, ROLE_ANSWER, a), -1) for a in range(len(q.answers))]
            if (min(q_row, *a_rows) < row0 or max(q_row, *a_rows) >= row0 + n or texts[q_row] != q.question
                    or tuple([texts[k] for k in a_rows]) != q.answers):
                return None  # missing rows or other texts: item by item says which, in its own words
            mine[qid] = (q_row - row0, [k - row0 for k in a_rows], context)
    return out


def _match_rows(path: Path, feature: str, item: str, questions: list[QAItem],
                ex: dict[str, list]) -> dict[str, tuple[int, list[int], int]]:
    """Each question's rows, found by (qid, role, answer index) in one pass over the item's rows (plain
    lists: per-question numpy calls cost more than the work on a few rows)."""
    texts, where = ex["text"], {}
    for k, (qid, role, a) in enumerate(zip(ex["qid"], ex["role"], ex["a_index"], strict=True)):
        where.setdefault((qid, role, a if role == ROLE_ANSWER else -1), []).append(k)
    context = _context_row(path, feature, item, [k for k, r in enumerate(ex["role"]) if r == ROLE_CONTEXT],
                           texts, questions)
    out = {}
    for q in questions:
        q_rows = where.get((q.qid, ROLE_QUESTION, -1), [])
        a_rows = [where.get((q.qid, ROLE_ANSWER, a), []) for a in range(len(q.answers))]
        if len(q_rows) != 1 or any(len(r) != 1 for r in a_rows):
            raise ValueError(f"{path}: {feature}/{item} has no rows for question {q.qid} with "
                             f"{len(q.answers)} answers; re-run extraction (the store is stale for the manifest)")
        a_rows_i = [r[0] for r in a_rows]
        stored = [texts[q_rows[0]], *(texts[r] for r in a_rows_i)]
        if stored != [q.question, *q.answers]:
            raise ValueError(f"{path}: {feature}/{item} question {q.qid}: stored texts {stored} differ "
                             f"from the manifest's; re-run extraction")
        out[q.qid] = (q_rows[0], a_rows_i, context)
    return out


def _context_row(path: Path, feature: str, item: str, rows: list[int], texts: list[str],
                 questions: list[QAItem]) -> int:
    """The item's context row (-1: none), checked against the manifest's context like the other texts."""
    want = questions[0].context if questions else None
    if len(rows) > 1 or (len(rows) == 1) != (want is not None) or (want is not None and texts[rows[0]] != want):
        stored = [texts[r] for r in rows]
        raise ValueError(f"{path}: {feature}/{item}: stored context {stored} differs from the manifest's "
                         f"{want!r}; re-run extraction")
    return rows[0] if rows else -1


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's counter step


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 whose outputs for consecutive counters pass as
    independent uniform 64-bit draws (uint64 arithmetic wraps, as the algorithm wants)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _draws(qids: Sequence[str], seed: int, n_draws: int) -> list[list[int]]:
    """Per qid `n_draws` uniform 64-bit integers, a pure function of (seed, qid, draw number): the qid's
    64-bit BLAKE2b keyed by the seed starts a splitmix64 counter stream. No other question changes them."""
    key = (int(seed) % (1 << 64)).to_bytes(8, "little")
    base = np.fromiter((int.from_bytes(hashlib.blake2b(q.encode(), digest_size=8, key=key).digest(), "little")
                        for q in qids), np.uint64, len(qids))
    with np.errstate(over="ignore"):
        return _mix64(base[:, None] + _GOLDEN * np.arange(1, n_draws + 1, dtype=np.uint64)).tolist()


def a4_choices(qids: Sequence[str], corrects: Sequence[Sequence[bool]], seed: int,
               n_answers: int = 4) -> list[tuple[tuple[int, ...], int] | None]:
    """`a4_choice` of many questions at once (one vectorised hash for all of them; the same results). From a
    question's draws u: the correct answer right[u0 mod len(right)] at position u1 mod n_answers, among the
    n_answers - 1 incorrect ones with the smallest u(2 + answer index) (docs/design.md, "Dataset plans")."""
    draws = _draws(qids, seed, 2 + max((len(c) for c in corrects), default=0))
    out: list[tuple[tuple[int, ...], int] | None] = []
    for correct, u in zip(corrects, draws, strict=True):
        right = [i for i, c in enumerate(correct) if c]
        wrong = [i for i, c in enumerate(correct) if not c]
        if not right or len(wrong) < n_answers - 1:
            out.append(None)
            continue
        chosen = sorted(wrong, key=lambda a: u[2 + a])[:n_answers - 1]  # noqa: B023 (used at once)
        label = u[1] % n_answers
        chosen.insert(label, right[u[0] % len(right)])
        out.append((tuple(chosen), label))
    return out


def a4_choice(qid: str, correct: Sequence[bool], seed: int, n_answers: int = 4) -> tuple[tuple[int, ...], int] | None:
    """Answer indices (one correct, n_answers - 1 incorrect) in a seeded order and the position of the correct
    one; None when the question has no correct answer or too few incorrect ones. A pure function of
    (seed, qid, correct): the same in every run, process, worker and subset of the questions."""
    return a4_choices([qid], [correct], seed, n_answers)[0]


class DroppedWarning(UserWarning):
    """Most of what a dataset was asked for was left out (its `dropped` counts why)."""


# what to do about each reason a dataset leaves something out
_REMEDIES = {
    FILTERED: "exclude_filtered=False keeps them",
    MISSING: "`make extract` computes what is missing; `python -m pipeline info STORE` lists failed and partial items",
    "unlabelled": "the release's test split has no answers to train on",
    "item missing or failed in a feature": "`make extract` computes what is missing; `python -m pipeline info STORE` "
                                           "lists failed items",
}


def check_left(what: str, kept: int, dropped: Mapping[str, int], unit: str) -> None:
    """A dataset with nothing left is a ValueError with the reasons counted (a training loop would run zero
    batches); one that left out most of what it was asked for warns (DroppedWarning) with the same counts."""
    lost = sum(dropped.values())
    if kept and lost <= kept:
        return
    reasons = "; ".join(f"{n:,} {reason}" + (f" ({_REMEDIES[reason]})" if reason in _REMEDIES else "")
                        for reason, n in sorted(dropped.items(), key=lambda kv: -kv[1]))
    if not kept:
        raise ValueError(f"{what}: nothing left: " + (f"all {lost:,} {unit} left out: {reasons}" if lost
                                                          else f"the store holds no {unit}"))
    warnings.warn(f"{what}: {lost:,} of {lost + kept:,} {unit} left out: {reasons}", DroppedWarning, stacklevel=4)


class _SocialIQ(Dataset):
    task = ""

    def __init__(
        self, store: str | Path, split: str | None = "train", modalities: Sequence[str] = ("frames", "acoustic"),
        to: Reference = "transcript", how: How | Mapping[str, How] = "mean", qa_feature: str = "qa", text: Text = "tokens",
        fill_value: float = 0.0, exclude_filtered: bool = True, cache_items: int = 8, seed: int = 0,
        materialized: bool = False, view_cache_bytes: int = 8 << 30,
    ) -> None:
        """`materialized`: align the modalities once into a packed view (reading/views.py: made or brought up to
        date here, in the main process) and read samples from it, at memory speed once its parts are loaded
        (up to `view_cache_bytes` of them per process)."""
        if text not in ("tokens", "pooled"):
            raise ValueError(f"text must be 'tokens' or 'pooled', got {text!r}")
        self.path, self.modalities = location(store), tuple(modalities)
        self.split = SPLIT_NAMES.get(split.lower(), split) if split is not None else None  # "dev" is stored as "val"
        self.to, self.how, self.qa_feature, self.text = to, how, qa_feature, text
        self.fill_value, self.cache_items, self.seed = float(fill_value), int(cache_items), int(seed)
        self.dropped: Counter[str] = Counter()  # why questions were left out, with counts
        s = open_store(self.path)
        with gc_paused():  # ~10 objects per question, none in a cycle
            self.samples = self._cached_plan(s, exclude_filtered)
        self._check_left()
        self.view, self.view_cache_bytes = None, int(view_cache_bytes)
        if materialized and self.modalities:
            if not isinstance(self.path, Path):
                raise ValueError(f"{self.path}: materialized=True writes an aligned view beside a local store; a "
                                 "store in a bucket is read as it is (materialized=False)")
            self.view = materialize(self.path, self.modalities, self.to, self.how,
                                    items=sorted({smp.item for smp in self.samples}))
        self._view_store: Store | None = None
        self._store: Store | None = None
        self._pid = -1
        self._cache: OrderedDict[str, dict[str, Any]] = OrderedDict()  # item -> aligned modalities

    # ---- planning (main process) ----

    def _cached_plan(self, s: Store, exclude_filtered: bool) -> list[QASample]:
        """The plan, read from the store's plan cache when neither the store nor the manifest changed since it
        was made (store/plancache.py), else made and saved."""
        present = s.features()  # once: in a bucket a listing and a request per feature each time
        self._needed(s, present)  # a missing feature is an error, cached plan or not
        options = {"task": type(self).__name__, "split": self.split, "modalities": list(self.modalities),
                   "to": self.to if self.modalities and isinstance(self.to, str | int | float) else None,
                   "qa": self.qa_feature, "exclude_filtered": exclude_filtered, "seed": self.seed}
        k = plan_cache_key(s, options, present)
        cached = load_plan(s.path, k)
        if cached is not None:
            self.dropped.update(cached["dropped"])
            self._restore(cached.get("extra", {}))
            return [QASample(qid, item, q_row, tuple(a_rows), label, c_row)
                    for qid, item, q_row, a_rows, label, c_row in cached["samples"]]
        samples = self._plan(s, *self._usable_items(s, exclude_filtered, present))
        save_plan(s.path, k, {"samples": samples,  # named tuples: JSON lists in field order
                                   "dropped": dict(self.dropped), "extra": self._extra()})
        return samples

    def _extra(self) -> dict[str, Any]:
        """Planning state a subclass keeps beyond samples and `dropped` (saved with a cached plan)."""
        return {}

    def _restore(self, extra: dict[str, Any]) -> None:
        pass

    def _needed(self, s: Store, present: list[str] | None = None) -> list[str]:
        """The features every sample reads: the QA texts, the modalities and, when something is aligned, the
        reference feature. A missing one is an error that says what the store has and what to pass.
        `present`: the store's features, when the caller has them."""
        present = s.features() if present is None else present
        if self.qa_feature not in present:
            raise ValueError(f"{self.path}: no feature {self.qa_feature!r}; present: {present}")
        absent = [f for f in self.modalities if f not in present]
        if absent:
            text_only = all(f == self.qa_feature or f in ("caption", "reactions", "transcript") for f in present)
            hint = ("; a text-only store (SocialIQA): pass modalities=() to read the questions alone" if text_only
                    else "; pass modalities= a subset of the store's features, or () for the texts alone")
            raise ValueError(f"{self.path}: no feature {absent[0]!r} for modalities={self.modalities!r}; "
                             f"present: {present}{hint}")
        needed = [self.qa_feature, *self.modalities]
        if self.modalities and isinstance(self.to, str):
            if self.to not in present:
                raise ValueError(f"{self.path}: no feature {self.to!r} to align to (the default reference: the "
                                 f"transcript's words); present: {present}; pass to=<one of those>, to=<rate in Hz> "
                                 "(e.g. to=1.0) or to=<(M, 2) array of seconds>; modalities=() aligns nothing")
            needed.append(self.to)
        return list(dict.fromkeys(needed))

    def _usable_items(self, s: Store, exclude_filtered: bool, present: list[str]) -> tuple[set[str], set[str]]:
        """(items complete in every needed feature, items a policy filtered in any feature when excluded);
        `present`: the store's features."""
        needed = self._needed(s, present)
        usable = set.intersection(*(set(s.items(f, include_filtered=True)) for f in needed))
        filtered = {i for f in present for i in s.filtered(f)} if exclude_filtered else set()
        return usable, filtered  # with exclude_filtered, an item filtered in any feature (faces) is out of the task

    def _plan(self, s: Store, usable: set[str], filtered: set[str]) -> list[QASample]:
        by_item: dict[str, list[QAItem]] = {}
        questions = s.qa_items()
        self._check_split(questions)
        for q in questions:
            if self.split is not None and q.split != self.split:
                continue
            if q.item_id in filtered:
                self.dropped[FILTERED] += 1
            elif q.item_id not in usable:
                self.dropped[MISSING] += 1
            elif not q.correct:
                self.dropped["unlabelled"] += 1
            else:
                by_item.setdefault(q.item_id, []).append(q)
        rows = _qa_rows_many(s, self.qa_feature, by_item)
        return self._samples_of([(q, *rows[item][q.qid]) for item in sorted(by_item) for q in by_item[item]])

    def _check_split(self, questions: list[QAItem]) -> None:
        if self.split is None or any(q.split == self.split for q in questions):
            return
        have = Counter(q.split for q in questions)
        found = ", ".join(f"{k} ({n} questions)" for k, n in sorted(have.items())) or "none"
        raise ValueError(f"{self.path}: no questions in split {self.split!r}; the splits with questions: {found} "
                         f"(split=None: all; the releases' names dev/valid/validation mean val)")

    def _samples_of(self, planned: list[tuple[QAItem, int, list[int], int]]) -> list[QASample]:
        """The samples of (question, question row, answer rows, context row), in that order."""
        raise NotImplementedError

    def _check_left(self) -> None:
        split = f"split {self.split!r}" if self.split is not None else "all splits"
        check_left(f"{self.path}: {type(self).__name__} ({split})", len({smp.qid for smp in self.samples}),
                   self.dropped, "questions")

    # ---- reading (any process) ----

    def _open(self) -> Store:
        if self._store is None or self._pid != os.getpid():  # a forked worker opens its own
            self._store, self._pid = open_store(self.path, whole_array_bytes=READ_WHOLE_BYTES), os.getpid()
            self._cache = OrderedDict()
            self._view_store = (Store(self.view, part_cache_bytes=self.view_cache_bytes,
                                      whole_array_bytes=READ_WHOLE_BYTES) if self.view else None)
        return self._store

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_store=None, _pid=-1, _cache=OrderedDict(), _view_store=None)
        return state

    def __len__(self) -> int:
        return len(self.samples)

    def _video(self, item: str) -> dict[str, Any]:
        """Aligned modalities of one item, kept for the next questions of the same item (LRU); nothing to
        align (and no store read) for a text-only dataset."""
        if not self.modalities:
            return {"ref_intervals": _NO_STEPS, "modalities": {}}
        if item in self._cache:
            self._cache.move_to_end(item)
            return self._cache[item]
        self._open()
        out: dict[str, Any] = {"modalities": {}}
        if self._view_store is not None:
            out["modalities"] = {f: self._viewed(f, item) for f in self.modalities}
            ref = self._view_store.arrays(self.modalities[0], item, [INTERVALS])[0]
            out["ref_intervals"] = torch.from_numpy(np.array(ref, np.float64))
        else:
            a = align(self._open(), item, self.modalities, to=self.to, how=self.how)
            out["ref_intervals"] = torch.from_numpy(a.ref_intervals)
            for f in self.modalities:
                valid = np.isfinite(a.values[f])
                x = np.where(valid, a.values[f], np.float32(self.fill_value)).astype(np.float32, copy=False)
                out["modalities"][f] = {"x": torch.from_numpy(x), "mask": torch.from_numpy(a.masks[f]),
                                        "valid": torch.from_numpy(valid)}
        if self.cache_items > 0:
            self._cache[item] = out
            while len(self._cache) > self.cache_items:
                self._cache.popitem(last=False)
        return out

    def _viewed(self, feature: str, item: str) -> dict[str, torch.Tensor]:
        """One modality of an item from the view: stored filled (0.0) with its `valid` mask, so a read is
        copies of slices of the part in memory (copies: a sample never aliases the reader's cache)."""
        assert self._view_store is not None
        x, valid, mask = self._view_store.arrays(feature, item, [FEATURES, "valid", "mask"])
        x, valid, mask = np.array(x, np.float32), np.array(valid, bool), np.array(mask, bool)
        if self.fill_value != 0.0:
            x[~valid] = np.float32(self.fill_value)
        return {"x": torch.from_numpy(x), "mask": torch.from_numpy(mask), "valid": torch.from_numpy(valid)}

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self._batch([i])[0]

    def extend(self, sample: dict[str, Any], smp: QASample) -> dict[str, Any]:
        """The hook for a subclass that adds to (or changes) a sample: both the single path (`__getitem__`) and
        the batched one (`__getitems__`, what a DataLoader with `batch_size` calls) hand it every sample, with
        its `QASample` (qid, item, rows, label). Returns the sample."""
        return sample

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """A batch of samples (what a DataLoader with automatic batching asks for): the question, answer and
        context rows of every sample gathered in one read per part touched, instead of one read per sample.
        A subclass that overrides `__getitem__` (and not this) gets its `__getitem__` called per sample, so a
        DataLoader's batches hold what its single samples hold; `extend` keeps the batched reads."""
        if type(self).__getitem__ is not _SocialIQ.__getitem__ and type(self).__getitems__ is _SocialIQ.__getitems__:
            return [self[i] for i in indices]
        return self._batch(indices)

    def _batch(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Samples `indices`, their text rows gathered in one `Store.rows` call per array (the store's one
        read path: one `take` from a slab, or a gather per part)."""
        smps = [self.samples[i] for i in indices]
        rows = [(smp.question_row, *smp.answer_rows, *([smp.context_row] if smp.context_row >= 0 else []))
                for smp in smps]
        picks = [(smp.item, r) for smp, rs in zip(smps, rows, strict=True) for r in rs]
        s = self._open()
        if self.text == "pooled":
            x = np.asarray(s.rows(self.qa_feature, "features", picks), np.float32)[:, None, :]
            m = np.ones(x.shape[:2], bool)
        else:
            x = np.asarray(s.rows(self.qa_feature, "tokens", picks), np.float32)
            m = np.asarray(s.rows(self.qa_feature, "token_mask", picks), bool)
        xt, mt = torch.from_numpy(x), torch.from_numpy(m)
        out, k = [], 0
        for smp, rs in zip(smps, rows, strict=True):
            n = 1 + len(smp.answer_rows)
            sample = {"qid": smp.qid, "item": smp.item, "question": xt[k], "question_mask": mt[k],
                      **self._video(smp.item)}
            sample.update(self._answers(xt[k + 1:k + n], mt[k + 1:k + n], smp.label))
            if len(rs) > n:
                sample.update(context=xt[k + n], context_mask=mt[k + n])
            out.append(self.extend(sample, smp))
            k += len(rs)
        return out

    def _answers(self, x: torch.Tensor, m: torch.Tensor, label: int) -> dict[str, torch.Tensor]:
        raise NotImplementedError


class SocialIQA2(_SocialIQ):
    """Binary: (question, one answer) -> 1.0 when the answer is correct, 0.0 when not."""

    task = "A2"

    def _samples_of(self, planned: list[tuple[QAItem, int, list[int], int]]) -> list[QASample]:
        return [QASample(q.qid, q.item_id, q_row, (a_rows[a],), int(q.correct[a]), context_row)
                for q, q_row, a_rows, context_row in planned for a in range(len(q.answers))]

    def _answers(self, x: torch.Tensor, m: torch.Tensor, label: int) -> dict[str, torch.Tensor]:
        return {"answer": x[0], "answer_mask": m[0], "label": torch.tensor(float(label))}


class SocialIQA4(_SocialIQ):
    """Four-way: question with one correct and three incorrect answers -> index of the correct one."""

    task = "A4"
    n_answers = 4

    def __init__(self, store: str | Path, *args: Any, **kwargs: Any) -> None:
        self._too_few: Counter[int] = Counter()  # answer counts of the questions left out for having too few
        super().__init__(store, *args, **kwargs)

    def _check_left(self) -> None:
        if not self.samples and self._too_few:  # the task does not fit the dataset: say which one does
            found = ", ".join(f"{n} questions with {k} answers" for k, n in sorted(self._too_few.items()))
            hint = "; use SocialIQA3, the three-way task" if max(self._too_few) >= 3 else ""
            raise ValueError(f"{self.path}: {self.task} needs questions with 1 correct and {self.n_answers - 1} "
                             f"incorrect answers; this store has none ({found}){hint}")
        super()._check_left()

    def _extra(self) -> dict[str, Any]:
        return {"too_few": {str(k): v for k, v in self._too_few.items()}}

    def _restore(self, extra: dict[str, Any]) -> None:
        self._too_few.update({int(k): v for k, v in extra.get("too_few", {}).items()})

    def _samples_of(self, planned: list[tuple[QAItem, int, list[int], int]]) -> list[QASample]:
        choices = a4_choices([p[0].qid for p in planned], [p[0].correct for p in planned], self.seed, self.n_answers)
        out = []
        for (q, q_row, a_rows, context_row), choice in zip(planned, choices, strict=True):
            if choice is None:
                self.dropped[f"fewer than 1 correct and {self.n_answers - 1} incorrect answers"] += 1
                self._too_few[len(q.answers)] += 1
                continue
            answers, label = choice
            out.append(QASample(q.qid, q.item_id, q_row, tuple(a_rows[a] for a in answers), label, context_row))
        return out

    def _answers(self, x: torch.Tensor, m: torch.Tensor, label: int) -> dict[str, torch.Tensor]:
        return {"answers": x, "answers_mask": m, "label": torch.tensor(label, dtype=torch.long)}


class SocialIQA3(SocialIQA4):
    """Three-way (SocialIQA's multiple choice): one correct and two incorrect answers -> index of the correct one."""

    task = "A3"
    n_answers = 3


def _pad(seqs: list[torch.Tensor], value: float | bool) -> torch.Tensor:
    """pad_sequence(batch_first=True), written out in numpy: one zeroed buffer (calloc: its zeros cost
    nothing), each sample copied once, the padding filled only when `value` is not zero. numpy copies on
    one thread: torch's copies here ran on its intra-op threads, which on a busy 2-core machine were 6x
    slower than one thread (a Social-IQ batch of 32: 0.9 s instead of 0.14 s; pad_sequence likewise)."""
    longest = max((len(x) for x in seqs), default=0)
    first = seqs[0].numpy()
    out = np.zeros((len(seqs), longest, *first.shape[1:]), dtype=first.dtype)
    for i, x in enumerate(seqs):
        out[i, :len(x)] = x.numpy()
        if value:
            out[i, len(x):] = value
    return torch.from_numpy(out)


def collate_qa(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack a batch (its keys: docs/reading.md, "Batches"); reference steps padded to the longest item with
    mask/valid False in the padding. Every other key is kept too: tensors stacked, anything else as a list; a
    key that only some samples have is an error (never dropped in silence)."""
    keys = list(dict.fromkeys(k for b in batch for k in b))
    for key in keys:
        lacking = [b.get("qid", "?") for b in batch if key not in b]
        if lacking:
            raise ValueError(f"collate_qa: {key!r} is in some samples of the batch but not in {lacking[:3]}")
    out: dict[str, Any] = {}
    for key in keys:
        values = [b[key] for b in batch]
        if key == "modalities":
            out[key] = {name: {k: _pad([v[name][k] for v in values], False if k != "x" else 0.0)
                               for k in ("x", "mask", "valid")} for name in values[0]}
        elif key == "ref_intervals":
            out["lengths"] = torch.tensor([len(v) for v in values], dtype=torch.long)
            out[key] = _pad(values, 0.0)
        elif isinstance(values[0], torch.Tensor):
            out[key] = torch.stack(values)
        else:
            out[key] = values
    return out


@dataclass(frozen=True)
class ReactionSample:
    """One Socratis reaction's plan: the pair (item) and the reaction's row in the reactions feature."""

    item: str
    row: int


class SocratisReactions(Dataset):
    """Socratis: one sample per reaction (docs/datasets.md): item; image[name] = {x (D,), valid (D,)} per
    still-image feature (a NaN value, e.g. faces' with no face, reads `fill_value`, valid False); caption and
    reaction (T, D) + masks, or (1, D) pooled; emotion, reason, worker. Items missing a feature are `dropped`."""

    def __init__(self, store: str | Path, image_features: Sequence[str] = ("frames", "faces"),
                 caption_feature: str = "caption", reactions_feature: str = "reactions", text: Text = "tokens",
                 fill_value: float = 0.0) -> None:
        if text not in ("tokens", "pooled"):
            raise ValueError(f"text must be 'tokens' or 'pooled', got {text!r}")
        self.path, self.image_features, self.text = location(store), tuple(image_features), text
        self.caption_feature, self.reactions_feature, self.fill_value = caption_feature, reactions_feature, fill_value
        s = open_store(self.path)
        needed = [*self.image_features, caption_feature, reactions_feature]
        everywhere = set.intersection(*(set(s.items(f, include_filtered=True)) for f in needed))
        media = [m.id for m in s.media_items()]
        missing = len(set(media) - everywhere)
        self.dropped: Counter[str] = Counter({"item missing or failed in a feature": missing} if missing else {})
        self.samples = [ReactionSample(item, row) for item in sorted(everywhere)
                        for row in range(s.read(reactions_feature, item).features.shape[0])]
        check_left(f"{self.path}: SocratisReactions", len(everywhere), self.dropped, "items")
        self._store: Store | None = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None, "_pid": -1}

    def _open(self) -> Store:
        if self._store is None or self._pid != os.getpid():  # a forked worker opens its own
            self._store, self._pid = open_store(self.path), os.getpid()
        return self._store

    def __len__(self) -> int:
        return len(self.samples)

    def _text(self, feature: str, item: str, row: int) -> tuple[torch.Tensor, torch.Tensor, ItemFeature]:
        r = self._open().read(feature, item)
        if self.text == "pooled":
            x = np.asarray(r.features[row : row + 1], np.float32)
            return torch.from_numpy(x), torch.ones(1, dtype=torch.bool), r
        x = np.asarray(r.extras["tokens"][row], np.float32)
        return torch.from_numpy(x), torch.from_numpy(np.asarray(r.extras["token_mask"][row], bool)), r

    def __getitem__(self, i: int) -> dict[str, Any]:
        smp = self.samples[i]
        image = {}
        for f in self.image_features:
            x = np.asarray(self._open().read(f, smp.item).features[0], np.float32)
            valid = np.isfinite(x)
            image[f] = {"x": torch.from_numpy(np.where(valid, x, self.fill_value).astype(np.float32)),
                        "valid": torch.from_numpy(valid)}
        caption, caption_mask, _ = self._text(self.caption_feature, smp.item, 0)
        reaction, reaction_mask, r = self._text(self.reactions_feature, smp.item, smp.row)
        return {"item": smp.item, "image": image, "caption": caption, "caption_mask": caption_mask,
                "reaction": reaction, "reaction_mask": reaction_mask, "emotion": str(r.extras["emotion"][smp.row]),
                "reason": str(r.extras["reason"][smp.row]), "worker": int(r.extras["worker"][smp.row])}


def collate_reactions(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack a batch of `SocratisReactions` samples; item, emotion, reason stay lists of strings."""
    out: dict[str, Any] = {k: [b[k] for b in batch] for k in ("item", "emotion", "reason")}
    out["worker"] = torch.tensor([b["worker"] for b in batch], dtype=torch.long)
    for key in ("caption", "caption_mask", "reaction", "reaction_mask"):
        out[key] = torch.stack([b[key] for b in batch])
    out["image"] = {f: {k: torch.stack([b["image"][f][k] for b in batch]) for k in ("x", "valid")}
                    for f in batch[0]["image"]}
    return out
