"""A store written by the code of commit fb9982b (tests/data/store_fixture, made by
tests/data/make_store_fixture.py) reads identically with today's code, and today's writer and compaction
carry on with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store.compact import compact_store
from store.reader import Store
from store.writer import StoreWriter

DATA = Path(__file__).parents[1] / "data" / "store_fixture"


def _expected() -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_store_fixture", DATA.parent / "make_store_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expected


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    out = tmp_path / "old.zarr"
    shutil.copytree(DATA / "store", out)
    return out


def test_a_store_written_before_reads_identically(old_store: Path) -> None:
    want = json.loads((DATA / "expected.json").read_text())
    assert _expected()(old_store) == want
    assert want["features"]["frames"]["items"]["v1"]["attrs"]["fingerprint"] == "fp11"  # the superseding rows
    assert want["features"]["faces"]["filtered"] == ["v1"]


def test_the_old_index_lines_decode_to_the_same_entries(old_store: Path) -> None:
    """The columns of an old line (fingerprint, spec, filtered, duration) agree with its attributes."""
    s = Store(old_store)
    for f in s.features():
        for e in s.index(f).entries.values():
            attrs = e.attrs()
            assert (e.fingerprint, e.spec_hash, e.filtered, e.duration_s) == (
                attrs["fingerprint"], attrs["spec_hash"], bool(attrs.get("filtered", False)), attrs.get("duration_s"))
    s.close()


def test_the_writer_and_compaction_carry_on_with_an_old_store(old_store: Path) -> None:
    want = json.loads((DATA / "expected.json").read_text())
    with StoreWriter(old_store, "fixture") as w:
        w.commit_batch("frames", [("v7", FeatureRows(np.ones((2, 3), np.float32), np.array([[0, 1], [1, 2.0]])),
                                   {"fingerprint": "fp7", "spec_hash": "fixture-spec-1"})])
    compact_store(old_store)
    got = _expected()(old_store)
    v7 = got["features"]["frames"]["items"].pop("v7")
    assert v7["features"] == [[1.0] * 3] * 2 and v7["attrs"]["fingerprint"] == "fp7"
    got["features"]["frames"]["listed"].remove("v7")
    assert got == want
    s = Store(old_store)
    assert {f: len(s.index(f).parts) for f in s.features()} == {"faces": 2, "frames": 2}  # by array signature
    s.close()
