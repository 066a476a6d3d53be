"""The store on object storage (docs/design.md, "On object storage"), against a real S3 server (moto on
127.0.0.1, a bucket per test): the same commits give a store equal to a local one array for array; one writer
at a time (a lease naming its holder); a killed commit's parts adopted or removed; racing publishers; a
compaction's new generation while a reader holds its snapshot."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from pipeline.cli import main
from rows import FeatureRows
from store import layout
from store.backends import join, log, open_backend
from store.reader import open_store
from store.writer import Rewrite, StoreError, StoreLocked, StoreWriter
from testing.faultproxy import FaultProxy
from tests import s3server

ATTRS = {"extractor": "x", "version": "1", "config": {}, "columns": ["a", "b"], "rate_hz": 1.0,
         "weights": "none", "spec_hash": "s1"}

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name


def rows(n: int, value: float, dim: int = 2) -> FeatureRows:
    return FeatureRows(
        features=(np.arange(n * dim).reshape(n, dim) * 0.37 + value).astype("float32"),
        intervals=np.stack([np.arange(n) * 0.5, np.arange(n) * 0.5 + 0.5], axis=1),
        extras={"words": np.array([f"w{value:g}-{i}" for i in range(n)]), "edges": np.linspace(0, value, n + 1)},
        attrs={"face_ratio": value / 10})


def write_run(out: str | Path) -> None:
    """Three commits, one superseding an item, one with a second array signature, and the run's records."""
    with StoreWriter(out, "demo") as w:
        w.set_feature("feat", ATTRS)
        w.set_feature("other", {**ATTRS, "extractor": "y"})
        w.commit_batch("feat", [("a", rows(3, 1.0), {"spec_hash": "s1", "fingerprint": "fa"}),
                                ("b", rows(5, 2.0, dim=3), {"spec_hash": "s1", "fingerprint": "fb"})])
        w.commit_batch("feat", [("a", rows(4, 7.0), {"spec_hash": "s1", "fingerprint": "fa2", "filtered": True}),
                                ("c", rows(1, 3.0), {"spec_hash": "s1", "fingerprint": "fc"})])
        w.commit_batch("other", [(f"i{k}", rows(2 + k, k), {"spec_hash": "s1", "fingerprint": f"f{k}"}) for k in range(6)])
        w.write_manifests([], [])
        w.write_run_report("20261129T080000Z-run", {"run_id": "20261129T080000Z-run", "dataset": "demo",
                                                    "counts": {"feat": {"done": 3, "skipped": 0, "failed": 0}}})


def everything(out: str | Path) -> dict:
    """Every item of every feature: arrays bit for bit, attributes, filtered flags; and the run's records."""
    s = open_store(out)
    got: dict = {"features": s.features(), "last_run": s.last_run(), "media": s.media_items()}
    for feature in s.features():
        got[feature, "attrs"] = s.feature_attrs(feature)
        got[feature, "filtered"] = s.filtered(feature)
        for item in s.items(feature, include_filtered=True, include_stale=True):
            r = s.read(feature, item)
            arrays = {"features": np.asarray(r.features[...]), "intervals": r.intervals,
                      **{k: np.asarray(v[...]) for k, v in r.extras.items()}}
            got[feature, item] = ({k: (a.dtype.str, a.shape, a.tobytes()) if a.dtype.kind not in "UST" else a.tolist()
                                   for k, a in arrays.items()}, r.attrs)
        picks = [(i, 0) for i in s.items(feature, include_filtered=True)]
        got[feature, "rows"] = s.rows(feature, "features", picks).tobytes() if feature == "other" else None
    s.close()
    return got


def test_an_s3_store_equals_a_local_one_array_for_array(tmp_path: Path, s3_url: str) -> None:
    write_run(tmp_path / "local.zarr")
    write_run(s3_url)
    local, remote = everything(tmp_path / "local.zarr"), everything(s3_url)
    assert remote == local
    assert local["feat", "a"][1]["fingerprint"] == "fa2" and local["feat", "filtered"] == ["a"]
    keys = [i.key for i in open_backend(s3_url).list()]
    assert not any(k.startswith(".staging") for k in keys) and "feat/index.log" in keys
    assert open_store(s3_url).check("other", full=True) and all(c.ok for c in open_store(s3_url).check("other", full=True))


