"""A damaged part never blocks the store: its items are reported with its folder, left out of reads, recomputed
by the next run, and `verify` finds every kind of damage (metadata, missing, truncated or changed shard files);
a damaged or deleted index is found and rebuilt from the parts."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store import layout
from store.integrity import DamagedItem
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

    import store.parts as sp

    monkeypatch.setattr(sp, "_CHUNK_BYTES", 64)  # 8 rows of features per inner chunk: 3 chunks in one shard
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        for i, item in enumerate(ITEMS):  # one commit (one part) per item
            w.commit("feat", item, rows(20, 100.0 * i), {"spec_hash": "s1", "fingerprint": f"fp-{item}"})
    return path


def part_of(store: Path, item: str) -> Path:
    return store / "feat" / "parts" / open_store(store).index("feat").entries[item].part


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
    part = part_of(store, "b")
    record = open_store(store).index("feat").parts[part.name]
    assert sorted(record.files) == files_of(part)
    assert [f for f in record.files if f.startswith("features/")] == ["features/c/0/0", "features/zarr.json"]
    assert record.files["features/c/0/0"][0] == (part / "features/c/0/0").stat().st_size
    assert record.arrays["features"] == {"shape": [20, 2], "dtype": "float32"}
    assert record.arrays["words"]["shape"] == [20]
    assert "integrity" not in open_store(store).read("feat", "b").attrs


@pytest.mark.parametrize("target,how", [
    ("zarr.json", "truncate"),
    ("zarr.json", "empty"),
    ("zarr.json", "delete"),
    ("features/zarr.json", "truncate"),
    ("intervals/zarr.json", "delete"),
    ("features/c/0/0", "delete"),  # read back as zeros without the record
    ("features/c/0/0", "truncate"),
    ("words/c/0", "empty"),
])
def test_a_damaged_item_is_reported_left_out_and_recomputed(store: Path, target: str, how: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    part = part_of(store, "b")
    damage(part / target, how)
    s = open_store(store)
    with caplog.at_level(logging.WARNING):
        assert s.items("feat") == ["a", "c"]  # the others still read
    assert str(part) in caplog.text
    np.testing.assert_array_equal(s.read("feat", "c").features[:], rows(20, 200.0).features)
    with pytest.raises(DamagedItem, match=f"{part}: damaged item b"):
        s.read("feat", "b")
    with pytest.raises(DamagedItem):
        s.item_attrs("feat", "b")

    plan = make_plan(store, wanted())
    assert [w.item for w in plan.todo] == ["b"] and [w.item for w in plan.skipped] == ["a", "c"]
    assert [(c.item, c.path) for c in plan.damaged] == [("b", part)] and plan.damaged[0].problem

    report = verify_store(store)
    assert [(c.feature, c.item) for c in report.damaged] == [("feat", "b")]
    assert f"DAMAGED feat/b ({part})" in report.summary()

    with StoreWriter(store, "demo") as w:  # what the next run does with the planned pair
        w.set_feature("feat", ATTRS)
        w.commit("feat", "b", rows(20, 100.0), {"spec_hash": "s1", "fingerprint": "fp-b"})
    assert open_store(store).items("feat") == list(ITEMS)
    np.testing.assert_array_equal(open_store(store).read("feat", "b").features[:], rows(20, 100.0).features)
    assert not verify_store(store).damaged


def test_every_file_deleted_truncated_or_flipped_is_found_by_verify(store: Path, tmp_path: Path) -> None:
    """The class, not the listed cases: each file of a part (its own metadata included), each way of
    damaging it, at several places. Changed bytes need the full check (hashes); the rest the quick one."""
    import shutil

    part = part_of(store, "b")
    pristine = tmp_path / "pristine"
    shutil.copytree(part, pristine)
    damages = [("delete", 0.0), ("empty", 0.0), ("truncate", 0.5), ("truncate", 0.98)]
    damages += [("flip", at) for at in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)]
    missed = []
    for rel in files_of(pristine):
        for how, at in damages:
            shutil.rmtree(part)
            shutil.copytree(pristine, part)
            damage(part / rel, how, at)
            s = open_store(store)
            full = [c.item for c in s.check("feat", full=True) if not c.ok]
            quick = [c.item for c in s.check("feat") if not c.ok]
            if full != ["b"] or (how != "flip" and quick != ["b"]):
                missed.append((rel, how, at, full, quick))
    assert not missed


def test_verify_before_planning_recomputes_changed_bytes(store: Path) -> None:
    damage(part_of(store, "a") / "features/c/0/0", "flip")
    assert make_plan(store, wanted()).todo == []  # sizes unchanged: only hashes tell
    plan = make_plan(store, wanted(), verify=True)
    assert [w.item for w in plan.todo] == ["a"] and "SHA-256" in plan.damaged[0].problem


def test_a_damaged_packed_part_recomputes_exactly_its_items(tmp_path: Path) -> None:
    """Items a, b share a part (one batch), c has its own: a flipped byte in the shared part's shard
    is found by verify, and only a and b are planned again."""
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.commit_batch("feat", [(i, rows(20, 100.0 * k), {"spec_hash": "s1", "fingerprint": f"fp-{i}"})
                                for k, i in enumerate(("a", "b"))])
        w.commit("feat", "c", rows(20, 200.0), {"spec_hash": "s1", "fingerprint": "fp-c"})
    shared = part_of(path, "a")
    assert shared == part_of(path, "b") != part_of(path, "c")
    damage(shared / "features/c/0/0", "flip", 0.7)
    assert sorted(c.item for c in verify_store(path).damaged) == ["a", "b"]
    plan = make_plan(path, wanted(), verify=True)
    assert [w.item for w in plan.todo] == ["a", "b"] and [w.item for w in plan.skipped] == ["c"]


@pytest.mark.parametrize("how", ["delete", "flip", "truncate-middle"])
def test_a_damaged_or_deleted_index_is_found_and_rebuilt_from_the_parts(store: Path, how: str) -> None:
    log_path = store / "feat" / "index.log"
    before = {i: open_store(store).read("feat", i).features[:] for i in ITEMS}
    with StoreWriter(store, "demo") as w:  # a superseded version: the rebuilt index must pick the newer one
        w.set_feature("feat", ATTRS)
        w.commit("feat", "b", rows(20, 7.0), {"spec_hash": "s1", "fingerprint": "fp-b2"})
    before["b"] = rows(20, 7.0).features
    if how == "delete":
        log_path.unlink()
    else:
        lines = log_path.read_bytes().split(b"\n")
        k = 2
        if how == "flip":
            lines[k] = lines[k][:40] + bytes([lines[k][40] ^ 0x01]) + lines[k][41:]
        else:
            lines[k] = lines[k][: len(lines[k]) // 2]
        log_path.write_bytes(b"\n".join(lines))
    assert open_store(store).items("feat") == list(ITEMS)  # read from the parts meanwhile, with a warning
    report = verify_store(store)
    assert "REBUILT feat/index.log" in report.summary() and not report.damaged
    s = open_store(store)
    assert s.items("feat") == list(ITEMS) and s.index("feat").entries["b"].fingerprint == "fp-b2"
    for i in ITEMS:
        np.testing.assert_array_equal(s.read("feat", i).features[:], before[i])
    assert "REBUILT" not in verify_store(store).summary()


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
def test_the_problem_names_the_damaged_file_within_the_part(store: Path, target: str, how: str) -> None:
    damage(part_of(store, "b") / target, how)
    [c] = [c for c in open_store(store).check("feat") if not c.ok]
    assert c.problem.startswith(f"{target} "), c.problem


def test_the_parts_own_metadata_is_checked_by_size_quickly_and_by_hash_in_full(store: Path) -> None:
    """The quick check does not parse a part's own zarr.json (it holds every item's row) where the record has its
    size: a same-size change is the full check's (SHA-256); a record without that size still has it parsed."""
    from dataclasses import replace

    from store.integrity import check_part

    part = part_of(store, "b")
    meta = part / layout.META
    meta.write_bytes(b"x" * meta.stat().st_size)  # the same size, no longer JSON
    record = open_store(store).index("feat").parts[part.name]
    assert check_part(part, record) is None
    assert check_part(part, record, full=True).startswith(f"{layout.META}: content differs")
    unsized = replace(record, files={k: v for k, v in record.files.items() if k != layout.META})
    assert check_part(part, unsized).startswith(f"{layout.META} is unreadable")


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
    part_b = part_of(store, "b")
    FEATURE_META_DAMAGE[how](store / target)
    damage(part_b / "features/c/0/0", "delete")
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


