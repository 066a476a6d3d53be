"""The index's bad states and their repair (under the store's write lock).

- A torn last line (no newline: a killed append) is no line of the log: the next append cuts it off.
- A part folder no index line names (a commit killed before its line was complete, or lines lost to damage:
  a log cut at a line boundary) is adopted: its record, read from its own metadata, is appended to the log
  (or the log is rebuilt from all parts when it is older than the log's last part, so that supersession
  keeps the parts' order). Its rows were complete and fsynced before it was renamed into place, so nothing
  deletes it: a part is removed only by compaction, once its rows are in newer parts and no reader pins an
  index that names it (`release_retired`).
- A damaged index (a complete line that fails its checksum, the last one included) or a deleted one, while
  part folders exist: the index is rebuilt from the parts, whose own metadata (`siqfeat_part`) holds their sequence number, entries and the size and SHA-256
  of each data file as committed; later parts supersede earlier ones, as in the log. A data file damaged
  before the rebuild therefore still differs from the rebuilt record, and verify reports its part.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from store import index, parts
from store.integrity import NOTES

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


RETIRED = "retired"  # <feature>/retired/<id>.log: an index log a compaction replaced, while readers may pin it


def retired_dir(store: Path, feature: str) -> Path:
    return store / feature / RETIRED


def retire_current(store: Path, feature: str) -> Path:
    """Keep the feature's current index log reachable (a hard link under `retired/`) before a compaction
    renames a new one over it: readers pin that file (a shared flock on it: store/reader.py), and its
    parts are removed only once none does (`release_retired`)."""
    folder = retired_dir(store, feature)
    folder.mkdir(exist_ok=True)
    link = folder / f"{uuid.uuid4().hex}.log"
    os.link(store / feature / index.INDEX, link)
    index.fsync_path(folder)
    return link


def _named(log_path: Path) -> set[str] | None:
    """The parts a log names; None when it cannot be read whole (then nothing it names is removed)."""
    names: set[str] = set()
    try:
        index.fold(log_path.read_bytes(), log_path,
                   lambda rec: names.add(str(rec["part"])) if rec.get("kind") == "part" else None)
    except (OSError, ValueError, KeyError):
        return None
    return names


def retired_parts(store: Path, feature: str) -> set[str]:
    """Parts named by a retired log (kept for readers, removed by `release_retired`): not unindexed."""
    out: set[str] = set()
    for log_path in sorted(retired_dir(store, feature).glob("*.log")):
        out |= _named(log_path) or set()
    return out


def release_retired(store: Path, feature: str, state: index.IndexState) -> list[str]:
    """Remove the parts of retired logs that no reader pins any more (no shared flock held on them) and that
    neither the current index (`state`) nor a still pinned log names; then those logs. The caller holds the
    write lock. Returns the removed parts."""
    pinned: set[str] = set()
    free: list[tuple[Path, int, set[str]]] = []
    try:
        for log_path in sorted(retired_dir(store, feature).glob("*.log")):
            fd = os.open(log_path, os.O_RDONLY)
            names = _named(log_path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until its parts are gone
            except OSError:  # a reader holds it (or flock fails here): its parts stay
                os.close(fd)
                pinned |= names or set()
                continue
            if names is None:  # unreadable: which parts it names is unknown, so none is removed
                log.warning("%s: unreadable retired index, kept with its parts", log_path)
                os.close(fd)
                continue
            free.append((log_path, fd, names))
        removed = []
        for log_path, _, names in free:
            done = True
            for name in sorted(names - set(state.parts) - pinned):
                folder = parts.part_dir(store, feature, name)
                if folder.exists():
                    shutil.rmtree(folder, ignore_errors=True)
                    if folder.exists():  # kept with its log, so that a later writer tries again
                        log.warning("%s: could not remove this superseded part; a later writer tries again", folder)
                        done = False
                        continue
                    removed.append(name)
                (store / feature / NOTES / name).unlink(missing_ok=True)  # a damage note of the part, if any
            if done:
                log_path.unlink()
    finally:
        for _, fd, _ in free:
            with contextlib.suppress(OSError):
                os.close(fd)
    if removed:
        log.info("%s: removed %d part(s) superseded by a compaction (no reader holds them)", store / feature,
                 len(removed))
    return removed


def unindexed(store: Path, feature: str, state: index.IndexState) -> list[str]:
    """Part folders on disk that the index does not name (nor a retired log kept for readers)."""
    names = [n for n in part_names(store, feature) if n not in state.parts]
    if names:
        retired = retired_parts(store, feature)
        names = [n for n in names if n not in retired]
    return names


@dataclass
class Adopted:
    feature: str
    parts: list[str]
    items: int
    unreadable: list[str]

    def line(self) -> str:
        lost = (f"; {len(self.unreadable)} with unreadable metadata left as they are: {', '.join(self.unreadable)}"
                if self.unreadable else "")
        return (f"  UNINDEXED {self.feature}: {len(self.parts)} part(s) on disk that no index line named "
                f"({', '.join(self.parts)}), {self.items} item(s), adopted into the index from their own metadata"
                f"{lost}")


def adopt(store: Path, feature: str, state: index.IndexState, names: list[str]) -> tuple[index.IndexState, Adopted]:
    """Put unindexed parts back into the index (caller holds the write lock): appended after the log when
    each is newer than its last part, else the log is rebuilt from every part in sequence order."""
    found, unreadable = [], []
    for name in names:
        folder = parts.part_dir(store, feature, name)
        try:
            found.append(parts.record_from_part(folder))
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("%s: a part no index line names, with unreadable metadata: left as it is (%s: %s)",
                        folder, type(e).__name__, e)
            unreadable.append(name)
    found.sort(key=lambda r: (r["seq"], r["part"]))
    path = store / feature / index.INDEX
    if found and found[0]["seq"] <= state.last_seq:
        rebuild(store, feature, f"{len(found)} part(s) no index line names, older than its last line")
    elif found:
        index.append(path, found, state.length)
    adopted = Adopted(feature, [r["part"] for r in found], sum(len(r["items"]) for r in found), unreadable)
    if found:
        log.warning("%s", adopted.line().strip())
    return index.load(path), adopted


def open_index(store: Path, feature: str) -> index.IndexState:
    """The writer's view of a feature's index, repaired first when it must be (see the module docstring),
    and the parts compactions retired removed where no reader pins them any more."""
    path = store / feature / index.INDEX
    why = problem(store, feature)
    if why is not None:
        rebuild(store, feature, why)
    if not path.exists():
        index.replace(path, [index.header()])
    state = index.load(path)
    orphans = unindexed(store, feature, state)
    if orphans:
        state, _ = adopt(store, feature, state, orphans)
    release_retired(store, feature, state)
    return state
