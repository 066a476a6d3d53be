"""Dataset plans kept beside the store (`<store>/_views/plans/<key>.json`), so that building a dataset again
costs a file read. The key hashes the task's options, each feature's index generation, length and damaged
parts, and the manifests' size and mtime: any change gives a new key, so a stale plan is never used. A store
that cannot be written (read-only) just builds the plan each time. Each file carries the SHA-256 of its plan:
a file damaged after it was written (a flipped byte that keeps the JSON valid would change a row number) is
said and built again, never used."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from atomicio import atomic_write
from store import layout
from store.backends import BackendError, is_url, open_backend

log = logging.getLogger(__name__)
FOLDER = (layout.VIEWS, "plans")
VERSION = 3  # 3: the plan's checksum in the file;  2: A3/A4 answer orders drawn by reading.datasets.a4_choices (counter-based), not one numpy Generator per question


def key(store: Any, options: dict[str, Any], features: list[str]) -> str:
    """The plan's key for this store snapshot."""
    state = {f: [store.index(f).generation, store.index(f).length,
                 sorted(store.part_problems(f))]  # damaged parts (quick check)
             for f in sorted(set(features))}
    manifests = {}
    for name in ("items.jsonl", "qa.jsonl"):
        try:
            if isinstance(store.path, Path):
                st = (layout.manifest_dir(store.path) / name).stat()
                manifests[name] = [st.st_size, st.st_mtime_ns]
            else:  # in a bucket: its size and ETag (a rewrite is a new ETag)
                info = store.backend.head(f"{layout.MANIFESTS}/{name}")
                manifests[name] = [info.size, info.version]
        except FileNotFoundError:
            manifests[name] = None
    return layout.sha256_of({"v": VERSION, "options": options, "index": state, "manifests": manifests})[:24]


def _path(store_path: Path | str, k: str) -> Path | str:
    if is_url(store_path):  # in the bucket, beside the store's parts (`_views/plans/<key>.json`)
        return "/".join((str(store_path).rstrip("/"), *FOLDER, f"{k}.json"))
    return Path(store_path).joinpath(*FOLDER, f"{k}.json")


def _bucket_key(store_path: str, k: str) -> tuple[Any, str]:
    return open_backend(store_path), "/".join((*FOLDER, f"{k}.json"))


def load(store_path: Path | str, k: str) -> dict[str, Any] | None:
    """The plan saved under `k`, or None: none saved, or one whose bytes no longer match its checksum."""
    path = _path(store_path, k)
    try:
        if isinstance(path, str):
            backend, key = _bucket_key(str(store_path), k)
            doc = json.loads(backend.get(key))
        else:
            doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, BackendError) as e:
        log.warning("plan cache %s unreadable (%s): building the plan again", path, e)
        return None
    plan = doc.get("plan") if isinstance(doc, dict) else None
    if not isinstance(plan, dict) or doc.get("sha256") != layout.sha256_of(plan):
        log.warning("plan cache %s is damaged (its plan does not match its checksum): building the plan again", path)
        return None
    return plan


def save(store_path: Path | str, k: str, plan: dict[str, Any]) -> None:
    path = _path(store_path, k)
    try:
        plan = json.loads(json.dumps(plan))  # as it will read back (tuples as lists): what the checksum covers
        body = json.dumps({"sha256": layout.sha256_of(plan), "plan": plan}, separators=(",", ":"))
        if isinstance(path, str):  # an object is written whole by nature
            backend, key = _bucket_key(str(store_path), k)
            backend.put(key, body.encode())
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, body, durable=False)  # a cache: see atomicio
    except (OSError, BackendError) as e:  # a read-only store (or bucket): no cache, nothing else changes
        log.debug("plan not cached for %s: %s", path, e)
