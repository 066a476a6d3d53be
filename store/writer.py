"""The store's only writer: every change a typed operation (`Append`, `Rewrite`) through one commit path, parts
placed whole and then published by one durable index append or a new generation, so a kill leaves nothing a
reader takes for data (docs/design.md, "Commit"). One writer per store: the backend's lock. Written against
the backend contract alone (store/backends/base.py): where a local folder and object storage differ (a flock
or a lease, a rename or an upload, an append or a conditional segment), the backend does it; this engine
never learns which one it is on."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import zarr

from manifests.records import MediaItem, QAItem, check_id
from rows import FeatureRows
from store import index, layout, parts, repair
from store.backends import BackendError, Conflict, Locked, join, location, open_backend
from store.backends.base import LogEnd
from store.workerparts import WrittenRows, part_meta

log = logging.getLogger(__name__)
Member = tuple[str, FeatureRows, dict[str, Any]]  # (item, rows, attributes)


@dataclass(frozen=True)
class Append:
    """New parts, one per batch (items of one array signature each), appended to the index: their items'
    rows supersede older ones of the same items."""

    batches: list[list[Member]]


@dataclass(frozen=True)
class Rewrite:
    """The rows in `batches` (the current rows of the parts in `old`, read back) written as new parts, and
    a new index generation naming the feature's other parts and the new ones but none of `old`. The old
    parts are removed once no reader holds a generation that names them (store/repair.py `release_retired`)."""

    old: frozenset[str]
    batches: list[list[Member]]


def _package_version() -> str:
    try:
        return version("siqfeat")
    except PackageNotFoundError:
        return "0+unknown"


class StoreError(RuntimeError):
    """The store as a whole cannot be written (read-only, not a folder, disk full, unreadable root
    metadata); the message names the path and the problem in one line."""


class StoreLocked(StoreError):
    """Another run holds the store's write lock."""


def _os_problem(e: OSError, fallback: Any) -> str:
    """'<path>: <problem>' from an OSError, whichever path it names (or the store's)."""
    return f"{e.filename or fallback}: {e.strerror or e}"


# the storage failed (full, read-only, over quota, I/O error), not the input: the CLI exits STORE on these too
STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO}


