"""Planning at scale: one integrity check per part, one index lookup per wanted pair, and no garbage
collection while an index's entries are made (docs/design.md, "Store")."""

import gc
import logging
from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store import index, layout
from store.plan import Wanted, make_plan
from store.reader import open_store
from store.writer import StoreWriter

ATTRS = {"extractor": "x", "version": "1", "config": {}, "columns": ["a", "b"], "rate_hz": 1.0,
         "weights": "none", "spec_hash": "s1"}


def rows(value: float) -> FeatureRows:
    return FeatureRows(np.full((3, 2), value, np.float32), np.stack([np.arange(3.0), np.arange(3.0) + 1], 1))


def meta(item: str, fp: str) -> dict:
    return {"spec_hash": "s1", "fingerprint": fp}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Parts: P1 (a, b), P2 (c, d), P3 (e); then b recommitted alone (P4: P1 keeps only a current) and e
    recommitted (P5: P3 fully superseded)."""
    path = tmp_path / "s.zarr"
    with StoreWriter(path, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.commit_batch("feat", [(i, rows(k), meta(i, f"fp-{i}")) for k, i in enumerate("ab")])
        w.commit_batch("feat", [(i, rows(k), meta(i, f"fp-{i}")) for k, i in enumerate("cd")])
        w.commit("feat", "e", rows(4.0), meta("e", "fp-e"))
        w.commit("feat", "b", rows(5.0), meta("b", "fp-b2"))
        w.commit("feat", "e", rows(6.0), meta("e", "fp-e2"))
    return path


def part_dir(store: Path, part: str) -> Path:
    return store / "feat" / "parts" / part


def parts_in_order(store: Path) -> list[str]:
    return sorted(open_store(store).index("feat").parts, key=lambda p: open_store(store).index("feat").parts[p].seq)


def test_live_parts_leave_out_fully_superseded_parts(store: Path) -> None:
    p1, p2, p3, p4, p5 = parts_in_order(store)
    assert sorted(open_store(store).index("feat").live_parts()) == sorted([p1, p2, p4, p5])


def test_plan_damaged_missing_stale_and_superseded(store: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A damaged part makes exactly its current items damaged (a, not b whose rows moved to P4); a damaged
    part with no current rows (P3) damages nothing; stale and missing items are planned."""
    p1, _, p3, _, _ = parts_in_order(store)
    (part_dir(store, p1) / "features" / "zarr.json").unlink()
    (part_dir(store, p3) / "intervals" / "zarr.json").write_bytes(b"")
    want = [Wanted("feat", "a", "fp-a"), Wanted("feat", "b", "fp-b2"), Wanted("feat", "c", "fp-c-new"),
            Wanted("feat", "d", "fp-d"), Wanted("feat", "e", "fp-e2"), Wanted("feat", "f", "fp-f"),
            Wanted("other", "a", "fp-a")]
    with caplog.at_level(logging.WARNING):
        plan = make_plan(store, want)
    assert [(w.feature, w.item) for w in plan.todo] == [("feat", "a"), ("feat", "c"), ("feat", "f"), ("other", "a")]
    assert [(w.feature, w.item) for w in plan.skipped] == [("feat", "b"), ("feat", "d"), ("feat", "e")]
    assert [(c.feature, c.item, c.path) for c in plan.damaged] == [("feat", "a", part_dir(store, p1))]
    assert "features/zarr.json is missing" in plan.damaged[0].problem
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [str(part_dir(store, p1))]
    # the same items as the per-item check says, and items() leaves out the same
    s = open_store(store)
    assert [c.item for c in s.check("feat") if not c.ok] == ["a"]
    assert [c.item for c in s.check("feat")] == list("abcde")
    assert s.items("feat") == list("bcde")


def _log_bytes(n_parts: int, per_part: int) -> bytes:
    recs: list[layout.Record] = [layout.Header("g")]
    for p in range(n_parts):
        items = [layout.item_row(f"i{p:03d}-{k:04d}", k, 1, {"fingerprint": f"fp{k}", "spec_hash": "s"})
                 for k in range(per_part)]
        recs.append(layout.PartLine(f"{p:03d}-x", p + 1, items, {"zarr.json": [1, "0"]}, {}))
    return b"".join(layout.encode(r) for r in recs)


