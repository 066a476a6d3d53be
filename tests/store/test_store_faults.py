"""Faults of object storage, against the real S3 server of the tests (moto on 127.0.0.1) and a TCP proxy between
the client and it that cuts connections and throttles (testing/faultproxy.py): nothing of the client is mocked.
Connections cut mid-upload and mid-download and answers lost are retried with backoff and counted, or the pair
fails alone naming the URL, and a torn object is never read as data; 503 SlowDown is retried with backoff; a
second run on a store is refused naming the holder, a killed holder's lease is taken over; a compaction leaves
a reader's snapshot readable; no secret reaches a report, a log, the store or an error. A driver killed with
kill -9 during a commit and run again gives the store a clean run gives."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from objectio.client import RetryPolicy
from pipeline.cli import main
from pipeline.committer import Committer
from pipeline.exitcodes import LOCKED
from store.backends import BackendError, open_backend, retries, retries_since
from store.backends import objects as objects_backend
from store.reader import open_store
from store.writer import StoreWriter
from testing.faultproxy import FaultProxy
from tests import s3server
from tests.store.test_store_s3 import ATTRS, everything, rows, write_run

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name
REPO = Path(__file__).parents[2]


@pytest.fixture
def proxy(s3_url: str, s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The fault proxy in front of the S3 server; the client's endpoint (AWS_ENDPOINT_URL) is the proxy's."""
    got = FaultProxy(s3_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL", got.endpoint)
    try:
        yield got
    finally:
        got.close()


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> RetryPolicy:
    """Three tries 10-20 ms apart: a request failing on every try fails in a blink (the policy's shape kept)."""
    policy = RetryPolicy(attempts=3, connect_attempts=2, first_s=0.01, max_s=0.02)
    monkeypatch.setattr(objects_backend, "RETRY", policy)
    return policy


def test_cut_connections_are_retried_counted_and_the_store_equals_an_unhurt_one(
        tmp_path: Path, s3_url: str, proxy: FaultProxy) -> None:
    """Uploads of parts cut midway, publishes the server applied whose answers were lost (the retry meets its own
    create-if-absent write: 412, which must not read as another writer's), a log segment's download cut midway:
    the store equals one written without faults, and each retry is counted as a dropped connection."""
    before = retries()
    proxy.fail("cut_upload", "PUT", "/parts/", times=2)
    proxy.fail("lose_response", "PUT", "/index.log.d/", times=3)
    proxy.fail("cut_download", "GET", "/index.log.d/", times=1)
    write_run(s3_url)
    got = everything(s3_url)
    assert proxy.pending() == 0 and dict(proxy.injected) == {"cut_upload": 2, "lose_response": 3, "cut_download": 1}
    assert retries_since(before) == {"dropped": 6}
    write_run(tmp_path / "unhurt.zarr")
    assert got == everything(tmp_path / "unhurt.zarr")
    backend = open_backend(s3_url)
    assert all(len(backend.children(f"{f}/parts")) == len(open_store(s3_url).index(f).parts) for f in ("feat", "other"))


def test_throttling_is_retried_with_backoff_and_counted(s3_url: str, proxy: FaultProxy) -> None:
    """503 SlowDown to the first three tries of a part's chunk upload (one object: a part's files go up several
    at once): the fourth succeeds, each retry waited at least half its exponential step (0.05, 0.1, 0.2 s),
    and the three are counted as throttled."""
    with StoreWriter(s3_url, "demo") as w:
        w.set_feature("feat", ATTRS)
        before = retries()
        proxy.fail("slowdown", "PUT", "/features/c/", times=3)
        w.commit("feat", "a", rows(3, 1.0), {"spec_hash": "s1", "fingerprint": "fa"})
        assert retries_since(before) == {"throttled": 3}
    tries = [(path, t) for method, path, t in proxy.requests if method == "PUT" and "/features/c/" in path]
    assert len(tries) == 4
    assert len({path for path, _ in tries}) == 1  # one object, tried four times
    policy = objects_backend.RETRY
    gaps = np.diff([t for _, t in tries])
    assert all(gap >= policy.first_s * policy.base ** k / 2 for k, gap in enumerate(gaps)), gaps
    np.testing.assert_array_equal(np.asarray(open_store(s3_url).read("feat", "a").features[...]), rows(3, 1.0).features)


def test_an_actors_throttled_upload_is_counted_in_what_goes_back_to_the_driver(
        s3_url: str, proxy: FaultProxy) -> None:
    """A model actor uploading its own part (pipeline/ownparts.py) throttled once: the retry it needed comes back
    with its results (the actor's process counts it; the driver adds it to the run report's, `Runner.results`)."""
    from pipeline import ownparts
    from pipeline.actors import Extracted, Failure
    from store.workerparts import WrittenRows

    class Plain:
        config = None

        @classmethod
        def join(cls, parts: list, config: object) -> object:
            return parts[0]

    proxy.fail("slowdown", "PUT", "/parts/", times=1)
    target = ownparts.StoreTarget(s3_url, frozenset({"a"}))
    out, retried = ownparts.store_results(target, "feat", Plain(), [Extracted("a", rows(3, 1.0), None, 0.1)],
                                          Failure.of)
    assert proxy.pending() == 0 and dict(proxy.injected) == {"slowdown": 1}
    assert isinstance(out[0].rows, WrittenRows) and retried == {"throttled": 1}


def test_a_request_failing_on_every_try_fails_its_pair_alone_naming_the_url(
        s3_url: str, proxy: FaultProxy, fast_retries: RetryPolicy) -> None:
    """Every try of a batch's chunk upload cut, then every try of its first pair's alone (the committer commits a
    failed batch again pair by pair): that pair fails with one line naming the object's URL, the three others
    are committed, and the failed pair left no part behind. (One object's uploads: a part's files go up
    several at once.)"""
    with StoreWriter(s3_url, "demo") as w:
        w.set_feature("feat", ATTRS)
        proxy.fail("cut_upload", "PUT", "/features/c/", times=2 * fast_retries.attempts)
        committer = Committer(w, batch_items=2)
        for k, item in enumerate("abcd"):
            committer.put("feat", item, rows(2, float(k)), {"spec_hash": "s1", "fingerprint": f"f{item}"})
        outcomes = committer.close()
    failed = {o.item: str(o.error) for o in outcomes if o.error is not None}
    assert list(failed) == ["a"] and committer.store_error is None, failed
    assert failed["a"].startswith(f"{s3_url}/feat/parts/") and "\n" not in failed["a"], failed
    assert f"dropped mid-request on every try ({fast_retries.attempts} time(s), with backoff)" in failed["a"]
    s = open_store(s3_url)
    assert s.items("feat") == ["b", "c", "d"]
    assert len(open_backend(s3_url).children("feat/parts")) == len(s.index("feat").parts)
    for k, item in enumerate("bcd", start=1):
        np.testing.assert_array_equal(np.asarray(s.read("feat", item).features[...]), rows(2, float(k)).features)


def test_a_cut_download_is_tried_again_or_fails_never_read_short(
        s3_url: str, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(s3_url)

    def arrays() -> list[bytes]:
        s = open_store(s3_url)
        return [np.asarray(s.read("other", i).features[...]).tobytes() for i in s.items("other")]

    want = arrays()
    assert want == [rows(2 + k, k).features.tobytes() for k in range(6)]
    backend = open_backend(s3_url)
    key = next(i.key for i in backend.list("other/parts") if not i.key.endswith("zarr.json"))
    whole = backend.get(key)
    path = key.rsplit("/", 3)[-3]  # the part's name: in the chunk's URL path
    before = retries()
    proxy.fail("cut_download", "GET", path, times=2)
    assert backend.get(key) == whole and retries_since(before) == {"dropped": 2}
    # the readers' arrays (zarr over obstore, with obstore's own retries: it resumes a cut body with a ranged GET)
    proxy.fail("cut_download", "GET", "/parts/", times=3)
    assert arrays() == want and proxy.pending() == 0
    # cut on every try: an error naming the object, never the half that came
    monkeypatch.setattr(objects_backend, "RETRY", RetryPolicy(attempts=3, first_s=0.01, max_s=0.02))
    proxy.fail("cut_download", "GET", path, times=3)
    with pytest.raises(BackendError, match=rf"^{s3_url}/{key}: the connection was dropped mid-request on every try "
                                           r"\(3 time\(s\), with backoff\)"):
        backend.get(key)


def test_a_second_extract_is_refused_naming_the_holder_and_a_killed_holder_is_taken_over(
        s3_url: str, tiny_root_template: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Another process holds the store (as a running extract's driver does, for the whole run): `extract` on the
    same store exits LOCKED with one line naming that process and host, before any work. Killed with kill -9, its
    lease is taken over at once (its pid is gone from this machine), said so; not after the lease's minute."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from store.writer import StoreWriter
            w = StoreWriter({s3_url!r}, "sample")
            print("held", flush=True)
            sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        caplog.clear()
        assert main(["extract", "--raw", str(tiny_root_template), "--out", s3_url, "--config", "sample",
                     "--features", "qa"]) == LOCKED
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, errors
        assert errors[0].startswith(f"{s3_url}: another run is writing to this store (pid {holder.pid} on "
                                    f"{socket.gethostname()}, lease until "), errors
    finally:
        holder.kill()
        holder.wait()
    caplog.clear()
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING), StoreWriter(s3_url, "sample"):
        pass
    assert time.monotonic() - t0 < 10
    assert f"took over the write lease of pid {holder.pid} on {socket.gethostname()}, a process of this machine " \
           "that is gone" in caplog.text


def test_a_compaction_leaves_a_held_snapshot_readable(s3_url: str) -> None:
    """A reader opened before `compact` reads every row of every item after it as before (its snapshot names
    the parts the compaction replaced); a reader opened after reads the same rows from the new parts."""
    write_run(s3_url)
    held = open_store(s3_url)
    for feature in held.features():
        held.index(feature)  # the snapshot taken: the logs as they are now
    before = everything(s3_url)
    old_parts = {f: set(held.index(f).parts) for f in held.features()}
    assert main(["compact", "--out", s3_url]) == 0
    after = open_store(s3_url)
    assert set(after.index("feat").parts) != old_parts["feat"]  # the compaction did replace parts
    for feature in held.features():
        widths: dict[int, list[str]] = {}  # batched reads gather rows of one width
        for item in held.items(feature, include_filtered=True):
            shape = held.read(feature, item).features.shape
            widths.setdefault(shape[1], []).extend((item, r) for r in range(shape[0]))
        for picks in widths.values():
            assert held.rows(feature, "features", picks).tobytes() == after.rows(feature, "features", picks).tobytes()
        for item in held.items(feature, include_filtered=True, include_stale=True):
            assert (np.asarray(held.read(feature, item).features[...]).tobytes()
                    == np.asarray(after.read(feature, item).features[...]).tobytes()
                    == before[feature, item][0]["features"][2]), (feature, item)


def test_a_status_code_in_a_url_is_not_taken_for_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket named with 403 or 412 in it, its endpoint down: unreachable, not 'access denied', and not a lost
    conditional write (the URL is in obstore's error text; only the status it reports counts)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    for name, value in s3server.CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    backend = open_backend("s3://t-403-412/store")
    with pytest.raises(BackendError, match=r"^s3://t-403-412/store: the endpoint is unreachable"):
        backend.check()
    with pytest.raises(BackendError, match=r"^s3://t-403-412/store/k: the endpoint is unreachable"):
        backend.put_if_absent("k", b"x")


def test_retries_are_one_summary_line_when_any() -> None:
    from pipeline.report import RunReport

    report = RunReport("r", "demo", "s3://b/s.zarr", {"feat": {"done": 1, "skipped": 0, "failed": 0, "n/a": 0}})
    assert "retried" not in report.summary()
    report.storage_retries = {"throttled": 2, "dropped": 1}
    lines = [ln for ln in report.summary().splitlines() if "retried" in ln]
    assert lines == ["  storage requests retried with backoff: 3 (2 throttled (503 SlowDown), 1 dropped connection(s))"]


SECRET = {"AWS_ACCESS_KEY_ID": "AKIASIQFAKEKEY47XYZQ", "AWS_SECRET_ACCESS_KEY": "siq47/FAKE+secret+never+printed+9Kq",
          "AWS_SESSION_TOKEN": "siq47-fake-session-token-Zx81"}


def _leaked(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [name for name, value in SECRET.items() if value.encode() in data]


def test_no_secret_in_a_report_log_store_attribute_or_error_message(
        s3_url: str, s3_server: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capfd: pytest.CaptureFixture[str], fast_retries: RetryPolicy) -> None:
    """Recognisable fake credentials (moto takes any): every command's output, every log record (DEBUG up), every
    object of the store (its attributes, logs, parts, run report) and the errors of a store that fails (a
    request dropped on every try, a missing object, an unreachable endpoint, a missing bucket) hold none of them."""
    for name, value in SECRET.items():
        monkeypatch.setenv(name, value)
    errors: list[str] = []
    with caplog.at_level(logging.DEBUG):
        write_run(s3_url)
        assert main(["info", s3_url, "--json"]) == 0
        assert main(["compact", "--out", s3_url]) == 0
        proxy = FaultProxy(s3_server)
        try:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            proxy.fail("cut_upload", "PUT", times=fast_retries.attempts)
            with pytest.raises(BackendError) as e:
                open_backend(s3_url).put("x", b"y" * 1000)
            errors.append(str(e.value))
        finally:
            proxy.close()
            monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
        with pytest.raises(FileNotFoundError) as missing:
            open_backend(s3_url).get("no/such/object")
        errors.append(str(missing.value))
        assert main(["info", s3_url.replace("store", "nothing-here")]) != 0
        assert main(["info", "s3://no-bucket-of-this-name/s.zarr"]) == 2
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        assert main(["info", s3_url]) == 2
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    out, err = capfd.readouterr()
    backend = open_backend(s3_url)
    stored = b"".join(backend.get(i.key) for i in backend.list())
    assert b'"spec_hash"' in stored and b"demo" in stored  # the store's attributes and run report are in there
    assert len(caplog.records) > 5 and "unreachable" in caplog.text and "no such bucket" in caplog.text
    assert "dropped mid-request" in errors[0] and "no such object" in errors[1]
    for what, text in {"stdout": out, "stderr": err, "logs": caplog.text, "errors": "\n".join(errors),
                       "store": stored}.items():
        assert not _leaked(text), (what, _leaked(text))


def _killed_during_a_commit(raw: Path, out: str, env: dict[str, str]) -> tuple[list[str], str]:
    """Run `extract --out s3://…` in a child (one pair per commit) and kill -9 it once its second commit has
    uploaded the first object of its part (a data file; where the model actors upload the data, the part's
    zarr.json) and not published it; (the items its published commits acknowledged, its output)."""
    script = textwrap.dedent(f"""
        import os, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(REPO / "tests" / "pipeline")!r})
        from store import layout
        from store.backends import log as blog
        from store.backends.objects import ObjectBackend
        from test_pipeline import loudness_config
        from pipeline.run import run_extract
        put, append, published = ObjectBackend.put, blog.append, []
        def uploading(self, key, data):
            got = put(self, key, data)
            if "/parts/" in key and len(published) == 1:  # a data file, or (actors upload those) zarr.json
                print("MID-COMMIT", key, flush=True)
                time.sleep(120)  # here the test kills this process
            return got
        def publishing(backend, key, generation, at, data):
            end = append(backend, key, generation, at, data)
            published.append(key)
            for line in data.splitlines():
                rec = layout.decode(line)
                if isinstance(rec, layout.PartLine):
                    print("PUBLISHED", *[row[0] for row in rec.rows], flush=True)
            return end
        ObjectBackend.put, blog.append = uploading, publishing
        run_extract("tiny", Path({str(raw)!r}), {out!r}, loudness_config(commit_batch_items=1))
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={**env, "PYTHONPATH": str(REPO)}, start_new_session=True)
    lines: list[str] = []
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 240
        for line in child.stdout:
            lines.append(line)
            if line.startswith("MID-COMMIT") or time.monotonic() > deadline:
                break
        os.kill(child.pid, signal.SIGKILL)  # the driver, and only it: kill -9
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        with contextlib.suppress(ProcessLookupError):  # what of its Ray outlived it: the group we made
            os.killpg(child.pid, signal.SIGKILL)
    text = "".join(lines)
    assert "MID-COMMIT" in text, text[-3000:]
    acked = [item for line in lines if line.startswith("PUBLISHED") for item in line.split()[1:]]
    return acked, text


@pytest.mark.slow
def test_a_driver_killed_during_a_commit_on_s3_is_finished_by_the_next_run(
        tiny_root: Path, s3_url: str, s3_server: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """kill -9 of the driver with its second commit half uploaded: the store holds exactly the commit it
    acknowledged, the torn part is not read as data; the next run takes the dead driver's lease over at once,
    computes only what is missing (its publishes throttled and cut: retried, counted in its report and summary)
    and leaves the store a clean run leaves; fake credentials appear nowhere."""
    from pipeline.run import run_extract
    from tests.pipeline.test_pipeline import loudness_config

    for name, value in SECRET.items():
        monkeypatch.setenv(name, value)
    acked, output = _killed_during_a_commit(tiny_root, s3_url, dict(os.environ))
    assert len(acked) == 1, output[-3000:]
    backend = open_backend(s3_url)
    unpublished = [p for p in backend.children("loudness/parts") if p not in open_store(s3_url).index("loudness").parts]
    # the second commit's part: some of its files in the bucket, its zarr.json (written last) not; where model
    # actors upload their parts' data and the driver their zarr.json, it may be whole, to be adopted
    torn = [p for p in unpublished if not backend.exists(f"loudness/parts/{p}/zarr.json")]
    assert unpublished and (torn or len(unpublished) == 1), unpublished
    served = open_store(s3_url).items("loudness", include_filtered=True, include_stale=True)
    # the commit acknowledged, never a torn part; a whole part no record names is served too (with a warning, as
    # locally: no run holds the store) only when its name says it is newer than the log's last line: an actor's
    # part (`w<random>`) never is, the next run adopts it
    newer = [p for p in unpublished if p not in torn and p.split("-", 1)[0].isdigit()]
    assert (served == acked) if not newer else set(acked) < set(served), (served, acked, unpublished)
    proxy = FaultProxy(s3_server)  # the next run's publishes throttled twice, one's answer lost: counted
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        proxy.fail("slowdown", "PUT", "/index.log.d/", times=2)
        proxy.fail("lose_response", "PUT", "/index.log.d/", times=1)
        with caplog.at_level(logging.INFO):
            again = run_extract("tiny", tiny_root, s3_url, loudness_config(commit_batch_items=1))
    finally:
        proxy.close()
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    adopted = len(unpublished) - len(torn)  # whole parts no record named: committed by the next run's writer
    assert again.counts["loudness"] == {"done": 2 - adopted, "skipped": 1 + adopted, "failed": 0, "n/a": 0}, \
        again.summary()
    assert "took over the write lease of pid" in caplog.text
    assert again.storage_retries == {"throttled": 2, "dropped": 1} == open_store(s3_url).last_run()["storage_retries"]
    assert "storage requests retried with backoff: 3 (2 throttled (503 SlowDown), 1 dropped connection(s))" in \
        again.summary()
    clean_url = s3_url.rsplit("/", 1)[0] + "/clean"
    clean = run_extract("tiny", tiny_root, clean_url, loudness_config(commit_batch_items=1))
    assert clean.counts["loudness"]["done"] == 3

    def timeless(got: dict) -> dict:
        volatile = {"extract_seconds", "decode_seconds"}
        return {k: (v[0], {a: x for a, x in v[1].items() if a not in volatile})
                if isinstance(k, tuple) and isinstance(v, tuple) else v for k, v in got.items() if k != "last_run"}

    assert timeless(everything(s3_url)) == timeless(everything(clean_url))
    assert not set(torn) & set(backend.children("loudness/parts"))  # removed by the next run
    stored = b"".join(backend.get(i.key) for i in backend.list())
    assert not _leaked(output) and not _leaked(caplog.text) and not _leaked(stored)
    assert not _leaked(json.dumps(again.as_dict(), default=str)) and not _leaked(again.summary())
