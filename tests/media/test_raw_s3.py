"""Raw data in a bucket (`--raw s3://bucket/prefix`; docs/design.md, "Raw data in a bucket"), against a real S3
server (moto on 127.0.0.1, a bucket per test): the bucket's listing answers what pathlib answers for the same tree;
the manifests read from it give the items and questions a local folder gives; its videos, audio and captions
decode to the same arrays; an object's identity is its size and ETag (the same on every run, new when it
changes); the node's copies are bounded; and a storage that cannot be read is one line naming the URL."""

from __future__ import annotations

import os
from pathlib import Path

import boto3
import numpy as np
import pytest

from media import kinds
from media.container import InputError
from objectio import ObjectPath, RawUnavailable, raw_root
from objectio import cache as object_cache
from pipeline.cli import main
from pipeline.config import load_config
from pipeline.sources import load_items
from tests import s3server

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name


def _client():
    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1")


def upload(folder: Path, url: str, skip: tuple[str, ...] = ()) -> str:
    """Every file under `folder` to `url` (s3://bucket/prefix), as `aws s3 sync` would; returns the URL."""
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    client = _client()
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_file() and not any(rel.startswith(s) for s in skip):
            client.upload_file(str(p), bucket, f"{prefix}/{rel}")
    return url


def put(url: str, data: bytes) -> None:
    bucket, key = url.removeprefix("s3://").split("/", 1)
    _client().put_object(Bucket=bucket, Key=key, Body=data)


def as_url(path: object, local_root: Path, url: str) -> object:
    """A local item's path as the bucket's URL of the same file (to compare items field by field)."""
    return f"{url}/{Path(path).relative_to(local_root).as_posix()}" if isinstance(path, Path) else path


@pytest.fixture
def raw_url(s3_url: str, tiny_root_template: Path) -> str:
    return upload(tiny_root_template, s3_url.removesuffix("/store") + "/raw")


def test_the_listing_answers_as_pathlib_does(raw_url: str, tiny_root_template: Path) -> None:
    local, remote = tiny_root_template, raw_root(raw_url)

    def rel(paths: object, root: object) -> list[str]:
        return sorted(str(p)[len(str(root)) + 1:] for p in paths)

    for pattern in ("*", "*/*", "siq2/video/*.mp4", "*/qa/qa_*.json", "nothing*"):
        assert rel(remote.glob(pattern), remote) == rel(local.glob(pattern), local), pattern
    assert rel(remote.rglob("*.vtt"), remote) == rel(local.rglob("*.vtt"), local) != []
    assert rel((remote / "siq2").iterdir(), remote) == rel((local / "siq2").iterdir(), local)
    for sub in ("siq2", "siq2/video", "siq2/trims.json", "siq2/video/tiny-a.mp4", "missing", "siq2/vide"):
        r, p = remote / sub, local / sub
        assert (r.exists(), r.is_file(), r.is_dir()) == (p.exists(), p.is_file(), p.is_dir()), sub
        assert (r.name, r.stem, r.suffix) == (p.name, p.stem, p.suffix)
    video = remote / "siq2/video/tiny-a.mp4"
    assert video.stat().st_size == (local / "siq2/video/tiny-a.mp4").stat().st_size
    assert video.read_bytes() == (local / "siq2/video/tiny-a.mp4").read_bytes()
    assert (remote / "siq2/trims.json").read_text() == (local / "siq2/trims.json").read_text()
    assert str(video) == f"{raw_url}/siq2/video/tiny-a.mp4" and video.relative_to(remote) == "siq2/video/tiny-a.mp4"
    with pytest.raises(TypeError):  # never folded into a local path 's3:/bucket/...'
        Path(video)  # type: ignore[arg-type]


def test_a_bucket_s_client_follows_the_settings_of_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client a process keeps per bucket is made again when AWS_ENDPOINT_URL or a credential changed (a
    notebook that runs twice against two endpoints, or with a refreshed session token), never the old one's."""
    from objectio.paths import client

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1111")
    first = client("s3://siq-settings-test")
    assert client("s3://siq-settings-test") is first and first.config["endpoint"] == "http://127.0.0.1:1111"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2222")
    second = client("s3://siq-settings-test")
    assert second.config["endpoint"] == "http://127.0.0.1:2222"
    monkeypatch.setenv("AWS_SESSION_TOKEN", "refreshed")
    assert client("s3://siq-settings-test") is not second