def test_loading_an_index_runs_no_garbage_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries made while the collector runs cost more to load, the more so the more there are (each
    collection walks the young ones, each full one all of them): loading pauses it and switches it back on
    after (also when the log is damaged); a caller that paused it keeps it paused."""
    data = _log_bytes(4, 1000)
    applied, during = [0], []
    real_add = index.Index.add

    def add(state: index.Index, rec: layout.Record) -> None:
        real_add(state, rec)
        applied[0] += 1

    def count(phase: str, info: dict) -> None:
        if phase == "start" and 0 < applied[0] < 5:  # the header and 4 parts: mid-load
            during.append(info["generation"])

    monkeypatch.setattr(index.Index, "add", add)
    gc.collect()
    gc.callbacks.append(count)
    try:
        state = index.parse(data, Path("index.log"))
        assert during == [] and applied[0] == 5 and len(state.entries) == 4000 and gc.isenabled()
        lines = data.split(b"\n")
        with pytest.raises(index.IndexDamaged):
            index.parse(b"\n".join([lines[0], b"0" + lines[1][1:], *lines[2:]]), Path("index.log"))
        assert gc.isenabled()
        gc.disable()
        index.parse(data, Path("index.log"))
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.callbacks.remove(count)


def test_a_log_cut_at_any_byte_reads_as_its_complete_lines() -> None:
    """`layout.fold` (every index load and plan): a log cut at any byte (a kill mid-append) reads as the
    records whose whole line, newline included, is there; the rest is a torn tail, never a commit."""
    data = _log_bytes(3, 4)
    ends = [k + 1 for k, b in enumerate(data) if b == ord("\n")]  # each complete line's end
    for cut in range(len(data) + 1):
        seen: list[str] = []
        length, torn = layout.fold(data[:cut], Path("index.log"), lambda rec, seen=seen: seen.append(type(rec).__name__))
        whole = [e for e in ends if e <= cut]
        assert length == (whole[-1] if whole else 0), cut
        assert torn == (cut > length), cut
        assert seen == ["Header", "PartLine", "PartLine", "PartLine"][:len(whole)], cut
        state = index.parse(bytearray(data[:cut]), Path("index.log"))  # a pinned read's buffer
        assert (state.length, state.torn, len(state.entries)) == (length, torn, 4 * max(0, len(whole) - 1))


def test_a_bad_line_before_the_last_is_damage_not_a_torn_tail() -> None:
    lines = _log_bytes(3, 4).split(b"\n")
    for k in range(len(lines) - 2):  # every complete line but the last
        bad = b"\n".join([*lines[:k], b"x" + lines[k][1:], *lines[k + 1:]])
        with pytest.raises(layout.IndexDamaged, match=f"line {k + 1} fails its checksum"):
            layout.fold(bad, Path("index.log"), lambda rec: None)


def _plan_tuple(plan) -> tuple:
    return ([(w.feature, w.item, w.fingerprint) for w in plan.todo],
            [(w.feature, w.item, w.fingerprint) for w in plan.skipped],
            [(c.feature, c.item, c.path, c.problem) for c in plan.damaged])


def test_planning_keeps_no_index_entries_and_equals_planning_from_the_whole_index(
        store: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A plan reads each index line for its items' parts and fingerprints only: no `Entry` is made (a million
    items: 0.7 GiB held instead of 1.6). Its answer equals the one from the whole index (the path a missing
    or damaged log takes): damaged parts' current items, wanted or not (c is not wanted: still damaged); a
    superseded item's new part (b); stale, missing and twice-wanted pairs."""
    p1, p2, _, _, _ = parts_in_order(store)
    (part_dir(store, p1) / "features" / "zarr.json").unlink()  # a (current in P1); b moved on to P4
    (part_dir(store, p2) / "intervals" / "zarr.json").write_bytes(b"")  # c and d
    want = [Wanted("feat", "a", "fp-a"), Wanted("feat", "b", "fp-b2"), Wanted("feat", "d", "fp-d"),
            Wanted("feat", "e", "fp-e"), Wanted("other", "x", "1"), Wanted("feat", "e", "fp-e2"),
            Wanted("feat", "b", "fp-b"), Wanted("feat", "f", "fp-f")]

    def no_entries(state: index.Index, rec: dict) -> None:
        raise AssertionError("planning made index entries")

    with monkeypatch.context() as m, caplog.at_level(logging.WARNING):
        m.setattr(index.Index, "add", no_entries)
        slim = make_plan(store, want)
    warned = sorted(r.getMessage() for r in caplog.records)
    caplog.clear()
    with monkeypatch.context() as m, caplog.at_level(logging.WARNING):
        m.setattr(open_store(store).__class__, "scan_index", lambda self, feature, visit: False)
        whole = make_plan(store, want)
    assert _plan_tuple(slim) == _plan_tuple(whole)
    assert sorted(r.getMessage() for r in caplog.records) == warned and len(warned) == 2
    todo, skipped, damaged = _plan_tuple(slim)
    # each pair of an item wanted twice is decided on its own fingerprint (b: the first is the stored one)
    assert skipped == [("feat", "b", "fp-b2"), ("feat", "e", "fp-e2")]
    assert [(f, i) for f, i, _ in todo] == [("feat", "a"), ("feat", "d"), ("feat", "e"), ("other", "x"),
                                            ("feat", "b"), ("feat", "f")]
    assert [(i, path.name) for _, i, path, _ in damaged] == [("a", p1), ("c", p2), ("d", p2)]


def test_a_run_reads_each_log_once(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's writer reads the log when it opens the feature; planning from the writer's index, commits
    and the end-of-run compaction read it no more (before: the plan, the compaction's reload and the run's
    last listing each read it again). The plan is the one a snapshot makes, damaged parts included."""
    import io
    import os

    (store / "feat" / "parts" / open_store(store).index("feat").entries["c"].part / "features" / "zarr.json").unlink()
    wanted = [Wanted("feat", i, fp) for i, fp in [("a", "fp-a"), ("b", "fp-b2"), ("c", "fp-c"), ("z", "fp-z")]]
    from_snapshot = _plan_tuple(make_plan(store, wanted))
    with StoreWriter(store, "demo") as w:
        w.set_feature("feat", ATTRS)
        reads: list[str] = []
        real_open = io.open

        def counting_open(file, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            if str(file).endswith(layout.INDEX):
                reads.append(str(file))
            return real_open(file, *a, **k)

        monkeypatch.setattr(io, "open", counting_open)
        real_os_open = os.open

        def counting_os_open(path, flags, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            if str(path).endswith(layout.INDEX) and not flags & (os.O_WRONLY | os.O_RDWR):  # a read, not an append
                reads.append(str(path))
            return real_os_open(path, flags, *a, **k)

        monkeypatch.setattr(os, "open", counting_os_open)
        assert _plan_tuple(make_plan(store, wanted, indexes=w.index)) == from_snapshot
        w.commit("feat", "z", rows(9.0), meta("z", "fp-z"))
        from store.compact import compact_store

        compact_store(store, ["feat"], force=False, writer=w)
        assert reads == []
