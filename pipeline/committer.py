"""Batched store commits off the driver's hot loop.

The driver hands each finished (feature, item) pair to `Committer.put` and goes back to scheduling; a
background thread gathers pairs per feature and commits them with `StoreWriter.commit_batch` (one
atomic transaction each) when a feature holds `batch_items` pairs or `batch_bytes` bytes, or its oldest
pair has waited `batch_age_s`. A kill loses at most the open batches (their pairs are recomputed by the
next run). Outcomes come back through `drain()`: the driver counts a pair done only once it is committed.
A storage error (disk full, read-only) stops the committer: that batch is not in the store, and every
later pair is refused with the same error (the run then ends with exit code 5).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pipeline import supervise
from store import StoreError, StoreWriter, WrittenRows

log = logging.getLogger(__name__)


class StoreStopped(Exception):
    """A pair never sent to the store: an earlier commit's store error (disk full) stopped all commits. Not the
    pair's failure (no FAILED line with another feature's path and error): the run counts it as not computed."""


@dataclass
class Outcome:
    feature: str
    item: str
    error: BaseException | None  # None: committed
    record: dict[str, Any] | None = None  # the batch's stage record (stages.py), on its first pair only


@dataclass
class _Open:
    pairs: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)
    nbytes: int = 0
    since: float = 0.0


def _nbytes(rows: Any) -> int:
    if isinstance(rows, WrittenRows):  # its bytes are in the store already, not in this process
        return 0
    return int(rows.features.nbytes + rows.intervals.nbytes + sum(getattr(v, "nbytes", 0) for v in rows.extras.values()))


class Committer:
    def __init__(self, writer: StoreWriter, batch_items: int = 512, batch_bytes: int = 128 << 20,
                 batch_age_s: float = 10.0) -> None:
        self.writer, self.batch_items, self.batch_bytes, self.batch_age_s = writer, batch_items, batch_bytes, batch_age_s
        self._in: queue.Queue[tuple[str, str, Any, dict[str, Any]] | None] = queue.Queue()
        self._out: queue.Queue[Outcome] = queue.Queue()
        self._open: dict[str, _Open] = {}
        self.store_error: StoreError | None = None
        self.commit_seconds = 0.0
        self.batches = 0
        self._thread = threading.Thread(target=self._loop, name="store-committer", daemon=True)
        self._thread.start()

    def put(self, feature: str, item: str, rows: Any, attrs: dict[str, Any]) -> None:
        self._in.put((feature, item, rows, attrs))

    def drain(self) -> list[Outcome]:
        out = []
        while True:
            try:
                out.append(self._out.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> list[Outcome]:
        """Commit what is open, stop the thread and return the outcomes not drained yet."""
        self._in.put(None)
        self._thread.join()
        return self.drain()

    def _loop(self) -> None:
        while True:
            timeout = self._next_deadline()
            try:
                got = self._in.get(timeout=timeout)
            except queue.Empty:
                got = ()
            if got is None:
                for feature in list(self._open):
                    self._commit(feature, closing=True)
                return
            if got:
                feature, item, rows, attrs = got
                batch = self._open.setdefault(feature, _Open(since=time.monotonic()))
                batch.pairs.append((item, rows, attrs))
                batch.nbytes += _nbytes(rows)
                if len(batch.pairs) >= self.batch_items or batch.nbytes >= self.batch_bytes:
                    self._commit(feature)
            now = time.monotonic()
            for feature, batch in list(self._open.items()):
                if now - batch.since >= self.batch_age_s:
                    self._commit(feature)

    def _next_deadline(self) -> float | None:
        if not self._open:
            return None
        oldest = min(b.since for b in self._open.values())
        return max(0.0, oldest + self.batch_age_s - time.monotonic())

    def _commit(self, feature: str, closing: bool = False) -> None:
        batch = self._open.pop(feature, None)
        if batch is None or not batch.pairs:
            return
        if not closing:  # a part a worker wrote goes whole: its items still to come keep it open
            batch, later = _whole_parts(batch)
            if later.pairs:
                self._open[feature] = later
            if not batch.pairs:
                return
        started, cpu0 = time.time(), time.thread_time()
        errors = self._write(feature, batch.pairs)
        if len(errors) < len(batch.pairs):  # for the command line's parent, should the driver end now
            supervise.note_commit(feature, [item for item, _, _ in batch.pairs if item not in errors])
        record = {"stage": f"commit:{feature}", "start_s": started, "end_s": time.time(),
                  "cpu_s": time.thread_time() - cpu0, "units": float(len(batch.pairs)), "items": len(batch.pairs),
                  "unit": "items"}
        self.commit_seconds += record["end_s"] - started
        self.batches += 1
        for k, (item, _, _) in enumerate(batch.pairs):
            self._out.put(Outcome(feature, item, errors.get(item), record if k == 0 else None))

    def _write(self, feature: str, pairs: list[tuple[str, Any, dict[str, Any]]]) -> dict[str, BaseException]:
        """item -> error of the pairs that were not committed. A batch that fails for a reason of its own
        (a malformed array) is committed again one pair at a time, so only the bad pair fails."""
        if self.store_error is not None:
            stopped = StoreStopped(f"not committed: the store stopped taking commits ({self.store_error})")
            return dict.fromkeys((item for item, _, _ in pairs), stopped)
        try:
            self.writer.commit_batch(feature, pairs)
            return {}
        except StoreError as e:
            log.error("%s", e)
            self.store_error = e
            return {item: e for item, _, _ in pairs}
        except Exception as e:
            units = _units(pairs)
            if len(units) == 1:
                return dict.fromkeys((item for item, _, _ in pairs), e)
        errors: dict[str, BaseException] = {}
        for unit in units:
            errors.update(self._write(feature, unit))
        return errors


def _units(pairs: list[tuple[str, Any, dict[str, Any]]]) -> list[list[tuple[str, Any, dict[str, Any]]]]:
    """What can be committed alone: a pair, or the pairs of one part a worker wrote (published whole)."""
    out: dict[Any, list[tuple[str, Any, dict[str, Any]]]] = {}
    for pair in pairs:
        rows = pair[1]
        out.setdefault(rows.part.name if isinstance(rows, WrittenRows) else (pair[0], id(pair)), []).append(pair)
    return list(out.values())


def _whole_parts(batch: _Open) -> tuple[_Open, _Open]:
    """(The pairs to commit now, those to keep open): a worker's part whose items have not all come yet (the
    driver hands them over one by one) waits for them."""
    missing: dict[str, int] = {}
    for _, rows, _ in batch.pairs:
        if isinstance(rows, WrittenRows):
            missing[rows.part.name] = missing.get(rows.part.name, len(rows.part.items)) - 1
    waiting = {p for p, n in missing.items() if n > 0}
    if not waiting:
        return batch, _Open()
    now = _Open(since=batch.since)
    later = _Open(since=time.monotonic())  # its age anew: tried again a batch's age from now, not at once
    for pair in batch.pairs:
        rows = pair[1]
        target = later if isinstance(rows, WrittenRows) and rows.part.name in waiting else now
        target.pairs.append(pair)
        target.nbytes += _nbytes(rows)
    return now, later