class StoreWriter:
    """Creates `<dataset>.zarr` if needed (a folder, or a prefix in a bucket: s3://, gs://, az://) and commits
    batches of finished (feature, item) pairs into it, holding the store's lock until `close`."""

    def __init__(self, path: Path | str, dataset: str) -> None:
        self.path: Any = location(path)  # a Path, or a URL's text: as given, for the callers' messages
        self._index: dict[str, index.Index] = {}
        self._finished: dict[tuple[str, str], bool] = {}  # workers' parts given their zarr.json, not yet published
        self._groups: set[str] = set()  # features whose group is known to exist (`_has_group`)
        self._held: contextlib.ExitStack | None = contextlib.ExitStack()
        self.backend = open_backend(self.path)
        try:
            try:
                self.backend.check()
            except BackendError as e:  # the store itself (a file, say, where its folder should be)
                raise StoreError(str(e)) from None
            try:
                self._held.enter_context(self.backend.lock(layout.LOCK, f"pid {os.getpid()} on {os.uname().nodename}"))
            except Locked as e:
                raise StoreLocked(str(e)) from None
            self.root = self._open_root()
            self._claim_root(dict(self.root.attrs), dataset)
            left = self.backend.sweep_staged()  # safe: this writer holds the store's lock
            if left:
                log.info("removing %d unfinished part(s) left by an interrupted run", left)
        except OSError as e:
            self.close()
            raise StoreError(f"cannot write the store: {_os_problem(e, self.path)}") from e
        except BaseException:
            self.close()
            raise

    def _claim_root(self, attrs: dict[str, Any], dataset: str) -> None:
        """A version-2 store of `dataset`, or a new one, which is made so (store/migrate.py overrides this)."""
        layout.check_schema(self.path, attrs)
        if attrs.get("dataset", dataset) != dataset:
            raise ValueError(f"{self.path}: store holds dataset {attrs['dataset']!r}, not {dataset!r}")
        if attrs.get("schema") != layout.SCHEMA or attrs.get("dataset") != dataset:
            self.root.attrs.update({"schema": layout.SCHEMA, "dataset": dataset, "package_version": _package_version()})

    def _open_root(self) -> zarr.Group:
        try:
            return zarr.open_group(self.backend.zarr_store(), mode="a")
        except (ValueError, TypeError, KeyError) as e:  # invalid JSON is a ValueError too
            raise StoreError(f"{self.backend.where(layout.META)}: the store's own metadata is unreadable "
                             f"({type(e).__name__}: {e}); its items may be intact, but this store needs repair "
                             "by hand or a new --out") from e

    def close(self) -> None:
        """Release the store's write lock (also done when the writer is garbage-collected or the process ends);
        the holder's name is erased first, so a later reader never takes it for the next holder."""
        held, self._held = getattr(self, "_held", None), None
        if held is not None:
            held.close()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def set_feature(self, feature: str, attrs: dict[str, Any]) -> None:
        """Create or update a feature group's attributes (extractor, version, config, columns, rate_hz, weights)."""
        check_id(feature)
        if feature in layout.RESERVED:
            raise ValueError(f"invalid feature name {feature!r}: the store keeps its own {feature}/ folder")
        try:
            try:
                group = self.root.require_group(feature)
            except (ValueError, TypeError, KeyError) as e:  # its metadata is damaged; the parts are separate
                meta = join(feature, layout.META)
                log.warning("%s: unreadable (%s: %s); writing it anew from this run's spec", self.backend.where(meta),
                            type(e).__name__, e)
                self.backend.delete(meta)
                group = self.root.require_group(feature)
            if dict(group.attrs) != attrs:
                group.attrs.put(attrs)  # one metadata write: never a moment with no spec_hash
            self._groups.add(feature)
            self.index(feature)
        except OSError as e:
            raise StoreError(f"cannot write the store: {_os_problem(e, self.backend.where(feature))}") from e

    def index(self, feature: str) -> index.Index:
        """The feature's index as this writer keeps it, loaded once: repaired if damaged (rebuilt from the
        parts), parts that no index record names (a killed commit's) adopted, or removed when never finished,
        and the parts of replaced generations that no reader holds any more removed (store/repair.py)."""
        if feature not in self._index:
            try:
                self._index[feature] = repair.open_index(self.backend, feature)
            except Conflict as e:
                raise StoreError(f"{self.backend.where(join(feature, layout.INDEX))}: another writer changed this "
                                 f"index meanwhile ({e}); this run's lock was lost; run again") from None
        return self._index[feature]

    def commit(self, feature: str, item_id: str, rows: FeatureRows, item_attrs: dict[str, Any]) -> None:
        """Write one item's rows atomically (a batch of one); supersedes an older version of the same item."""
        self.commit_batch(feature, [(item_id, rows, item_attrs)])

    def commit_batch(self, feature: str, batch: list[Member]) -> None:
        """Write many items of one feature atomically: all of them become visible at once, or none.
        Items with differently shaped arrays go to separate parts of the same commit."""
        for item_id, _, _ in batch:
            check_id(item_id)
            if item_id in layout.RESERVED:
                raise ValueError(f"invalid id {item_id!r}: reserved by the store")
        latest = {item: (item, rows, {**rows.attrs, **attrs, "n_rows": int(len(rows.features)), "complete": True})
                  for item, rows, attrs in batch if not isinstance(rows, WrittenRows)}  # twice: its last rows count
        groups: dict[tuple, list[Member]] = {}
        for entry in latest.values():
            groups.setdefault(parts.signature(entry[1]), []).append(entry)
        self.commit_op(feature, Append([*groups.values(), *_written_parts(batch)]))

    def commit_op(self, feature: str, op: Append | Rewrite) -> index.Index:
        """The one commit path: the operation's parts written and placed, then published (records appended
        to the index, or a new generation). A failure removes the parts it placed: the store is as before.
        Returns the feature's index as it is now."""
        if not self._has_group(feature):
            raise KeyError(f"feature {feature!r} has no group yet; call set_feature first")
        state = self.index(feature)
        lines, placed = [], []
        try:
            for seq, members in enumerate(op.batches, start=state.last_seq + 1):
                written = members[0][1] if members and isinstance(members[0][1], WrittenRows) else None
                name = written.part.name if written is not None else f"{seq:09d}-{uuid.uuid4().hex[:8]}"
                lines.append(self._write_part(feature, name, seq, members))
                placed.append(name)
            retired = self._publish(feature, state, op, lines)
        except BaseException as e:
            published = self._index[feature] is not state  # a rewrite's new generation in place before the error
            for p in () if published else placed:  # never published: the store is as before
                self._remove_part(feature, p)
            if isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
                n = sum(len(b) for b in op.batches)
                raise StoreError(f"cannot write the store: {_os_problem(e, self.backend.where(feature))}; the batch "
                                 f"of {n} item(s) was {'published, its folder not flushed' if published else 'not committed'}"
                                 ) from e
            raise
        if retired:
            repair.release_retired(self.backend, feature, self._index[feature])
        return self._index[feature]

    def _has_group(self, feature: str) -> bool:
        # one request per commit otherwise (not group_keys(): that parses every feature); a group is never
        # removed while this writer holds the lock
        if feature not in self._groups and self.backend.exists(join(feature, layout.META)):
            self._groups.add(feature)
        return feature in self._groups

    def _remove_part(self, feature: str, name: str) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            if self._finished.pop((feature, name), False):  # a worker's: as it uploaded it, for a commit retried
                self.backend.delete(join(feature, layout.PARTS, name, layout.META))
                return
            self.backend.delete_prefix(join(feature, layout.PARTS, name))

    def _publish(self, feature: str, state: index.Index, op: Append | Rewrite, lines: list[layout.PartLine],
                 ) -> bool:
        """Make the written parts visible; True when a generation was replaced (a rewrite)."""
        key = join(feature, layout.INDEX)
        for line in lines:  # published from here on (or never, should this raise): nothing to take back
            self._finished.pop((feature, line.part), None)
        if isinstance(op, Append):
            try:
                repair.publish(self.backend, feature, state, lines)
            except Conflict as e:
                raise StoreError(f"{self.backend.where(key)}: another writer published to this index meanwhile "
                                 f"({e}); this run's lock was lost; run again") from None
            return False
        kept = _current_lines(state, set(state.parts) - op.old)
        records: list[layout.Record] = index.chained([layout.new_header(), *kept, *lines])
        data = b"".join(layout.encode(r) for r in records)
        try:
            token = self.backend.log_replace(key, data, LogEnd(state.token, state.length), retire=True)
        except Conflict as e:
            raise StoreError(f"{self.backend.where(key)}: changed by another writer during the compaction ({e}); "
                             "nothing was replaced") from None
        except BaseException:
            found = self._now_at(key, records[0])
            if found is not None:  # switched, then a later step failed (a folder's fsync): published
                self._index[feature] = index.of_records(records, len(data))
                self._index[feature].token = found
            raise
        self._index[feature] = index.of_records(records, len(data))
        self._index[feature].token = token
        return True

    def _now_at(self, key: str, header: layout.Record) -> str | None:
        """The log's generation name when its current generation begins with `header`, else None."""
        try:
            got = self.backend.log_read(key)
        except (OSError, RuntimeError):
            return None
        if got is None or got[1].split(b"\n", 1)[0] != layout.encode(header).rstrip(b"\n"):
            return None
        return got[0]

    def _write_part(self, feature: str, name: str, seq: int, members: list[Member]) -> layout.PartLine:
        if isinstance(members[0][1], WrittenRows):
            return self._finish_written(feature, name, seq, members)
        part, made = parts.MemoryPart(members), {}  # staged in memory: the same bytes whichever backend

        def finish() -> bytes:  # once its data files are placed: its own zarr.json, with its record
            staged = made["staged"] = part.staged()
            staged.group.attrs.put({layout.PART_ATTR: {"feature": feature, "seq": seq, "items": staged.entries,
                                                       "spans": staged.spans, "files": staged.own}})
            made["record"] = parts.record_staged(staged)
            return staged.bytes_of(layout.META)

        # each array's files handed over as soon as it is encoded (object storage sends them meanwhile)
        self.backend.place(join(feature, layout.PARTS, name), part.write(), layout.META, finish)
        rows, spans, (files, shapes) = made["staged"].entries, made["staged"].spans, made["record"]
        return layout.PartLine(name, seq, rows, files, shapes, spans)

    def _finish_written(self, feature: str, name: str, seq: int, members: list[Member]) -> layout.PartLine:
        """A part a worker uploaded (store/workerparts.py): its data files checked to be there as it recorded
        them (one listing), then its own zarr.json written with its record; the caller publishes it."""
        part = members[0][1].part
        key = join(feature, layout.PARTS, name)
        there = {i.key[len(key) + 1:]: i.size for i in self.backend.list(key)}
        wrong = sorted(rel for rel, (size, _) in part.files.items() if there.get(rel) != size)
        if wrong:
            raise OSError(f"{self.backend.where(key)}: the worker's upload is not all there ({', '.join(wrong[:3])}"
                          f"{' …' if len(wrong) > 3 else ''} missing or of another size); not published")
        rows = [layout.item_row(item, r0, n, attrs) for (item, _, attrs), (r0, n) in zip(members, part.rows, strict=True)]
        raw = part_meta(feature, seq, part, rows)
        self.backend.put(join(key, layout.META), raw)
        self._finished[feature, name] = True  # (a failed commit takes back only this: `_remove_part`)
        files = {**{rel: list(v) for rel, v in part.files.items()}, layout.META: [len(raw), hashlib.sha256(raw).hexdigest()]}
        return layout.PartLine(name, seq, rows, files, part.arrays, part.spans)

    def write_manifests(self, items: Iterable[MediaItem], qa: Iterable[QAItem]) -> None:
        for name, records in (("items.jsonl", items), ("qa.jsonl", qa)):
            key = join(layout.MANIFESTS, name)
            try:  # one record a line, written whole: a manifest is the store's truth
                self.backend.put(key, "".join(r.model_dump_json() + "\n" for r in records).encode())
            except OSError as e:
                raise StoreError(f"cannot write the store: {_os_problem(e, self.backend.where(layout.MANIFESTS))}") from e

    def write_run_report(self, run_id: str, report: dict[str, Any]) -> str:
        key = join(layout.RUNS, f"{run_id}.json")
        try:
            self.backend.put(key, layout.canonical_json(report).encode())
        except OSError as e:
            raise StoreError(f"cannot save the run report: {_os_problem(e, self.backend.where(key))}") from e
        return self.backend.where(key)


