"""Dataset name + raw root → manifest records, by layout."""

from __future__ import annotations

from pathlib import Path

from manifests.records import ManifestNote, MediaItem, QAItem
from manifests.socialiq import is_siq2, read_siq1, read_siq2
from pipeline.config import RunConfig


def detect_layout(raw: Path) -> str:
    if is_siq2(raw):
        return "siq2"
    if (raw / "qa").is_dir() or (raw / "raw" / "qa").is_dir():
        return "siq1"
    # SocialIQA's zip unpacks to socialiqa-train-dev/: its .jsonl files may sit one folder down
    if any(raw.glob("*.jsonl")) or any(p.name in ("train.jsonl", "dev.jsonl", "test.jsonl") for p in raw.glob("*/*.jsonl")):
        return "socialiqa"
    raise FileNotFoundError(f"{raw}: no known dataset layout (Social-IQ 2.0, Social-IQ 1.0 or SocialIQA, "
                            "here or, for SocialIQA, one folder down)")


def load_items(dataset: str, raw: Path, config: RunConfig) -> tuple[list[MediaItem], list[QAItem], list[ManifestNote]]:
    """Items, questions, and what the layout held that did not become a record as it was (see ManifestNote)."""
    if not raw.exists():
        raise FileNotFoundError(f"raw data root {raw} does not exist")
    kind = detect_layout(raw) if config.layout == "auto" else config.layout
    notes: list[ManifestNote] = []
    if kind == "siq2":
        return (*read_siq2(raw, dataset=dataset, notes=notes), notes)
    if kind == "siq1":
        return (*read_siq1(raw, folds=config.folds, dataset=dataset, notes=notes), notes)
    from manifests.socialiqa import read_socialiqa

    return (*read_socialiqa(raw, dataset=dataset), notes)


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
