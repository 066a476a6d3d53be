"""Socratis (Deng et al., 2023: "Socratis: Are large multimodal models emotionally aware?") -> MediaItem records,
one per image-caption pair. Nothing here opens an image.

Layout, under RAW:
    imCaptionEmotionExplanation_formatted.json   (arijitray1993/socratis; the same file is `test.json` in the
                                                  Hugging Face dataset array/socratis_image_text_emotion)
    the image archive unpacked anywhere under RAW (e.g. images/): images are matched by file name
The JSON: {pair_id: [[image_path, caption, emotions, explanations, demographics], ...]}, one inner list per worker.
`emotions` and `explanations` may each be a string (one) or a list of strings; both are read. Demographics are
optional and kept as found.

What is an error of one pair, reported when the pair is extracted (its image and caption still run where they
can): a missing image file; a pair with no reactions; a worker entry whose emotion and reason counts differ.
A worker entry that is not [image_path, caption, emotions, explanations(, demographics)] with text where
text belongs is logged with the file, pair and entry, and skipped.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path, PurePosixPath
from typing import Any

from manifests import jsonfile
from manifests.layouts import Layout, Sample, register_layout, register_sample
from manifests.limits import InputTooLarge
from manifests.records import ManifestNote, MediaItem, Reaction, check_id, note_dropped
from objectio import as_path

log = logging.getLogger(__name__)

DATASET = "socratis"
FILE_NAMES = ("imCaptionEmotionExplanation_formatted.json", "test.json")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff"}
SPLIT = "test"  # the release is an evaluation benchmark (the HF copy names the file test.json)


def find_annotations(raw: Path) -> Path | None:
    for name in FILE_NAMES:
        for cand in (raw / name, *sorted(raw.glob(f"*/{name}"))):
            if cand.is_file():
                return cand
    return None


def _texts(value: Any) -> tuple[str, ...]:
    """A string is one text; a list must hold strings only."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"expected a string or a list of strings, got {json.dumps(value)[:80]}")


def _entry(entry: Any) -> tuple[str, str, Reaction]:
    """(image file name, caption, reaction) of one worker's entry."""
    if not isinstance(entry, list) or len(entry) not in (4, 5):
        raise ValueError(f"expected [image_path, caption, emotions, explanations, demographics], got "
                         f"{json.dumps(entry)[:80]}")
    image, caption = entry[0], entry[1]
    if not isinstance(image, str) or not image.strip():
        raise ValueError(f"image_path must be a non-empty string, got {json.dumps(image)[:80]}")
    if not isinstance(caption, str):
        raise ValueError(f"caption must be a string, got {json.dumps(caption)[:80]}")
    try:
        emotions, reasons = _texts(entry[2]), _texts(entry[3])
    except ValueError as e:
        raise ValueError(f"emotions/explanations: {e}") from e
    demographics = json.dumps(entry[4], sort_keys=True) if len(entry) == 5 and entry[4] is not None else None
    name = PurePosixPath(image.replace("\\", "/")).name  # matched by file name: the archive's folders differ
    return name, caption, Reaction(emotions=emotions, reasons=reasons, demographics=demographics)


def index_images(raw: Path) -> dict[str, Path]:
    """File name -> path of every image under `raw` (the first in sorted order when a name repeats)."""
    out: dict[str, Path] = {}
    for path in sorted(raw.rglob("*")):
        if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
            if path.name in out:
                log.warning("%s: image name also at %s; using the first", path, out[path.name])
                continue
            out[path.name] = path
    return out


def _item_id(pair_id: str, seen: set[str]) -> str | None:
    item_id = re.sub(r"[^A-Za-z0-9_.\-]", "_", pair_id)
    try:
        check_id(item_id)
    except ValueError:
        return None
    return None if item_id in seen else item_id


def _pair(pair_id: str, item_id: str, entries: Any, source: Path, images: dict[str, Path],
          image_dir: Path, dataset: str, notes: list[ManifestNote] | None) -> MediaItem:
    if not isinstance(entries, list):
        note_dropped(notes, "worker entries", f"pair {pair_id}", source, "not a list of worker entries",
                 json.dumps(entries)[:80])
        entries = []
    names, captions, reactions = [], [], []
    for k, entry in enumerate(entries):
        try:
            name, caption, reaction = _entry(entry)
        except ValueError as e:
            note_dropped(notes, "worker entry", f"pair {pair_id}, entry {k}", source, "malformed entry", str(e))
            continue
        names.append(name)
        captions.append(caption)
        reactions.append(reaction)
    if len(set(names)) > 1 or len(set(captions)) > 1:
        log.warning("%s: pair %s: entries disagree on image or caption; using the first entry's", source, pair_id)
    name = names[0] if names else None
    return MediaItem(
        id=item_id, dataset=dataset, split=SPLIT,
        image=(images.get(name) or image_dir / name) if name else None,
        caption=captions[0] if captions else None, reactions=tuple(reactions), annotations=source,
    )


