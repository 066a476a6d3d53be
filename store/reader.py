"""Lazy reads: opening the store reads the root metadata only; arrays load when sliced."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from manifests.records import MediaItem, QAItem, read_jsonl
from store import layout


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
        self.root = zarr.open_group(self.path, mode="r")
        self.attrs = dict(self.root.attrs)
        if self.attrs.get("schema") != layout.SCHEMA:
            raise ValueError(f"{self.path}: schema {self.attrs.get('schema')!r}, this reader knows {layout.SCHEMA!r}")

    def features(self) -> list[str]:
        return sorted(self.root.group_keys())

    def feature_attrs(self, feature: str) -> dict[str, Any]:
        return dict(self._feature_group(feature).attrs)

    def _feature_group(self, feature: str) -> zarr.Group:
        if feature not in self.root.group_keys():
            raise KeyError(f"{self.path}: no feature {feature!r}; present: {self.features()}")
        return self.root[feature]

    def item_attrs(self, feature: str, item: str) -> dict[str, Any]:
        return dict(self._feature_group(feature)[item].attrs)

    def items(self, feature: str, include_filtered: bool = False, include_stale: bool = False) -> list[str]:
        """Complete items of a feature. Items made with an older spec (config, version, weights) are
        stale and left out unless asked for; so are items a policy filtered (faces: too few faces)."""
        group = self._feature_group(feature)
        spec = group.attrs.get("spec_hash")
        out = []
        for name, sub in group.groups():
            attrs = sub.attrs
            if not attrs.get("complete"):
                continue
            if not include_stale and attrs.get("spec_hash") != spec:
                continue
            if not include_filtered and attrs.get("filtered"):
                continue
            out.append(name)
        return sorted(out)

    def read(self, feature: str, item: str) -> ItemFeature:
        fgroup = self._feature_group(feature)
        try:
            g = fgroup[item]  # one metadata read; listing the feature's items would cost O(items)
        except KeyError:
            raise KeyError(f"{self.path}: feature {feature!r} has no item {item!r}") from None
        attrs = dict(g.attrs)
        if not attrs.get("complete"):
            raise KeyError(f"{self.path}: {feature}/{item} is not complete")
        extras = {k: v for k, v in g.arrays() if k not in (layout.FEATURES, layout.INTERVALS)}
        return ItemFeature(
            feature=feature,
            item=item,
            features=g[layout.FEATURES],
            intervals=np.asarray(g[layout.INTERVALS][...], dtype=np.float64),
            extras=extras,
            attrs=attrs,
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

    def stored_fingerprints(self, feature: str) -> dict[str, str]:
        """item -> fingerprint of its complete group: what the planner compares with."""
        if feature not in self.root.group_keys():
            return {}
        return {
            name: sub.attrs.get("fingerprint", "")
            for name, sub in self.root[feature].groups()
            if sub.attrs.get("complete")
        }


def open_store(path: Path | str) -> Store:
    return Store(path)
