"""`python -m pipeline migrate STORE`: convert a version-1 store (one folder per item) to version 2.

Under the store's write lock: each feature's complete items are read (metadata, every array decoded) and
committed in batches into packed parts with an index, exactly as a run would have written them (their
attributes kept, their integrity recorded anew); then the root's schema becomes version 2 in one atomic
rename, and only then are the old item folders removed. Until that rename the store stays a version-1 store
(readers refuse it with this command's name); a killed migration is started over by the next one. An item
that does not read (damaged, incomplete) is not carried over: it is listed, and the next run recomputes it.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from atomicio import atomic_write
from rows import FeatureRows
from store import layout
from store.backends import is_url, open_backend
from store.writer import StoreWriter

log = logging.getLogger(__name__)
BATCH_ITEMS = 512
_V1_INTERNAL = ("integrity", "complete", "n_rows")  # version-1 attributes the new layout keeps elsewhere


@dataclass
class Migration:
    store: Path
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


def _v1_items(feature_dir: Path) -> list[Path]:
    return sorted(p for p in feature_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and p.name not in layout.RESERVED)


def _read_v1(item_dir: Path) -> tuple[FeatureRows, dict]:
    group = zarr.open_group(item_dir, mode="r")
    attrs = dict(group.attrs)
    if attrs.get("complete") is not True:
        raise ValueError("not marked complete")
    arrays = {name: arr[...] for name, arr in group.arrays()}
    extras = {k: v for k, v in arrays.items() if k not in (layout.FEATURES, layout.INTERVALS)}
    rows = FeatureRows(np.asarray(arrays[layout.FEATURES]), np.asarray(arrays[layout.INTERVALS], np.float64), extras, {})
    return rows, {k: v for k, v in attrs.items() if k not in _V1_INTERNAL}


def migrate_store(path: Path | str) -> Migration:
    if is_url(path):  # version 1 predates object storage: only a store uploaded as it was can be one
        return _migrate_in_bucket(str(path))
    path = Path(path)
    meta = json.loads((path / layout.META).read_bytes())
    schema = meta.get("attributes", {}).get("schema")
    if schema == layout.SCHEMA:
        _remove_v1_folders(path)  # what a migration killed after its rename left
        return Migration(path, already=True)
    if schema != layout.SCHEMA_V1:
        raise ValueError(f"{path}: schema {schema!r} is not a version-1 store; nothing to migrate")
    out = Migration(path)
    writer = _MigrationWriter(path, str(meta["attributes"].get("dataset", "")))
    try:
        features = [p for p in sorted(path.iterdir()) if p.is_dir() and (p / layout.META).exists()
                    and p.name not in layout.RESERVED]
        for feature_dir in features:
            _restart(feature_dir)
            out.items[feature_dir.name] = _migrate_feature(writer, feature_dir, out.skipped)
        meta["attributes"]["schema"] = layout.SCHEMA
        atomic_write(path / layout.META, json.dumps(meta, indent=2))  # the moment the store becomes version 2
        _remove_v1_folders(path)
    finally:
        writer.close()
    return out


def _restart(feature_dir: Path) -> None:
    """Parts and index an interrupted migration wrote: started over."""
    shutil.rmtree(layout.parts_dir(feature_dir.parent, feature_dir.name), ignore_errors=True)
    layout.index_path(feature_dir.parent, feature_dir.name).unlink(missing_ok=True)


def _migrate_feature(writer: StoreWriter, feature_dir: Path, skipped: list[str]) -> int:
    feature, batch, n = feature_dir.name, [], 0
    for item_dir in _v1_items(feature_dir):
        try:
            rows, attrs = _read_v1(item_dir)
        except Exception as e:  # damaged or incomplete: recomputed by the next run
            skipped.append(f"{feature}/{item_dir.name}: {type(e).__name__}: {str(e)[:200]}")
            continue
        batch.append((item_dir.name, rows, attrs))
        if len(batch) >= BATCH_ITEMS:
            writer.commit_batch(feature, batch)
            n, batch = n + len(batch), []
    if batch:
        writer.commit_batch(feature, batch)
        n += len(batch)
    log.info("%s: %d item(s) migrated", feature, n)
    return n


def _remove_v1_folders(path: Path) -> None:
    for feature_dir in sorted(path.iterdir()):
        if feature_dir.is_dir() and layout.index_path(path, feature_dir.name).exists():
            for item_dir in _v1_items(feature_dir):
                shutil.rmtree(item_dir)


def _migrate_in_bucket(url: str) -> Migration:
    """A store in a bucket at version 2 has nothing to migrate; a version-1 store uploaded as it was is converted
    on a local disk (its item folders are renamed and removed, which a bucket has no operation for)."""
    backend = open_backend(url)
    try:
        meta = json.loads(backend.get(layout.META))
    except FileNotFoundError:
        raise FileNotFoundError(f"{url}: not a feature store (no {layout.META})") from None
    schema = meta.get("attributes", {}).get("schema")
    if schema == layout.SCHEMA:
        return Migration(url, already=True)  # type: ignore[arg-type]
    if schema == layout.SCHEMA_V1:
        raise ValueError(f"{url}: a version-1 store in a bucket: download it, run `python -m pipeline migrate DIR` "
                         "there, and upload the result")
    raise ValueError(f"{url}: schema {schema!r} is not a feature store's")
