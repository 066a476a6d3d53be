"""The index's bad states and their repair, under the store's write lock (docs/design.md, "Commit"): a damaged
or missing log rebuilt from the parts' own records, parts no line names adopted, parts of retired logs no
reader leases any more removed (`release_retired`)."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from atomicio import fsync_path
from store import index, layout, parts

log = logging.getLogger(__name__)


@dataclass
class Rebuilt:
    feature: str
    reason: str
    parts: int = 0
    items: int = 0
    unreadable: list[str] = field(default_factory=list)  # part folders whose metadata did not read: lost
    damage: bool = False  # the log was in a state no crash makes (lines out of order): verify exits 4

    def line(self) -> str:
        lost = f"; {len(self.unreadable)} unreadable part(s) left out: {', '.join(self.unreadable)}" if self.unreadable else ""
        return (f"  REBUILT {self.feature}/{layout.INDEX} ({self.reason}) from {self.parts} part(s), "
                f"{self.items} item(s){lost}")


def load(store: Path, feature: str) -> tuple[index.Index | None, str | None]:
    """The feature's index read once: (its state, None), or (None, why it cannot be used as it is), or
    (None, None) when there is neither a log nor a part (a new feature)."""
    path = layout.index_path(store, feature)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, "index missing" if parts.part_names(store, feature) else None
    except OSError as e:
        return None, f"index unreadable ({e.strerror or e})"
    try:
        return index.parse(data, path), None
    except layout.IndexOutOfOrder as e:
        return None, str(e).split(": ", 1)[1].split("; ")[0]
    except layout.IndexDamaged as e:
        return None, str(e).split(": ", 1)[1].split(" (")[0]


def rebuild(store: Path, feature: str, reason: str) -> tuple[Rebuilt, index.Index]:
    """Write the feature's index anew from its parts (caller holds the write lock); the new state."""
    out = Rebuilt(feature, reason)
    found, unreadable = parts.records_on_disk(store, feature)
    for name, why in unreadable.items():
        log.warning("%s: unreadable part left out of the rebuilt index (%s)", layout.part_dir(store, feature, name), why)
    out.unreadable = list(unreadable)
    records = index.chained([layout.new_header(), *found])
    state = index.of_records(records, index.replace(layout.index_path(store, feature), records))
    out.parts, out.items = len(found), len(state.entries)
    log.warning("%s", out.line().strip())
    return out, state


def retire_current(store: Path, feature: str) -> Path:
    """Keep the feature's current index log reachable (a hard link under `retired/`) before a compaction
    renames a new one over it: readers pin that file (a shared flock on it: store/reader.py), and its
    parts are removed only once none does (`release_retired`)."""
    folder = layout.retired_dir(store, feature)
    folder.mkdir(exist_ok=True)
    link = folder / f"{uuid.uuid4().hex}.log"
    os.link(layout.index_path(store, feature), link)
    fsync_path(folder)
    return link


def _named(log_path: Path) -> set[str] | None:
    """The parts a log names; None when it cannot be read whole (then nothing it names is removed)."""
    names: set[str] = set()
    try:
        layout.fold(log_path.read_bytes(), log_path,
                    lambda rec: names.add(rec.part) if isinstance(rec, layout.PartLine) else None)
    except (OSError, ValueError, KeyError):
        return None
    return names


def retired_parts(store: Path, feature: str) -> set[str]:
    """Parts named by a retired log (kept for readers, removed by `release_retired`): not unindexed."""
    out: set[str] = set()
    for log_path in sorted(layout.retired_dir(store, feature).glob("*.log")):
        out |= _named(log_path) or set()
    return out


def release_retired(store: Path, feature: str, state: index.Index) -> list[str]:
    """Remove the parts of retired logs that no reader pins any more (no shared flock held on them) and that
    neither the current index (`state`) nor a still pinned log names; then those logs. The caller holds the
    write lock. Returns the removed parts."""
    pinned: set[str] = set()
    free: list[tuple[Path, int, set[str]]] = []
    try:
        for log_path in sorted(layout.retired_dir(store, feature).glob("*.log")):
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
                folder = layout.part_dir(store, feature, name)
                if folder.exists():
                    shutil.rmtree(folder, ignore_errors=True)
                    if folder.exists():  # kept with its log, so that a later writer tries again
                        log.warning("%s: could not remove this superseded part; a later writer tries again", folder)
                        done = False
                        continue
                    removed.append(name)
                (layout.notes_dir(store, feature) / name).unlink(missing_ok=True)  # a damage note of the part, if any
            if done:
                log_path.unlink()
    finally:
        for _, fd, _ in free:
            with contextlib.suppress(OSError):
                os.close(fd)
    if removed:  # housekeeping: their rows live on in the compacted parts (the run's summary says what was reclaimed)
        log.debug("%s: removed %d part(s) superseded by a compaction (no reader holds them)", store / feature,
                  len(removed))
    return removed


def unindexed(store: Path, feature: str, state: index.Index) -> list[str]:
    """Part folders on disk that the index does not name (nor a retired log kept for readers)."""
    names = [n for n in parts.part_names(store, feature) if n not in state.parts]
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
    damage: bool = False  # a part older than the log's last line: a middle line was deleted (verify exits 4)

    def line(self) -> str:
        lost = (f"; {len(self.unreadable)} with unreadable metadata left as they are: {', '.join(self.unreadable)}"
                if self.unreadable else "")
        return (f"  UNINDEXED {self.feature}: {len(self.parts)} part(s) on disk that no index line named "
                f"({', '.join(self.parts)}), {self.items} item(s), adopted into the index from their own metadata"
                f"{lost}")


def adopt(store: Path, feature: str, state: index.Index, names: list[str]) -> tuple[index.Index, Adopted]:
    """Put unindexed parts back into the index (caller holds the write lock): appended after the log when
    each is newer than its last part, else the log is rebuilt from every part in sequence order."""
    found, unreadable = parts.records_on_disk(store, feature, names)
    for name, why in unreadable.items():
        log.warning("%s: a part no index line names, with unreadable metadata: left as it is (%s)",
                    layout.part_dir(store, feature, name), why)
    adopted = Adopted(feature, [r.part for r in found], sum(len(r.rows) for r in found), list(unreadable))
    if found and found[0].seq <= state.last_seq:  # no crash leaves one: a middle line was deleted
        adopted.damage = True
        _, state = rebuild(store, feature, f"{len(found)} part(s) no index line names, older than its last line")
    elif found:
        state.publish(layout.index_path(store, feature), found)
    if found:
        log.warning("%s", adopted.line().strip())
    return state, adopted


def open_index(store: Path, feature: str, reports: list[Rebuilt | Adopted] | None = None) -> index.Index:
    """The writer's view of a feature's index, its log read once: repaired first when it must be (see the
    module docstring; each repair's report appended to `reports`), and the parts compactions retired removed
    where no reader pins them any more."""
    reports = [] if reports is None else reports
    state, why = load(store, feature)
    if why is not None:
        rebuilt, state = rebuild(store, feature, why)
        rebuilt.damage = why.startswith(index.DISORDER)
        reports.append(rebuilt)
    elif state is None:  # a new feature
        records: list[layout.Record] = [layout.new_header()]
        state = index.of_records(records, index.replace(layout.index_path(store, feature), records))
    orphans = unindexed(store, feature, state)
    if orphans:
        state, adopted = adopt(store, feature, state, orphans)
        reports.append(adopted)
    release_retired(store, feature, state)
    return state