def test_one_writer_at_a_time(s3_url: str) -> None:
    with StoreWriter(s3_url, "demo"), pytest.raises(StoreLocked, match=r"another run is writing to this store \(pid \d+ on "):
        StoreWriter(s3_url, "demo")
    with StoreWriter(s3_url, "demo"):  # released
        pass


def test_a_killed_commit_leaves_nothing_read_as_data(s3_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A part uploaded whole but never published is adopted by the next writer; one cut short (its own
    zarr.json, uploaded last, missing) is removed. Before, readers never see the cut one; the whole one they see
    as a local store's readers do (tests/store/test_store.py): not while a run holds the store (a commit in
    flight), else with a warning (a part newer than the log is never silently passed over)."""
    write_run(s3_url)
    backend = open_backend(s3_url)
    with StoreWriter(s3_url, "demo") as w:
        w._write_part("feat", "000000009-deadbeef", 9, [("d", rows(2, 5.0), {"spec_hash": "s1", "fingerprint": "fd",
                                                                          "n_rows": 2, "complete": True})])
        w._write_part("feat", "000000010-cafef00d", 10, [("e", rows(2, 6.0), {"spec_hash": "s1", "fingerprint": "fe",
                                                                           "n_rows": 2, "complete": True})])
    backend.delete("feat/parts/000000010-cafef00d/zarr.json")  # as a kill mid-upload leaves it
    with caplog.at_level(logging.WARNING):
        assert open_store(s3_url).items("feat") == ["b", "c", "d"]
    assert "1 part(s) committed after its last line (000000009-deadbeef)" in caplog.text
    with StoreWriter(s3_url, "demo") as w:
        assert open_store(s3_url).items("feat") == ["b", "c"]  # a run holds the lease: maybe a commit in flight
        assert "d" in w.index("feat").pos
    s = open_store(s3_url)
    assert s.items("feat") == ["b", "c", "d"]
    np.testing.assert_array_equal(np.asarray(s.read("feat", "d").features[...]), rows(2, 5.0).features)
    assert backend.children("feat/parts/000000010-cafef00d") == []


def test_a_writer_that_lost_the_race_publishes_nothing(s3_url: str) -> None:
    """Another writer published at this writer's next position (its lease was taken over): this writer's
    commit fails naming the index, its parts are removed, and the winner's record stands."""
    write_run(s3_url)
    backend = open_backend(s3_url)
    with StoreWriter(s3_url, "demo") as w:
        state = w.index("feat")
        generation, at = state.token, state.length
        log.append(backend, join("feat", layout.INDEX), generation, at, b"")  # nothing: not a conflict
        winner = log.append(backend, join("feat", layout.INDEX), generation, at,
                            layout.encode(layout.PartLine("000000099-0000000a", 99, [])))
        before = set(backend.children("feat/parts"))
        with pytest.raises(StoreError, match=r"feat/index.log: another writer published"):
            w.commit("feat", "z", rows(2, 9.0), {"spec_hash": "s1", "fingerprint": "fz"})
        assert set(backend.children("feat/parts")) == before
    assert len(log.read(backend, "feat/index.log").data) == winner


def test_a_compaction_publishes_a_new_generation_while_a_reader_keeps_its_snapshot(s3_url: str) -> None:
    write_run(s3_url)
    held = open_store(s3_url)
    before = everything(s3_url)
    with StoreWriter(s3_url, "demo") as w:
        state = w.index("other")
        old = frozenset(state.parts)
        s = open_store(s3_url)
        members = []
        for i in s.items("other"):
            r = s.read("other", i)
            members.append((i, FeatureRows(np.asarray(r.features[...]), r.intervals,
                                           {k: np.asarray(v[...]) for k, v in r.extras.items()}), r.attrs))
        w.commit_op("other", Rewrite(old, [members]))
        assert len(w.index("other").parts) == 1
    after = open_store(s3_url)
    assert len(after.index("other").parts) == 1 and after.index("other").generation != held.index("other").generation
    for item in held.items("other"):  # the old parts stay: the held snapshot reads them whole
        np.testing.assert_array_equal(np.asarray(held.read("other", item).features[...]),
                                      np.asarray(after.read("other", item).features[...]))
    assert everything(s3_url)["other", "i3"] == before["other", "i3"]


