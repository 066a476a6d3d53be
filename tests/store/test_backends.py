"""The storage backends' conformance suite (store/backends/base.py): every test runs against the local folder
and against object storage on a real S3 server (moto on 127.0.0.1, a bucket per test)."""

from __future__ import annotations

import json
import os
import re
import threading
import time

import numpy as np
import pytest
import zarr

from store.backends import Backend, BackendError, Conflict, Locked, open_backend
from store.backends import lease as leases
from store.backends.base import LogEnd
from tests import s3server

s3_server, s3_url, backend = s3server.s3_server, s3server.s3_url, s3server.backend  # fixtures, used by name


def test_whole_objects_round_trip(backend: Backend) -> None:
    with pytest.raises(FileNotFoundError, match="no such object"):
        backend.get("a/b.bin")
    assert not backend.exists("a/b.bin")
    data = bytes(range(256)) * 40
    info = backend.put("a/b.bin", data)
    assert backend.get("a/b.bin") == data
    assert backend.head("a/b.bin").size == len(data) == info.size
    assert backend.get_range("a/b.bin", 1000, 300) == data[1000:1300]
    assert backend.get_range("a/b.bin", len(data) - 10, 300) == data[-10:]
    backend.put("a/b.bin", b"new")
    assert backend.get("a/b.bin") == b"new"
    assert backend.head("a/b.bin").version != info.version
    many = {f"m/{k:02d}": bytes([k]) * (k + 1) for k in range(12)}  # (in a bucket, several in flight at once)
    backend.put_many(many)
    assert {i.key: backend.get(i.key) for i in backend.list("m")} == many
    assert backend.get_many([*many, "m/none"]) == {**many, "m/none": None}

    def producer():  # (a part's files, each sent as soon as it is encoded; the encoder fails at the third)
        yield "n/0", b"first"
        yield "n/1", b"second"
        raise ValueError("cannot encode")

    with pytest.raises(ValueError, match="cannot encode"):
        backend.put_many(producer())
    sent = backend.list("n")  # each written whole or not at all, and none still in flight to land later
    assert {(i.key, i.size) for i in sent} <= {("n/0", 5), ("n/1", 6)}
    time.sleep(0.2)
    assert backend.list("n") == sent


def test_listing(backend: Backend) -> None:
    for key in ("f/parts/2/x", "f/parts/1/zarr.json", "f/index.log", "g/y", "f.txt"):
        backend.put(key, key.encode())
    assert [i.key for i in backend.list("f")] == ["f/index.log", "f/parts/1/zarr.json", "f/parts/2/x"]
    assert [i.key for i in backend.list("f/parts/1")] == ["f/parts/1/zarr.json"]
    assert [i.key for i in backend.list()] == ["f.txt", "f/index.log", "f/parts/1/zarr.json", "f/parts/2/x", "g/y"]
    assert backend.children("f") == ["index.log", "parts"]
    assert backend.children("f/parts") == ["1", "2"]
    assert backend.children() == ["f", "f.txt", "g"]
    assert backend.children("nothing") == [] and backend.list("nothing") == []
    backend.delete("g/y")
    backend.delete("g/y")  # twice: no error
    backend.delete_prefix("f/parts")
    assert [i.key for i in backend.list()] == ["f.txt", "f/index.log"]


def test_sizes_of_many_objects_are_what_head_says(backend: Backend) -> None:
    """`sizes` (a part's quick check asks it for every file; in a bucket one listing): each name's size as `head`
    gives it, None for a name with no object, a folder's name included, nothing from a neighbour's prefix."""
    for key, n in (("p/1/zarr.json", 5), ("p/1/features/c/0/0", 300), ("p/1/features/zarr.json", 17), ("p/10/x", 9)):
        backend.put(key, b"z" * n)
    names = ["zarr.json", "features/c/0/0", "features/zarr.json", "features", "gone", "x"]
    assert backend.sizes("p/1", names) == {"zarr.json": 5, "features/c/0/0": 300, "features/zarr.json": 17,
                                           "features": None, "gone": None, "x": None}
    assert backend.sizes("p/1", names) == {n: backend.head(f"p/1/{n}").size if backend.exists(f"p/1/{n}") else None
                                           for n in names}
    assert backend.sizes("nothing", ["a"]) == {"a": None} and backend.sizes("p/1", []) == {}


