"""What makes two QA rows the same question, and unique stored qids when a release reuses its qids.

Social-IQ 2.0 as published repeats itself: `qa_test.json` asks again, unlabelled and with the answers
shuffled or one of them changed, 872 questions that `qa_train.json`/`qa_val.json` hold with labels,
under the same qid; and 26 qids name two different questions of one video in one split. The store keeps
one row block per qid and item, so every stored qid must name exactly one question. The rules:

1. A question's identity is (split, qid, video, content), content = the question text, the answers in
   order and `ts`. The split is part of it: a test question is what the test file asks, even where a
   train question reads the same, so it stays a test question.
2. Rows with the same identity are one question: the copies collapse into the first labelled one (a
   labelled copy is never replaced by an unlabelled one; a copy with other labels is dropped and listed).
3. Identities that share a published qid are all kept. The first, in the order labelled before
   unlabelled, then train, val, test, unknown, then file order, keeps the qid; each other one is stored
   as `<qid>.<split>` when its split differs from the first's, with `.<n>` added for the n-th (n >= 2)
   different question under that qid in one split (`X_q2_0.2`, `X_q5_0.test`, `X_q5_0.test.2`). The
   published qid is the stored one up to the first added `.`; every renaming is listed in the run report.
"""

from __future__ import annotations

from collections import defaultdict

from manifests.records import ManifestNote, QAItem

_SPLIT_ORDER = {"train": 0, "val": 1, "test": 2, "unknown": 3}


def _identity(q: QAItem) -> tuple:
    return q.split, q.qid, q.item_id, q.question, q.answers, q.ts


def unique_questions(rows: list[tuple[QAItem, str]]) -> tuple[list[QAItem], list[ManifestNote]]:
    """Rows (question, "file:line") in reading order -> one record per question with a unique qid, and notes."""
    notes: list[ManifestNote] = []
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, (q, _) in enumerate(rows):
        groups[_identity(q)].append(i)
    kept: dict[int, tuple] = {}  # row index -> identity
    for ident, idx in groups.items():
        labelled = [i for i in idx if rows[i][0].correct]
        first = labelled[0] if labelled else idx[0]
        kept[first] = ident
        for i in idx:
            if i == first:
                continue
            q, where = rows[i]
            why = ("unlabelled copy of a labelled question" if not q.correct and rows[first][0].correct
                   else "identical duplicate" if q.correct == rows[first][0].correct
                   else "same question with other labels")
            notes.append(ManifestNote(kind="dropped", what="question", id=q.qid, file=where, reason=why,
                                      detail=f"kept {rows[first][1]}"))
    by_qid: dict[str, list[int]] = defaultdict(list)
    for i in sorted(kept, key=lambda i: (not rows[i][0].correct, _SPLIT_ORDER[rows[i][0].split], i)):
        by_qid[rows[i][0].qid].append(i)
    taken = set(by_qid)
    new_qid: dict[int, str] = {}
    for qid, idx in by_qid.items():
        first_split = rows[idx[0]][0].split
        rank: dict[str, int] = defaultdict(int)
        for n, i in enumerate(idx):
            q, where = rows[i]
            rank[q.split] += 1
            if n == 0:
                continue
            key = qid + (f".{q.split}" if q.split != first_split else "") + (f".{rank[q.split]}" if rank[q.split] > 1 else "")
            while key in taken:  # a published qid already reads like this: add until free
                key += ".x"
            taken.add(key)
            new_qid[i] = key
            other = "the same question in " + rows[idx[0]][0].split if _same_text(q, rows[idx[0]][0]) else "another question"
            notes.append(ManifestNote(kind="note", what="question", id=qid, file=where,
                                      reason="qid also names another question: stored under a new qid",
                                      detail=f"stored as {key}; {qid} is {other} at {rows[idx[0]][1]}"))
    out = [rows[i][0].model_copy(update={"qid": new_qid[i]}) if i in new_qid else rows[i][0] for i in sorted(kept)]
    return out, notes


def _same_text(a: QAItem, b: QAItem) -> bool:
    return a.item_id == b.item_id and a.question == b.question
