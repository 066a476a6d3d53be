"""Store version 2 (packed parts + index): supersession, snapshot readers, compaction, migration, batches."""

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from pipeline.cli import main
from rows import FeatureRows
from store import layout
from store.compact import compact_store
from store.integrity import DamagedItem
from store.migrate import migrate_store
from store.reader import SnapshotGone, open_store
from store.writer import StoreWriter

ATTRS = {"extractor": "x", "version": "1", "config": {}, "columns": ["a", "b"], "rate_hz": 1.0,
         "weights": "none", "spec_hash": "s1"}


def rows(n: int, value: float, dtype: str = "float32") -> FeatureRows:
    return FeatureRows(
        features=(np.arange(n * 2).reshape(n, 2) * 0.37 + value).astype(dtype),
        intervals=np.stack([np.arange(n) * 0.5, np.arange(n) * 0.5 + 0.5], axis=1),
        extras={"words": np.array([f"w{value:g}-{i}" for i in range(n)]), "count": np.arange(n, dtype=np.int16) + int(value),
                "edges": np.linspace(0, value, n + 1)},  # not row-aligned: n + 1 values
        attrs={"face_ratio": value / 10},
    )


def snapshot(store: Path, feature: str = "feat", skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every current item's arrays (but `skip`'s) as bytes (bit-level) and strings, and its attributes."""
    s = open_store(store)
    out = {}
    for item in s.items(feature, include_filtered=True, include_stale=True):
        if item in skip:
            continue
        r = s.read(feature, item)
        arrays = {"features": np.asarray(r.features[...]), "intervals": r.intervals,
                  **{k: np.asarray(v[...]) for k, v in r.extras.items()}}
        out[item] = ({k: (a.dtype.str, a.shape, a.tobytes()) if a.dtype.kind not in "UST" else a.tolist()
                      for k, a in arrays.items()}, r.attrs)
    return out


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.commit_batch("feat", [("a", rows(3, 1.0), {"spec_hash": "s1", "fingerprint": "fa"}),
                                ("b", rows(5, 2.0), {"spec_hash": "s1", "fingerprint": "fb"})])
        w.commit("feat", "c", rows(4, 3.0), {"spec_hash": "s1", "fingerprint": "fc"})
    return path


def test_a_batch_packs_many_items_into_one_part_that_plain_zarr_reads(store: Path) -> None:
    s = open_store(store)
    entries = s.index("feat").entries
    assert entries["a"].part == entries["b"].part != entries["c"].part
    assert (entries["a"].row0, entries["a"].n_rows, entries["b"].row0, entries["b"].n_rows) == (0, 3, 3, 5)
    part = zarr.open_group(store, mode="r")[f"feat/parts/{entries['b'].part}"]
    np.testing.assert_array_equal(part["features"][3:8], rows(5, 2.0).features)  # plain zarr, with the offsets
    import xarray as xr

    ds = xr.open_zarr(store, group=f"feat/parts/{entries['b'].part}", consolidated=False)
    np.testing.assert_array_equal(ds["features"].values[3:8], rows(5, 2.0).features)
    assert ds["features"].dims == ("row", "features_dim1") and list(ds["words"].values[3:5]) == ["w2-0", "w2-1"]
    np.testing.assert_array_equal(s.read("feat", "b").extras["edges"][:], rows(5, 2.0).extras["edges"])
    assert list(s.read("feat", "b").extras["words"][1:3]) == ["w2-1", "w2-2"]
    assert s.read("feat", "a").attrs["face_ratio"] == 0.1 and s.item_attrs("feat", "b")["fingerprint"] == "fb"


def test_a_superseded_item_reads_its_new_rows(store: Path) -> None:
    others = {k: v for k, v in snapshot(store).items() if k != "a"}
    with StoreWriter(store, "demo") as w:
        w.commit("feat", "a", rows(6, 9.0), {"spec_hash": "s1", "fingerprint": "fa2"})
    s = open_store(store)
    r = s.read("feat", "a")
    np.testing.assert_array_equal(r.features[:], rows(6, 9.0).features)
    np.testing.assert_array_equal(r.intervals, rows(6, 9.0).intervals)
    assert r.attrs["fingerprint"] == "fa2" and s.items("feat") == ["a", "b", "c"]
    assert {k: v for k, v in snapshot(store).items() if k != "a"} == others  # b shared a's part: untouched
    assert len(s.index("feat").parts) == 3  # the old rows stay until compaction


def test_a_held_reader_never_sees_a_mix(store: Path) -> None:
    """A handle opened (and an item handle taken) before a re-extraction reads the version it opened:
    features, intervals, extras and attributes all of the old version; a new handle reads the new one."""
    held = open_store(store)
    old_item = held.read("feat", "a")
    with StoreWriter(store, "demo") as w:
        w.commit("feat", "a", rows(6, 9.0), {"spec_hash": "s1", "fingerprint": "fa2"})
        w.commit("feat", "c", rows(2, 8.0), {"spec_hash": "s1", "fingerprint": "fc2"})
    for r, n, value, fp in ((old_item, 3, 1.0, "fa"), (held.read("feat", "a"), 3, 1.0, "fa"),
                            (held.read("feat", "c"), 4, 3.0, "fc"), (open_store(store).read("feat", "c"), 2, 8.0, "fc2")):
        want = rows(n, value)
        np.testing.assert_array_equal(r.features[:], want.features)
        np.testing.assert_array_equal(r.intervals, want.intervals)
        np.testing.assert_array_equal(r.extras["count"][:], want.extras["count"])
        assert r.attrs["fingerprint"] == fp and len(r.intervals) == r.features.shape[0] == n


def test_compaction_keeps_every_current_row_bit_identical(store: Path) -> None:
    with StoreWriter(store, "demo") as w:
        w.set_feature("half", {**ATTRS, "spec_hash": "h"})
        for ks in (range(3), range(3, 5)):  # two parts: compacting them changes something
            w.commit_batch("half", [(f"i{k}", rows(k + 1, float(k), "float16"), {"spec_hash": "h"}) for k in ks])
        w.commit("feat", "a", rows(6, 9.0), {"spec_hash": "s1", "fingerprint": "fa2"})  # supersedes a's rows
        w.commit("feat", "b", FeatureRows(np.full((2, 2), np.nan, np.float32), np.array([[0.0, 1.0], [1.0, 1.0]]),
                                          {"words": np.array(["", "é"]), "count": np.zeros(2, np.int16),
                                           "edges": np.array([-0.0, np.inf, 1e-300])}, {"filtered": True}),
                 {"spec_hash": "s0"})  # stale and filtered: kept too
    before = {f: snapshot(store, f) for f in ("feat", "half")}
    parts_before = len(open_store(store).index("feat").parts)
    done = compact_store(store)
    assert [c.feature for c in done] == ["feat", "half"] and done[0].rows_dropped == 3 + 5
    assert {f: snapshot(store, f) for f in ("feat", "half")} == before
    s = open_store(store)
    assert len(s.index("feat").parts) == 1 < parts_before
    assert sorted(p.name for p in (store / "feat" / "parts").iterdir()) == list(s.index("feat").parts)
    assert not any(c.problem for f in ("feat", "half") for c in s.check(f, full=True))


def test_a_reader_open_during_compaction_keeps_its_snapshot_until_it_closes(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        for k, item in enumerate("abc"):
            w.commit("feat", item, rows(3, float(k)), {"spec_hash": "s1"})
    held = open_store(path)
    a = held.read("feat", "a").features[:]  # its part is now in this handle's memory
    old_parts = sorted(p.name for p in (path / "feat" / "parts").iterdir())
    compact_store(path)
    np.testing.assert_array_equal(held.read("feat", "a").features[:], a)
    np.testing.assert_array_equal(held.read("feat", "b").features[:], rows(3, 1.0).features)  # its lease kept it
    assert set(old_parts) <= {p.name for p in (path / "feat" / "parts").iterdir()}
    np.testing.assert_array_equal(open_store(path).read("feat", "b").features[:], rows(3, 1.0).features)
    held.close()
    with StoreWriter(path, "demo") as w:  # the next writer removes what no reader holds any more
        w.set_feature("feat", ATTRS)
    assert not set(old_parts) & {p.name for p in (path / "feat" / "parts").iterdir()}
    assert not list((path / "feat" / "retired").iterdir())


def test_without_a_lease_a_read_of_a_compacted_part_says_so_in_one_line(tmp_path: Path) -> None:
    """Where the filesystem refuses flock a reader has no lease: a read that needs a removed part raises
    SnapshotGone, never zeros."""
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        for k, item in enumerate("abc"):
            w.commit("feat", item, rows(3, float(k)), {"spec_hash": "s1"})
    with pytest.MonkeyPatch.context() as m:
        def no_flock(fd: int, op: int) -> None:
            raise OSError(37, "No locks available")

        m.setattr("fcntl.flock", no_flock)
        held = open_store(path)
    a = held.read("feat", "a").features[:]
    compact_store(path)
    np.testing.assert_array_equal(held.read("feat", "a").features[:], a)
    with pytest.raises(SnapshotGone, match=r"feat was compacted after this reader opened the store .*open the store again"):
        held.read("feat", "b").features[:]


def test_the_end_of_a_run_merges_small_parts_and_rewrites_wasteful_ones_only(store: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`force=False` (the end of a run): two small parts are merged into one; one small part alone is left
    as it is, and so is a full part beside it, until a quarter of its rows are superseded."""
    before = snapshot(store)
    [done] = compact_store(store, force=False)  # the fixture's two small parts
    assert (done.parts_before, done.parts_after) == (2, 1) and snapshot(store) == before
    assert compact_store(store, force=False) == []  # one small part: nothing to merge it with
    monkeypatch.setattr("store.compact.PART_ITEMS", 6)  # the part of a, b, c counts as full now
    with StoreWriter(store, "demo") as w:
        w.commit("feat", "d", rows(2, 5.0), {"spec_hash": "s1"})
    [full] = open_store(store).index("feat").parts.keys() - {open_store(store).index("feat").entries["d"].part}
    assert compact_store(store, force=False) == []  # a full part and one small one
    with StoreWriter(store, "demo") as w:
        w.commit("feat", "b", rows(5, 4.0), {"spec_hash": "s1"})  # 5 of the full part's 12 rows superseded
    [done] = compact_store(store, force=False)
    s = open_store(store)
    assert full not in s.index("feat").parts and len(s.index("feat").parts) == 1 and done.rows_dropped == 5
    np.testing.assert_array_equal(s.read("feat", "b").features[...], rows(5, 4.0).features)