def test_the_commands_read_an_s3_store_as_a_local_one(tmp_path: Path, s3_url: str, capsys) -> None:
    write_run(tmp_path / "local.zarr")
    write_run(s3_url)
    assert main(["info", str(tmp_path / "local.zarr"), "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["info", s3_url, "--json"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert remote.pop("path") == s3_url and local.pop("path") == str(tmp_path / "local.zarr")
    assert remote == local and remote["features"]


@pytest.mark.parametrize("problem", ["no bucket", "unreachable", "no credentials"])
def test_storage_problems_are_one_line_and_exit_2_before_any_work(s3_url: str, monkeypatch, caplog, problem) -> None:
    url = s3_url
    if problem == "no bucket":
        url = "s3://no-bucket-of-this-name/s.zarr"
    elif problem == "unreachable":
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    else:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setenv("HOME", "/nonexistent")
    want = {"no bucket": "no such bucket", "unreachable": "unreachable; check AWS_ENDPOINT_URL",
            "no credentials": "no credentials found; set AWS_ACCESS_KEY_ID"}[problem]
    for argv in (["info", url], ["verify", "--out", url], ["export", url, "--sdk", "/nonexistent/x"]):
        caplog.clear()
        assert main(argv) == 2
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and want in errors[0] and url.split("/")[2] in errors[0], errors
        assert "testing-secret" not in caplog.text and "\n" not in errors[0]


def test_verify_finds_changed_bytes_and_repairs_the_index_on_s3(s3_url: str, capsys) -> None:
    write_run(s3_url)
    assert main(["verify", "--out", s3_url]) == 0
    backend = open_backend(s3_url)
    part = open_store(s3_url).index("feat").part_names[-1]
    chunk = next(i.key for i in backend.list(f"feat/parts/{part}/features") if not i.key.endswith("zarr.json"))
    data = bytearray(backend.get(chunk))
    data[len(data) // 2] ^= 0xFF
    backend.put(chunk, bytes(data))  # the same size: only the content hash finds it
    capsys.readouterr()
    assert main(["verify", "--out", s3_url]) == 4
    assert f"DAMAGED feat/c ({s3_url}/feat/parts/{part})" in capsys.readouterr().out
    data[len(data) // 2] ^= 0xFF
    backend.put(chunk, bytes(data))  # as committed again
    log_key = "feat/index.log"
    generation = log.read(backend, log_key).generation
    backend.delete_prefix(f"{log_key}.d/{generation}")  # the index lost: rebuilt from the parts' own records
    assert main(["verify", "--out", s3_url]) == 0
    assert "REBUILT feat/index.log" in capsys.readouterr().out
    # damaged metadata is found in a bucket as on a disk (one walk over the backend), and the items of a feature
    # whose zarr.json is damaged are still checked through its index
    backend.put("other/zarr.json", b"{")
    backend.put("_runs/20261129T090000Z-cut.json", b'{"run_id": ')
    assert main(["verify", "--out", s3_url]) == 4
    out = capsys.readouterr().out
    assert f"DAMAGED METADATA {s3_url}/other/zarr.json: zarr.json is unreadable" in out
    assert f"DAMAGED METADATA {s3_url}/_runs/20261129T090000Z-cut.json: unreadable" in out
    assert f"  {'other':<12}{6:>6}{0:>9}{0:>9}" in out, out
    assert open_store(s3_url).items("feat", include_filtered=True) == ["a", "b", "c"]


def test_export_from_s3_equals_export_from_local(tmp_path: Path, s3_url: str) -> None:
    write_run(tmp_path / "local.zarr")
    write_run(s3_url)
    assert main(["export", str(tmp_path / "local.zarr"), "--xarray", str(tmp_path / "local.nc"), "--features", "other"]) == 0
    assert main(["export", s3_url, "--xarray", str(tmp_path / "s3.nc"), "--features", "other"]) == 0
    import xarray as xr

    with xr.open_dataset(tmp_path / "local.nc") as a, xr.open_dataset(tmp_path / "s3.nc") as b:
        xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())
        assert a.sizes and a.attrs.keys() == b.attrs.keys()


@pytest.mark.slow
def test_extract_into_a_bucket_equals_a_local_run(tiny_root_template: Path, tmp_path: Path, s3_url: str) -> None:
    """`extract --out s3://…` with a local Ray: the same pairs committed, equal array for array to a local run's
    store (the per-item timings aside; the text model's rows within float rounding, which depends on the items
    batched together in the run), and the second run finds everything up to date."""
    import ray

    from pipeline.config import load_config
    from pipeline.run import run_extract

    if ray.is_initialized():  # an earlier test's Ray in this process: its workers lack the bucket's credentials,
        ray.shutdown()        # which a user's run (one Ray, started with them) has; the run starts its own
    features = ["qa", "transcript"]
    local = run_extract("tiny", tiny_root_template, tmp_path / "local.zarr", load_config("sample"), only=features)
    remote = run_extract("tiny", tiny_root_template, s3_url, load_config("sample"), only=features)
    assert local.exit_code == remote.exit_code == 0 and remote.counts == local.counts
    assert sum(c["done"] for c in remote.counts.values()) > 0
    # every pair's rows went to the bucket from its model actor (pipeline/ownparts.py), none through the driver
    assert remote.driver_received["pairs written by actors"] == sum(c["done"] for c in remote.counts.values())
    assert local.driver_received["pairs written by actors"] == 0
    assert remote.driver_received["model results"] < local.driver_received["model results"] / 10

    def timeless(got: dict) -> dict:
        volatile = {"extract_seconds", "decode_seconds"}
        return {k: (v[0], {a: x for a, x in v[1].items() if a not in volatile}) if isinstance(k, tuple) and
                isinstance(v, tuple) else v for k, v in got.items() if k != "last_run"}

    got, want = timeless(everything(s3_url)), timeless(everything(tmp_path / "local.zarr"))
    assert got.keys() == want.keys()
    for key, value in want.items():
        if not (isinstance(value, tuple) and isinstance(value[0], dict)):
            assert got[key] == value, key
            continue
        assert got[key][1] == value[1], key  # attributes: the same
        for name, a in value[0].items():  # arrays: the same but for the text model's float rounding, which
            b = got[key][0][name]         # depends on which items shared a call (their padding)
            if isinstance(a, tuple) and np.dtype(a[0]).kind == "f":
                assert b[:2] == a[:2] and np.allclose(np.frombuffer(b[2], a[0]), np.frombuffer(a[2], a[0]),
                                                      rtol=1e-4, atol=1e-5), (key, name)
            else:
                assert b == a, (key, name)
    again = run_extract("tiny", tiny_root_template, s3_url, load_config("sample"), only=features)
    assert again.exit_code == 0 and all(c["done"] == 0 for c in again.counts.values())
    assert len(open_store(s3_url).run_reports()) == 2


def test_compact_command_on_a_bucket(s3_url: str, capsys) -> None:
    write_run(s3_url)
    before = everything(s3_url)
    assert main(["compact", "--out", s3_url]) == 0
    out = capsys.readouterr().out
    assert f"compact {s3_url}: 1 feature(s) rewritten\n  compacted feat: 3 -> 2 part(s), 3 superseded row(s) dropped" in out
    after = open_store(s3_url)
    assert len(after.index("feat").parts) == 2 and len(after.index("other").parts) == 1 and "a" in after.items("feat", include_filtered=True)
    assert {k: v for k, v in everything(s3_url).items() if k != ("feat", "rows")} == \
        {k: v for k, v in before.items() if k != ("feat", "rows")}


def _chain(store: str | Path, feature: str) -> list[tuple[int, int | None]]:
    """(seq, after) of each part line of the feature's current log, as the reader's order check reads them."""
    got: list[tuple[int, int | None]] = []
    data = log.read(open_backend(store), join(feature, layout.INDEX)).data if isinstance(store, str) else \
        (Path(store) / feature / layout.INDEX).read_bytes()
    layout.fold(data, feature, lambda r: got.append((r.seq, r.after)) if isinstance(r, layout.PartLine) else None)
    return got


def test_the_log_in_a_bucket_is_chained_as_a_local_one(tmp_path: Path, s3_url: str) -> None:
    """Every part line names the seq of the line before it (issue 53's order check), after the log's appends and
    after its compaction, on object storage as locally."""
    for out in (tmp_path / "local.zarr", s3_url):
        write_run(out)
        for feature in ("feat", "other"):
            chain = _chain(out, feature)
            assert chain and all(after == (chain[k - 1][0] if k else 0) for k, (_, after) in enumerate(chain)), chain
        assert main(["compact", str(out)]) == 0
        chain = _chain(out, "feat")
        assert chain and all(after == (chain[k - 1][0] if k else 0) for k, (_, after) in enumerate(chain)), chain
    assert _chain(s3_url, "other") == _chain(tmp_path / "local.zarr", "other")



def test_requests_a_commit_and_an_open_do_not_need(s3_url: str, s3_server: str, monkeypatch) -> None:
    """Requests saved, counted as they reach the server (through the tests' TCP proxy): the writer holding the
    lease asks whether the feature's group exists once, not at every commit, and a commit to a feature with
    no group is still refused; opening the store asks for no Zarr v2 metadata (.zgroup, .zattrs, .zmetadata:
    the store is v3); its parts' quick checks list the feature's parts' files once, not once per part; a read then
    asks for its arrays' chunks alone (an array's zarr.json is the one its check read, and no listing checks
    the array's files afterwards)."""
    proxy = FaultProxy(s3_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        with StoreWriter(s3_url, "demo") as w:
            w.set_feature("feat", ATTRS)
            proxy.requests.clear()
            for k in range(4):
                w.commit("feat", f"i{k}", rows(2, k), {"spec_hash": "s1", "fingerprint": f"f{k}"})
            heads = [t for m, t, _ in proxy.requests if m == "HEAD" and t.endswith("/feat/zarr.json")]
            assert len(heads) <= 1, heads
            with pytest.raises(KeyError, match="no group yet"):
                w.commit("nofeat", "x", rows(1, 0.0), {"spec_hash": "s1", "fingerprint": "fx"})
        proxy.requests.clear()
        s = open_store(s3_url)
        assert s.items("feat") == [f"i{k}" for k in range(4)]
        v2 = [t for _, t, _ in proxy.requests if t.split("?")[0].endswith((".zgroup", ".zattrs", ".zmetadata"))]
        assert proxy.requests and not v2, v2
        listings = [t for m, t, _ in proxy.requests if m == "GET" and "list-type" in t and "feat%2Fparts" in t]
        # one listing of every part's files (the quick checks' sizes), and one of the parts' names alone (is any
        # part newer than the log? store/reader.py `_newer_parts`), per feature opened
        assert sorted("delimiter" in t for t in listings) == [False, True] and len(s.index("feat").parts) == 4, \
            listings
        proxy.requests.clear()
        np.testing.assert_array_equal(np.asarray(s.read("feat", "i2").features[...]), rows(2, 2).features)
        got = sorted((m, t.split("/parts/")[-1].split("/", 1)[-1]) for m, t, _ in proxy.requests)
        assert got == [("GET", "features/c/0/0"), ("GET", "intervals/c/0/0")], proxy.requests
        s.close()
    finally:
        proxy.close()


def test_a_version_1_store_uploaded_to_a_bucket_is_migrated_there(tmp_path: Path, s3_url: str, capsys) -> None:
    """Version 1 predates object storage: only a store uploaded as it was can be one in a bucket. Readers refuse
    it naming `migrate`, which converts it where it is, through the backend contract as a folder, into a store
    equal to the folder's migration array for array, the item folders gone."""
    from tests.store.test_store_v2 import _v1_store

    local = tmp_path / "old.zarr"
    _v1_store(local)
    backend = open_backend(s3_url)
    backend.put_many({p.relative_to(local).as_posix(): p.read_bytes() for p in local.rglob("*") if p.is_file()})
    with pytest.raises(ValueError, match=f"version-1 store.*python -m pipeline migrate {s3_url}"):
        open_store(s3_url)
    assert main(["migrate", s3_url]) == 0
    out = capsys.readouterr().out
    assert f"migrated {s3_url} to {layout.SCHEMA}" in out and "NOT CARRIED OVER feat/half: " in out
    assert main(["migrate", str(local)]) == 0
    capsys.readouterr()
    remote = everything(s3_url)
    assert remote == everything(local) and remote["feat", "b"][1]["fingerprint"] == "fb"
    assert not [i.key for i in backend.list("feat") if i.key.split("/")[1] in ("a", "b", "half")]
    assert main(["migrate", s3_url]) == 0  # (replaces tests/reading/test_reading_s3.py's check of this line)
    assert capsys.readouterr().out.strip() == f"nothing to migrate: {s3_url} is already {layout.SCHEMA}"
