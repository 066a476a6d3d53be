"""The index's bad states and their repair (under the store's write lock).

- A torn last line (a killed append) is not a commit: the next append cuts it off.
- A part folder no index line names was renamed into place by a commit that was killed before its index
  line: it is removed (that batch was never acknowledged).
- A damaged index (a bad line that is not the last) or a deleted one, while part folders exist: the index
  is rebuilt from the parts, whose own metadata (`siqfeat_part`) holds their sequence number, entries and the size and SHA-256
  of each data file as committed; later parts supersede earlier ones, as in the log. A data file damaged
  before the rebuild therefore still differs from the rebuilt record, and verify reports its part.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from store import index, parts

log = logging.getLogger(__name__)


@dataclass
class Rebuilt:
    feature: str
    reason: str
    parts: int = 0
    items: int = 0
    unreadable: list[str] = field(default_factory=list)  # part folders whose metadata did not read: lost

    def line(self) -> str:
        lost = f"; {len(self.unreadable)} unreadable part(s) left out: {', '.join(self.unreadable)}" if self.unreadable else ""
        return (f"  REBUILT {self.feature}/{index.INDEX} ({self.reason}) from {self.parts} part(s), "
                f"{self.items} item(s){lost}")


def part_names(store: Path, feature: str) -> list[str]:
    folder = store / feature / parts.PARTS
    try:
        return sorted(p.name for p in folder.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []


def problem(store: Path, feature: str) -> str | None:
    """Why the feature's index cannot be used as it is (None: it can)."""
    path = store / feature / index.INDEX
    if not path.exists():
        return "index missing" if part_names(store, feature) else None
    try:
        index.load(path)
    except index.IndexDamaged as e:
        return str(e).split(": ", 1)[1].split(" (")[0]
    except OSError as e:
        return f"index unreadable ({e.strerror or e})"
    return None


def rebuild(store: Path, feature: str, reason: str) -> Rebuilt:
    """Write the feature's index anew from its parts (caller holds the write lock)."""
    out = Rebuilt(feature, reason)
    found = []
    for name in part_names(store, feature):
        folder = parts.part_dir(store, feature, name)
        try:
            found.append(parts.record_from_part(folder))
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("%s: unreadable part left out of the rebuilt index (%s: %s)", folder, type(e).__name__, e)
            out.unreadable.append(name)
    found.sort(key=lambda r: (r["seq"], r["part"]))
    index.replace(store / feature / index.INDEX, [index.header(), *found])
    state = index.load(store / feature / index.INDEX)
    out.parts, out.items = len(found), len(state.entries)
    log.warning("%s", out.line().strip())
    return out


def open_index(store: Path, feature: str) -> index.IndexState:
    """The writer's view of a feature's index, repaired first when it must be (see the module docstring)."""
    path = store / feature / index.INDEX
    why = problem(store, feature)
    if why is not None:
        rebuild(store, feature, why)
    if not path.exists():
        index.replace(path, [index.header()])
    state = index.load(path)
    orphans = [n for n in part_names(store, feature) if n not in state.parts]
    if orphans:
        log.info("%s: removing %d part(s) an interrupted run never committed", store / feature, len(orphans))
        for name in orphans:
            shutil.rmtree(parts.part_dir(store, feature, name), ignore_errors=True)
    return state
