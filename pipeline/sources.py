"""Dataset name + raw root → manifest records, by layout."""

from __future__ import annotations

from pathlib import Path

from manifests.records import MediaItem, QAItem
from manifests.socialiq import is_siq2, read_siq1, read_siq2
from pipeline.config import RunConfig


def detect_layout(raw: Path) -> str:
    if (raw / "clips.csv").is_file():  # TinySocial: checked first, its qa/ and video/ look like Social-IQ's
        return "tinysocial"
    if is_siq2(raw):
        return "siq2"
    if (raw / "qa").is_dir() or (raw / "raw" / "qa").is_dir():
        return "siq1"
    if any(raw.glob("*.jsonl")):
        return "socialiqa"
    if (raw / "imCaptionEmotionExplanation_formatted.json").is_file():
        return "socratis"
    raise FileNotFoundError(f"{raw}: no known dataset layout (Social-IQ 2.0, Social-IQ 1.0 or SocialIQA)")


def load_items(dataset: str, raw: Path, config: RunConfig) -> tuple[list[MediaItem], list[QAItem]]:
    if not raw.exists():
        raise FileNotFoundError(f"raw data root {raw} does not exist")
    kind = detect_layout(raw) if config.layout == "auto" else config.layout
    if kind == "siq2":
        return read_siq2(raw, dataset=dataset)
    if kind == "siq1":
        return read_siq1(raw, folds=config.folds, dataset=dataset)
    if kind == "socratis":
        from manifests.socratis import read_socratis

        return read_socratis(raw, dataset=dataset), []
    if kind == "tinysocial":
        from manifests.tinysocial import read_tinysocial

        return read_tinysocial(raw, dataset=dataset)
    from manifests.socialiqa import read_socialiqa

    return read_socialiqa(raw, dataset=dataset)
