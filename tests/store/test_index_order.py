"""Issue 53 point 3: the index log checks its own order. Edits no crash makes (a middle line deleted, lines
swapped, an old line appended again, the log cut in its middle) are found: a reader warns and serves the newest
committed rows, `verify` names the damage (exit 4 where no crash could have made it) and rebuilds the log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store import index, layout
from store.reader import open_store
from store.verify import verify_store
from store.writer import StoreWriter

ATTRS = {"extractor": "x", "version": "1", "config": {}, "columns": ["a"], "rate_hz": 1.0, "weights": "none",
         "spec_hash": "s1"}
# (items, version) per commit: a and b are committed again, so each has older rows a bad log could serve
COMMITS = [("ab", 0), ("c", 0), ("a", 1), ("b", 1), ("d", 0)]
NEWEST = {"a": 1, "b": 1, "c": 0, "d": 0}


def _rows(item: str, version: int) -> FeatureRows:
    n = 2 + "abcd".index(item)
    return FeatureRows(np.full((n, 1), 10 * version + "abcd".index(item), np.float32),
                       np.stack([np.arange(n) * 1.0, np.arange(n) + 1.0], axis=1), {}, {})


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        for items, version in COMMITS:  # one part and one log line each
            w.commit_batch("feat", [(i, _rows(i, version), {"spec_hash": "s1", "fingerprint": f"{i}{version}"})
                                    for i in items])
    return path


def _lines(store: Path) -> list[bytes]:
    return (store / "feat" / layout.INDEX).read_bytes().splitlines(keepends=True)


def _write(store: Path, lines: list[bytes]) -> None:
    (store / "feat" / layout.INDEX).write_bytes(b"".join(lines))


def _newest_read(store: Path, items: dict[str, int] = NEWEST) -> None:
    s = open_store(store)
    try:
        assert sorted(s.items("feat")) == sorted(items)
        for item, version in items.items():
            np.testing.assert_array_equal(s.read("feat", item).features[...], _rows(item, version).features)
    finally:
        s.close()


def delete_line(k: int) -> Callable[[list[bytes]], list[bytes]]:
    return lambda lines: lines[:k] + lines[k + 1:]


# line 0 is the header; lines 1-5 the commits above
EDITS: dict[str, Callable[[list[bytes]], list[bytes]]] = {
    "a middle line deleted (a's newest rows)": delete_line(3),
    "another middle line deleted (b's newest)": delete_line(4),
    "the first commit's line deleted": delete_line(1),
    "the first line appended again": lambda lines: [*lines, lines[1]],
    "a's newest line appended again": lambda lines: [*lines, lines[3]],
    "two lines swapped": lambda lines: [*lines[:3], lines[4], lines[3], lines[5]],
    "a line repeated in place": lambda lines: [*lines[:3], lines[3], *lines[3:]],
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_log_out_of_order_is_damage_the_reader_warns_about_and_verify_names(
        store: Path, edit: str, caplog: pytest.LogCaptureFixture) -> None:
    _write(store, EDITS[edit](_lines(store)))
    log = store / "feat" / layout.INDEX
    with pytest.raises(layout.IndexOutOfOrder, match="part line"):
        index.parse(log.read_bytes(), log)
    with caplog.at_level(logging.WARNING):
        _newest_read(store)  # from the parts' own records: never an older version, never an item left out
    assert any("part line" in r.getMessage() and str(log) in r.getMessage() for r in caplog.records)
    report = verify_store(store)
    assert not report.ok and "REBUILT feat/index.log (part line" in report.summary(), report.summary()
    assert verify_store(store).ok  # rebuilt: in order again
    _newest_read(store)


@pytest.mark.parametrize("cut", ["mid-line", "at a line"])
def test_parts_newer_than_a_cut_log_are_served_with_a_warning(
        store: Path, cut: str, caplog: pytest.LogCaptureFixture) -> None:
    lines = _lines(store)
    kept = b"".join(lines[:3])
    _write(store, [kept + (lines[3][:40] if cut == "mid-line" else b"")])
    with caplog.at_level(logging.WARNING):
        _newest_read(store)
    assert any("3 part(s) committed after its last line" in r.getMessage() for r in caplog.records)
    with StoreWriter(store, "demo"):  # a run holds the lock: parts past the log may be commits in flight
        caplog.clear()
        s = open_store(store)
        assert sorted(s.items("feat")) == ["a", "b", "c"]  # this snapshot, as before
        s.close()
        assert not any("committed after" in r.getMessage() for r in caplog.records)
    report = verify_store(store)
    assert report.ok and "UNINDEXED feat: 3 part(s)" in report.summary()  # a kill can leave this: adopted
    _newest_read(store)


def test_a_log_written_before_the_chain_is_checked_for_rising_seqs(store: Path) -> None:
    """Lines without `after` (an older store): a repeat or a reorder is still found by their seqs; a deleted
    middle line leaves a part older than the last line, which verify adopts and names as damage."""
    import json

    def unchained(line: bytes) -> bytes:
        if b'"kind":"part"' not in line:
            return line
        body = json.loads(line.split(b" ", 1)[1])
        body.pop("after")
        return layout.encode(layout.PartLine.from_json(body))

    old = [unchained(x) for x in _lines(store)]
    log = store / "feat" / layout.INDEX
    _write(store, [*old, old[1]])
    with pytest.raises(layout.IndexOutOfOrder, match="seq 1 after seq 5"):
        index.parse(log.read_bytes(), log)
    _newest_read(store)
    _write(store, delete_line(3)(old))
    index.parse(log.read_bytes(), log)  # no chain to break
    report = verify_store(store)
    assert not report.ok and "UNINDEXED feat: 1 part(s)" in report.summary(), report.summary()
    _newest_read(store)


def test_logs_the_store_writes_keep_their_order_through_compaction_and_rebuild(store: Path) -> None:
    from store.compact import compact_store

    log = store / "feat" / layout.INDEX
    assert compact_store(store)
    index.parse(log.read_bytes(), log)
    with StoreWriter(store, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.commit("feat", "a", _rows("a", 2), {"spec_hash": "s1", "fingerprint": "a2"})
    index.parse(log.read_bytes(), log)
    log.unlink()
    assert verify_store(store).ok  # a deleted log is rebuilt as before
    index.parse(log.read_bytes(), log)
    _newest_read(store, {**NEWEST, "a": 2})
