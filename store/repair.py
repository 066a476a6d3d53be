"""The index's bad states and their repair, under the store's write lock (docs/design.md, "Commit"), on any
backend (store/backends/base.py): a damaged or missing log rebuilt from the parts' own records, parts no
record names adopted (or removed, when they were never finished: no zarr.json), and the parts of replaced
log generations that no reader holds any more removed (`release_retired`). The writer opens every index
through `open_index`; `python -m pipeline verify` repairs through it too."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from store import index, layout, parts
from store.backends import Backend, join, open_backend
from store.backends.base import LogEnd

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


def _backend(store: Path | Backend) -> Backend:
    return store if isinstance(store, Backend) else open_backend(store)


def _key(feature: str) -> str:
    return join(feature, layout.INDEX)


def load(store: Path | Backend, feature: str) -> tuple[index.Index | None, str | None, LogEnd | None]:
    """The feature's index read once: (its state, None, where its log ended), or (None, why it cannot be used
    as it is, where its log ended: None when there is none), or (None, None, ...) when there is neither a log
    nor a part (a new feature). A state's `token` is its generation's name (`LogEnd`)."""
    backend = _backend(store)
    key = _key(feature)
    try:
        got = backend.log_read(key)
    except OSError as e:
        return None, f"index unreadable ({e.strerror or e})", None
    end = None if got is None else LogEnd(got[0], len(got[1]))
    if got is None or not got[1]:  # (object storage: a generation without its first segment has no log)
        return None, "index missing" if parts.part_names(backend, feature) else None, end
    try:
        state = index.parse(got[1], backend.where(key))  # type: ignore[arg-type]
    except layout.IndexOutOfOrder as e:
        return None, str(e).split(": ", 1)[1].split("; ")[0], end
    except layout.IndexDamaged as e:
        return None, str(e).split(": ", 1)[1].split(" (")[0], end
    state.token = got[0]
    return state, None, end


def _write_new(backend: Backend, feature: str, records: list[layout.Record], end: LogEnd | None) -> index.Index:
    """`records` as the feature's whole new log (a rebuilt or a new one: the old, if any, not kept for readers)."""
    data = b"".join(layout.encode(r) for r in records)
    token = backend.log_replace(_key(feature), data, end, retire=False)
    state = index.of_records(records, len(data))
    state.token = token
    return state


def _unfinished(backend: Backend, feature: str, unreadable: dict[str, str], what: str) -> dict[str, str]:
    """Of the parts whose records do not read, remove those never finished (no zarr.json: a part's own zarr.json
    is placed last, so a killed upload leaves one without it) and say the others; those others."""
    left = {}
    for name, why in unreadable.items():
        key = join(feature, layout.PARTS, name)
        if not backend.exists(join(key, layout.META)):
            log.info("%s: removing a part that was never finished (no %s)", backend.where(key), layout.META)
            backend.delete_prefix(key)
            continue
        log.warning("%s: %s (%s)", backend.where(key), what, why)
        left[name] = why
    return left


def rebuild(store: Path | Backend, feature: str, reason: str, end: LogEnd | None = None,
            ) -> tuple[Rebuilt, index.Index]:
    """Write the feature's index anew from its parts (caller holds the write lock); the new state. `end`: where
    the log it replaces ended, as `load` read it."""
    backend = _backend(store)
    out = Rebuilt(feature, reason)
    found, unreadable = parts.records_on_disk(backend, feature)
    out.unreadable = list(_unfinished(backend, feature, unreadable, "unreadable part left out of the rebuilt index"))
    state = _write_new(backend, feature, index.chained([layout.new_header(), *found]), end)
    out.parts, out.items = len(found), len(state.entries)
    log.warning("%s", out.line().strip())
    return out, state


def reset(backend: Backend, feature: str) -> None:
    """The feature's log, where there is one, replaced by an empty one (its header alone; the caller holds the
    write lock and has removed the parts): a migration started over."""
    got = backend.log_read(_key(feature))
    if got is not None:
        _write_new(backend, feature, [layout.new_header()], LogEnd(got[0], len(got[1])))


def publish(backend: Backend, feature: str, state: index.Index, lines: list[layout.PartLine]) -> None:
    """Append part records to the feature's log after the end `state` was read at, then fold them into `state`.
    Conflict (nothing published) when another writer published there first."""
    records = index.chained(lines, state.order.prev)  # type: ignore[arg-type]
    data = b"".join(layout.encode(r) for r in records)
    state.length = backend.log_append(_key(feature), LogEnd(state.token, state.length), data)
    state.torn = False
    for rec in records:
        state.add(rec)


def _named(data: bytes | None, where: str) -> set[str] | None:
    """The parts a log names; None when it cannot be read whole (then nothing it names is removed)."""
    if data is None:
        return None
    names: set[str] = set()
    try:
        layout.fold(data, where, lambda rec: names.add(rec.part) if isinstance(rec, layout.PartLine) else None)
    except (ValueError, KeyError):
        return None
    return names