def _written_parts(batch: list[Member]) -> list[list[Member]]:
    """The parts workers wrote (`WrittenRows`), one batch each with its items in the part's row order and the
    attributes the part's record gets; ValueError when the batch lacks an item of one of them (a part is
    published whole or not at all)."""
    by_part: dict[str, dict[str, Member]] = {}
    for item, rows, attrs in batch:
        if isinstance(rows, WrittenRows):
            by_part.setdefault(rows.part.name, {})[item] = (
                item, rows, {**rows.attrs, **attrs, "n_rows": rows.n_rows, "complete": True})
    out = []
    for name, members in by_part.items():
        part = next(iter(members.values()))[1].part
        missing = [i for i in part.items if i not in members]
        if missing:
            raise ValueError(f"part {name}: item(s) {', '.join(missing)} of it are not in this commit; it is "
                             "published whole or not at all")
        out.append([members[i] for i in part.items])
    return out


def _current_lines(state: index.Index, keep: set[str]) -> list[layout.PartLine]:
    """The kept parts' lines in a new generation, in commit order: each with its entries that are still
    current (the others are superseded by later parts, which the new log names too)."""
    return [layout.PartLine(p, state.parts[p].seq, [layout.row_of(e) for e in es], state.parts[p].files,
                            state.parts[p].arrays, {e.item: e.spans for e in es if e.spans})
            for p, es in state.entries_of(keep).items()]
