"""QA: the questions of an item (a video's, or a text-only SocialIQA entry's) with their answers, from the
manifest (pipeline/decode.py `qa_text`); no file of its own. Counted in questions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extractors.base import QAText
from manifests.records import MediaItem, QAItem
from pipeline import decode
from pipeline.config import RunConfig
from pipeline.kinds.base import Kind, Span
from store import layout


class Questions(Kind):
    name = "qa"
    unit = "questions"

    def source(self, item: MediaItem) -> Path | None:
        return None

    def applicable(self, item: MediaItem, questions: list[QAItem]) -> bool:
        return bool(questions)

    def identity(self, item: MediaItem, questions: list[QAItem], config: RunConfig) -> dict[str, Any]:
        # the records themselves, but not the split: moving a question between splits changes no embedding
        return {"qa": layout.sha256_of([q.model_dump(mode="json", exclude={"split"}) for q in questions])}

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> QAText:
        return decode.qa_text(questions)


QA = Questions()