def retired_parts(store: Path | Backend, feature: str) -> set[str]:
    """Parts named by a replaced log generation (kept for readers, removed by `release_retired`): not unindexed."""
    backend = _backend(store)
    key = _key(feature)
    with backend.log_retired(key) as found:
        return {n for r in found for n in _named(r.data, backend.where(key)) or ()}


def release_retired(store: Path | Backend, feature: str, state: index.Index) -> set[str]:
    """Remove the parts of replaced log generations that no reader holds any more and that neither the current
    index (`state`) nor a held generation names; then those generations. The caller holds the write lock. The
    parts the kept generations name are returned (not unindexed: readers may still read them). A failure here
    is said and left to the next writer: what was published stays published."""
    backend = _backend(store)
    key = _key(feature)
    where = backend.where(key)
    kept: set[str] = set()
    removed: list[str] = []
    free: list[tuple[str, set[str]]] = []
    try:
        with backend.log_retired(key) as found:
            for retired in found:
                names = _named(retired.data, where)
                if retired.held:
                    kept |= names or set()
                elif names is None:  # unreadable: which parts it names is unknown, so none is removed
                    log.warning("%s: a replaced generation (%s) is unreadable, kept with its parts", where, retired.token)
                else:
                    free.append((retired.token, names))
            for token, names in free:
                done = True
                for name in sorted(names - set(state.parts) - kept):
                    part = join(feature, layout.PARTS, name)
                    try:
                        backend.delete_prefix(part)
                    except (OSError, RuntimeError) as e:  # kept with its log, so that a later writer tries again
                        log.warning("%s: could not remove this superseded part (%s); a later writer tries again",
                                    backend.where(part), e)
                        done = False
                        continue
                    removed.append(name)
                    backend.delete(join(feature, layout.NOTES, name))  # a damage note of the part, if any
                if done:
                    backend.log_drop(key, token)  # after its parts: a failure retries them
                else:
                    kept |= names
    except (OSError, RuntimeError) as e:
        log.warning("%s: could not remove the parts a compaction replaced (%s); the next writer tries again",
                    backend.where(feature), e)
        return kept | {n for _, names in free for n in names}
    if removed:  # housekeeping: their rows live on in the compacted parts (the run's summary says what was reclaimed)
        log.debug("%s: removed %d part(s) superseded by a compaction (no reader holds them)", backend.where(feature),
                  len(removed))
    return kept


def unindexed(store: Path | Backend, feature: str, state: index.Index, kept: set[str] | None = None) -> list[str]:
    """Part folders that the index does not name (nor a replaced generation kept for readers: `kept`, else
    every replaced generation's)."""
    backend = _backend(store)
    names = [n for n in parts.part_names(backend, feature) if n not in state.parts]
    if names:
        retired = retired_parts(backend, feature) if kept is None else kept
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


def adopt(store: Path | Backend, feature: str, state: index.Index, names: list[str]) -> tuple[index.Index, Adopted]:
    """Put unindexed parts back into the index (caller holds the write lock): appended after the log when
    each is newer than its last part, else the log is rebuilt from every part in sequence order. Parts never
    finished (no zarr.json) are removed."""
    backend = _backend(store)
    found, unreadable = parts.records_on_disk(backend, feature, names)
    unreadable = _unfinished(backend, feature, unreadable,
                             "a part no index record names, with unreadable metadata: left as it is")
    adopted = Adopted(feature, [r.part for r in found], sum(len(r.rows) for r in found), list(unreadable))
    if found and found[0].seq <= state.last_seq:  # no crash leaves one: a middle line was deleted
        adopted.damage = True
        _, state = rebuild(backend, feature, f"{len(found)} part(s) no index line names, older than its last line",
                           LogEnd(state.token, state.length))
    elif found:
        publish(backend, feature, state, found)
    if found:
        log.warning("%s", adopted.line().strip())
    return state, adopted


def open_index(store: Path | Backend, feature: str, reports: list[Rebuilt | Adopted] | None = None) -> index.Index:
    """The writer's view of a feature's index, its log read once: repaired first when it must be (see the
    module docstring; each repair's report appended to `reports`), and the parts compactions replaced removed
    where no reader holds them any more."""
    backend = _backend(store)
    reports = [] if reports is None else reports
    state, why, end = load(backend, feature)
    if why is not None:
        rebuilt, state = rebuild(backend, feature, why, end)
        rebuilt.damage = why.startswith(index.DISORDER)
        reports.append(rebuilt)
    elif state is None:  # a new feature
        state = _write_new(backend, feature, [layout.new_header()], end)
    kept = release_retired(backend, feature, state)
    orphans = unindexed(backend, feature, state, kept)
    if orphans:
        state, adopted = adopt(backend, feature, state, orphans)
        if adopted.parts or adopted.unreadable:
            reports.append(adopted)
    return state
