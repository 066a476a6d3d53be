"""Issue 35, store: a damaged index never loses a committed part, held readers read their whole snapshot after
a compaction, a corrupted chunk is never served as data, and broken attributes are named."""

import json
from pathlib import Path

import numpy as np
import pytest

from extractors.base import FeatureRows
from store import index, repair
from store.compact import compact_store
from store.reader import open_store
from store.verify import verify_store
from store.writer import StoreWriter

ATTRS = {"extractor": "x", "version": "1", "config": {}, "columns": ["a", "b"], "rate_hz": 1.0,
         "weights": "none", "spec_hash": "s1"}


def rows(n: int, value: float) -> FeatureRows:
    return FeatureRows(features=(np.arange(n * 2).reshape(n, 2) * 0.37 + value).astype("float32"),
                       intervals=np.stack([np.arange(n) * 0.5, np.arange(n) * 0.5 + 0.5], axis=1), extras={},
                       attrs={})


def expected(item: str) -> np.ndarray:
    """The rows each item was committed with (the reference every read is compared to)."""
    k = "abcdefgh".index(item)
    return rows(3 + k, float(k)).features


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Three commits (three parts, a header and three lines): the last line is item d's alone."""
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.commit_batch("feat", [(i, rows(3 + "abcdefgh".index(i), float("abcdefgh".index(i))),
                                 {"spec_hash": "s1", "fingerprint": f"f{i}"}) for i in "ab"])
        for i in "cd":
            w.commit("feat", i, rows(3 + "abcdefgh".index(i), float("abcdefgh".index(i))),
                     {"spec_hash": "s1", "fingerprint": f"f{i}"})
    return path


def all_read(path: Path, items: str = "abcd") -> None:
    s = open_store(path)
    try:
        assert s.items("feat") == list(items)
        for i in items:
            np.testing.assert_array_equal(s.read("feat", i).features[...], expected(i))
    finally:
        s.close()


def n_parts(path: Path) -> int:
    return len(list((path / "feat" / "parts").iterdir()))


# ---- 1. a damaged last index line is damage, and no intact part is ever deleted ----

def _flip_last_line(log: Path) -> None:
    data = bytearray(log.read_bytes())
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    data[start + 40] ^= 0x04  # inside the JSON: the line keeps its newline, its checksum fails
    log.write_bytes(bytes(data))


def _cut_mid_line(log: Path) -> None:
    data = log.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    log.write_bytes(data[: start + (len(data) - start) // 2])


def _cut_at_line(log: Path) -> None:
    data = log.read_bytes()
    log.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])


@pytest.mark.parametrize("damage", [_flip_last_line, _cut_mid_line, _cut_at_line])
def test_a_damaged_or_cut_last_index_line_loses_no_committed_part(store: Path, damage, caplog) -> None:
    log = store / "feat" / index.INDEX
    damage(log)
    if damage is _flip_last_line:  # a complete line that fails its checksum: readers rebuild from the parts
        with pytest.raises(index.IndexDamaged, match="line 4 fails its checksum"):
            index.load(log)
        all_read(store)
    parts_before = n_parts(store)
    report = verify_store(store)  # repairs the index under the write lock and says so
    assert report.ok, report.summary()
    text = report.summary()
    if damage is _flip_last_line:
        assert "REBUILT feat/index.log (line 4 fails its checksum)" in text
    else:
        assert "UNINDEXED feat: 1 part(s) on disk that no index line named" in text and "1 item(s)" in text
    assert n_parts(store) == parts_before == 3
    all_read(store)
    compact_store(store)  # and a compaction after it keeps every item, bit-identical
    all_read(store)


@pytest.mark.parametrize("damage", [_flip_last_line, _cut_mid_line, _cut_at_line])
def test_the_next_writer_adopts_a_part_no_index_line_names(store: Path, damage) -> None:
    damage(store / "feat" / index.INDEX)
    with StoreWriter(store, "demo") as w:
        w.set_feature("feat", ATTRS)  # opens the index: the old code removed item d's part here
        assert n_parts(store) == 3
        w.commit("feat", "e", rows(7, 4.0), {"spec_hash": "s1", "fingerprint": "fe"})
    all_read(store, "abcde")
    assert compact_store(store) and n_parts(store) == 1
    all_read(store, "abcde")


def test_verify_reports_parts_that_no_index_line_names(store: Path) -> None:
    _cut_at_line(store / "feat" / index.INDEX)
    text = verify_store(store).summary()
    assert "UNINDEXED feat" in text and "adopted into the index" in text
    assert not repair.unindexed(store, "feat", index.load(store / "feat" / index.INDEX))
    assert "UNINDEXED" not in verify_store(store).summary()
    all_read(store)
