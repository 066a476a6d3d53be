"""SocialIQA (Sap et al., 2019), the text-only release -> MediaItem / QAItem records.

Layout, under RAW (or one folder below it, as the release zip unpacks to socialiqa-train-dev/):
    train.jsonl + train-labels.lst, dev.jsonl + dev-labels.lst, optionally test.jsonl (+ test-labels.lst)
Each .jsonl line: {"context", "question", "answerA", "answerB", "answerC", ...}; each labels line: 1, 2 or 3
(the correct answer). Entry k of split S becomes MediaItem "siqa-S-00000k" (no media: the context is the
"clip") and QAItem "siqa-S-00000k-q" with the context. dev maps to the "val" split.
"""

from __future__ import annotations

import json
from pathlib import Path

from manifests.jsonfile import json_rows
from manifests.layouts import Layout, Sample, register_layout, register_sample
from manifests.records import MediaItem, QAItem
from objectio import as_path

DATASET = "socialiqa"
_SPLITS = {"train": "train", "dev": "val", "test": "test"}
_ANSWER_KEYS = ("answerA", "answerB", "answerC")


def _find(raw: Path, name: str) -> Path | None:
    for cand in (raw / name, *sorted(raw.glob(f"*/{name}"))):
        if cand.is_file():
            return cand
    return None


def _read_labels(path: Path, n_entries: int, jsonl: Path) -> list[int]:
    labels = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        if line.strip() not in ("1", "2", "3"):
            raise ValueError(f"{path}:{line_no}: label must be 1, 2 or 3, got {line.strip()!r}")
        labels.append(int(line) - 1)
    if len(labels) != n_entries:
        raise ValueError(f"{path} has {len(labels)} labels but {jsonl} has {n_entries} entries")
    return labels


