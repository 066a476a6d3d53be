"""The parts a compaction replaced, on object storage (store/backends/pins.py, store/repair.py `release_retired`),
against a real S3 server (moto on 127.0.0.1): kept while a reader holds a snapshot of the old generation (it
reads them during and after the compaction), never adopted back into the index, and removed with that
generation once the reader lets go, or once a killed reader's pin has expired."""

from __future__ import annotations

import json

import numpy as np

from pipeline.cli import main
from store import layout
from store.backends import join, log, open_backend, pins
from store.reader import open_store
from store.writer import StoreWriter
from tests import s3server
from tests.store.test_store_s3 import ATTRS, everything, write_run

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name


def stored_parts(url: str, feature: str) -> set[str]:
    return set(open_backend(url).children(join(feature, layout.PARTS)))


def reopen(url: str) -> None:
    """What the next run does first: a writer opens the store's features."""
    with StoreWriter(url, "demo") as w:
        for feature in ("feat", "other"):
            w.set_feature(feature, {**ATTRS, "extractor": "y"} if feature == "other" else ATTRS)


def test_a_compaction_keeps_a_held_snapshot_s_parts_then_removes_them(s3_url: str) -> None:
    write_run(s3_url)
    before = everything(s3_url)
    old = stored_parts(s3_url, "feat")
    held = open_store(s3_url)  # its snapshot pins the generation that names `old`; nothing read yet
    key = join("feat", layout.INDEX)
    first = log.head(open_backend(s3_url), key)[0]
    assert [i.key for i in open_backend(s3_url).list(pins.prefix(key, first))]
    assert main(["compact", "--out", s3_url]) == 0
    new = set(open_store(s3_url).index("feat").parts)
    assert len(new) == 2 and not new & old and stored_parts(s3_url, "feat") == old | new
    # the held handle reads its own snapshot's parts, loaded only now, after the compaction
    for item in ("a", "b", "c"):
        got = np.asarray(held.read("feat", item).features[...])
        assert (got.dtype.str, got.shape, got.tobytes()) == before["feat", item][0]["features"]
    reopen(s3_url)  # the next writer: the held parts are neither removed nor adopted back
    assert set(open_store(s3_url).index("feat").parts) == new and stored_parts(s3_url, "feat") == old | new
    held.close()
    assert not open_backend(s3_url).list(pins.prefix(key, first))
    reopen(s3_url)  # released: the old parts and their generation go
    assert stored_parts(s3_url, "feat") == new
    assert log.generations(open_backend(s3_url), key) == [log.head(open_backend(s3_url), key)[0]]
    after = everything(s3_url)
    assert {k: v for k, v in after.items() if k != ("feat", "rows")} == \
        {k: v for k, v in before.items() if k != ("feat", "rows")}


def test_without_a_reader_a_compaction_removes_what_it_replaced_at_once(s3_url: str) -> None:
    write_run(s3_url)
    old = stored_parts(s3_url, "other")
    assert main(["compact", "--out", s3_url]) == 0
    now = stored_parts(s3_url, "feat")
    assert now == set(open_store(s3_url).index("feat").parts) and len(now) == 2
    assert stored_parts(s3_url, "other") == old  # one part already: nothing rewritten


def test_a_killed_reader_s_pin_holds_nothing_once_expired(s3_url: str) -> None:
    write_run(s3_url)
    old = stored_parts(s3_url, "feat")
    held = open_store(s3_url)
    backend = open_backend(s3_url)
    key = join("feat", layout.INDEX)
    (pin,) = backend.list(pins.prefix(key, log.head(backend, key)[0]))
    assert main(["compact", "--out", s3_url]) == 0
    assert stored_parts(s3_url, "feat") > old  # held
    record = json.loads(backend.get(pin.key))
    backend.put(pin.key, json.dumps({**record, "expires": record["expires"] - 2 * pins.TTL_S}).encode())
    pins._keeper.discard(held._pins["feat"].pin)  # killed: nothing renews it
    reopen(s3_url)
    assert stored_parts(s3_url, "feat") == set(open_store(s3_url).index("feat").parts)
    assert not stored_parts(s3_url, "feat") & old


def test_a_reader_that_may_not_write_reads_unheld_and_says_so(s3_url: str, monkeypatch, caplog) -> None:
    """Read-only credentials: no pin can be written; the store still opens and reads (said once, with what it
    risks)."""
    from store.backends import BackendError

    write_run(s3_url)

    def refused(self: pins.Pin, now: float | None = None) -> None:
        raise BackendError(f"{s3_url}/feat/index.log.pins: access denied; use credentials allowed to read and write it")

    monkeypatch.setattr(pins.Pin, "renew", refused)
    with caplog.at_level("WARNING"):
        s = open_store(s3_url)
        assert s.items("feat", include_filtered=True) == ["a", "b", "c"]
        open_store(s3_url).close()
    said = [r.getMessage() for r in caplog.records if "cannot hold this reader's snapshot" in r.getMessage()]
    assert len(said) == 1 and "access denied" in said[0]
    s.close()