def test_compact_and_migrate_commands(store: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["compact", "--out", str(store)]) == 0
    assert "compacted feat: 2 -> 1 part(s)" in capsys.readouterr().out


def _v1_store(path: Path) -> dict[str, FeatureRows]:
    """A version-1 store as that writer laid it out: one complete group per (feature, item)."""
    root = zarr.open_group(path, mode="w")
    root.attrs.update({"schema": layout.SCHEMA_V1, "dataset": "demo", "package_version": "0"})
    feat = root.create_group("feat")
    feat.attrs.put(ATTRS)
    made = {}
    for k, item in enumerate(("a", "b")):
        r = rows(3 + k, float(k))
        g = feat.create_group(item)
        for name, data in {"features": r.features, "intervals": r.intervals, **r.extras}.items():
            arr = g.create_array(name, shape=data.shape, dtype=str if data.dtype.kind == "U" else data.dtype)
            arr[...] = data
        g.attrs.update({"face_ratio": 0.5, "fingerprint": f"f{item}", "spec_hash": "s1", "n_rows": 3 + k,
                        "integrity": {"version": 1}, "complete": True})
        made[item] = r
    feat.create_group("half").attrs.update({"complete": False})  # a killed v1 write: not carried over
    return made


def test_a_version_1_store_is_refused_naming_the_command_then_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.zarr"
    made = _v1_store(path)
    for opener in (open_store, lambda p: StoreWriter(p, "demo")):
        with pytest.raises(ValueError, match=f"version-1 store.*python -m pipeline migrate {path}"):
            opener(path)
    assert main(["verify", "--out", str(path)]) == 2  # bad input: the message names the command
    report = migrate_store(path)
    assert report.items == {"feat": 2} and report.skipped[0].startswith("feat/half: ")
    s = open_store(path)
    assert s.attrs["schema"] == layout.SCHEMA and s.items("feat") == ["a", "b"]
    for item, want in made.items():
        r = s.read("feat", item)
        np.testing.assert_array_equal(r.features[:], want.features)
        np.testing.assert_array_equal(r.extras["edges"][:], want.extras["edges"])
        assert list(r.extras["words"][:]) == list(want.extras["words"])
        assert r.attrs["fingerprint"] == f"f{item}" and "integrity" not in r.attrs
    assert sorted(p.name for p in (path / "feat").iterdir()) == ["index.log", "parts", "zarr.json"]
    assert json.loads((path / "zarr.json").read_text())["attributes"]["schema"] == layout.SCHEMA
    assert migrate_store(path).items == {}  # already version 2: nothing to do