def _read_entries(path: Path) -> list[dict[str, str]]:
    """The entries in file order: JSON Lines as released, or an array/object of them (manifests/jsonfile.py)."""
    entries = []
    for r in json_rows(path, id_field=None):
        try:
            row = r.parsed()
        except json.JSONDecodeError as e:
            raise ValueError(f"{r.where}: not JSON ({e.msg})") from e
        missing = [k for k in ("context", "question", *_ANSWER_KEYS) if not isinstance(row, dict)
                   or not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(f"{r.where}: missing or non-text fields {missing}")
        entries.append(row)
    return entries


def _records(
    stem: str, entries: list[dict[str, str]], labels: list[int] | None, dataset: str
) -> tuple[list[MediaItem], list[QAItem]]:
    split = _SPLITS[stem]
    media, qa = [], []
    for k, row in enumerate(entries):
        item_id = f"siqa-{stem}-{k:06d}"
        media.append(MediaItem(id=item_id, dataset=dataset, split=split))
        answers = tuple(row[key] for key in _ANSWER_KEYS)
        correct = tuple(i == labels[k] for i in range(3)) if labels is not None else ()
        qa.append(
            QAItem(qid=f"{item_id}-q", item_id=item_id, dataset=dataset, split=split,
                   question=row["question"], answers=answers, correct=correct, context=row["context"])
        )
    return media, qa


def read_socialiqa(raw: Path, dataset: str = DATASET) -> tuple[list[MediaItem], list[QAItem]]:
    """All splits found under `raw`; a split's labels file is required except for test."""
    raw = as_path(raw)  # a folder, or a bucket prefix (--raw s3://...)
    media: list[MediaItem] = []
    qa: list[QAItem] = []
    found = []
    for stem in _SPLITS:
        jsonl = _find(raw, f"{stem}.jsonl")
        if jsonl is None:
            continue
        found.append(jsonl)
        entries = _read_entries(jsonl)
        labels_path = jsonl.with_name(f"{stem}-labels.lst")
        if not labels_path.is_file() and stem != "test":
            raise FileNotFoundError(f"{jsonl}: labels file {labels_path} not found")
        labels = _read_labels(labels_path, len(entries), jsonl) if labels_path.is_file() else None
        m, q = _records(stem, entries, labels, dataset)
        media += m
        qa += q
    if not media and found:
        raise ValueError(f"{raw}: SocialIQA layout, but its files hold no questions "
                         f"({', '.join(str(p.relative_to(raw)) for p in found)}): nothing to extract")
    if not media:
        raise FileNotFoundError(f"{raw}: no SocialIQA files (train.jsonl, dev.jsonl, test.jsonl) here or one level down")
    return media, qa


# Hand-written in the style of SocialIQA (context, question about motivation/reaction/next step, 3 answers).
_SAMPLES = [
    ("{a} forgot {b}'s birthday and apologised the next morning with a cake.", "How would {b} feel as a result?",
     ("touched by the gesture", "angry about the cake", "bored by the morning"), 0),
    ("{a} stayed late at work to help {b} finish the quarterly report.", "Why did {a} do this?",
     ("to go home early", "to support a colleague", "to avoid the report"), 1),
    ("{a} saw a wallet on the bus seat and handed it to the driver.", "What will {a} want to do next?",
     ("keep the money", "throw the wallet away", "get off at their stop"), 2),
    ("{a} practised the piano for three hours before the recital.", "What does {a} need to do before this?",
     ("sign up for the recital", "sell the piano", "skip the lessons"), 0),
    ("{a} told {b} a joke, but {b} didn't laugh at all.", "How would {a} feel afterwards?",
     ("proud and confident", "a bit embarrassed", "extremely hungry"), 1),
    ("{a} lent {b} $20 so {b} could buy lunch.", "What will {b} want to do next?",
     ("ask for $200 more", "forget about it forever", "pay {a} back soon"), 2),
    ("{a} moved to a new city and didn't know anyone there.", "How would you describe {a}?",
     ("lonely but hopeful", "famous and busy", "tired of friends"), 0),
    ("{a} yelled at the referee after the team lost 3-2.", "How would others feel as a result?",
     ("calm and grateful", "uncomfortable", "eager to yell too"), 1),
    ("{a} cooked a three-course dinner for {b}'s parents.", "Why did {a} do this?",
     ("to make a good impression", "to practise knife skills", "because the oven was broken"), 0),
    ("{a} noticed {b} was crying in the hallway and sat down next to them.", "What will {a} want to do next?",
     ("leave quickly", "laugh at {b}", "ask what's wrong"), 2),
]
_NAMES = [("Jordan", "Casey"), ("Aubrey", "Riley"), ("Kendall", "Skylar"), ("Quinn", "Taylor"), ("Sasha", "Robin")]


def write_sample_socialiqa(dest: Path, n: int = 8) -> None:
    """A small SocialIQA-layout sample: n train entries and max(1, n // 2) dev entries, with labels."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    k = 0
    for stem, count in (("train", n), ("dev", max(1, n // 2))):
        rows, labels = [], []
        for _ in range(count):
            context, question, answers, label = _SAMPLES[k % len(_SAMPLES)]
            a, b = _NAMES[(k // len(_SAMPLES) + k) % len(_NAMES)]
            fill = {"a": a, "b": b}
            row = {"context": context.format(**fill), "question": question.format(**fill)}
            row.update({key: ans.format(**fill) for key, ans in zip(_ANSWER_KEYS, answers, strict=True)})
            rows.append(json.dumps(row))
            labels.append(str(label + 1))
            k += 1
        (dest / f"{stem}.jsonl").write_text("\n".join(rows) + "\n")
        (dest / f"{stem}-labels.lst").write_text("\n".join(labels) + "\n")


def holds_socialiqa(raw: Path) -> bool:
    """.jsonl files here, or the release's split files one folder down (its zip unpacks to socialiqa-train-dev/)."""
    return any(raw.glob("*.jsonl")) or any(p.name in ("train.jsonl", "dev.jsonl", "test.jsonl")
                                           for p in raw.glob("*/*.jsonl"))


register_layout(Layout(
    "socialiqa", "SocialIQA", "train.jsonl/dev.jsonl/test.jsonl with *-labels.lst (here or one folder down)",
    detect=holds_socialiqa, read=lambda raw, dataset, config, notes: read_socialiqa(raw, dataset=dataset),
    media_dir=None, detect_first=40))  # text only: no media to find
register_sample(Sample("sample-socialiqa", "socialiqa", write_sample_socialiqa))
