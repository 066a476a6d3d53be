"""`python -m pipeline verify` / `make verify`: every item of a store checked against what the writer
recorded when it committed it (store/integrity.py, full check: content hashes included)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from store.integrity import ItemCheck
from store.reader import Store


@dataclass(frozen=True)
class VerifyReport:
    store: Path
    checks: list[ItemCheck]
    seconds: float

    @property
    def damaged(self) -> list[ItemCheck]:
        return [c for c in self.checks if not c.ok]

    def summary(self) -> str:
        lines = [f"verify {self.store}: {len(self.checks)} item(s) in {self.seconds:.2f} s",
                 f"  {'feature':<12}{'ok':>6}{'damaged':>9}{'no record':>11}"]
        for feat in sorted({c.feature for c in self.checks}):
            mine = [c for c in self.checks if c.feature == feat]
            lines.append(f"  {feat:<12}{sum(c.ok for c in mine):>6}{sum(not c.ok for c in mine):>9}"
                         f"{sum(c.ok and not c.recorded for c in mine):>11}")
        for c in self.damaged:
            lines.append(f"  DAMAGED {c.feature}/{c.item} ({c.path}): {c.problem}")
        for c in self.checks:
            if c.ok and not c.recorded:
                lines.append(f"  NO RECORD {c.feature}/{c.item}: committed before integrity records; its metadata "
                             "reads and its arrays decode, but its bytes cannot be compared with the commit")
        if self.damaged:
            lines.append(f"  {len(self.damaged)} damaged item(s): `make extract EXTRACT_ARGS=--verify` on this store recomputes them")
        return "\n".join(lines)


def verify_store(path: Path | str, features: list[str] | None = None) -> VerifyReport:
    t0 = time.perf_counter()
    store = Store(path)
    present = store.features()  # parses every feature's metadata: once
    unknown = set(features or []) - set(present)
    if unknown:
        raise ValueError(f"{path}: no feature(s) {sorted(unknown)}; present: {present}")
    checks = [c for f in (features or present) for c in store.check(f, full=True)]
    return VerifyReport(Path(path), checks, time.perf_counter() - t0)
