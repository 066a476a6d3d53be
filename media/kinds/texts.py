"""Texts an item carries itself (Socratis): its caption, and its reactions (one text per emotion and reason),
decoded to `Texts` (media/inputs.py); counted in texts. Their identity is the item's own texts, not the whole
annotations file they come from, so an edit of another pair recomputes nothing here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extractors.base import Texts
from manifests.records import MediaItem, QAItem
from media import inputs
from media.kinds.base import Kind, Span, Tracks
from rows.identity import sha256_of


class ItemTexts(Kind):
    unit = "texts"

    def made_from(self, item: MediaItem) -> object:
        """What the texts are made from (the fingerprint hashes it)."""
        raise NotImplementedError

    def source(self, item: MediaItem) -> Path | None:
        return item.annotations

    def identity(self, item: MediaItem, questions: list[QAItem], audio_rate_hz: int,
                 tracks: Tracks | None = None) -> dict[str, Any]:
        return {"path": str(item.annotations), self.name: sha256_of(self.made_from(item))}


class Caption(ItemTexts):
    name = "caption"

    def made_from(self, item: MediaItem) -> object:
        return item.caption

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Texts:
        return inputs.caption_texts(item)


class Reactions(ItemTexts):
    name = "reactions"

    def made_from(self, item: MediaItem) -> object:
        return [r.model_dump(mode="json", include={"emotions", "reasons"}) for r in item.reactions]

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Texts:
        return inputs.reaction_texts(item)


CAPTION, REACTIONS = Caption(), Reactions()
