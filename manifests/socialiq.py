"""Social-IQ layouts → MediaItem / QAItem records. Nothing here opens media.

2.0 (challenge release), under RAW or RAW/siq2:
    video/<vid>.mp4, audio/wav/<vid>.wav, transcript/<vid>.vtt,
    qa/qa_{train,val,test}.json  (JSON Lines: qid, q, vid_name, ts "0.00-60.06", a0..a3, answer_idx, …),
    trims.json (clip start second in the source video), current_split.json (split → video ids).
1.0, under RAW (or RAW/raw):
    vision/raw/<vid>_trimmed-out.mp4, qa/<vid>_trimmed.txt with lines `q<k>: …`, `a…: …` (correct),
    `i…: …` (incorrect); transcript/<vid>_trimmed.vtt when present. Folds: the CMU Multimodal SDK's
    `socialiq_std_folds.py` (or a JSON {"train": [...], "val": [...]}) passed as `folds`.
A malformed QA line is logged with its file and line and skips that question only.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from manifests.records import MediaItem, QAItem, check_id

log = logging.getLogger(__name__)
CLIP_S = 60.0
_SPLITS = {"train": "train", "val": "val", "valid": "val", "validation": "val", "dev": "val", "test": "test"}


def is_siq2(raw: Path) -> bool:
    return _siq2_root(raw) is not None


def _siq2_root(raw: Path) -> Path | None:
    for cand in (raw, raw / "siq2"):
        if (cand / "qa").is_dir() and (cand / "video").is_dir():
            return cand
    return None


def _first_existing(*paths: Path) -> Path | None:
    return next((p for p in paths if p.exists()), None)


def _parse_trim(value: Any) -> float:
    """trims.json values: a start second, [start, end], or "start-end"."""
    if isinstance(value, list | tuple):
        value = value[0]
    if isinstance(value, str):
        value = value.split("-")[0]
    return float(value)


def _parse_ts(ts: str) -> tuple[float, float]:
    start, end = (float(x) for x in ts.split("-"))
    if end < start:
        raise ValueError(f"ts {ts!r} ends before it starts")
    return start, end


def _split_map(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    data = json.loads(path.read_text())
    data = data.get("subsets", data) if isinstance(data, dict) else data
    out = {}
    for split, vids in data.items():
        for vid in vids:
            out[vid] = _SPLITS.get(split.lower(), "unknown")
    return out


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


def read_siq2_qa(qa_dir: Path) -> list[QAItem]:
    out: list[QAItem] = []
    for path in sorted(qa_dir.glob("qa_*.json")):
        split = _SPLITS.get(path.stem.removeprefix("qa_").lower(), "unknown")
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(_siq2_question(json.loads(line), split, f"{path.stem}-{line_no}"))
            except (ValueError, KeyError, TypeError) as e:
                log.warning("%s:%d: skipping malformed question: %s", path, line_no, e)
    return out


def read_siq2(raw: Path, dataset: str = "socialiq2") -> tuple[list[MediaItem], list[QAItem]]:
    root = _siq2_root(raw)
    if root is None:
        raise FileNotFoundError(f"{raw}: no Social-IQ 2.0 layout (expected qa/ and video/ under it or under siq2/)")
    qa = [q.model_copy(update={"dataset": dataset}) for q in read_siq2_qa(root / "qa")]
    trims_path = _first_existing(root / "trims.json", raw / "trims.json")
    trims = {k: _parse_trim(v) for k, v in json.loads(trims_path.read_text()).items()} if trims_path else {}
    splits = _split_map(_first_existing(root / "current_split.json", raw / "current_split.json"))
    q_split = {q.item_id: q.split for q in qa}
    vids = sorted({p.stem for p in (root / "video").glob("*.mp4")} | set(q_split))
    items = []
    for vid in vids:
        try:
            check_id(vid)
        except ValueError as e:
            log.warning("%s: skipping video with unusable id: %s", root / "video", e)
            continue
        audio = root / "audio" / "wav" / f"{vid}.wav"
        transcript = root / "transcript" / f"{vid}.vtt"
        start = trims.get(vid, 0.0)
        items.append(MediaItem(
            id=vid, dataset=dataset, split=splits.get(vid, q_split.get(vid, "unknown")),
            video=root / "video" / f"{vid}.mp4",
            audio=audio if audio.exists() else None,
            transcript=transcript if transcript.exists() else None,
            clip_start_s=start, clip_end_s=start + CLIP_S if vid in trims else None,
        ))
    return items, qa


_SIQ1_LINE = re.compile(r"^(q|a|i)(\d*)\s*:\s*(.*\S)\s*$", re.IGNORECASE)


def read_siq1_qa_file(path: Path, vid: str, split: str, dataset: str = "socialiq1") -> list[QAItem]:
    """`q<k>:` opens a question; `a…:` lines are correct answers, `i…:` incorrect ones."""
    out: list[QAItem] = []
    current: dict[str, Any] | None = None
    bad = False

    def close() -> None:
        if current is None or bad:
            return
        if not current["answers"]:
            log.warning("%s:%d: question without answers, skipped", path, current["line"])
            return
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
            current, bad = {"q": m.group(3), "answers": [], "correct": [], "line": line_no}, False
        elif kind in ("a", "i") and current is not None:
            current["answers"].append(m.group(3))
            current["correct"].append(kind == "a")
        else:
            log.warning("%s:%d: malformed QA line %r; skipping its question", path, line_no, line[:60])
            bad = True
    close()
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


def read_siq1(raw: Path, folds: Path | None = None, dataset: str = "socialiq1") -> tuple[list[MediaItem], list[QAItem]]:
    root = raw / "raw" if (raw / "raw" / "qa").is_dir() else raw
    if not (root / "qa").is_dir():
        raise FileNotFoundError(f"{raw}: no Social-IQ 1.0 layout (expected qa/ under it or under raw/)")
    split_of = read_folds(folds)
    videos = {p.name.removesuffix("_trimmed-out.mp4"): p for p in (root / "vision" / "raw").glob("*_trimmed-out.mp4")}
    items, qa = [], []
    by_vid: dict[str, list[QAItem]] = defaultdict(list)
    for path in sorted((root / "qa").glob("*_trimmed.txt")):
        vid = path.name.removesuffix("_trimmed.txt")
        by_vid[vid] = read_siq1_qa_file(path, vid, split_of.get(vid, "unknown"), dataset)
    for vid in sorted(set(videos) | set(by_vid)):
        transcript = root / "transcript" / f"{vid}_trimmed.vtt"
        items.append(MediaItem(
            id=vid, dataset=dataset, split=split_of.get(vid, "unknown"), video=videos.get(vid),
            transcript=transcript if transcript.exists() else None,
        ))
        qa.extend(by_vid.get(vid, []))
    return items, qa
