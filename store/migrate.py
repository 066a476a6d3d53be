"""`python -m pipeline migrate STORE`: convert a version-1 store (one folder per item) to version 2.

Under the store's write lock: each feature's complete items are read (metadata, every array decoded) and
committed in batches into packed parts with an index, exactly as a run would have written them (their
attributes kept, their integrity recorded anew); then the root's schema becomes version 2 in one atomic
write of the root's zarr.json (whole or not at all, on any backend), and only then are the old item folders
removed. Until that write the store stays a version-1 store (readers refuse it with this command's name); a
killed migration is started over by the next one. An item that does not read (damaged, incomplete) is not
carried over: it is listed, and the next run recomputes it. Written against the backend contract alone: a
version-1 store uploaded to a bucket as it was is migrated where it is.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from rows import FeatureRows
from store import layout, repair
from store.backends import Backend, join, location, open_backend
from store.writer import StoreWriter

log = logging.getLogger(__name__)
BATCH_ITEMS = 512
_V1_INTERNAL = ("integrity", "complete", "n_rows")  # version-1 attributes the new layout keeps elsewhere


@dataclass
class Migration:
    store: Path | str  # as given: a folder's Path, or a URL
    items: dict[str, int] = field(default_factory=dict)  # feature -> items carried over
    skipped: list[str] = field(default_factory=list)  # "<feature>/<item>: why"
    already: bool = False  # the store was at version 2 before: nothing was converted

    def summary(self) -> str:
        if self.already:
            return f"nothing to migrate: {self.store} is already {layout.SCHEMA}"
        lines = [f"migrated {self.store} to {layout.SCHEMA}"]
        lines += [f"  {f:<12}{n:>8} item(s)" for f, n in sorted(self.items.items())]
        lines += [f"  NOT CARRIED OVER {s} (the next run recomputes it)" for s in self.skipped]
        return "\n".join(lines)


class _MigrationWriter(StoreWriter):
    """The writer for a version-1 store being converted: it writes version-2 parts and indexes beside the
    item folders and leaves the root's schema alone (`migrate_store` switches it last). The only place a
    writer accepts a version-1 store."""

    def _claim_root(self, attrs: dict[str, Any], dataset: str) -> None:
        if attrs.get("schema") != layout.SCHEMA_V1:
            raise ValueError(f"{self.path}: schema {attrs.get('schema')!r} is not a version-1 store")


def _v1_items(backend: Backend, feature: str) -> list[str]:
    """The feature's version-1 item groups (a folder with its zarr.json), and nothing of version 2's (parts/,
    the index log and whatever the backend keeps beside it, its own zarr.json) or the engine's."""
    return [name for name in backend.children(feature)
            if not name.startswith(".") and name not in (*layout.RESERVED, layout.META, layout.RETIRED, layout.NOTES)
            and not name.startswith(layout.INDEX) and backend.exists(join(feature, name, layout.META))]


def _read_v1(backend: Backend, key: str) -> tuple[FeatureRows, dict]:
    group = zarr.open_group(backend.zarr_store(key, read_only=True), mode="r", zarr_format=3)
    attrs = dict(group.attrs)
    if attrs.get("complete") is not True:
        raise ValueError("not marked complete")
    arrays = {name: arr[...] for name, arr in group.arrays()}
    extras = {k: v for k, v in arrays.items() if k not in (layout.FEATURES, layout.INTERVALS)}
    rows = FeatureRows(np.asarray(arrays[layout.FEATURES]), np.asarray(arrays[layout.INTERVALS], np.float64), extras, {})
    return rows, {k: v for k, v in attrs.items() if k not in _V1_INTERNAL}


def migrate_store(path: Path | str) -> Migration:
    """Through the backend contract: a folder, or a version-1 store uploaded to a bucket as it was (no run ever
    wrote one there: version 1 predates object storage)."""
    where = location(path)
    backend = open_backend(where)
    try:
        meta = json.loads(backend.get(layout.META))
    except FileNotFoundError:
        raise FileNotFoundError(f"{where}: not a feature store (no {layout.META})") from None
    schema = meta.get("attributes", {}).get("schema")
    if schema == layout.SCHEMA:
        _remove_v1_folders(backend)  # what a migration killed after its switch left
        return Migration(where, already=True)
    if schema != layout.SCHEMA_V1:
        raise ValueError(f"{where}: schema {schema!r} is not a version-1 store; nothing to migrate")
    out = Migration(where)
    writer = _MigrationWriter(where, str(meta["attributes"].get("dataset", "")))
    try:
        features = [n for n in backend.children() if n not in layout.RESERVED and not n.startswith(".")
                    and backend.exists(join(n, layout.META))]
        for feature in features:
            _restart(backend, feature)
            out.items[feature] = _migrate_feature(writer, backend, feature, out.skipped)
        meta["attributes"]["schema"] = layout.SCHEMA
        backend.put(layout.META, json.dumps(meta, indent=2).encode())  # whole: the moment the store becomes version 2
        _remove_v1_folders(backend)
    finally:
        writer.close()
    return out


def _restart(backend: Backend, feature: str) -> None:
    """Parts and index an interrupted migration wrote: started over (an empty index in place of its log)."""
    backend.delete_prefix(join(feature, layout.PARTS))
    repair.reset(backend, feature)


def _migrate_feature(writer: StoreWriter, backend: Backend, feature: str, skipped: list[str]) -> int:
    batch, n = [], 0
    for item in _v1_items(backend, feature):
        try:
            rows, attrs = _read_v1(backend, join(feature, item))
        except Exception as e:  # damaged or incomplete: recomputed by the next run
            skipped.append(f"{feature}/{item}: {type(e).__name__}: {str(e)[:200]}")
            continue
        batch.append((item, rows, attrs))
        if len(batch) >= BATCH_ITEMS:
            writer.commit_batch(feature, batch)
            n, batch = n + len(batch), []
    if batch:
        writer.commit_batch(feature, batch)
        n += len(batch)
    log.info("%s: %d item(s) migrated", feature, n)
    return n


def _remove_v1_folders(backend: Backend) -> None:
    for feature in backend.children():
        if not feature.startswith(".") and backend.exists(join(feature, layout.INDEX)):
            for item in _v1_items(backend, feature):
                backend.delete_prefix(join(feature, item))
