"""Issue 35, store: a damaged index never loses a committed part, held readers read their whole snapshot after
a compaction, a corrupted chunk is never served as data, and broken attributes are named."""

import json
from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store import index, layout, repair
from store.backends.local import LocalBackend
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



def _index(store: Path) -> index.Index:
    path = store / "feat" / layout.INDEX
    return index.parse(path.read_bytes(), path)

@pytest.mark.parametrize("damage", [_flip_last_line, _cut_mid_line, _cut_at_line])
def test_a_damaged_or_cut_last_index_line_loses_no_committed_part(store: Path, damage, caplog) -> None:
    log = store / "feat" / layout.INDEX
    damage(log)
    if damage is _flip_last_line:  # a complete line that fails its checksum: readers rebuild from the parts
        with pytest.raises(index.IndexDamaged, match="line 4 fails its checksum"):
            index.parse(log.read_bytes(), log)
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
    damage(store / "feat" / layout.INDEX)
    with StoreWriter(store, "demo") as w:
        w.set_feature("feat", ATTRS)  # opens the index: the old code removed item d's part here
        assert n_parts(store) == 3
        w.commit("feat", "e", rows(7, 4.0), {"spec_hash": "s1", "fingerprint": "fe"})
    all_read(store, "abcde")
    assert compact_store(store) and n_parts(store) == 1
    all_read(store, "abcde")


def test_verify_reports_parts_that_no_index_line_names(store: Path) -> None:
    _cut_at_line(store / "feat" / layout.INDEX)
    text = verify_store(store).summary()
    assert "UNINDEXED feat" in text and "adopted into the index" in text
    assert not repair.unindexed(store, "feat", _index(store))
    assert "UNINDEXED" not in verify_store(store).summary()
    all_read(store)


# ---- 2, 3. a held reader reads its whole snapshot after a compaction, on every path ----

def _supersede_and_compact(path: Path) -> None:
    """A new version of item a, then a compaction that rewrites every current row and retires the old parts."""
    with StoreWriter(path, "demo") as w:
        w.commit("feat", "a", rows(2, 9.0), {"spec_hash": "s1", "fingerprint": "fa2"})
    assert compact_store(path)


@pytest.mark.parametrize("whole_array_bytes", [0, 16 << 20], ids=["lazy", "cached"])
def test_a_held_reader_reads_its_whole_snapshot_after_a_compaction(store: Path, whole_array_bytes: int) -> None:
    held = open_store(store, whole_array_bytes=whole_array_bytes)
    view = held.read("feat", "b").features  # taken before the compaction, read after it
    old_parts = {p.name for p in (store / "feat" / "parts").iterdir()}
    _supersede_and_compact(store)
    assert held.items("feat") == list("abcd")
    np.testing.assert_array_equal(view[...], expected("b"))
    for item in "abcd":  # a: its version of the snapshot, not the new one
        np.testing.assert_array_equal(held.read("feat", item).features[...], expected(item))
        np.testing.assert_array_equal(held.arrays("feat", item, ["features"])[0], expected(item))
    picks = [("d", 5), ("a", 0), ("c", 4), ("b", 1)]
    for _ in range(2):  # the second time through the columns and slabs the first one made
        np.testing.assert_array_equal(held.rows("feat", "features", picks),
                                      np.stack([expected(i)[r] for i, r in picks]))
    assert old_parts <= {p.name for p in (store / "feat" / "parts").iterdir()}  # kept: this reader holds them
    held.close()
    with StoreWriter(store, "demo") as w:  # no reader holds the old log now: its parts go
        w.set_feature("feat", ATTRS)
    assert not old_parts & {p.name for p in (store / "feat" / "parts").iterdir()}
    s = open_store(store)
    np.testing.assert_array_equal(s.read("feat", "a").features[...], rows(2, 9.0).features)
    np.testing.assert_array_equal(s.read("feat", "d").features[...], expected("d"))


