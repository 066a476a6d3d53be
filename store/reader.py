"""Lazy reads: opening the store reads the root metadata only; arrays load when sliced."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from manifests.records import MediaItem, QAItem, read_jsonl
from store import layout
from store.integrity import RECORD, DamagedItem, ItemCheck, check_item, item_dirs, record_required, records_marker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemFeature:
    """One feature of one item. `features` and `extras` are zarr arrays: slicing loads only what is asked."""

    feature: str
    item: str
    features: zarr.Array
    intervals: np.ndarray  # (N, 2) float64 seconds [start, end)
    extras: dict[str, zarr.Array]
    attrs: dict[str, Any]
    columns: list[str]


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not (self.path / "zarr.json").exists():
            raise FileNotFoundError(f"{self.path}: not a feature store (no zarr.json); run `make extract` first")
        try:
            self.root = zarr.open_group(self.path, mode="r")
        except (ValueError, TypeError, KeyError) as e:  # invalid JSON is a ValueError
            raise ValueError(f"{self.path / 'zarr.json'}: the store's metadata is unreadable "
                             f"({type(e).__name__}: {e})") from None
        self.attrs = dict(self.root.attrs)
        self._reported: set[tuple[Path, str | None]] = set()
        self._marker = records_marker(self.attrs)  # which items may lack an integrity record
        if self.attrs.get("schema") != layout.SCHEMA:
            raise ValueError(f"{self.path}: schema {self.attrs.get('schema')!r}, this reader knows {layout.SCHEMA!r}")

    def features(self) -> list[str]:
        """Features whose group metadata reads (one with damaged metadata is logged and left out)."""
        out = []
        for name, path in item_dirs(self.path):
            if name in layout.RESERVED:
                continue  # _manifests, _runs: plain folders
            if not (path / "zarr.json").exists():
                log.warning("%s: feature metadata missing; feature left out", path / "zarr.json")
                continue
            try:
                self.root[name]
            except (ValueError, TypeError, KeyError) as e:
                log.warning("%s: feature metadata unreadable (%s: %s); feature left out", path / "zarr.json",
                            type(e).__name__, e)
                continue
            out.append(name)
        return out

    def feature_attrs(self, feature: str) -> dict[str, Any]:
        return dict(self._feature_group(feature).attrs)

    def _feature_group(self, feature: str) -> zarr.Group:
        if feature.startswith(".") or "/" in feature or not (self.path / feature / "zarr.json").exists():
            raise KeyError(f"{self.path}: no feature {feature!r}; present: {self.features()}")
        try:
            return self.root[feature]
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{self.path / feature / 'zarr.json'}: feature metadata unreadable "
                             f"({type(e).__name__}: {e})") from None

    def item_attrs(self, feature: str, item: str) -> dict[str, Any]:
        return self._checked(feature, item)[1].attrs or {}

    def check(self, feature: str, full: bool = False) -> list[ItemCheck]:
        """Every item folder of a feature, checked against what the writer recorded at commit
        (store/integrity.py: `full` also compares content hashes). Never raises for one bad item."""
        return [check_item(path, feature, name, full, record_required(self._marker, feature, name))
                for name, path in item_dirs(self.path / feature)]

    def _good(self, feature: str) -> list[ItemCheck]:
        """The feature's items that pass the quick check; the others are logged with their folder."""
        good = []
        for c in self.check(feature):
            if c.ok:
                good.append(c)
            elif (c.path, c.problem) not in self._reported:  # once per Store, not on every items() call
                self._reported.add((c.path, c.problem))
                log.warning("%s: damaged item left out (%s)", c.path, c.problem)
        return good

    def items(self, feature: str, include_filtered: bool = False, include_stale: bool = False) -> list[str]:
        """Complete items of a feature. Items made with an older spec (config, version, weights) are
        stale and left out unless asked for; so are items a policy filtered (faces: too few faces) and
        damaged items (logged with their folder; `python -m pipeline verify` lists them)."""
        return sorted(c.item for c in self._current(feature, include_stale)
                      if include_filtered or not c.attrs.get("filtered"))

    def filtered(self, feature: str) -> list[str]:
        """The complete, current items of a feature that a policy filtered (faces: too few faces)."""
        return sorted(c.item for c in self._current(feature) if c.attrs.get("filtered"))

    def _current(self, feature: str, include_stale: bool = False) -> list[ItemCheck]:
        spec = self._feature_group(feature).attrs.get("spec_hash")
        return [c for c in self._good(feature) if include_stale or c.attrs.get("spec_hash") == spec]

    def _checked(self, feature: str, item: str) -> tuple[zarr.Group, ItemCheck]:
        """The feature's group and the item's quick check, its attributes without the record."""
        fgroup = self._feature_group(feature)
        path = self.path / feature / item
        if item.startswith(".") or "/" in item or not path.is_dir():
            raise KeyError(f"{self.path}: feature {feature!r} has no item {item!r}")
        c = check_item(path, feature, item, required=record_required(self._marker, feature, item))
        if not c.ok:
            raise DamagedItem(f"{path}: damaged item ({c.problem}); the next `make extract` recomputes it")
        return fgroup, ItemCheck(c.feature, c.item, c.path, None,
                                 {k: v for k, v in c.attrs.items() if k != RECORD}, c.recorded)

    def read(self, feature: str, item: str) -> ItemFeature:
        """One item, after the quick check (metadata, recorded files present with their sizes): a damaged
        item raises DamagedItem naming its folder instead of reading back zeros for a missing chunk."""
        fgroup, c = self._checked(feature, item)
        try:
            g = zarr.open_group(c.path, mode="r")
            extras = {k: v for k, v in g.arrays() if k not in (layout.FEATURES, layout.INTERVALS)}
            features, intervals = g[layout.FEATURES], np.asarray(g[layout.INTERVALS][...], dtype=np.float64)
        except Exception as e:  # metadata that passed the quick check but zarr cannot use
            raise DamagedItem(f"{c.path}: damaged item ({type(e).__name__}: {e})") from None
        return ItemFeature(
            feature=feature,
            item=item,
            features=features,
            intervals=intervals,
            extras=extras,
            attrs=c.attrs,
            columns=list(fgroup.attrs.get("columns", [])),
        )

    @cached_property
    def _media(self) -> list[MediaItem]:
        path = layout.manifest_dir(self.path) / "items.jsonl"
        return list(read_jsonl(path, MediaItem)) if path.exists() else []

    @cached_property
    def _qa(self) -> list[QAItem]:
        path = layout.manifest_dir(self.path) / "qa.jsonl"
        return list(read_jsonl(path, QAItem)) if path.exists() else []

    def media_items(self) -> list[MediaItem]:
        return list(self._media)

    def qa_items(self) -> list[QAItem]:
        return list(self._qa)

    def last_run(self) -> dict[str, Any] | None:
        runs = sorted(layout.runs_dir(self.path).glob("*.json"))
        return json.loads(runs[-1].read_text()) if runs else None


def open_store(path: Path | str) -> Store:
    return Store(path)