def test_the_manifests_read_from_a_bucket_equal_a_local_folders(raw_url: str, tiny_root_template: Path) -> None:
    config = load_config("sample")
    items, qa, notes = load_items("sample", tiny_root_template, config)
    got_items, got_qa, got_notes = load_items("sample", raw_root(raw_url), config)
    assert got_qa == qa and len(qa) > 0
    assert [n.model_copy(update={"file": as_url(Path(n.file), tiny_root_template, raw_url) if n.file else n.file})
            for n in notes] == got_notes
    fields = ("video", "audio", "transcript", "image", "annotations")
    assert len(got_items) == len(items) == 3
    for mine, theirs in zip(got_items, items, strict=True):
        assert mine.model_dump(exclude=set(fields)) == theirs.model_dump(exclude=set(fields))
        for f in fields:
            value = getattr(mine, f)
            assert (str(value) if value is not None else None) == as_url(getattr(theirs, f), tiny_root_template,
                                                                          raw_url), f
        assert isinstance(mine.video, ObjectPath)


def test_inputs_decode_from_a_bucket_as_from_a_folder(raw_url: str, tiny_root_template: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIQ_RAW_CACHE", str(tmp_path / "cache"))
    config = load_config("sample")
    local = {i.id: i for i in load_items("sample", tiny_root_template, config)[0]}
    remote = {i.id: i for i in load_items("sample", raw_root(raw_url), config)[0]}
    item = "tiny-a"
    for kind in ("frames", "audio", "transcript"):
        a, b = kinds.decode(local[item], kind), kinds.decode(remote[item], kind)
        for name in ("pixels", "samples", "intervals", "times", "words"):
            if hasattr(a, name):
                np.testing.assert_array_equal(np.asarray(getattr(b, name)), np.asarray(getattr(a, name)), err_msg=kind)
    # the video's audio track, no separate file: read from the same copy of the video
    no_wav = remote[item].model_copy(update={"audio": None})
    np.testing.assert_array_equal(kinds.decode(no_wav, "audio").samples,
                                  kinds.decode(local[item].model_copy(update={"audio": None}), "audio").samples)
    copies = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert any(n.endswith("-tiny-a.mp4") for n in copies) and not any(n.startswith(".") for n in copies)


def test_an_objects_identity_is_its_size_and_etag(raw_url: str, tiny_root_template: Path) -> None:
    config = load_config("sample")

    def identities() -> dict[str, dict]:
        items = load_items("sample", raw_root(raw_url), config)[0]
        return {(i.id, k): kinds.identity(i, k, [], 16000) for i in items for k in ("frames", "audio", "transcript")}

    first = identities()
    ident = first["tiny-a", "frames"]
    local = (tiny_root_template / "siq2/video/tiny-a.mp4").read_bytes()
    assert ident["size"] == len(local) and "mtime_ns" not in ident
    import hashlib  # a single-part upload's ETag is the MD5 of its bytes

    assert ident["etag"].strip('"') == hashlib.md5(local).hexdigest()
    assert identities() == first  # listed again: the same identities, so the same fingerprints
    put(f"{raw_url}/siq2/video/tiny-a.mp4", local)  # the same bytes uploaded again: the same ETag
    assert identities() == first
    put(f"{raw_url}/siq2/video/tiny-a.mp4", local[:-1] + bytes([local[-1] ^ 1]))  # one byte changed, same size
    again = identities()
    assert again["tiny-a", "frames"]["etag"] != ident["etag"]
    assert {k for k in first if again[k] != first[k]} == {("tiny-a", "frames")}


def test_a_missing_or_replaced_object_fails_its_pair_naming_the_url(raw_url: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIQ_RAW_CACHE", str(tmp_path / "cache"))
    items = {i.id: i for i in load_items("sample", raw_root(raw_url), load_config("sample"))[0]}
    url = f"{raw_url}/siq2/video/tiny-b.mp4"
    put(url, b"other bytes")  # replaced after the run listed it: not decoded under the old identity
    with pytest.raises(InputError, match=f"^{url}: changed since the run listed it"):
        kinds.decode(items["tiny-b"], "frames")
    bucket, key = url.removeprefix("s3://").split("/", 1)
    _client().delete_object(Bucket=bucket, Key=key)
    with pytest.raises(InputError, match=f"^{url}: no such object"):
        kinds.decode(items["tiny-b"], "frames")
    assert kinds.decode(items["tiny-a"], "frames").pixels.shape[0] > 0  # the others are not affected


def test_the_nodes_copies_are_bounded_least_recently_used_first(raw_url: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIQ_RAW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(object_cache, "KEEP_RECENT_S", 0.0)
    root = raw_root(raw_url)
    videos = [root / f"siq2/video/tiny-{c}.mp4" for c in "abc"]
    sizes = [v.stat().st_size for v in videos]
    monkeypatch.setenv("SIQ_RAW_CACHE_BYTES", str(sizes[0] + sizes[1] + sizes[2] - 1))  # room for two
    copies = [object_cache.local_copy(v) for v in videos[:2]]
    os.utime(copies[1], (1, 1))  # b used long ago, a just now
    os.utime(copies[0], (2, 2))
    assert object_cache.local_copy(videos[0]) == copies[0]  # found, not fetched again; a is now the newest
    third = object_cache.local_copy(videos[2])
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == sorted([copies[0].name, third.name])
    assert third.read_bytes() == videos[2].read_bytes() and copies[0].read_bytes() == videos[0].read_bytes()


def test_a_runs_copies_are_its_own_unless_a_kept_folder_is_asked_for(raw_url: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A raw root listed for a run carries where its copies go to any worker (pickled as Ray sends it): by default
    the run's own folder in the node's temporary folder, which `remove_run` (what each node runs as the run ends)
    removes whole; with a kept folder (`raw_cache`) the next run finds its copies there, checked against the ETag:
    not fetched again while it is the same, fetched anew once it changed."""
    import pickle

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv(object_cache.KEPT_ENV, raising=False)

    def video(cache: tuple) -> ObjectPath:  # as a worker gets it
        return pickle.loads(pickle.dumps(raw_root(raw_url, cache=cache) / "siq2/video/tiny-a.mp4"))

    copy = object_cache.local_copy(video(object_cache.spec("run1", None, None)))
    assert copy.parent == tmp_path / f"siq-raw-{os.getuid()}-run1" and copy.read_bytes() == video(None).read_bytes()
    size = copy.stat().st_size
    assert object_cache.remove_run("run1") == size > 0
    assert not list(tmp_path.glob("siq-raw-*"))
    kept = tmp_path / "kept"
    first = object_cache.local_copy(video(object_cache.spec("run2", kept, None)))
    assert first.parent == kept and object_cache.remove_run("run2") == 0 and first.exists()
    fetched = []
    real_fetch = object_cache._fetch
    monkeypatch.setattr(object_cache, "_fetch", lambda *a: (fetched.append(a[0]), real_fetch(*a))[1])
    assert object_cache.local_copy(video(object_cache.spec("run3", kept, None))) == first and fetched == []
    data = first.read_bytes()
    put(str(video(None)), data[:-1] + bytes([data[-1] ^ 1]))  # the same size, a new ETag
    again = object_cache.local_copy(video(object_cache.spec("run3", kept, None)))
    assert again != first and fetched and again.read_bytes()[-1] == data[-1] ^ 1


@pytest.mark.parametrize("problem", ["no bucket", "no credentials", "nothing there"])
def test_a_raw_root_that_cannot_be_read_is_one_line_and_exit_2(raw_url: str, tmp_path: Path, problem: str,
                                                               monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    url = {"no bucket": "s3://no-such-bucket-here/raw", "no credentials": raw_url,
           "nothing there": raw_url + "-missing"}[problem]
    if problem == "no credentials":
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws either
    with pytest.raises((RawUnavailable, FileNotFoundError)) as e:
        raw_root(url)
    assert str(e.value).startswith(url.rsplit("/", 1)[0] if problem == "no bucket" else url) and "\n" not in str(e.value)
    expected = {"no bucket": "no such bucket", "no credentials": "no credentials found; set AWS_ACCESS_KEY_ID",
                "nothing there": "raw data root does not exist (no object under this prefix)"}[problem]
    assert expected in str(e.value)
    out = tmp_path / "out.zarr"
    assert main(["extract", "--dataset", "sample", "--raw", url, "--out", str(out)]) == 2
    assert expected in caplog.text and not out.exists()  # before any work: no store made
    if problem == "nothing there":  # where a sample comes from
        assert f"{expected}; a sample is generated into a local folder only: `python -m pipeline sample DIR`, then " \
               "upload DIR there" in caplog.text
    assert "testing-secret" not in caplog.text


LOUDNESS = """
layout = "siq2"
cpu_actors = 1

[features.loudness]
extractor = "rms_loudness"
"""


@pytest.mark.slow
def test_extract_from_a_bucket_equals_a_local_run_and_recomputes_only_what_changed(
        s3_url: str, tiny_root_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """`extract --raw s3://…` with a local Ray, the audio decoded from each video's own track (the wav files are
    not uploaded): the store equals a run on the same files in a folder; a second run recomputes nothing; a
    replaced video recomputes its pair alone; a deleted one fails its pair, naming the URL. The copies a run
    decodes from are its own and removed when it ends; with `raw_cache` they are kept there for the next run."""
    import logging
    import shutil
    import tempfile

    from pipeline.run import run_extract
    from store.reader import open_store

    monkeypatch.delenv("SIQ_RAW_CACHE", raising=False)
    local_raw = tmp_path / "raw"
    shutil.copytree(tiny_root_template, local_raw, ignore=shutil.ignore_patterns("wav"))
    url = upload(local_raw, s3_url.removesuffix("/store") + "/raw")
    (tmp_path / "loudness.toml").write_text(LOUDNESS)
    config = load_config(tmp_path / "loudness.toml")
    local = run_extract("sample", local_raw, tmp_path / "local.zarr", config)
    with caplog.at_level(logging.INFO, logger="siqfeat"):
        remote = run_extract("sample", url, tmp_path / "s3raw.zarr", config)
    removed = [r.getMessage() for r in caplog.records if "removed this run's copies of raw objects" in r.getMessage()]
    assert removed and removed[0].startswith("removed this run's copies of raw objects from 1 node(s): ") and \
        float(removed[0].rsplit(" ", 2)[-2]) > 0, removed  # the three videos' copies, made in the run's folder
    assert not list(Path(tempfile.gettempdir()).glob(f"siq-raw-{os.getuid()}-{remote.run_id}"))
    assert local.exit_code == remote.exit_code == 0
    assert remote.counts["loudness"] == local.counts["loudness"] == {"done": 3, "skipped": 0, "failed": 0, "n/a": 0}
    a, b = open_store(tmp_path / "local.zarr"), open_store(tmp_path / "s3raw.zarr")
    for item in a.items("loudness"):
        ra, rb = a.read("loudness", item), b.read("loudness", item)
        np.testing.assert_array_equal(rb.features[:], ra.features[:])
        np.testing.assert_array_equal(rb.intervals[:], ra.intervals[:])
        assert rb.attrs["source"]["etag"] and "mtime_ns" not in rb.attrs["source"]
    again = run_extract("sample", url, tmp_path / "s3raw.zarr", config)
    assert again.counts["loudness"]["done"] == 0 and again.counts["loudness"]["skipped"] == 3
    video = (local_raw / "siq2/video/tiny-b.mp4").read_bytes()
    put(f"{url}/siq2/video/tiny-b.mp4", video[:-1] + bytes([video[-1] ^ 1]))  # same size, new ETag
    bucket, key = f"{url}/siq2/video/tiny-c.mp4".removeprefix("s3://").split("/", 1)
    _client().delete_object(Bucket=bucket, Key=key)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="siqfeat"):  # copies kept across runs, asked for in the config
        changed = run_extract("sample", url, tmp_path / "s3raw.zarr", config.model_copy(update={"raw_cache": tmp_path / "kept"}))
    assert "removed this run's copies" not in caplog.text
    assert any(p.name.endswith("-tiny-b.mp4") for p in (tmp_path / "kept").iterdir())
    assert changed.counts["loudness"]["done"] == 1 and changed.counts["loudness"]["skipped"] == 1
    assert changed.counts["loudness"]["failed"] == 1
    assert f"{url}/siq2/video/tiny-c.mp4" in changed.summary() or "tiny-c" in changed.summary()
