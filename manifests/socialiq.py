"""Social-IQ layouts → MediaItem / QAItem records. Nothing here opens media.

2.0 (challenge release), under RAW or RAW/siq2:
    video/<vid>.mp4, audio/wav/<vid>.wav, transcript/<vid>.vtt,
    qa/qa_{train,val,test}.json  (JSON Lines: qid, q, vid_name, ts "0.00-60.06", a0..a3, answer_idx, …),
    trims.json (clip start second in the source video), current_split.json as download_all.py writes it,
    else original_split.json as shipped: {"subsets": {"youtubeclips"|"movieclips"|"car": {split: [ids]}}}
    (a flat {split: [ids]} is read too). An item's split and subset come from that file (first listing of
    a video listed twice), else from its questions; a question's split is its QA file's.
    Question identity and unique qids: manifests/questions.py.
1.0, under RAW (or RAW/raw):
    vision/raw/<vid>_trimmed-out.mp4, qa/<vid>_trimmed.txt with lines `q<k>: …`, `a…: …` (correct),
    `i…: …` (incorrect); transcript/<vid>_trimmed.vtt when present. Folds: the CMU Multimodal SDK's
    `socialiq_std_folds.py` (or a JSON {"train": [...], "val": [...]}) passed as `folds`.
Nothing is skipped in silence: a malformed QA line skips that question only, a video with an unusable id
is dropped, a bad trims.json value fails that video only, and zero or missing trims are kept as they are;
each is appended to `notes` (ManifestNote), which the run report lists.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
from pathlib import Path
from typing import Any

from manifests import jsonfile
from manifests.layouts import Layout, register_layout
from manifests.limits import InputTooLarge, not_a_file
from manifests.questions import unique_questions
from manifests.records import (
    SPLIT_NAMES,
    ManifestNote,
    MediaItem,
    QAItem,
    check_id,
    note_dropped,
    note_empty_qa_file,
    qa_file_rows,
)

log = logging.getLogger(__name__)
CLIP_S = 60.0
_SPLITS = {k: v for k, v in SPLIT_NAMES.items() if k != "unknown"}
SPLIT_FILES = ("current_split.json", "original_split.json")


def is_siq2(raw: Path) -> bool:
    return siq2_root(raw) is not None


def siq2_root(raw: Path) -> Path | None:
    """RAW or RAW/siq2, whichever holds a part of the 2.0 release: its QA files, trims.json or a split file
    (the metadata a user has before the videos are downloaded), or qa/ beside video/."""
    for cand in (raw, raw / "siq2"):
        if (any((cand / "qa").glob("qa_*.json")) or (cand / "trims.json").is_file()
                or any((cand / f).is_file() for f in SPLIT_FILES)
                or ((cand / "qa").is_dir() and (cand / "video").is_dir())):
            return cand
    return None


def _first_existing(*paths: Path) -> Path | None:
    return next((p for p in paths if p.exists()), None)


def _parse_trim(value: Any) -> float:
    """trims.json values: a start second, [start, end], or "start-end". Anything else is a ValueError."""
    start = value[0] if isinstance(value, list | tuple) and value else value
    if isinstance(start, str):
        start = start.strip().split("-")[0] if not start.strip().startswith("-") else start
    try:
        if isinstance(start, bool):
            raise TypeError
        out = float(start)
    except (TypeError, ValueError):
        out = math.nan
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"trim {value!r} is not a start time (seconds >= 0, [start, end] or \"start-end\")")
    return out


def _parse_ts(ts: str) -> tuple[float, float]:
    start, end = (float(x) for x in ts.split("-"))
    if end < start:
        raise ValueError(f"ts {ts!r} ends before it starts")
    return start, end


def _read_json(path: Path) -> Any:
    try:
        return jsonfile.loads(jsonfile.read_json_text(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, InputTooLarge) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from e


def _split_listings(path: Path, notes: list[ManifestNote]) -> dict[str, tuple[str, str | None]]:
    """vid -> (split, subset) from a split file: nested {"subsets": {subset: {split: [ids]}}} as Social-IQ 2.0
    ships it (original_split.json; the download script writes current_split.json the same way), or flat
    {split: [ids]}. A video listed twice keeps its first listing (file order); the others are noted."""
    data = _read_json(path)
    data = data.get("subsets", data) if isinstance(data, dict) else data
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected {{\"subsets\": {{subset: {{split: [ids]}}}}}} or {{split: [ids]}}")
    nested = {sub: v for sub, v in data.items() if isinstance(v, dict)}
    flat = {None: {k: v for k, v in data.items() if not isinstance(v, dict)}}
    out: dict[str, tuple[str, str | None]] = {}
    for subset, splits in [*nested.items(), *flat.items()]:
        for name, vids in splits.items():
            split = _SPLITS.get(str(name).lower(), "unknown")
            where = f"{subset}/{name}" if subset else str(name)
            if split == "unknown" or not isinstance(vids, list):
                notes.append(ManifestNote(kind="dropped", what="split entry", id=where, file=str(path),
                                          reason="not a split name with a list of video ids",
                                          detail=f"{name!r}: {type(vids).__name__}"))
                continue
            for vid in vids:
                vid = str(vid)
                if vid in out:
                    first = out[vid]
                    notes.append(ManifestNote(
                        kind="note", what="split entry", id=vid, file=str(path),
                        reason="video listed more than once in the split file: its first listing counts",
                        detail=f"{where} ignored; kept {first[1] + '/' if first[1] else ''}{first[0]}"))
                else:
                    out[vid] = (split, subset)
    return out


def _split_map(path: Path | None) -> dict[str, str]:
    """vid -> split (see `_split_listings`)."""
    return {} if path is None else {vid: s for vid, (s, _) in _split_listings(path, []).items()}


def _siq2_question(row: dict[str, Any], split: str, where: str) -> QAItem:
    vid = row["vid_name"]
    answers = tuple(str(row[f"a{i}"]) for i in range(4) if f"a{i}" in row)
    idx = row.get("answer_idx")
    correct = tuple(i == int(idx) for i in range(len(answers))) if idx is not None else ()
    if idx is not None and not 0 <= int(idx) < len(answers):
        raise ValueError(f"answer_idx {idx} out of range for {len(answers)} answers")
    qid = str(row.get("qid") or where)
    qid = qid if re.fullmatch(r"[A-Za-z0-9_.\-]+", qid) else re.sub(r"[^A-Za-z0-9_\-]", "_", qid)
    return QAItem(
        qid=qid, item_id=vid, dataset="socialiq2", split=split, question=str(row["q"]), answers=answers,
        correct=correct, q_type=str(row.get("idx_types")) if row.get("idx_types") is not None else None,
        ts=_parse_ts(row["ts"]) if row.get("ts") else None,
    )


def read_siq2_qa(qa_dir: Path, notes: list[ManifestNote] | None = None) -> list[QAItem]:
    """Every question of qa_*.json, one record each with a unique qid (rules: manifests/questions.py).
    A question's split is its file's (qa_test.json also asks about train and val videos)."""
    notes = [] if notes is None else notes
    rows: list[tuple[QAItem, str]] = []
    for path in sorted(qa_dir.glob("qa_*.json")):
        split = _SPLITS.get(path.stem.removeprefix("qa_").lower(), "unknown")
        if split == "unknown":
            notes.append(ManifestNote(kind="note", what="QA file", id=path.name, file=str(path),
                                      reason="not qa_{train,val,test}.json: its questions get split 'unknown'"))
        found = qa_file_rows(path, notes)
        for r in found or ():
            row: Any = None
            try:
                row = r.parsed()
                rows.append((_siq2_question(row, split, f"{path.stem}-{r.n}"), r.where))
                _check_answers(*rows[-1], notes)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                qid = row.get("qid") if isinstance(row, dict) else None
                note_dropped(notes, "question", str(qid or r.label), r.where, "malformed question",
                             _one_line(e))
    qa, dup_notes = unique_questions(rows)
    notes += dup_notes
    return qa


def _check_answers(q: QAItem, where: str, notes: list[ManifestNote]) -> None:
    """The release has questions whose correct answer's text is also one of the incorrect answers (33 labelled
    ones): kept as published, but A2 then holds contradictory pairs and A4 two identical choices."""
    if not q.correct:
        return
    right = {a for a, c in zip(q.answers, q.correct, strict=True) if c}
    if right & {a for a, c in zip(q.answers, q.correct, strict=True) if not c}:
        notes.append(ManifestNote(kind="note", what="question", id=q.qid, file=where,
                                  reason="the correct answer's text is also given as an incorrect answer",
                                  detail="kept as published: A2 gets the same text labelled 1 and 0, "
                                         "A4 two identical choices"))


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:200]}"


def _read_trims(root: Path, raw: Path, notes: list[ManifestNote]) -> tuple[dict[str, Any], Path | None]:
    path = _first_existing(root / "trims.json", raw / "trims.json")
    if path is None:
        notes.append(ManifestNote(kind="note", what="trims", id="trims.json", reason="no trims.json",
                                  detail="every video is taken as the clip as it is, from 0 s"))
        return {}, None
    trims = _read_json(path)
    if not isinstance(trims, dict):
        raise ValueError(f"{path}: expected {{video id: start second}}, got {type(trims).__name__}")
    return trims, path


def _clip_times(vid: str, trims: dict[str, Any], trims_path: Path | None, has_video: bool,
                notes: list[ManifestNote]) -> tuple[float, float | None]:
    """(clip_start_s, clip_end_s) from trims.json; a bad value raises ValueError. Zero and missing trims
    are noted: download_all.py downloads no video without a trim, and a zero trim may be a placeholder."""
    if trims_path is None:
        return 0.0, None
    if vid not in trims:
        reason = ("no trim entry: its video file is taken as the clip as it is (from 0 s, no trim correction)"
                  if has_video else "no trim entry and no video (download_all.py skips videos without a trim): "
                  "its media features fail as missing files, its questions are kept")
        notes.append(ManifestNote(kind="note", what="trim", id=vid, file=str(trims_path), reason=reason))
        return 0.0, None
    start = _parse_trim(trims[vid])
    if start == 0:
        notes.append(ManifestNote(kind="note", what="trim", id=vid, file=str(trims_path),
                                  reason="trim is 0: the clip is taken as the source's first 60 s (no trim correction)"))
    return start, start + CLIP_S


def read_siq2(raw: Path, dataset: str = "socialiq2",
              notes: list[ManifestNote] | None = None) -> tuple[list[MediaItem], list[QAItem]]:
    """Items (videos on disk and videos the QA files ask about) and questions. What the layout holds but
    does not become a record, or becomes one with a caveat, is appended to `notes` (ManifestNote)."""
    notes = [] if notes is None else notes
    root = siq2_root(raw)
    if root is None:
        raise FileNotFoundError(f"{raw}: no Social-IQ 2.0 layout (expected qa/qa_*.json, trims.json, video/ under "
                                "it or under siq2/)")
    qa = [q.model_copy(update={"dataset": dataset}) for q in read_siq2_qa(root / "qa", notes)]
    trims, trims_path = _read_trims(root, raw, notes)
    split_path = _first_existing(*(d / f for f in SPLIT_FILES for d in (root, raw)))
    listings = _split_listings(split_path, notes) if split_path else {}
    q_split: dict[str, str] = {}
    for q in sorted(qa, key=lambda q: not q.correct):  # a video's labelled questions say its split first
        q_split.setdefault(q.item_id, q.split)
    video_dir = root / "video"  # absent before the videos are downloaded: every item's video is then missing
    files = sorted(p for p in video_dir.iterdir() if p.is_file() and not p.name.startswith(".")) \
        if video_dir.is_dir() else []
    if video_dir.is_dir():
        _not_files(video_dir, set(q_split), notes)
    for p in files:
        if p.suffix != ".mp4":
            notes.append(ManifestNote(kind="dropped", what="video", id=p.name, file=str(p),
                                      reason="not an .mp4 file", detail="ignored"))
    vids = sorted({p.stem for p in files if p.suffix == ".mp4"} | set(q_split))
    items = []
    for vid in vids:
        video = root / "video" / f"{vid}.mp4"
        try:
            check_id(vid)
        except ValueError as e:
            note_dropped(notes, "video", vid, video if video.exists() else root / "qa", "unusable id", str(e))
            continue
        try:
            start, end = _clip_times(vid, trims, trims_path, video.exists(), notes)
            split, subset = listings.get(vid, (q_split.get(vid, "unknown"), None))
            if split_path and vid not in listings:
                notes.append(ManifestNote(kind="note", what="split entry", id=vid, file=str(split_path),
                                          reason="video not in the split file: its split is its questions'",
                                          detail=f"split {split}, no subset"))
            audio = root / "audio" / "wav" / f"{vid}.wav"
            transcript = root / "transcript" / f"{vid}.vtt"
            items.append(MediaItem(
                id=vid, dataset=dataset, split=split, subset=subset, video=video,
                audio=audio if audio.exists() else None, transcript=transcript if transcript.exists() else None,
                clip_start_s=start, clip_end_s=end,
            ))
        except ValueError as e:  # bad metadata for this video: it fails, the others go on
            log.warning("%s: %s: %s", trims_path, vid, e)
            notes.append(ManifestNote(kind="failed", what="video", id=vid, file=str(trims_path), reason="bad trim",
                                      detail=_one_line(e)))
    _orphans(root, {i.id for i in items} | {n.id for n in notes if n.kind == "failed"}, notes)
    return items, qa


def _not_files(folder: Path, asked: set[str], notes: list[ManifestNote]) -> None:
    """Entries of video/ that are no readable file (a symbolic link whose target is gone, a folder): listed,
    never passed over. One whose id has questions still becomes an item (noted: its media fail as a
    missing file); the others are dropped."""
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") or not_a_file(p) is None:
            continue
        reason = not_a_file(p) or "not a regular file"
        detail = f"-> {p.parent / p.readlink()}" if p.is_symlink() else ""
        if p.suffix == ".mp4" and p.stem in asked:
            notes.append(ManifestNote(kind="note", what="video", id=p.name, file=str(p), detail=detail,
                                      reason=f"{reason}; the item is kept for its questions, its media fail"))
        else:
            notes.append(ManifestNote(kind="dropped", what="video", id=p.name, file=str(p), reason=reason,
                                      detail=detail))


def _orphans(root: Path, items: set[str], notes: list[ManifestNote]) -> None:
    """Audio and transcripts that no item takes (no usable video or question of that id) are listed."""
    for what, folder, suffix in (("audio", root / "audio" / "wav", ".wav"), ("transcript", root / "transcript", ".vtt")):
        for p in sorted(folder.glob(f"*{suffix}")) if folder.is_dir() else []:
            if p.stem not in items:
                notes.append(ManifestNote(kind="dropped", what=what, id=p.stem, file=str(p),
                                          reason="no item of that id (no usable video or question)"))


_SIQ1_LINE = re.compile(r"^(q|a|i)(\d*)\s*:\s*(.*\S)\s*$", re.IGNORECASE)


def read_siq1_qa_file(path: Path, vid: str, split: str, dataset: str = "socialiq1",
                      notes: list[ManifestNote] | None = None) -> list[QAItem]:
    """`q<k>:` opens a question; `a…:` lines are correct answers, `i…:` incorrect ones."""
    notes = [] if notes is None else notes
    out: list[QAItem] = []
    current: dict[str, Any] | None = None
    bad: tuple[int, str] | None = None  # the first malformed line of the open question
    notes_before = len(notes)

    def drop(line_no: int, why: str) -> None:
        note_dropped(notes, "question", f"{vid} line {line_no}", f"{path}:{line_no}", "malformed question", why)

    def close() -> None:
        if current is None:
            return
        if bad:
            drop(*bad)
        elif not current["answers"]:
            drop(current["line"], "question without answers")
        else:
            out.append(QAItem(
                qid=f"{vid}_q{len(out)}", item_id=vid, dataset=dataset, split=split, question=current["q"],
                answers=tuple(current["answers"]), correct=tuple(current["correct"]),
            ))

    for line_no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        m = _SIQ1_LINE.match(line.strip())
        kind = m.group(1).lower() if m else None
        if kind == "q":
            close()
            current, bad = {"q": m.group(3), "answers": [], "correct": [], "line": line_no}, None
        elif kind in ("a", "i") and current is not None:
            current["answers"].append(m.group(3))
            current["correct"].append(kind == "a")
        elif current is None:
            drop(line_no, f"malformed QA line {line[:60]!r} before any question")
        else:
            bad = bad or (line_no, f"malformed QA line {line[:60]!r}")
    close()
    if current is None and len(notes) == notes_before:  # no question, and no line noted as malformed
        note_empty_qa_file(notes, path)
    return out


def read_folds(path: Path | None) -> dict[str, str]:
    """vid → split from the SDK's std-folds .py (list literals) or a JSON {split: [vids]}."""
    if path is None:
        return {}
    if path.suffix == ".json":
        return _split_map(path)
    names = {"standard_train_fold": "train", "standard_valid_fold": "val", "standard_test_fold": "test"}
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names:
            for vid in ast.literal_eval(node.value):
                out[vid] = names[node.targets[0].id]
    return out