def test_create_if_absent_has_one_winner(backend: Backend) -> None:
    """Writers racing for one key (one sequence number): exactly one wins, the others write nothing."""
    wins, losses = [], []

    def race(k: int) -> None:
        try:
            backend.put_if_absent("f/log/000000007", f"writer {k}".encode())
            wins.append(k)
        except Conflict as e:
            losses.append(str(e))

    threads = [threading.Thread(target=race, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 7
    assert backend.get("f/log/000000007") == f"writer {wins[0]}".encode()
    assert "already exists" in losses[0] and backend.where("f/log/000000007") in losses[0]


def test_replace_if_unchanged(backend: Backend) -> None:
    first = backend.put_if_absent("lease", b"one")
    second = backend.put_if_version("lease", b"two", first.version)
    with pytest.raises(Conflict, match="changed since"):
        backend.put_if_version("lease", b"three", first.version)  # a stale version loses
    assert backend.get("lease") == b"two"
    backend.delete("lease")
    with pytest.raises(Conflict):
        backend.put_if_version("lease", b"four", second.version)
    assert not backend.exists("lease")


def test_compare_and_swap_race_has_one_winner(backend: Backend) -> None:
    start = backend.put("counter", b"start")  # no racer writes these bytes (an ETag is their MD5)
    wins = []

    def race(k: int) -> None:
        try:
            backend.put_if_version("counter", str(k).encode(), start.version)
            wins.append(k)
        except Conflict:
            pass

    threads = [threading.Thread(target=race, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and backend.get("counter") == str(wins[0]).encode()


def test_zarr_groups_through_the_backend(backend: Backend) -> None:
    data = np.arange(600, dtype=np.float32).reshape(200, 3)
    group = zarr.open_group(backend.zarr_store("feat/parts/p1"), mode="w")
    group.create_array("features", data=data, chunks=(64, 3))
    group.attrs["siqfeat_part"] = {"seq": 1}
    assert backend.exists("feat/parts/p1/zarr.json")
    back = zarr.open_group(backend.zarr_store("feat/parts/p1", read_only=True), mode="r")
    np.testing.assert_array_equal(back["features"][50:70], data[50:70])
    assert back.attrs["siqfeat_part"] == {"seq": 1}


def test_index_log_appended_replaced_and_retired(backend: Backend) -> None:
    """The writer's log operations: a new log, records appended at its end, a new generation published whole
    (the old one listed as replaced while a reader's snapshot holds it, then dropped), and a rebuild's
    replacement, which keeps nothing."""
    key = "f/index.log"
    assert backend.log_read(key) is None
    first = backend.log_replace(key, b"header 1\n", None, retire=False)
    assert backend.log_read(key) == (first, b"header 1\n")
    assert backend.log_append(key, LogEnd(first, 9), b"rec a\n") == 15
    assert backend.log_append(key, LogEnd(first, 15), b"rec b\n") == 21
    assert backend.log_read(key) == (first, b"header 1\nrec a\nrec b\n")
    pin = backend.pin_log(key)  # a reader's snapshot of generation 1
    assert pin is not None and bytes(pin.read()) == b"header 1\nrec a\nrec b\n"
    second = backend.log_replace(key, b"header 2\n", LogEnd(first, 21), retire=True)
    assert backend.log_read(key) == (second, b"header 2\n")
    with backend.log_retired(key) as found:
        assert [(r.data, r.held) for r in found] == [(b"header 1\nrec a\nrec b\n", True)]
    assert bytes(pin.read()) == b"header 1\nrec a\nrec b\n"  # the reader still reads its snapshot whole
    pin.close()
    with backend.log_retired(key) as found:
        assert [(r.data, r.held) for r in found] == [(b"header 1\nrec a\nrec b\n", False)]
        backend.log_drop(key, found[0].token)
    with backend.log_retired(key) as found:
        assert found == []
    third = backend.log_replace(key, b"header 3\n", LogEnd(second, 9), retire=False)
    assert backend.log_read(key) == (third, b"header 3\n")
    with backend.log_retired(key) as found:
        assert found == []


def test_a_pin_knows_whether_the_log_moved_on(backend: Backend) -> None:
    """`Pinned.unchanged` (a reader's test that a part newer than its snapshot cannot be named by a later
    record): true while the log is as pinned, however often asked; false once a record is appended, and once a
    new generation of the same length replaces it."""
    key = "f/index.log"
    first = backend.log_replace(key, b"header 1\n", None, retire=False)
    pin = backend.pin_log(key)
    assert pin is not None and pin.unchanged() and pin.unchanged()
    backend.log_append(key, LogEnd(first, 9), b"rec a\n")
    assert not pin.unchanged()
    pin.close()
    pin = backend.pin_log(key)
    assert pin is not None and pin.unchanged()
    backend.log_replace(key, b"header 2\nrec b\n", LogEnd(first, 15), retire=True)  # as long as the pinned one
    assert not pin.unchanged()
    pin.close()


def test_lock_held_while_a_writer_has_the_lock(backend: Backend) -> None:
    """`lock_held`: no lock yet, then held while a writer is inside `lock`, free again after it."""
    assert not backend.lock_held(".lock")
    with backend.lock(".lock", "pid 1 on node-a"):
        assert backend.lock_held(".lock")
    assert not backend.lock_held(".lock")


def test_a_tree_is_placed_whole_or_not_at_all(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """`place`: nothing under the key until it returns, then every file, the marking file (made by `finish`
    once the others are written) last where files are written one by one; an error midway leaves nothing
    (and nothing for `sweep_staged`)."""
    order: list[str] = []
    put = backend.put
    monkeypatch.setattr(backend, "put", lambda key, data: (order.append(key), put(key, data))[1])
    seen = []

    def files():  # noqa: ANN202
        yield "features/c/0", b"chunk"
        seen.append(backend.children("f/parts"))  # midway: not there yet, locally (a bucket's files go as they come)
        yield "features/zarr.json", b"{}"

    backend.place("f/parts/p1", files(), "zarr.json", lambda: b'{"part": 1}')
    assert [i.key for i in backend.list("f/parts")] == ["f/parts/p1/features/c/0", "f/parts/p1/features/zarr.json",
                                                        "f/parts/p1/zarr.json"]
    assert backend.get("f/parts/p1/features/c/0") == b"chunk" and backend.get("f/parts/p1/zarr.json") == b'{"part": 1}'
    assert order[-1:] in ([], ["f/parts/p1/zarr.json"]) and seen in ([[]], [["p1"]])

    def cut():  # noqa: ANN202
        yield "features/c/0", b"chunk"
        raise RuntimeError("cut")

    with pytest.raises(RuntimeError, match="cut"):
        backend.place("f/parts/p2", cut(), "zarr.json", lambda: b"{}")
    assert backend.children("f/parts") == ["p1"] and backend.sweep_staged() == 0


def test_lock_names_its_holder(backend: Backend) -> None:
    me = f"pid {os.getpid()} on {os.uname().nodename}"  # as the writer names itself (locally checked against the kernel's)
    with backend.lock(".lock", me) as held:
        assert held
        with pytest.raises(Locked, match=rf"another run is writing to this store \({re.escape(me)}"), \
                backend.lock(".lock", "pid 2 on node-b"):
            pass
    with backend.lock(".lock", "pid 3 on node-c"):  # released: free again
        pass


def test_lease_taken_over_after_expiry(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """A dead holder's lease (never released) is taken over after its expiry, and the taker says so; a live
    one is refused naming its holder; a holder that was taken over cannot renew."""
    dead = leases.Lease(backend, "lease", "run dead", ttl_s=30)
    dead.take(now=1000.0)
    assert leases.alive(backend, "lease", now=1020.0) and not leases.alive(backend, "lease", now=1031.0)
    with pytest.raises(Locked, match="run dead"):
        leases.Lease(backend, "lease", "run early", ttl_s=30).take(now=1020.0)
    with caplog.at_level("WARNING"):
        late = leases.Lease(backend, "lease", "run late", ttl_s=30)
        late.take(now=1031.0)
    assert "took over the write lease of run dead" in caplog.text
    assert json.loads(backend.get("lease"))["holder"] == "run late"
    assert not dead.renew(now=1032.0) and dead.lost
    assert late.renew(now=1040.0)
    late.release()
    caplog.clear()
    with caplog.at_level("WARNING"):
        leases.Lease(backend, "lease", "run next").take(now=1041.0)  # released: no warning
    assert "took over" not in caplog.text


def test_lease_is_renewed_while_held(backend: Backend) -> None:
    with leases.held(backend, "lease", "run a", ttl_s=0.6) as got:
        first = json.loads(backend.get("lease"))["expires"]
        time.sleep(0.9)  # longer than the ttl: renewed meanwhile, so still ours
        assert json.loads(backend.get("lease"))["expires"] > first and not got.lost
        with pytest.raises(Locked, match="run a"):
            leases.Lease(backend, "lease", "run b").take()
    assert json.loads(backend.get("lease"))["released"] is True


def test_storage_failures_are_one_line_naming_the_url(s3_server: str, s3_url: str, monkeypatch) -> None:
    bucket = s3_url.split("/")[2]
    with pytest.raises(BackendError, match=r"s3://no-such-bucket-here/x: no such bucket") as e:
        open_backend("s3://no-such-bucket-here/x").check()
    assert "\n" not in str(e.value)
    open_backend(s3_url).check()
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(BackendError, match=f"s3://{bucket}/store.*unreachable.*AWS_ENDPOINT_URL") as e:
        open_backend(s3_url).check()
    assert "testing-secret" not in str(e.value) and "testing-key" not in str(e.value)
