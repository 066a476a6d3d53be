"""Dataset name + raw root → manifest records, by layout (manifests/layouts.py: each manifest module registers the
layouts it reads)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from manifests import limits
from manifests.layouts import get_layout, layouts
from manifests.records import SPLIT_NAMES, ManifestNote, MediaItem, QAItem
from pipeline.config import RunConfig


def detect_layout(raw: Path) -> str:
    """The layout of `raw`, from the files each release is known by (each layout's `detect`, in their order); a
    part of a release (its metadata before the videos are downloaded) is that release, so that the run can say
    what is missing."""
    for layout in layouts():
        if layout.detect(raw):
            return layout.name
    if not raw.is_dir():
        raise FileNotFoundError(f"{raw}: not a folder: --raw wants the dataset's root folder")
    found = sorted(p.name + ("/" if p.is_dir() else "") for p in raw.iterdir() if not p.name.startswith("."))
    shown = ", ".join(found[:8]) + (f" and {len(found) - 8} more" if len(found) > 8 else "")
    raise FileNotFoundError(f"{raw}: no known dataset layout; it holds {shown or 'nothing'}. Expected one of: "
                            + "; ".join(f"{layout.title}: {layout.parts}" for layout in layouts()))


def load_items(dataset: str, raw: Path, config: RunConfig) -> tuple[list[MediaItem], list[QAItem], list[ManifestNote]]:
    """Items, questions, and what the layout held that did not become a record as it was (see ManifestNote).
    A layout that yields no item, or whose media are all missing, is a ValueError saying what was found."""
    with limits.applied(config.limits):
        return _load_items(dataset, raw, config)


def _load_items(dataset: str, raw: Path, config: RunConfig) -> tuple[list[MediaItem], list[QAItem], list[ManifestNote]]:
    if not raw.exists():
        raise FileNotFoundError(f"raw data root {raw} does not exist")
    kind = detect_layout(raw) if config.layout == "auto" else config.layout
    items, qa, notes = _read(kind, dataset, raw, config)
    check_found(kind, raw, items, qa)
    return items, qa, notes


def _read(kind: str, dataset: str, raw: Path,
          config: RunConfig) -> tuple[list[MediaItem], list[QAItem], list[ManifestNote]]:
    notes: list[ManifestNote] = []
    return (*get_layout(kind).read(raw, dataset, config, notes), notes)


def check_found(kind: str, raw: Path, items: list[MediaItem], qa: list[QAItem]) -> None:
    """A release that yields nothing to extract is an error, never an empty store: no item at all, or a
    layout of videos or images none of which is on disk (the metadata downloaded, the media not yet). Some
    media missing is not: those items fail one by one, in the summary."""
    layout = get_layout(kind)
    what = f"{len(qa):,} questions" if qa else "no questions"
    if not items:
        raise ValueError(f"{raw}: {layout.title} layout, but no items in it ({what}): nothing to extract")
    if layout.media_dir is None:  # text only
        return
    media = [p for i in items for p in (i.video, i.image) if p is not None]
    if not any(p.is_file() for p in media):
        where = layout.media_dir(raw)
        shown = where.relative_to(raw) if where.is_relative_to(raw) else where
        raise ValueError(f"{raw}: {layout.title} metadata found ({what}, {len(items):,} items), no "
                         f"{layout.media_noun} under {shown}: download them first")


def choose_items(items: list[MediaItem], split: str | None, limit: int | None, raw: Path) -> list[MediaItem]:
    """The items of `split` (if given), then the first `limit` of them, in the order the manifest lists them."""
    if limit is not None and limit < 1:  # [:0] would run nothing, [:-1] all but the last
        raise ValueError(f"--limit {limit}: wants a number of items, at least 1")
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
    repeated = sum(bool(n.get("repeated")) for n in notes)
    if repeated == len(notes):  # the previous run said all this: one line, no repeat of the same notes
        return [f"  manifest: {kinds['dropped']} input(s) dropped, {kinds['note']} kept with a note, as the "
                "previous run said (listed in _runs/)"]
    lines = [f"  manifest: {kinds['failed']} item(s) failed on their metadata, {kinds['dropped']} input(s) "
             f"dropped, {kinds['note']} kept with a note" + (f" ({repeated} as the previous run said, not repeated "
                                                             "here)" if repeated else "")]
    notes = [n for n in notes if not n.get("repeated")]
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