@pytest.mark.parametrize("whole_array_bytes", [0, 16 << 20], ids=["lazy", "cached"])
def test_a_part_being_removed_is_snapshot_gone_never_damaged(store: Path, whole_array_bytes: int) -> None:
    """Without a lease (a filesystem refusing flock) a compaction removes the old parts under a held reader;
    caught mid-removal (one file of each part gone), every read of them says SnapshotGone, never
    DamagedItem, never zeros, and `items()` never quietly leaves items out."""
    import shutil

    from store.reader import SnapshotGone

    with pytest.MonkeyPatch.context() as m:
        m.setattr("fcntl.flock", lambda fd, op: (_ for _ in ()).throw(OSError(37, "No locks")))
        held = open_store(store, whole_array_bytes=whole_array_bytes)
    view = held.read("feat", "b").features  # the lazy array opened, not yet read
    real_rmtree = shutil.rmtree

    def first_file_only(folder: Path, *args: object, **kwargs: object) -> None:
        if Path(folder).parent.name != "parts":
            return real_rmtree(folder, *args, **kwargs)
        (Path(folder) / "features" / "c" / "0" / "0").unlink()

    with pytest.MonkeyPatch.context() as m:  # the removal is caught after the first file of each part
        m.setattr(shutil, "rmtree", first_file_only)
        _supersede_and_compact(store)
    def true_or_gone(read, truth: np.ndarray) -> str:
        """A read returns the true rows (what this handle already holds in memory) or SnapshotGone."""
        try:
            np.testing.assert_array_equal(read(), truth)
        except SnapshotGone as e:
            assert "open the store again" in str(e)
            return "gone"
        return "true"

    true_or_gone(lambda: view[...], expected("b"))
    for item in "cd":  # never read before: their parts are being removed
        assert true_or_gone(lambda item=item: held.read("feat", item).features[...], expected(item)) == "gone"
    assert true_or_gone(lambda: held.rows("feat", "features", [("d", 1)])[0], expected("d")[1]) == "gone"
    with pytest.raises(SnapshotGone):
        held.items("feat")


# ---- 4. a corrupted chunk is never served as data ----

def _flip_chunk(path: Path, item: str) -> Path:
    s = open_store(path)
    part = path / "feat" / "parts" / s.index("feat").entries[item].part
    s.close()
    shard = part / "features" / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x10  # inside the compressed chunk (the shard index is at the end)
    shard.write_bytes(bytes(data))
    return part


@pytest.mark.parametrize("whole_array_bytes", [0, 16 << 20], ids=["lazy", "cached"])
def test_a_corrupted_chunk_raises_damaged_item_and_the_next_plan_recomputes_it(store: Path,
                                                                             whole_array_bytes: int) -> None:
    from store.integrity import DamagedItem
    from store.plan import Wanted, make_plan

    part = _flip_chunk(store, "c")
    s = open_store(store, whole_array_bytes=whole_array_bytes)
    with pytest.raises(DamagedItem, match=rf"{part}: damaged item c \(features: .*checksum"):
        s.read("feat", "c").features[...]
    with pytest.raises(DamagedItem, match=rf"{part}: damaged item c \("):
        s.rows("feat", "features", [("a", 0), ("c", 1)])
    np.testing.assert_array_equal(s.read("feat", "d").features[...], expected("d"))  # other parts read
    want = [Wanted("feat", i, f"f{i}") for i in "abcd"]
    plan = make_plan(store, want)  # a plain plan, no --verify: the read's finding is seen
    assert [w.item for w in plan.todo] == ["c"] and [c.item for c in plan.damaged] == ["c"]
    with StoreWriter(store, "demo") as w:  # what the next extract does with it
        w.commit("feat", "c", rows(5, 2.0), {"spec_hash": "s1", "fingerprint": "fc"})
    assert make_plan(store, want).todo == []
    np.testing.assert_array_equal(open_store(store).read("feat", "c").features[...], expected("c"))


def test_a_corrupted_chunk_is_found_by_batched_and_single_slab_reads(store: Path) -> None:
    from store.integrity import DamagedItem

    _flip_chunk(store, "d")
    s = open_store(store)
    with pytest.raises(DamagedItem, match=r"damaged item d \("):
        s.rows("feat", "features", [("d", 0)])
    for _ in range(4):  # again and again: a part that failed to load is never served from the slab
        with pytest.raises(DamagedItem, match=r"damaged item d \("):
            s.read("feat", "d").features[...]
        np.testing.assert_array_equal(s.read("feat", "a").features[...], expected("a"))


def test_parts_written_without_chunk_checksums_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from zarr.codecs import ZstdCodec

    from store import parts

    monkeypatch.setattr(parts, "CHUNK_CODEC", ZstdCodec(level=0, checksum=False))  # as parts were written before
    path = tmp_path / "old.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.commit_batch("feat", [(i, rows(3 + k, float(k)), {"spec_hash": "s1"}) for k, i in enumerate("ab")])
    meta = json.loads((next((path / "feat" / "parts").iterdir()) / "features" / "zarr.json").read_bytes())
    assert '"checksum": false' in json.dumps(meta)
    monkeypatch.undo()
    for whole in (0, 16 << 20):
        s = open_store(path, whole_array_bytes=whole)
        for i in "ab":
            np.testing.assert_array_equal(s.read("feat", i).features[...], expected(i))


