"""Texts an item carries itself (Socratis): its caption, and its reactions (one text per emotion and reason),
decoded to `Texts` (pipeline/inputs.py); counted in texts. Their identity is the item's own texts, not the whole
annotations file they come from, so an edit of another pair recomputes nothing here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from extractors.base import Texts
from manifests.records import MediaItem, QAItem
from pipeline import inputs
from pipeline.config import RunConfig
from pipeline.kinds.base import Kind, Span
from store import layout


class ItemTexts(Kind):
    unit = "texts"

    def __init__(self, name: str, decode: Callable[[MediaItem], Texts], made_from: Callable[[MediaItem], object]):
        self.name, self._decode, self._made_from = name, decode, made_from  # type: ignore[misc]

    def source(self, item: MediaItem) -> Path | None:
        return item.annotations

    def identity(self, item: MediaItem, questions: list[QAItem], config: RunConfig) -> dict[str, Any]:
        return {"path": str(item.annotations), self.name: layout.sha256_of(self._made_from(item))}

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Texts:
        return self._decode(item)


CAPTION = ItemTexts("caption", inputs.caption_texts, lambda item: item.caption)
REACTIONS = ItemTexts("reactions", inputs.reaction_texts,
                      lambda item: [r.model_dump(mode="json", include={"emotions", "reasons"}) for r in item.reactions])
