"""Dataset plans kept beside the store (`<store>/_views/plans/<key>.json`, through the store's backend: a local
folder or a bucket), so that building a dataset again costs a file read. The key hashes the task's options,
each feature's index generation, length and damaged parts, and the manifests' size and version (locally size,
mtime and inode; in a bucket the ETag): any change gives a new key, so a stale plan is never used. A store
that cannot be written (read-only) just builds the plan each time. Each file carries the SHA-256 of its plan:
a file damaged after it was written (a flipped byte that keeps the JSON valid would change a row number) is
said and built again, never used."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from store import layout
from store.backends import BackendError, join, open_backend

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
            info = store.backend.head(join(layout.MANIFESTS, name))
            manifests[name] = [info.size, info.version]
        except FileNotFoundError:
            manifests[name] = None
    return layout.sha256_of({"v": VERSION, "options": options, "index": state, "manifests": manifests})[:24]


def _key(k: str) -> str:
    return join(*FOLDER, f"{k}.json")


def load(store_path: Path | str, k: str) -> dict[str, Any] | None:
    """The plan saved under `k`, or None: none saved, or one whose bytes no longer match its checksum."""
    backend = open_backend(store_path)
    path = backend.where(_key(k))
    try:
        doc = json.loads(backend.get(_key(k)))
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
    backend = open_backend(store_path)
    try:
        plan = json.loads(json.dumps(plan))  # as it will read back (tuples as lists): what the checksum covers
        backend.put(_key(k), json.dumps({"sha256": layout.sha256_of(plan), "plan": plan}, separators=(",", ":")).encode())
    except (OSError, BackendError) as e:  # a read-only store (or bucket): no cache, nothing else changes
        log.debug("plan not cached in %s: %s", backend.where(_key(k)), e)