def read_siq1(raw: Path, folds: Path | None = None, dataset: str = "socialiq1",
              notes: list[ManifestNote] | None = None) -> tuple[list[MediaItem], list[QAItem]]:
    notes = [] if notes is None else notes
    root = raw / "raw" if (raw / "raw" / "qa").is_dir() else raw
    if not (root / "qa").is_dir():
        raise FileNotFoundError(f"{raw}: no Social-IQ 1.0 layout (expected qa/ under it or under raw/)")
    split_of = read_folds(folds)
    videos = {p.name.removesuffix("_trimmed-out.mp4"): p for p in (root / "vision" / "raw").glob("*_trimmed-out.mp4")}
    qa_files = {p.name.removesuffix("_trimmed.txt"): p for p in sorted((root / "qa").glob("*_trimmed.txt"))}
    items, qa = [], []
    for vid in sorted(set(videos) | set(qa_files)):
        try:
            check_id(vid)
        except ValueError as e:
            note_dropped(notes, "video", vid, videos.get(vid) or qa_files[vid], "unusable id", str(e))
            continue
        transcript = root / "transcript" / f"{vid}_trimmed.vtt"
        items.append(MediaItem(
            id=vid, dataset=dataset, split=split_of.get(vid, "unknown"), video=videos.get(vid),
            transcript=transcript if transcript.exists() else None,
        ))
        if vid in qa_files:
            qa.extend(read_siq1_qa_file(qa_files[vid], vid, split_of.get(vid, "unknown"), dataset, notes))
    return items, qa


def siq1_root(raw: Path) -> Path | None:
    """RAW or RAW/raw, whichever holds a part of the 1.0 release (its QA files or its videos)."""
    for root in (raw / "raw", raw):
        if any((root / "qa").glob("*_trimmed.txt")) or any((root / "vision" / "raw").glob("*_trimmed-out.mp4")):
            return root
    return None


register_layout(Layout(
    "siq2", "Social-IQ 2.0", "qa/qa_{train,val,test}.json, trims.json, video/<vid>.mp4 (here or under siq2/)",
    detect=is_siq2, read=lambda raw, dataset, config, notes: read_siq2(raw, dataset=dataset, notes=notes),
    media_dir=lambda raw: (siq2_root(raw) or raw) / "video", detect_first=20))
register_layout(Layout(
    "siq1", "Social-IQ 1.0", "qa/<vid>_trimmed.txt, vision/raw/<vid>_trimmed-out.mp4 (here or under raw/)",
    detect=lambda raw: siq1_root(raw) is not None,
    read=lambda raw, dataset, config, notes: read_siq1(raw, folds=config.folds, dataset=dataset, notes=notes),
    media_dir=lambda raw: (siq1_root(raw) or raw) / "vision" / "raw", detect_first=30))
