"""Dataset plans kept beside the store (`<store>/_views/plans/<key>.json`), so that building a dataset again
costs a file read. The key hashes the task's options, each feature's index generation, length and damaged
parts, and the manifests' size and mtime: any change gives a new key, so a stale plan is never used. A store
that cannot be written (read-only) just builds the plan each time."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from atomicio import atomic_write
from store import layout

log = logging.getLogger(__name__)
FOLDER = (layout.VIEWS, "plans")
VERSION = 2  # 2: A3/A4 answer orders drawn by reading.datasets.a4_choices (counter-based), not one numpy Generator per question


def key(store: Any, options: dict[str, Any], features: list[str]) -> str:
    """The plan's key for this store snapshot."""
    state = {f: [store.index(f).generation, store.index(f).length,
                 sorted(store.part_problems(f))]  # damaged parts (quick check)
             for f in sorted(set(features))}
    manifests = {}
    for name in ("items.jsonl", "qa.jsonl"):
        try:
            st = (layout.manifest_dir(store.path) / name).stat()
            manifests[name] = [st.st_size, st.st_mtime_ns]
        except FileNotFoundError:
            manifests[name] = None
    return layout.sha256_of({"v": VERSION, "options": options, "index": state, "manifests": manifests})[:24]


def _path(store_path: Path, k: str) -> Path:
    return Path(store_path).joinpath(*FOLDER, f"{k}.json")


def load(store_path: Path, k: str) -> dict[str, Any] | None:
    try:
        return json.loads(_path(store_path, k).read_bytes())
    except (OSError, ValueError):
        return None


def save(store_path: Path, k: str, plan: dict[str, Any]) -> None:
    path = _path(store_path, k)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(plan, separators=(",", ":")), durable=False)  # a cache: see atomicio
    except OSError as e:  # a read-only store: no cache, nothing else changes
        log.debug("plan not cached in %s: %s", path.parent, e)
