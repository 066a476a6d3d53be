"""Workers write their own parts on object storage (store/workerparts.py, pipeline/ownparts.py; docs/design.md,
"On object storage"), against a real S3 server (moto on 127.0.0.1): a part an actor uploaded and the driver
published is the part the driver would have written; one never published is not data and the next writer
sweeps it; the committer publishes a worker's part whole."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline import ownparts
from pipeline.committer import Committer
from rows import FeatureRows
from store import layout, workerparts
from store.backends import join, open_backend
from store.reader import open_store
from store.writer import StoreWriter
from tests import s3server
from tests.store.test_store_s3 import ATTRS, everything, rows

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name

BATCHES = [[("a", rows(3, 1.0), {"spec_hash": "s1", "fingerprint": "fa"}),
            ("b", rows(5, 2.0, dim=3), {"spec_hash": "s1", "fingerprint": "fb"}),  # another signature: its own part
            ("c", rows(2, 4.0), {"spec_hash": "s1", "fingerprint": "fc", "filtered": True})],
           [("a", rows(4, 7.0), {"spec_hash": "s1", "fingerprint": "fa2"})]]


def part_records(url: str, feature: str) -> list[tuple[dict, bytes]]:
    """Each part's own record (its zarr.json's attribute) and that zarr.json's bytes, in commit order."""
    backend = open_backend(url)
    out = []
    for name in backend.children(join(feature, layout.PARTS)):
        raw = backend.get(join(feature, layout.PARTS, name, layout.META))
        out.append((json.loads(raw)["attributes"][layout.PART_ATTR], raw))
    return sorted(out, key=lambda r: r[0]["seq"])


def test_a_part_a_worker_wrote_is_the_part_the_driver_would_write(s3_url: str, tmp_path: Path) -> None:
    """The same commits, rows uploaded by the 'worker' and published by the driver, against the driver's own
    parts: equal item for item and array for array, and each part's record (chunk hashes included) the same,
    and the same as a local store's (a part staged in memory for a bucket holds a local part's bytes)."""
    by_driver, by_worker, local = f"{s3_url}-driver", f"{s3_url}-worker", str(tmp_path / "local.zarr")
    for url in (by_driver, by_worker, local):
        with StoreWriter(url, "demo") as w:
            w.set_feature("feat", ATTRS)
            for batch in BATCHES:
                if url == by_worker:
                    written = workerparts.write(url, "feat", [(i, r) for i, r, _ in batch])
                    assert all(isinstance(written[i], workerparts.WrittenRows) for i, _, _ in batch)
                    batch = [(i, written[i], attrs) for i, _, attrs in batch]
                w.commit_batch("feat", batch)
    assert everything(by_worker) == everything(by_driver)
    assert part_records(by_worker, "feat") == part_records(by_driver, "feat") == part_records(local, "feat")
    assert len(part_records(by_worker, "feat")) == 3
    assert all(c.ok for c in open_store(by_worker).check("feat", full=True))