# ---- 5. an index line with broken attribute JSON (and a valid checksum) ----

def test_broken_attribute_json_names_the_item_and_the_line(store: Path) -> None:
    from store.integrity import DamagedItem

    log = store / "feat" / layout.INDEX
    lines = log.read_bytes().split(b"\n")
    rec = json.loads(lines[3][17:])  # item d's line, the 4th
    rec["items"][0][-1] = rec["items"][0][-1][:-5]  # its attributes cut short: no longer JSON
    lines[3] = layout.encode(layout.PartLine.from_json(rec)).rstrip(b"\n")
    log.write_bytes(b"\n".join(lines))
    s = open_store(store)
    with pytest.raises(DamagedItem, match=r"index.log: line 4 \(part .*\): damaged item d \(its attributes do not parse"):
        s.read("feat", "d")
    np.testing.assert_array_equal(s.read("feat", "c").features[...], expected("c"))
    report = verify_store(store)
    assert not report.ok and [c.item for c in report.damaged] == ["d"]
    assert "index line 4: its attributes do not parse" in report.summary()


@pytest.mark.parametrize("when", ["before its rename", "after its rename"])
def test_a_killed_compaction_loses_nothing_and_its_leftovers_go(store: Path, when: str) -> None:
    """Killed before the new log is renamed into place: the new parts are unindexed, the next writer adopts
    them (the same rows, newer). Killed after it: the old parts are named by the retired log, and the next
    writer removes them (no reader holds it). Either way every item reads its rows, and one more compaction
    leaves one part."""
    import shutil

    with StoreWriter(store, "demo") as w:
        w.commit("feat", "a", rows(3, 0.0), {"spec_hash": "s1", "fingerprint": "fa"})  # something to reclaim

    real_replace, renamed = LocalBackend.log_replace, []

    def replace(*args: object, **kwargs: object) -> str:
        if when == "before its rename":
            raise KeyboardInterrupt
        renamed.append(real_replace(*args, **kwargs))
        return renamed[-1]

    def release(*args: object) -> list[str]:
        if renamed:  # the compaction's own release, right after its rename
            raise KeyboardInterrupt
        return []

    with pytest.MonkeyPatch.context() as m:
        m.setattr(shutil, "rmtree", lambda *a, **k: None)  # a killed process cleans nothing up
        m.setattr(LocalBackend, "log_replace", replace)
        m.setattr(repair, "release_retired", release)
        with pytest.raises(KeyboardInterrupt):
            compact_store(store)
    all_read(store)
    with StoreWriter(store, "demo") as w:
        w.set_feature("feat", ATTRS)
    all_read(store)
    names = {p.name for p in (store / "feat" / "parts").iterdir()}
    state = _index(store)
    assert names == set(state.parts) and not list((store / "feat").glob("retired/*"))
    assert len(names) == (5 if when == "before its rename" else 1)  # 4 old + 1 adopted; the compacted one
    compact_store(store)
    all_read(store)
    assert n_parts(store) == 1


def test_a_compaction_whose_log_was_renamed_before_an_error_keeps_its_new_parts(store: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The new log is renamed into place, then the folder's fsync fails (EIO): the error reaches the caller,
    but the new parts stay, since the log on disk names them; every item reads, and verify finds nothing."""
    import errno

    import atomicio

    real = atomicio.fsync_path

    def failing(path: object) -> None:
        if Path(str(path)) == store / "feat":  # the folder the new index.log was renamed in
            raise OSError(errno.EIO, "I/O error")
        real(path)

    monkeypatch.setattr(atomicio, "fsync_path", failing)
    from store.writer import StoreError

    with pytest.raises(StoreError, match="I/O error; the batch of 4 item.s. was published, its folder not flushed"):
        compact_store(store)
    monkeypatch.setattr(atomicio, "fsync_path", real)
    all_read(store)
    assert verify_store(store).ok
    with StoreWriter(store, "demo") as w:  # the next writer removes the old parts (no reader holds their log)
        w.set_feature("feat", ATTRS)
    assert n_parts(store) == 1
    all_read(store)
