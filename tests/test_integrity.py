"""A damaged item never blocks the store: it is reported with its folder, left out of reads, recomputed by the
next run, and `verify` finds every kind of damage (metadata, missing, truncated or changed chunk files)."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from extractors.base import FeatureRows
from store import layout
from store.integrity import RECORD, STORE_RECORDS, DamagedItem
from store.plan import Wanted, make_plan
from store.reader import open_store
from store.verify import verify_store
from store.writer import StoreWriter

ATTRS = {"extractor": "x", "version": "1", "config": {}, "columns": ["a", "b"], "rate_hz": 1.0,
         "weights": "none", "spec_hash": "s1"}
ITEMS = ("a", "b", "c")


def rows(n: int, value: float) -> FeatureRows:
    """Several chunks per array (chunk rows forced small), a string extra and an all-zero array (zarr writes
    no chunk file for it: the record, not the chunk grid, says which files exist)."""
    return FeatureRows(
        features=np.arange(n * 2, dtype=np.float32).reshape(n, 2) + value,
        intervals=np.stack([np.arange(n), np.arange(n) + 1.0], axis=1),
        extras={"words": np.array([f"w{i}" for i in range(n)]), "zeros": np.zeros(n, np.int32)},
        attrs={"face_ratio": 0.5},
    )


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import store.writer as sw

    monkeypatch.setattr(sw, "_CHUNK_BYTES", 64)  # 8 rows of features per chunk: 3 chunk files per item
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        for i, item in enumerate(ITEMS):
            w.commit("feat", item, rows(20, 100.0 * i), {"spec_hash": "s1", "fingerprint": f"fp-{item}"})
    return path


def wanted() -> list[Wanted]:
    return [Wanted("feat", item, f"fp-{item}") for item in ITEMS]


def files_of(item_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(item_dir)) for p in item_dir.rglob("*") if p.is_file())


def damage(path: Path, how: str, at: float = 0.5) -> None:
    data = path.read_bytes()
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(data[: int(len(data) * at)])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "flip":
        k = min(len(data) - 1, int(len(data) * at))
        path.write_bytes(data[:k] + bytes([data[k] ^ 0x01]) + data[k + 1:])


def test_the_record_lists_what_was_committed(store: Path) -> None:
    item = store / "feat" / "b"
    record = json.loads((item / "zarr.json").read_text())["attributes"][RECORD]
    assert sorted(record["files"]) == [f for f in files_of(item) if f != "zarr.json"]
    assert [f for f in record["files"] if f.startswith("features/c/")] == ["features/c/0/0", "features/c/1/0",
                                                                          "features/c/2/0"]
    assert not any(f.startswith("zeros/c/") for f in record["files"])  # all-zero chunks are never written
    assert record["arrays"]["features"] == {"shape": [20, 2], "dtype": "float32"}
    assert record["arrays"]["words"]["shape"] == [20]
    assert "integrity" not in open_store(store).read("feat", "b").attrs  # internal: not in the item's attrs


@pytest.mark.parametrize("target,how", [
    ("zarr.json", "truncate"),  # the reported case: "Unterminated string …"
    ("zarr.json", "empty"),
    ("zarr.json", "delete"),
    ("features/zarr.json", "truncate"),
    ("intervals/zarr.json", "delete"),
    ("features/c/1/0", "delete"),  # read back as zeros before
    ("features/c/2/0", "truncate"),
    ("words/c/0", "empty"),
])
def test_a_damaged_item_is_reported_left_out_and_recomputed(store: Path, target: str, how: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    item_dir = store / "feat" / "b"
    damage(item_dir / target, how)
    s = open_store(store)
    with caplog.at_level(logging.WARNING):
        assert s.items("feat") == ["a", "c"]  # the others still read
    assert str(item_dir) in caplog.text
    np.testing.assert_array_equal(s.read("feat", "c").features[:], rows(20, 200.0).features)
    with pytest.raises(DamagedItem, match=f"{item_dir}: damaged item"):
        s.read("feat", "b")
    with pytest.raises(DamagedItem):
        s.item_attrs("feat", "b")

    plan = make_plan(store, wanted())
    assert [w.item for w in plan.todo] == ["b"] and [w.item for w in plan.skipped] == ["a", "c"]
    assert [(c.item, c.path) for c in plan.damaged] == [("b", item_dir)] and plan.damaged[0].problem

    report = verify_store(store)
    assert [(c.feature, c.item) for c in report.damaged] == [("feat", "b")]
    assert f"DAMAGED feat/b ({item_dir})" in report.summary()

    with StoreWriter(store, "demo") as w:  # what the next run does with the planned pair
        w.set_feature("feat", ATTRS)
        w.commit("feat", "b", rows(20, 100.0), {"spec_hash": "s1", "fingerprint": "fp-b"})
    assert open_store(store).items("feat") == list(ITEMS)
    np.testing.assert_array_equal(open_store(store).read("feat", "b").features[:], rows(20, 100.0).features)
    assert not verify_store(store).damaged


def test_every_file_deleted_truncated_or_flipped_is_found_by_verify(store: Path, tmp_path: Path) -> None:
    """The class, not the listed cases: each file of an item (its own metadata included), each way of
    damaging it, at several places. Changed bytes need the full check (hashes); the rest the quick one."""
    import shutil

    pristine = tmp_path / "pristine"
    shutil.copytree(store / "feat" / "b", pristine)
    damages = [("delete", 0.0), ("empty", 0.0), ("truncate", 0.5), ("truncate", 0.98)]
    damages += [("flip", at) for at in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)]
    missed = []
    for rel in files_of(pristine):
        for how, at in damages:
            shutil.rmtree(store / "feat" / "b")
            shutil.copytree(pristine, store / "feat" / "b")
            damage(store / "feat" / "b" / rel, how, at)
            s = open_store(store)
            full = [c.item for c in s.check("feat", full=True) if not c.ok]
            quick = [c.item for c in s.check("feat") if not c.ok]
            if full != ["b"] or (how != "flip" and quick != ["b"]):
                missed.append((rel, how, at, full, quick))
    assert not missed


def test_verify_before_planning_recomputes_changed_bytes(store: Path) -> None:
    damage(store / "feat" / "a" / "features/c/0/0", "flip")
    assert make_plan(store, wanted()).todo == []  # sizes unchanged: only hashes tell
    plan = make_plan(store, wanted(), verify=True)
    assert [w.item for w in plan.todo] == ["a"] and "SHA-256" in plan.damaged[0].problem


def test_damaged_feature_metadata_is_rewritten_by_the_next_writer(store: Path) -> None:
    damage(store / "feat" / "zarr.json", "truncate")
    with pytest.raises(ValueError, match="feature metadata unreadable"):
        open_store(store).items("feat")
    assert open_store(store).features() == []  # left out, logged; the store still opens
    with StoreWriter(store, "demo") as w:
        w.set_feature("feat", ATTRS)  # every attribute comes from the run's spec
    assert open_store(store).items("feat") == list(ITEMS)


@pytest.mark.parametrize("target", ["zarr.json", "features/zarr.json", "intervals/zarr.json"])
@pytest.mark.parametrize("how", ["delete", "truncate"])
def test_the_problem_names_the_damaged_metadata_file_within_the_item(store: Path, target: str, how: str) -> None:
    """An array's damaged metadata is named as <array>/zarr.json, not as the item's own zarr.json."""
    damage(store / "feat" / "b" / target, how)
    [c] = [c for c in open_store(store).check("feat") if not c.ok]
    assert c.problem.startswith(f"{target} is "), c.problem


def drop_record(item_dir: Path) -> None:
    meta_path = item_dir / "zarr.json"
    meta = json.loads(meta_path.read_text())
    del meta["attributes"][RECORD]
    meta_path.write_text(json.dumps(meta))


def as_store_from_before_records(store: Path) -> None:
    """The store as code before integrity records left it: no root marker, no item record."""
    meta = json.loads((store / "zarr.json").read_text())
    del meta["attributes"][STORE_RECORDS]
    (store / "zarr.json").write_text(json.dumps(meta))
    for item in ITEMS:
        drop_record(store / "feat" / item)


def test_items_without_a_record_are_named_not_failed(store: Path) -> None:
    """Items committed before records existed: metadata and decoding checked, and verify says so."""
    as_store_from_before_records(store)
    s = open_store(store)
    assert s.items("feat") == list(ITEMS)
    report = verify_store(store)
    assert not report.damaged and "NO RECORD feat/c" in report.summary()
    (store / "feat" / "c" / "intervals" / "zarr.json").write_text("{")
    assert [c.item for c in verify_store(store).damaged] == ["c"]


@pytest.mark.parametrize("flip", [False, True])
def test_an_item_that_lost_its_record_in_a_store_written_with_records_is_damaged(store: Path, flip: bool) -> None:
    """Deleting the record must not hide damage: the item is damaged (left out, recomputed, verify exit 4),
    also with a flipped byte that the record would have caught."""
    drop_record(store / "feat" / "c")
    if flip:
        damage(store / "feat" / "c" / "features/c/0/0", "flip")
    s = open_store(store)
    assert s.items("feat") == ["a", "b"]
    with pytest.raises(DamagedItem, match="integrity record is missing"):
        s.read("feat", "c")
    assert [w.item for w in make_plan(store, wanted()).todo] == ["c"]
    assert [w.item for w in make_plan(store, wanted(), verify=True).todo] == ["c"]
    report = verify_store(store)
    assert [c.item for c in report.damaged] == ["c"] and "NO RECORD" not in report.summary()


def test_a_store_from_before_records_keeps_its_old_items_and_guards_the_new_ones(store: Path) -> None:
    """The first writer on an old store lists the items it found without a record: those stay readable (NO
    RECORD); every item committed from then on must keep its record."""
    as_store_from_before_records(store)
    with StoreWriter(store, "demo") as w:
        w.commit("feat", "d", rows(20, 7.0), {"spec_hash": "s1", "fingerprint": "fp-d"})
    assert open_store(store).items("feat") == [*ITEMS, "d"]
    drop_record(store / "feat" / "d")
    report = verify_store(store)
    assert [c.item for c in report.damaged] == ["d"]
    assert sum("NO RECORD" in line for line in report.summary().splitlines()) == 3


FEATURE_META_DAMAGE = {
    "truncate": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "delete": lambda p: p.unlink(),
    "empty": lambda p: p.write_bytes(b""),
    "not a group": lambda p: p.write_text(json.dumps({"zarr_format": 3, "node_type": "array"})),
    "not an object": lambda p: p.write_text("[]"),
}


@pytest.mark.parametrize("how", sorted(FEATURE_META_DAMAGE))
@pytest.mark.parametrize("target", ["feat/zarr.json", "other/zarr.json", "zarr.json"])
def test_verify_finds_damaged_metadata_of_any_feature_or_the_root(store: Path, target: str, how: str,
                                                                  capsys: pytest.CaptureFixture) -> None:
    """A damaged or deleted zarr.json of a feature or of the store itself is damage (exit 4), named by its
    file; the items below it are still checked (a missing chunk of one of them is found too)."""
    from pipeline import exitcodes
    from pipeline.cli import main

    with StoreWriter(store, "demo") as w:
        w.set_feature("other", ATTRS)
        w.commit("other", "x", rows(4, 1.0), {"spec_hash": "s1"})
    FEATURE_META_DAMAGE[how](store / target)
    damage(store / "feat" / "b" / "features/c/0/0", "delete")
    report = verify_store(store)
    assert [str(p) for p, _ in report.metadata] == [str(store / target)]
    assert sorted(f"{c.feature}/{c.item}" for c in report.checks) == ["feat/a", "feat/b", "feat/c", "other/x"]
    assert [c.item for c in report.damaged] == ["b"]
    assert main(["verify", "--out", str(store)]) == exitcodes.DAMAGED
    assert f"DAMAGED METADATA {store / target}:" in capsys.readouterr().out


def test_verify_finds_a_truncated_manifest(store: Path) -> None:
    from manifests.records import MediaItem, QAItem

    with StoreWriter(store, "demo") as w:
        w.write_manifests([MediaItem(id=i, dataset="demo") for i in ITEMS],
                          [QAItem(qid=f"{i}-q", item_id=i, dataset="demo", question="why?", answers=("a", "b"))
                           for i in ITEMS])
    assert verify_store(store).metadata == []
    damage(store / "_manifests" / "qa.jsonl", "truncate", at=0.5)
    [(path, problem)] = verify_store(store).metadata
    assert path == store / "_manifests" / "qa.jsonl" and "qa.jsonl:2:" in problem, problem


def test_the_store_root_damaged_is_one_clear_error(store: Path) -> None:
    from store.writer import StoreError

    damage(store / "zarr.json", "truncate")
    with pytest.raises(ValueError, match=f"{store / 'zarr.json'}: the store's metadata is unreadable"):
        open_store(store)
    with pytest.raises(StoreError, match=f"{store / 'zarr.json'}: the store's own metadata is unreadable"):
        StoreWriter(store, "demo")
    assert layout.SCHEMA  # the store is left as it is for a person to look at
