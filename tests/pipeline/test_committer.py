"""The run's background committer: batches by count, by bytes and by age; a bad pair fails alone."""

import time
from pathlib import Path

import numpy as np

from pipeline.committer import Committer
from rows import FeatureRows
from store.reader import open_store
from store.writer import StoreWriter


def rows(n: int = 2, value: float = 1.0) -> FeatureRows:
    return FeatureRows(np.full((n, 2), value, np.float32), np.stack([np.arange(n), np.arange(n) + 1.0], 1))


class Recording:
    def __init__(self) -> None:
        self.batches: list[tuple[str, list[str]]] = []

    def commit_batch(self, feature: str, batch: list) -> None:
        if any(item == "bad" for item, _, _ in batch):
            raise ValueError("bad array")
        self.batches.append((feature, [item for item, _, _ in batch]))


def test_pairs_are_committed_in_batches_by_count_then_the_rest_at_close() -> None:
    w = Recording()
    c = Committer(w, batch_items=2, batch_age_s=60)
    for i in range(5):
        c.put("f", f"i{i}", rows(), {})
    c.put("g", "j0", rows(), {})
    outcomes = c.close()
    assert w.batches[:2] == [("f", ["i0", "i1"]), ("f", ["i2", "i3"])]
    assert sorted(w.batches[2:]) == [("f", ["i4"]), ("g", ["j0"])]
    assert sorted((o.feature, o.item) for o in outcomes if o.error is None) == [("f", f"i{i}") for i in range(5)] + [("g", "j0")]
    records = [o.record for o in outcomes if o.record]
    assert sorted(r["items"] for r in records) == [1, 1, 2, 2] and all(r["stage"].startswith("commit:") for r in records)


def test_an_old_batch_is_committed_by_age_without_waiting_for_more() -> None:
    w = Recording()
    c = Committer(w, batch_items=100, batch_age_s=0.2)
    c.put("f", "a", rows(), {})
    deadline = time.monotonic() + 10
    got = []
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
        got = c.drain()
    assert [(o.item, o.error) for o in got] == [("a", None)] and w.batches == [("f", ["a"])]
    c.close()


def test_a_batch_too_big_in_bytes_is_committed_at_once() -> None:
    w = Recording()
    c = Committer(w, batch_items=100, batch_bytes=1000, batch_age_s=60)
    c.put("f", "big", rows(100), {})  # 100 x 2 float32 + intervals: over 1000 bytes
    c.put("f", "next", rows(1), {})
    c.close()
    assert w.batches == [("f", ["big"]), ("f", ["next"])]


def test_a_bad_pair_fails_alone_and_its_batch_mates_are_committed(tmp_path: Path) -> None:
    w = Recording()
    c = Committer(w, batch_items=3, batch_age_s=60)
    for item in ("a", "bad", "b"):
        c.put("f", item, rows(), {})
    outcomes = {o.item: o.error for o in c.close()}
    assert outcomes["a"] is None and outcomes["b"] is None and isinstance(outcomes["bad"], ValueError)
    assert w.batches == [("f", ["a"]), ("f", ["b"])]


def test_committed_pairs_are_in_the_store_with_their_attributes(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "s.zarr", "demo") as w:
        w.set_feature("f", {"spec_hash": "s"})
        c = Committer(w, batch_items=2)
        for k in range(3):
            c.put("f", f"i{k}", rows(2, float(k)), {"spec_hash": "s", "fingerprint": f"fp{k}", "missing_s": [k]})
        assert all(o.error is None for o in c.close())
    s = open_store(tmp_path / "s.zarr")
    assert s.items("f") == ["i0", "i1", "i2"] and len(s.index("f").parts) == 2
    assert s.item_attrs("f", "i2")["missing_s"] == [2] and float(s.read("f", "i1").features[0, 0]) == 1.0
