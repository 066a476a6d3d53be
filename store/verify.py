"""`python -m pipeline verify` / `make verify`: every part of a store checked against what the writer
recorded when it committed it (store/integrity.py, full check: content hashes included), and every
feature's index checked; a damaged or deleted index is rebuilt from the parts (under the write lock)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from store import repair
from store.integrity import ItemCheck
from store.reader import Store


@dataclass(frozen=True)
class VerifyReport:
    store: Path
    checks: list[ItemCheck]
    seconds: float
    rebuilt: list[repair.Rebuilt] = field(default_factory=list)

    @property
    def damaged(self) -> list[ItemCheck]:
        return [c for c in self.checks if not c.ok]

    def summary(self) -> str:
        lines = [f"verify {self.store}: {len(self.checks)} item(s) in {self.seconds:.2f} s",
                 f"  {'feature':<12}{'ok':>6}{'damaged':>9}"]
        for feat in sorted({c.feature for c in self.checks}):
            mine = [c for c in self.checks if c.feature == feat]
            lines.append(f"  {feat:<12}{sum(c.ok for c in mine):>6}{sum(not c.ok for c in mine):>9}")
        lines += [r.line() for r in self.rebuilt]
        for c in self.damaged:
            lines.append(f"  DAMAGED {c.feature}/{c.item} ({c.path}): {c.problem}")
        if self.damaged:
            lines.append(f"  {len(self.damaged)} damaged item(s): `make extract EXTRACT_ARGS=--verify` on this store recomputes them")
        return "\n".join(lines)


def verify_store(path: Path | str, features: list[str] | None = None) -> VerifyReport:
    t0 = time.perf_counter()
    path = Path(path)
    store = Store(path)
    present = store.features()  # parses every feature's metadata: once
    unknown = set(features or []) - set(present)
    if unknown:
        raise ValueError(f"{path}: no feature(s) {sorted(unknown)}; present: {present}")
    rebuilt = _repair_indexes(path, features or present)
    if rebuilt:
        store = Store(path)  # the repaired indexes
    checks = [c for f in (features or present) for c in store.check(f, full=True)]
    return VerifyReport(path, checks, time.perf_counter() - t0, rebuilt)


def _repair_indexes(path: Path, features: list[str]) -> list[repair.Rebuilt]:
    """Rebuild each damaged or missing index from its parts, holding the store's write lock."""
    broken = {f: why for f in features if (why := repair.problem(path, f)) is not None}
    if not broken:
        return []
    from store.writer import StoreWriter

    dataset = str(Store(path).attrs.get("dataset", ""))
    with StoreWriter(path, dataset):
        return [repair.rebuild(path, f, why) for f, why in broken.items()]