def test_the_part_cache_holds_slabs_up_to_its_bytes_and_reads_the_rest_lazily(tmp_path: Path) -> None:
    """The slabs of one handle together never hold more than `part_cache_bytes`: a feature whose slab would
    not fit in what is left is read through zarr item by item (random access over more than the cache
    holds), with the same values, and nothing of it is cached."""
    from store.reader import Store

    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        for feature in ("feat", "more"):
            w.set_feature(feature, ATTRS)
            for p in range(12):
                w.commit_batch(feature, [(f"i{p}-{k}", rows(20, float(p * 10 + k)), {"spec_hash": "s1"})
                                         for k in range(10)])
    one_part = 10 * 20 * 2 * 4  # bytes of one part's features (float32, 2 columns)
    # room for feat's features and intervals (float64, twice the bytes), 12 parts each; then none for more's
    s = Store(path, part_cache_bytes=37 * one_part)
    order = [f"i{p}-{k}" for k in range(10) for p in range(12)]  # every read in another part
    for feature in ("feat", "more"):
        for item in order:
            p, k = map(int, item[1:].split("-"))
            np.testing.assert_array_equal(s.read(feature, item).features[...], rows(20, float(p * 10 + k)).features)
    assert s._arrays["feat", "features"].data is not None and s._arrays["more", "features"].data is None
    assert s.cached_bytes == 36 * one_part and s._arrays["more", "intervals"].data is None
    assert s._lazy and all(key[0] == "more" for key in s._lazy)


