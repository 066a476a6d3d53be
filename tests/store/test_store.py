import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rows import FeatureRows
from store import layout
from store.plan import Wanted, make_plan
from store.reader import open_store
from store.writer import StoreWriter

ATTRS = {"extractor": "x", "version": "1", "config": {}, "columns": ["a", "b"], "rate_hz": 1.0,
         "weights": "none", "spec_hash": "s1"}


def rows(n: int, value: float = 1.0) -> FeatureRows:
    return FeatureRows(
        features=np.full((n, 2), value, np.float32),
        intervals=np.stack([np.arange(n), np.arange(n) + 1.0], axis=1),
        extras={"words": np.array([f"w{i}" for i in range(n)]), "count": np.arange(n, dtype=np.int32)},
        attrs={"face_ratio": 0.5},
    )


def test_roundtrip_is_lazy_and_complete(tmp_path: Path) -> None:
    w = StoreWriter(tmp_path / "s.zarr", "demo")
    w.set_feature("feat", ATTRS)
    w.commit("feat", "item-1", rows(5, 2.0), {"fingerprint": "f1", "spec_hash": "s1"})
    s = open_store(tmp_path / "s.zarr")
    assert s.attrs["schema"] == layout.SCHEMA and s.attrs["dataset"] == "demo"
    assert s.features() == ["feat"] and s.items("feat") == ["item-1"]
    r = s.read("feat", "item-1")
    assert r.features.shape == (5, 2) and float(r.features[4, 1]) == 2.0
    assert r.intervals.tolist()[-1] == [4.0, 5.0]
    assert list(r.extras["words"][:]) == ["w0", "w1", "w2", "w3", "w4"]
    assert r.attrs["complete"] is True and r.attrs["face_ratio"] == 0.5 and r.columns == ["a", "b"]


def test_zero_rows_and_rejects_bad_ids(tmp_path: Path) -> None:
    w = StoreWriter(tmp_path / "s.zarr", "demo")
    w.set_feature("feat", ATTRS)
    w.commit("feat", "empty", rows(0), {"spec_hash": "s1"})
    assert open_store(tmp_path / "s.zarr").read("feat", "empty").features.shape == (0, 2)
    with pytest.raises(ValueError, match="invalid id"):
        w.commit("feat", "../evil", rows(1), {})
    with pytest.raises(ValueError, match="invalid id"):
        w.commit("feat", "zarr.json", rows(1), {})  # would replace the feature group's own metadata
    with pytest.raises(ValueError, match="invalid feature name"):
        w.set_feature(layout.RUNS, ATTRS)


def test_stale_and_filtered_items_are_hidden_by_default(tmp_path: Path) -> None:
    w = StoreWriter(tmp_path / "s.zarr", "demo")
    w.set_feature("feat", ATTRS)
    w.commit("feat", "old", rows(1), {"spec_hash": "s0"})
    w.commit("feat", "few-faces", FeatureRows(np.zeros((1, 2)), np.array([[0.0, 1.0]]), attrs={"filtered": True}),
             {"spec_hash": "s1"})
    w.commit("feat", "good", rows(1), {"spec_hash": "s1"})
    s = open_store(tmp_path / "s.zarr")
    assert s.items("feat") == ["good"]
    assert s.items("feat", include_filtered=True, include_stale=True) == ["few-faces", "good", "old"]


def test_recommit_replaces_the_item(tmp_path: Path) -> None:
    w = StoreWriter(tmp_path / "s.zarr", "demo")
    w.set_feature("feat", ATTRS)
    w.commit("feat", "i", rows(3, 1.0), {"spec_hash": "s1"})
    w.commit("feat", "i", rows(2, 7.0), {"spec_hash": "s1"})
    r = open_store(tmp_path / "s.zarr").read("feat", "i")
    assert r.features.shape == (2, 2) and float(r.features[0, 0]) == 7.0
    assert not (tmp_path / "s.zarr" / layout.STAGING).exists() or not any((tmp_path / "s.zarr" / layout.STAGING).iterdir())