@pytest.mark.parametrize("target,how", [("feat/zarr.json", "truncate"), ("feat/zarr.json", "delete"),
                                        ("zarr.json", "truncate"), ("_manifests/qa.jsonl", "truncate")])
def test_verify_finds_damaged_store_metadata_and_still_checks_the_items(store: Path, target: str, how: str) -> None:
    """Damaged metadata of the store, a feature or a manifest is DAMAGED METADATA (exit 4), and the items of
    every feature are checked through the indexes all the same."""
    from pipeline import exitcodes
    from pipeline.cli import main

    (store / "_manifests").mkdir(exist_ok=True)
    (store / "_manifests" / "qa.jsonl").write_text('{"qid": "q1", "item_id": "a", "dataset": "d", "question": "?", '
                                                   '"answers": ["x"]}\n')
    damage(part_of(store, "c") / "features/c/0/0", "flip", 0.5)
    damage(store / target, how)
    report = verify_store(store)
    assert [str(p) for p, _ in report.metadata] == [str(store / target)] and not report.ok
    assert [c.item for c in report.damaged] == ["c"] and len(report.checks) == 3
    assert f"DAMAGED METADATA {store / target}: " in report.summary()
    assert main(["verify", "--out", str(store)]) == exitcodes.DAMAGED


def test_damage_is_still_found_after_the_index_is_lost_and_rebuilt(store: Path) -> None:
    """Deleting the index must not hide damage (issue 25 item 7's class): a flipped byte in a shard, then the
    index deleted; the rebuilt index takes each data file's hash from the part's own record of its commit,
    so verify reports the damaged part, and a plan with --verify recomputes exactly its item."""
    damage(part_of(store, "b") / "features/c/0/0", "flip", 0.4)
    (store / "feat" / "index.log").unlink()
    report = verify_store(store)
    assert "REBUILT feat/index.log" in report.summary()
    assert [c.item for c in report.damaged] == ["b"] and "SHA-256" in report.damaged[0].problem
    assert [w.item for w in make_plan(store, wanted(), verify=True).todo] == ["b"]