def test_compaction_never_launders_a_damaged_part(store: Path) -> None:
    """A part whose bytes changed since its commit is not rewritten with fresh hashes: it stays as it is,
    verify still reports its item, and every other current row is compacted bit-identically."""
    with StoreWriter(store, "demo") as w:
        w.commit("feat", "a", rows(6, 9.0), {"spec_hash": "s1", "fingerprint": "fa2"})  # garbage to reclaim
    bad = store / "feat" / "parts" / open_store(store).index("feat").entries["c"].part
    data = bytearray((bad / "features" / "c" / "0" / "0").read_bytes())
    data[len(data) // 2] ^= 0x01
    (bad / "features" / "c" / "0" / "0").write_bytes(bytes(data))
    before = snapshot(store, skip=("c",))
    with pytest.raises(DamagedItem, match=r"damaged item c \(features: .*checksum"):  # never served as data
        open_store(store).read("feat", "c").features[...]
    [done] = compact_store(store)
    assert bad.is_dir() and open_store(store).index("feat").entries["c"].part == bad.name
    assert snapshot(store, skip=("c",)) == before
    from store.verify import verify_store

    assert [c.item for c in verify_store(store).damaged] == ["c"]


def test_a_kill_mid_append_leaves_a_torn_line_that_is_no_commit(store: Path) -> None:
    """The part is renamed into place and half of its index line written when the process dies: the torn line
    is no record; a reader warns and serves the whole part past it, the next writer cuts the line and adopts the
    part (its rows are complete: nothing that was written whole is deleted), and the store goes on."""
    import store.index as si
    from store.backends.local import LocalBackend

    log_path = store / "feat" / "index.log"
    good = log_path.read_bytes()
    def torn(backend: LocalBackend, key: str, end: object, data: bytes) -> int:
        with open(backend.root / key, "ab") as f:
            f.write(data[: len(data) // 2])  # what reached the disk before the kill
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as m:
        m.setattr(LocalBackend, "log_append", torn)
        m.setattr("shutil.rmtree", lambda *a, **k: None)  # a killed process cleans nothing up
        w = StoreWriter(store, "demo")
        with pytest.raises(KeyboardInterrupt):
            w.commit("feat", "d", rows(2, 5.0), {"spec_hash": "s1"})
        w.close()
    assert len(log_path.read_bytes()) > len(good) and len(list((store / "feat" / "parts").iterdir())) == 3
    assert si.parse(log_path.read_bytes(), log_path).torn
    # the part was written whole; with no run writing, a reader warns and serves it rather than the older rows the
    # log alone names (issue 53: parts newer than the log are never silently left out)
    assert open_store(store).items("feat") == ["a", "b", "c", "d"]
    with StoreWriter(store, "demo") as w:
        w.set_feature("feat", ATTRS)
        assert len(list((store / "feat" / "parts").iterdir())) == 3  # the unpublished part is adopted
        assert open_store(store).items("feat") == ["a", "b", "c", "d"]
        w.commit("feat", "d", rows(2, 5.0), {"spec_hash": "s1"})
    assert log_path.read_bytes().startswith(good)  # the torn line was cut before the new ones
    s = open_store(store)
    assert s.items("feat") == ["a", "b", "c", "d"] and not s.index("feat").torn
    np.testing.assert_array_equal(s.read("feat", "d").features[:], rows(2, 5.0).features)
    assert len(list((store / "feat" / "parts").iterdir())) == 4
