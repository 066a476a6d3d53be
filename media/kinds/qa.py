"""QA: the questions of an item (a video's, or a text-only SocialIQA entry's) with their answers, from the
manifest (`qa_text`); no file of its own. Counted in questions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extractors.base import QAText
from manifests.records import MediaItem, QAItem
from media.container import InputError
from media.kinds.base import Kind, Span, Tracks
from rows.identity import sha256_of


class Questions(Kind):
    name = "qa"
    unit = "questions"

    def source(self, item: MediaItem) -> Path | None:
        return None

    def applicable(self, item: MediaItem, questions: list[QAItem]) -> bool:
        return bool(questions)

    def identity(self, item: MediaItem, questions: list[QAItem], audio_rate_hz: int,
                 tracks: Tracks | None = None) -> dict[str, Any]:
        # the records themselves, but not the split: moving a question between splits changes no embedding
        return {"qa": sha256_of([q.model_dump(mode="json", exclude={"split"}) for q in questions])}

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> QAText:
        return qa_text(questions)


def qa_text(questions: list[QAItem]) -> QAText:
    if not questions:
        raise InputError("no questions for this item")
    return QAText(
        qids=tuple(q.qid for q in questions),
        questions=tuple(q.question for q in questions),
        answers=tuple(q.answers for q in questions),
        correct=tuple(q.correct for q in questions),
        context=questions[0].context,
        ts=tuple(q.ts for q in questions),
    )


QA = Questions()
