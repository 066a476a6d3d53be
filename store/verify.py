"""`python -m pipeline verify` / `make verify`: every item of a store checked against what the writer
recorded when it committed it (store/integrity.py, full check: content hashes included), and every
metadata file of the store: its own `zarr.json`, each feature's `zarr.json` and the manifests.

The store is walked on disk, not through zarr: a feature whose `zarr.json` is missing or damaged is still
a feature (every visible folder but `_manifests` and `_runs` is one), reported as damaged metadata, and its
items are checked like any other; a damaged root does not stop the items from being checked either."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from manifests.records import MediaItem, QAItem, read_jsonl
from store import layout
from store.integrity import (
    DamagedItem,
    ItemCheck,
    check_item,
    item_dirs,
    read_group_attrs,
    record_required,
    records_marker,
)

_REPAIR = {"root": "the store's own metadata: repair it by hand (its items are checked here regardless)",
           "feature": "`make extract` with this feature writes it anew from the run's spec",
           "manifest": "`make extract` writes it anew"}


@dataclass(frozen=True)
class VerifyReport:
    store: Path
    checks: list[ItemCheck]
    seconds: float
    metadata: list[tuple[Path, str]]  # (file, problem) for each damaged metadata file of the store

    @property
    def damaged(self) -> list[ItemCheck]:
        return [c for c in self.checks if not c.ok]

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.metadata

    def summary(self) -> str:
        lines = [f"verify {self.store}: {len(self.checks)} item(s) in {self.seconds:.2f} s",
                 f"  {'feature':<12}{'ok':>6}{'damaged':>9}{'no record':>11}"]
        for feat in sorted({c.feature for c in self.checks}):
            mine = [c for c in self.checks if c.feature == feat]
            lines.append(f"  {feat:<12}{sum(c.ok for c in mine):>6}{sum(not c.ok for c in mine):>9}"
                         f"{sum(c.ok and not c.recorded for c in mine):>11}")
        for path, problem in self.metadata:
            lines.append(f"  DAMAGED METADATA {path}: {problem}")
        for c in self.damaged:
            lines.append(f"  DAMAGED {c.feature}/{c.item} ({c.path}): {c.problem}")
        for c in self.checks:
            if c.ok and not c.recorded:
                lines.append(f"  NO RECORD {c.feature}/{c.item}: committed before integrity records; its metadata "
                             "reads and its arrays decode, but its bytes cannot be compared with the commit")
        if self.damaged:
            lines.append(f"  {len(self.damaged)} damaged item(s): `make extract EXTRACT_ARGS=--verify` on this store recomputes them")
        return "\n".join(lines)


def _is_store(path: Path) -> bool:
    return any((path / name).exists() for name in ("zarr.json", layout.LOCK, *layout.RESERVED))


def _metadata(path: Path, features: list[str]) -> tuple[list[tuple[Path, str]], dict | None]:
    """Damaged metadata files (with what to do) and the root's attributes (None when unreadable)."""
    problems, root = [], None
    try:
        root = read_group_attrs(path)
        if root.get("schema") is None:
            raise DamagedItem("zarr.json has no schema attribute")
        if root["schema"] != layout.SCHEMA:
            raise ValueError(f"{path}: schema {root['schema']!r}, this code knows {layout.SCHEMA!r}")
    except DamagedItem as e:
        problems.append((path / "zarr.json", f"{e}; {_REPAIR['root']}"))
    for feature in features:
        try:
            read_group_attrs(path / feature)
        except DamagedItem as e:
            problems.append((path / feature / "zarr.json", f"{e}; {_REPAIR['feature']}"))
    for name, kind in (("items.jsonl", MediaItem), ("qa.jsonl", QAItem)):
        file = layout.manifest_dir(path) / name
        try:
            if file.exists():
                for _ in read_jsonl(file, kind):
                    pass
        except (OSError, ValueError) as e:
            problems.append((file, f"unreadable ({' '.join(str(e).split())[:300]}); {_REPAIR['manifest']}"))
    return problems, root


def verify_store(path: Path | str, features: list[str] | None = None) -> VerifyReport:
    t0 = time.perf_counter()
    path = Path(path)
    if not _is_store(path):
        raise FileNotFoundError(f"{path}: not a feature store (no zarr.json); run `make extract` first")
    present = [name for name, _ in item_dirs(path) if name not in layout.RESERVED]
    unknown = set(features or []) - set(present)
    if unknown:
        raise ValueError(f"{path}: no feature(s) {sorted(unknown)}; present: {present}")
    chosen = features or present
    metadata, root = _metadata(path, chosen)
    marker = records_marker(root)
    checks = [check_item(p, f, name, True, record_required(marker, f, name))
              for f in chosen for name, p in item_dirs(path / f)]
    return VerifyReport(path, checks, time.perf_counter() - t0, metadata)