def test_a_process_killed_mid_write_leaves_no_half_item(tmp_path: Path) -> None:
    """The child dies (os._exit, like SIGKILL) after writing the features array of its second item."""
    store = tmp_path / "s.zarr"
    script = textwrap.dedent(f"""
        import os, numpy as np
        import store.parts as parts
        import store.writer as sw
        from rows import FeatureRows
        rows = lambda n: FeatureRows(np.ones((n, 2), np.float32), np.stack([np.arange(n), np.arange(n) + 1.0], 1))
        w = sw.StoreWriter({str(store)!r}, "demo")
        w.set_feature("feat", {ATTRS!r})
        w.commit("feat", "done", rows(3), {{"spec_hash": "s1"}})
        real = parts.write_array
        def dying(group, name, data, *rest):
            real(group, name, data, *rest)
            if name == "features":
                os._exit(9)
        parts.write_array = dying
        w.commit("feat", "half", rows(4), {{"spec_hash": "s1"}})
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(Path(__file__).parents[2])})
    assert proc.returncode == 9, proc.stderr
    assert any((store / layout.STAGING).iterdir())  # the half item is on disk, but only in staging
    s = open_store(store)
    assert s.items("feat", include_filtered=True, include_stale=True) == ["done"]
    with pytest.raises(KeyError):
        s.read("feat", "half")
    StoreWriter(store, "demo")  # the next run's writer sweeps the leftovers
    assert not (store / layout.STAGING).exists()


def test_plan_finds_missing_and_stale_pairs(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    w = StoreWriter(path, "demo")
    w.set_feature("feat", ATTRS)
    w.commit("feat", "same", rows(1), {"fingerprint": "fp-same", "spec_hash": "s1"})
    w.commit("feat", "changed", rows(1), {"fingerprint": "fp-old", "spec_hash": "s1"})
    wanted = [Wanted("feat", "same", "fp-same"), Wanted("feat", "changed", "fp-new"), Wanted("feat", "new", "fp")]
    plan = make_plan(path, wanted)
    assert [w.item for w in plan.todo] == ["changed", "new"] and [w.item for w in plan.skipped] == ["same"]
    assert len(make_plan(path, wanted, force=True).todo) == 3


def test_fingerprint_depends_on_declared_inputs_only() -> None:
    spec = layout.spec_hash("densenet161", "1", {"weights": "random"}, "random-seed0")
    assert spec == layout.spec_hash("densenet161", "1", {"weights": "random"}, "random-seed0")
    assert spec != layout.spec_hash("densenet161", "2", {"weights": "random"}, "random-seed0")
    assert spec != layout.spec_hash("densenet161", "1", {"weights": "random", "x": 1}, "random-seed0")
    src = {"name": "a.mp4", "size": 10, "mtime_ns": 5}
    assert layout.fingerprint(spec, src) != layout.fingerprint(spec, {**src, "size": 11})


def test_wrong_dataset_or_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    StoreWriter(tmp_path / "s.zarr", "demo")
    with pytest.raises(ValueError, match="holds dataset 'demo'"):
        StoreWriter(tmp_path / "s.zarr", "other")
    with pytest.raises(FileNotFoundError, match="not a feature store"):
        open_store(tmp_path / "nothing.zarr")


def test_one_writer_per_store(tmp_path: Path) -> None:
    """A second run on the same store stops at once instead of sweeping the first run's staging."""
    path = tmp_path / "s.zarr"
    first = StoreWriter(path, "demo")
    first.set_feature("feat", ATTRS)
    with pytest.raises(RuntimeError, match=r"another run is writing to this store \(pid \d+"):
        StoreWriter(path, "demo")
    first.commit("feat", "i", rows(1), {"spec_hash": "s1"})
    first.close()
    with StoreWriter(path, "demo") as second:  # free again once the first writer is closed
        second.commit("feat", "j", rows(1), {"spec_hash": "s1"})
    assert open_store(path).items("feat") == ["i", "j"]


def test_a_replacement_killed_before_its_index_line_keeps_the_old_version(tmp_path: Path) -> None:
    """The new part is renamed into place, then the process dies before the index append: readers get one
    whole version, never absent, never half: with no run writing, the new one with a warning (issue 53: a part
    newer than the log is never silently passed over); the next writer adopts the new part, whole (its rows were
    complete before the rename: nothing written whole is deleted), and readers then get it from the log."""
    from store.backends.local import LocalBackend

    path = tmp_path / "s.zarr"
    w = StoreWriter(path, "demo")
    w.set_feature("feat", ATTRS)
    w.commit("feat", "i", rows(3, 1.0), {"spec_hash": "s1"})

    def dying(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as m:
        m.setattr(LocalBackend, "log_append", dying)
        m.setattr("shutil.rmtree", lambda *a, **k: None)  # a killed process cleans nothing up
        with pytest.raises(KeyboardInterrupt):
            w.commit("feat", "i", rows(2, 7.0), {"spec_hash": "s1"})
    w.close()
    assert len(list((path / "feat" / "parts").iterdir())) == 2  # the new part is on disk, unpublished
    with StoreWriter(path, "demo"):  # while a run holds the lock the part may be a commit in flight: the log's
        r = open_store(path).read("feat", "i")
        assert r.features.shape == (3, 2) and float(r.features[0, 0]) == 1.0
    np.testing.assert_array_equal(open_store(path).read("feat", "i").features[...], rows(2, 7.0).features)
    StoreWriter(path, "demo").set_feature("feat", ATTRS)  # the next writer adopts the unpublished part
    assert len(list((path / "feat" / "parts").iterdir())) == 2
    np.testing.assert_array_equal(open_store(path).read("feat", "i").features[...], rows(2, 7.0).features)


def test_an_item_is_on_disk_before_it_becomes_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every staged file is fsynced before the rename, and the rename's directory after it."""
    import os

    import atomicio

    w = StoreWriter(tmp_path / "s.zarr", "demo")
    w.set_feature("feat", ATTRS)
    synced, renamed = [], []
    real_fsync, real_rename = atomicio.fsync_path, Path.rename
    monkeypatch.setattr(atomicio, "fsync_path", lambda p: (synced.append(Path(p)), real_fsync(p)))
    monkeypatch.setattr(Path, "rename", lambda self, t: (renamed.append(len(synced)), real_rename(self, t))[1])
    w.commit("feat", "i", rows(3), {"spec_hash": "s1"})
    staging = tmp_path / "s.zarr" / layout.STAGING
    before = {"/".join(p.relative_to(staging).parts[1:]) for p in synced[: renamed[0]] if p.is_relative_to(staging)}
    assert {"zarr.json", "features/zarr.json", "intervals/zarr.json", ""} <= before  # "" = the item's folder
    assert any(f.startswith("features/c/") for f in before)  # the chunk data, not only metadata
    assert synced[-1] == tmp_path / "s.zarr" / "feat" / "parts"  # the directory the part was renamed into
    [part] = os.listdir(tmp_path / "s.zarr" / "feat" / "parts")
    assert open_store(tmp_path / "s.zarr").index("feat").entries["i"].part == part
