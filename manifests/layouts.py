"""The registry of dataset layouts: a manifest module registers the layouts it reads (`register_layout`) and the
sample datasets it writes (`register_sample`), as an extractor module registers its extractors; nothing else
names them. pipeline/sources.py detects and reads a layout through here, pipeline/config.py checks a config's
`layout` against it, and `extract` generates a missing sample through it.

Adding a layout (docs/design.md, "Adding a dataset layout"): a module in manifests/ whose import registers a
`Layout`, a preset in pipeline/configs/ that names it, and its test; tests/extractors/test_registry.py holds the rules.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from manifests.records import ManifestNote, MediaItem, QAItem

# A layout's reader: (raw root, dataset name, the run's config, notes to append to) -> (items, questions). The
# config is pipeline/config.py's RunConfig, which this layer does not import: a reader takes its own keys from it
# (Social-IQ 1.0: `folds`).
Reader = Callable[[Path, str, Any, list[ManifestNote]], tuple[list[MediaItem], list[QAItem]]]


@dataclass(frozen=True)
class Layout:
    """One dataset layout: how a raw folder is known to hold it, how it is read, where its media are."""

    name: str  # what a config's `layout` says ("siq2")
    title: str  # for messages ("Social-IQ 2.0")
    parts: str  # what the folder holds, for the message when a folder is no known layout
    detect: Callable[[Path], bool]  # does this folder hold (a part of) the release?
    read: Reader
    # where the layout keeps its media under the raw root, for the message when none is on disk; None: a
    # text-only layout (its items have no media to find)
    media_dir: Callable[[Path], Path] | None = None
    media_noun: str = "videos"
    # detection order, lowest first: a layout whose folders also look like another's is tried before it
    # (TinySocial's qa/ and video/ look like Social-IQ 2.0's)
    detect_first: int = 100


@dataclass(frozen=True)
class Sample:
    """A dataset `extract` generates into a new or empty --raw folder (the offline samples)."""

    dataset: str  # its name, as --dataset and its preset spell it: "sample" or "sample-<something>" (the Makefile)
    layout: str  # the layout it is written in
    write: Callable[[Path], object]  # writes the dataset into the folder
    marker: str | None = None  # what under --raw shows it is there already; None: --raw itself, not empty


_LAYOUTS: dict[str, Layout] = {}
_SAMPLES: dict[str, Sample] = {}


def register_layout(layout: Layout) -> Layout:
    if _LAYOUTS.get(layout.name, layout) != layout:
        raise ValueError(f"layout {layout.name!r} registered twice")
    _LAYOUTS[layout.name] = layout
    return layout


def register_sample(sample: Sample) -> Sample:
    if _SAMPLES.get(sample.dataset, sample) != sample:
        raise ValueError(f"sample dataset {sample.dataset!r} registered twice")
    _SAMPLES[sample.dataset] = sample
    return sample


@functools.cache
def _load() -> None:
    """Import every module of this package once: their imports register what they read and write (all of them
    together take well under a second; a layout's detection needs every one anyway)."""
    import manifests

    for info in pkgutil.iter_modules(manifests.__path__):
        importlib.import_module(f"manifests.{info.name}")


def layouts() -> list[Layout]:
    """Every registered layout, in detection order."""
    _load()
    return sorted(_LAYOUTS.values(), key=lambda layout: (layout.detect_first, layout.name))


def get_layout(name: str) -> Layout:
    _load()
    if name not in _LAYOUTS:
        raise KeyError(f"unknown layout {name!r}; known: {', '.join(sorted(_LAYOUTS))}")
    return _LAYOUTS[name]


def layout_names() -> list[str]:
    return sorted(layout.name for layout in layouts())


def samples() -> dict[str, Sample]:
    _load()
    return dict(_SAMPLES)
