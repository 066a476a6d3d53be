"""Names in the store's directory tree. Only `store/` code imports this."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SCHEMA = "siqfeat.store/2"  # packed parts + an index per feature (docs/design.md, "Store")
SCHEMA_V1 = "siqfeat.store/1"  # one folder per (feature, item): `python -m pipeline migrate` converts it
STAGING = ".staging"  # no zarr.json inside: invisible to zarr listings
LOCK = ".lock"  # held (flock) by the one open writer
MANIFESTS = "_manifests"  # plain JSONL files beside the groups
RUNS = "_runs"  # one JSON report per run
RESERVED = (MANIFESTS, RUNS, "_views", "parts", "index.log")  # names that are not features or items

FEATURES = "features"
INTERVALS = "intervals"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def spec_hash(extractor: str, version: str, config: dict[str, Any], weights: str) -> str:
    """What makes two runs of one feature produce the same rows from the same input."""
    return sha256_of({"extractor": extractor, "version": version, "config": config, "weights": weights})[:16]


def fingerprint(spec: str, source: dict[str, Any]) -> str:
    """Declared inputs only: the feature spec and the identity of the files read (never pickled code)."""
    return sha256_of({"spec": spec, "source": source})[:32]


def file_identity(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"name": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def manifest_dir(root: Path) -> Path:
    return root / MANIFESTS


def runs_dir(root: Path) -> Path:
    return root / RUNS


def v1_refusal(root: Path) -> str:
    return (f"{root}: a version-1 store (one folder per item); this code reads and writes version 2. "
            f"Convert it once with `python -m pipeline migrate --out {root}`")
