"""Dataset name + raw root → manifest records, by layout."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from manifests import limits
from manifests.records import SPLIT_NAMES, ManifestNote, MediaItem, QAItem
from manifests.socialiq import is_siq2, read_siq1, read_siq2
from pipeline.config import RunConfig


def detect_layout(raw: Path) -> str:
    if (raw / "clips.csv").is_file():  # TinySocial: checked first, its qa/ and video/ look like Social-IQ's
        return "tinysocial"
    if is_siq2(raw):
        return "siq2"
    if (raw / "qa").is_dir() or (raw / "raw" / "qa").is_dir():
        return "siq1"
    # SocialIQA's zip unpacks to socialiqa-train-dev/: its .jsonl files may sit one folder down
    if any(raw.glob("*.jsonl")) or any(p.name in ("train.jsonl", "dev.jsonl", "test.jsonl") for p in raw.glob("*/*.jsonl")):
        return "socialiqa"
    if (raw / "imCaptionEmotionExplanation_formatted.json").is_file():
        return "socratis"
    raise FileNotFoundError(f"{raw}: no known dataset layout (Social-IQ 2.0, Social-IQ 1.0 or SocialIQA, "
                            "here or, for SocialIQA, one folder down)")


def load_items(dataset: str, raw: Path, config: RunConfig) -> tuple[list[MediaItem], list[QAItem], list[ManifestNote]]:
    """Items, questions, and what the layout held that did not become a record as it was (see ManifestNote)."""
    with limits.applied(config.limits):
        return _load_items(dataset, raw, config)


def _load_items(dataset: str, raw: Path, config: RunConfig) -> tuple[list[MediaItem], list[QAItem], list[ManifestNote]]:
    if not raw.exists():
        raise FileNotFoundError(f"raw data root {raw} does not exist")
    kind = detect_layout(raw) if config.layout == "auto" else config.layout
    notes: list[ManifestNote] = []
    if kind == "siq2":
        return (*read_siq2(raw, dataset=dataset, notes=notes), notes)
    if kind == "siq1":
        return (*read_siq1(raw, folds=config.folds, dataset=dataset, notes=notes), notes)
    if kind == "socratis":
        from manifests.socratis import read_socratis

        return read_socratis(raw, dataset=dataset, notes=notes), [], notes
    if kind == "tinysocial":
        from manifests.tinysocial import read_tinysocial

        return (*read_tinysocial(raw, dataset=dataset, notes=notes), notes)
    from manifests.socialiqa import read_socialiqa

    return (*read_socialiqa(raw, dataset=dataset), notes)


def choose_items(items: list[MediaItem], split: str | None, limit: int | None, raw: Path) -> list[MediaItem]:
    """The items of `split` (if given), then the first `limit` of them, in the order the manifest lists them."""
    if split is not None:
        name = SPLIT_NAMES.get(split.lower(), split)
        chosen = [i for i in items if i.split == name]
        if not chosen:
            have = Counter(i.split for i in items)
            raise ValueError(f"{raw}: no items in split {split!r}; the splits here: "
                             + (", ".join(f"{k} ({n} items)" for k, n in sorted(have.items())) or "none"))
        items = chosen
    return items[:limit] if limit else items


def manifest_summary(notes: list[dict], shown: int = 8) -> list[str]:
    """Run-summary lines for the manifest's notes (the full list is in _runs/<run id>.json under "manifest").
    Dropped inputs get one line each; notes one line per reason with a count and the first ids; failed
    items are already FAILED lines (stage "manifest") and are only counted here."""
    if not notes:
        return []
    kinds = {k: sum(n["kind"] == k for n in notes) for k in ("failed", "dropped", "note")}
    lines = [f"  manifest: {kinds['failed']} item(s) failed on their metadata, {kinds['dropped']} input(s) "
             f"dropped, {kinds['note']} kept with a note"]
    for n in notes:
        if n["kind"] == "dropped":
            detail = f" ({n['detail']})" if n["detail"] else ""
            lines.append(f"  DROPPED {n['what']} {n['id']!r} {n['file'] or ''}: {n['reason']}{detail}")
    groups: dict[tuple[str, str], list[str]] = {}
    for n in notes:
        if n["kind"] == "note":
            groups.setdefault((n["what"], n["reason"]), []).append(n["id"])
    for (what, reason), ids in groups.items():
        more = f" … and {len(ids) - shown} more (listed in _runs/)" if len(ids) > shown else ""
        lines.append(f"  note: {len(ids)} {what}(s): {reason}: {', '.join(ids[:shown])}{more}")
    return lines