def test_a_worker_part_never_published_is_not_data_and_is_swept(s3_url: str) -> None:
    """A part uploaded by a worker whose record never got published (its run was killed): no reader sees its
    items, and the next writer to open the feature removes it; the published ones stay."""
    with StoreWriter(s3_url, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.commit_batch("feat", BATCHES[0])
        orphan = workerparts.write(s3_url, "feat", [("z", rows(3, 9.0))])["z"].part.name
    backend = open_backend(s3_url)
    key = join("feat", layout.PARTS, orphan)
    assert backend.list(key) and not backend.exists(join(key, layout.META))
    s = open_store(s3_url)
    assert s.items("feat", include_filtered=True) == ["a", "b", "c"] and orphan not in s.index("feat").parts
    assert all(c.ok for c in s.check("feat", full=True))
    with StoreWriter(s3_url, "demo") as w:
        w.set_feature("feat", ATTRS)
    assert backend.list(key) == []
    assert open_store(s3_url).items("feat", include_filtered=True) == ["a", "b", "c"]


def test_a_part_is_published_whole_or_not_at_all(s3_url: str) -> None:
    """The driver hands a worker's part's items to the committer one by one; a commit that falls between them
    waits for the rest, and a part whose items never all come fails its pairs, publishing nothing."""
    with StoreWriter(s3_url, "demo") as w:
        w.set_feature("feat", ATTRS)
        written = workerparts.write(s3_url, "feat", [("a", rows(3, 1.0)), ("c", rows(2, 4.0))])
        lone = workerparts.write(s3_url, "feat", [("d", rows(2, 5.0)), ("e", rows(1, 6.0))])
        committer = Committer(w, batch_items=1, batch_age_s=0.05)  # a commit after every pair
        committer.put("feat", "a", written["a"], {"spec_hash": "s1", "fingerprint": "fa"})
        time.sleep(0.3)  # several batch ages: "a" waits for "c"
        assert committer.drain() == [] and open_store(s3_url).items("feat") == []
        committer.put("feat", "c", written["c"], {"spec_hash": "s1", "fingerprint": "fc"})
        committer.put("feat", "d", lone["d"], {"spec_hash": "s1", "fingerprint": "fd"})  # its "e" never comes
        outcomes = committer.close()
    assert {o.item: o.error for o in outcomes if o.item in "ac"} == {"a": None, "c": None}
    failed = [o for o in outcomes if o.item == "d"]
    assert len(failed) == 1 and "published whole or not at all" in str(failed[0].error)
    s = open_store(s3_url)
    assert s.items("feat") == ["a", "c"] and len(s.index("feat").parts) == 1
    np.testing.assert_array_equal(np.asarray(s.read("feat", "c").features[...]), rows(2, 4.0).features)


class _Faces:
    """An extractor whose join remakes the attributes (as faces' does) and can fail for one item."""

    config = None

    @classmethod
    def join(cls, parts: list[FeatureRows], config: object) -> FeatureRows:
        if parts[0].attrs.get("bad"):
            raise ValueError("segments disagree")
        return FeatureRows(parts[0].features, parts[0].intervals, parts[0].extras, {"joined": True})


def test_an_actor_stores_the_items_it_may_and_returns_their_records(s3_url: str) -> None:
    """Only the items the driver named are uploaded; a failing join is that item's failure; the record is a few
    hundred bytes where the rows were more."""
    from pipeline.actors import Extracted, Failure

    big = FeatureRows(np.ones((500, 64), np.float32), np.stack([np.arange(500.0), np.arange(500.0) + 1], 1), {},
                      {"face_ratio": 1.0})
    failed = Failure("c", "decode:frames", None, "ValueError: x")
    results = [Extracted("a", big, None, 0.1), Extracted("b", rows(2, 3.0), None, 0.1),
               Extracted("c", None, failed, 0.0),
               Extracted("d", FeatureRows(big.features, big.intervals, {}, {"bad": True}), None, 0.1)]
    target = ownparts.StoreTarget(s3_url, frozenset({"a", "c", "d"}))
    out, retried = ownparts.store_results(target, "feat", _Faces(), results, Failure.of)
    a, b, c, d = out
    assert retried == {}  # nothing retried: no kind
    assert isinstance(a.rows, workerparts.WrittenRows) and a.rows.attrs == {"joined": True}
    assert (a.item, a.failure, a.seconds) == ("a", None, 0.1)
    assert b == results[1] and c == results[2]
    assert d.rows is None and d.failure == Failure("d", "extract:feat", None, "ValueError: segments disagree")
    assert ownparts.wire_bytes(a) < 2000 < big.features.nbytes < ownparts.wire_bytes(results[0])
    keys = [i.key for i in open_backend(s3_url).list("feat")]
    assert keys and all(k.startswith(f"feat/{layout.PARTS}/{a.rows.part.name}/") for k in keys)
    assert not any(k.endswith(f"{a.rows.part.name}/{layout.META}") for k in keys)  # not whole until published


def test_wire_bytes_counts_arrays_as_ray_sends_them() -> None:
    x = np.zeros((1000, 10), np.float32)
    assert 40_000 <= ownparts.wire_bytes({"rows": x}) < 40_400
    assert ownparts.wire_bytes({"rows": x[:, :5]}) >= 20_000  # a strided view: copied in band, still counted


@pytest.fixture(autouse=True)
def _fresh_refusals() -> None:
    ownparts._refused.clear()


def test_the_driver_asks_an_actor_to_write_only_whole_pairs_into_a_bucket(tmp_path: Path) -> None:
    """(`Runner.store_target`) a bucket: the call's items whose pair is one call's rows, not a long video's
    segments (joined on the driver), nor pairs already closed; a local store, or `worker_parts = false`: none."""
    from types import SimpleNamespace

    from pipeline.runner import Runner, _Pair
    from pipeline.schedule import Unit

    runner = Runner.__new__(Runner)
    runner.config = SimpleNamespace(worker_parts=True)
    runner.writer = SimpleNamespace(path="s3://b/s.zarr")
    runner.pairs = {("frames", "one"): _Pair(), ("frames", "long"): _Pair(segments=3)}
    call = SimpleNamespace(pool=SimpleNamespace(feature="frames"),
                           take=[Unit("one", None, 1, 1), Unit("long", None, 1, 1), Unit("long", None, 1, 1, part=1),
                                 Unit("gone", None, 1, 1)])
    assert runner.store_target(call) == ownparts.StoreTarget("s3://b/s.zarr", frozenset({"one"}))
    runner.config.worker_parts = False
    assert runner.store_target(call) is None
    runner.config.worker_parts, runner.writer = True, SimpleNamespace(path=tmp_path / "x.zarr")
    assert runner.store_target(call) is None


def test_a_part_not_all_uploaded_fails_alone(s3_url: str) -> None:
    """A worker's part with a data file missing is not published (its pairs fail naming it); the other part of
    the same batch is published when the committer tries it alone, its upload intact."""
    with StoreWriter(s3_url, "demo") as w:
        w.set_feature("feat", ATTRS)
        good = workerparts.write(s3_url, "feat", [("a", rows(3, 1.0))])
        torn = workerparts.write(s3_url, "feat", [("b", rows(2, 2.0))])
        backend = open_backend(s3_url)
        part = join("feat", layout.PARTS, torn["b"].part.name)
        backend.delete(next(i.key for i in backend.list(part) if "/c/" in i.key))  # a chunk of it
        committer = Committer(w, batch_items=10, batch_age_s=60)
        committer.put("feat", "a", good["a"], {"spec_hash": "s1", "fingerprint": "fa"})  # finished first, then
        committer.put("feat", "b", torn["b"], {"spec_hash": "s1", "fingerprint": "fb"})  # the batch fails on this
        outcomes = {o.item: o.error for o in committer.close()}
    assert outcomes["a"] is None
    assert "the worker's upload is not all there" in str(outcomes["b"]) and torn["b"].part.name in str(outcomes["b"])
    s = open_store(s3_url)
    assert s.items("feat") == ["a"] and all(c.ok for c in s.check("feat", full=True))
    np.testing.assert_array_equal(np.asarray(s.read("feat", "a").features[...]), rows(3, 1.0).features)


def test_a_run_whose_actors_wrote_its_parts_does_not_merge_them_on_its_driver(tmp_path: Path) -> None:
    """The end of a run compacts only what pays without reading the small parts back (`merge_small=False`):
    parts whose rows are all superseded still go; `pipeline compact` (force) still merges everything."""
    from store.compact import to_rewrite
    from tests.store.test_store_s3 import write_run

    write_run(tmp_path / "s.zarr")
    with StoreWriter(tmp_path / "s.zarr", "demo") as w:
        state = w.index("other")
        w.commit_batch("feat", [("b", rows(5, 2.0, dim=3), {"spec_hash": "s1", "fingerprint": "fb"})])
        feat = w.index("feat")  # parts 1 (a) and 2 (b) now all superseded; parts 3, 4: small
    assert to_rewrite(state, False) == set() and to_rewrite(state, False, merge_small=False) == set()
    small = to_rewrite(feat, False)
    assert len(small) == 4
    wasteful = to_rewrite(feat, False, merge_small=False)
    assert len(wasteful) == 2 and wasteful < small and all(feat.usage()[p][0] == 0 for p in wasteful)
    assert to_rewrite(feat, True, merge_small=False) == set(feat.parts)
