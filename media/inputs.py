"""Decoding of inputs that are not media streams: a still image, and the texts an item carries (Socratis).

A still image becomes `Still`: one row, interval [0, 0] (a still has no time extent; see extractors/base.py),
turned upright by its EXIF orientation as a viewer shows it, in RGB. The caption and the reactions become
`Texts`; a pair without reactions, or a worker entry whose emotion and reason counts differ, is an error of
that item naming the annotations file and the pair.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from extractors.base import Still, Texts
from manifests.records import MediaItem
from media.container import InputError, existing, first_line
from media.picture import exif_view

EXIF_ORIENTATION_TAG = 0x0112

# enters every still's fingerprint: bump when the same file would give different pixels
# (the picture record has its own, media.picture.PICTURE_VERSION)
IMAGE_DECODE_VERSION = "1"


def decode_image(path: Path | None) -> Still:  # None: the manifest found no image for the item
    from PIL import Image, ImageOps, UnidentifiedImageError

    path = existing(path, "image")
    try:
        with Image.open(path) as img:
            img.load()
            view = exif_view(img.size, img.getexif().get(EXIF_ORIENTATION_TAG))
            upright = ImageOps.exif_transpose(img)
            pixels = np.asarray(upright.convert("RGB"), np.uint8)
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read image: {first_line(e)}") from e
    if pixels.ndim != 3 or min(pixels.shape[:2]) == 0:
        raise InputError(f"{path}: image has no pixels ({pixels.shape})")
    return Still(pixels=np.ascontiguousarray(pixels[None]), picture=view.attrs())


def _where(item: MediaItem) -> str:
    return f"{item.annotations or '(no annotations file)'}: pair {item.id}"


def caption_texts(item: MediaItem) -> Texts:
    if item.caption is None:
        raise InputError(f"{_where(item)}: no caption")
    return Texts(texts=(item.caption,))


def reaction_texts(item: MediaItem) -> Texts:
    """One text per (emotion, reason): the k-th emotion of a worker's entry goes with its k-th reason."""
    from extractors.texts import reaction_text

    emotions, reasons, workers = [], [], []
    for w, r in enumerate(item.reactions):
        if len(r.emotions) != len(r.reasons):
            raise InputError(f"{_where(item)}, worker entry {w}: {len(r.emotions)} emotion(s) "
                             f"{list(r.emotions)} but {len(r.reasons)} reason(s)")
        emotions += r.emotions
        reasons += r.reasons
        workers += [w] * len(r.emotions)
    if not emotions:
        raise InputError(f"{_where(item)}: no reactions")
    texts = tuple(reaction_text(e, r) for e, r in zip(emotions, reasons, strict=True))
    return Texts(texts=texts, labels={"emotion": tuple(emotions), "reason": tuple(reasons), "worker": tuple(workers)})