def read_socratis(raw: Path, dataset: str = DATASET, notes: list[ManifestNote] | None = None) -> list[MediaItem]:
    """One MediaItem per pair, in the file's order. A pair id that is not a usable item id has its
    other characters replaced by '_'; one that still is not (or collides) is logged and skipped. What is
    skipped is also noted in `notes` when given (the run report)."""
    raw = as_path(raw)  # a folder, or a bucket prefix (--raw s3://...)
    source = find_annotations(raw)
    if source is None:
        raise FileNotFoundError(f"{raw}: no Socratis file ({' or '.join(FILE_NAMES)}) here or one folder down")
    try:
        data = jsonfile.loads(jsonfile.read_json_text(source, "Socratis file"))
    except InputTooLarge as e:
        raise ValueError(str(e)) from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{source}: not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected an object {{pair_id: [worker entries]}}, got {type(data).__name__}")
    images = index_images(raw)
    image_dir = raw / "images" if (raw / "images").is_dir() else raw
    items: list[MediaItem] = []
    seen: set[str] = set()
    for pair_id, entries in data.items():
        item_id = _item_id(str(pair_id), seen)
        if item_id is None:
            note_dropped(notes, "pair", f"pair {pair_id}", source, "unusable or repeated pair id", repr(pair_id))
            continue
        seen.add(item_id)
        items.append(_pair(str(pair_id), item_id, entries, source, images, image_dir, dataset, notes))
    return items


# ---- the offline sample ----

_SAMPLE_PAIRS = (  # (pair id, scikit-image picture, caption, [(emotions, explanations, demographics)])
    ("soc-0001", "astronaut", "Astronaut Eileen Collins poses in her flight suit before the shuttle launch.",
     [("proud", "She is the first woman to command a space shuttle.", {"age": "30-40"}),
      (["inspired", "hopeful"], ["It shows anyone can reach the stars.", "Space travel is moving forward."], None),
      ("nervous", "Launches are dangerous and things have gone wrong before.", None)]),
    ("soc-0002", "coffee", "A cup of coffee on a cafe table on a quiet Sunday morning.",
     [(["calm"], ["It looks like a slow, peaceful morning."], None),
      ("cozy", "Warm coffee makes me think of home.", {"gender": "f"})]),
    ("soc-0003", "chelsea", "Rescued cat finds a new home after weeks at the shelter.",
     [("happy", "The cat finally has a family.", None),
      ("sad", "Many animals are still waiting in shelters.", None),
      (["relieved"], "It is safe now.", None)]),
)


def write_sample_socratis(dest: Path) -> Path:
    """Three pairs with scikit-image pictures (one real face); `emotions`/`explanations` given both as strings
    and as lists. Writes dest/imCaptionEmotionExplanation_formatted.json and dest/images/*.jpg; returns dest."""
    from PIL import Image
    from skimage import data as pictures

    dest = Path(dest)
    (dest / "images").mkdir(parents=True, exist_ok=True)
    out: dict[str, list[list[Any]]] = {}
    for pair_id, picture, caption, reactions in _SAMPLE_PAIRS:
        name = f"{picture}.jpg"
        Image.fromarray(getattr(pictures, picture)()).convert("RGB").save(dest / "images" / name, quality=92)
        out[pair_id] = [[f"socratis_images/{name}", caption, e, r, d] for e, r, d in reactions]
    (dest / FILE_NAMES[0]).write_text(json.dumps(out, indent=1))
    return dest


register_layout(Layout(
    "socratis", "Socratis", "imCaptionEmotionExplanation_formatted.json and its images",
    detect=lambda raw: find_annotations(raw) is not None,
    read=lambda raw, dataset, config, notes: (read_socratis(raw, dataset=dataset, notes=notes), []),
    media_dir=lambda raw: raw / "images", media_noun="images", detect_first=50))
register_sample(Sample("sample-socratis", "socratis", write_sample_socratis))
