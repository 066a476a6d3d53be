"""A local S3 server: moto's server mode on 127.0.0.1, the bytes over HTTP as to AWS (not a mock of the client
library). The tests start one per module (tests/s3server.py), `make bench-store` one per run, and a user one to
try object storage on one machine:

    python -m testing.s3server [--port 5555] [--bucket bucket ...]     (make s3-server)

starts it, creates the buckets, prints the environment to set in another shell and serves until Ctrl-C. moto
keeps everything in memory: what was written is gone when the server stops."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the server is on this machine: never reached through a proxy, whatever the environment names (a user's
# HTTP_PROXY, or a test's dead one), and not through urllib.request.urlopen's opener either, which keeps the
# proxies of the environment as it was at its first use in the process
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))

# moto takes any keys; these are what clients sign with (an unsigned client would be refused by real S3 and is
# not what the code under test does)
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key", "AWS_SECRET_ACCESS_KEY": "testing-secret",
               "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}
DEFAULT_PORT = 5555


def _serialized(app: Callable[..., Any], counts: Counter[str]) -> Callable[..., Any]:
    """One request at a time: S3 applies a conditional write (If-None-Match, If-Match) atomically; moto checks
    the condition and then stores, with no lock between (moto/s3/responses.py, put_object), so two racing PUTs
    could both pass its check on a threaded server. Served in turn, moto is as atomic as S3; the connections
    stay concurrent. Each request is counted by its method in `counts`."""
    lock = threading.Lock()

    def app_in_turn(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with lock:
            counts[environ.get("REQUEST_METHOD", "?")] += 1
            return list(app(environ, start_response))

    return app_in_turn


def create_bucket(endpoint: str, name: str) -> None:
    """A new bucket on the local server at `endpoint` (S3's CreateBucket, path-style, in us-east-1; moto takes
    it unsigned). obstore has no call for it: a bucket is not an object."""
    request = urllib.request.Request(f"{endpoint}/{name}", method="PUT", data=b"")
    try:
        with _DIRECT.open(request, timeout=30) as got:
            got.read()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{endpoint}/{name}: cannot create the bucket: HTTP {e.code} {e.read()[:200]!r}") from None


class S3Server:
    """moto's S3 on `host`:`port` (0: a free port), its WSGI app served one request at a time (`_serialized`),
    in a thread of this process. A context manager: started on entry, stopped on exit."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
        #: requests served so far, by HTTP method (a listing is a GET): what a client costs in round trips
        self.requests: Counter[str] = Counter()
        app = _serialized(DomainDispatcherApplication(create_backend_app), self.requests)
        try:
            self._server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
        except OSError as e:
            raise OSError(f"{host}:{port}: cannot serve S3 there ({e.strerror or e}); choose another port") from None
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-server", daemon=True)
        self._started = False

    @property
    def url(self) -> str:
        """The endpoint, as AWS_ENDPOINT_URL takes it."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self) -> dict[str, str]:
        """The environment a client needs: the endpoint and credentials moto takes."""
        return {"AWS_ENDPOINT_URL": self.url, **CREDENTIALS}

    def start(self) -> S3Server:
        self._thread.start()
        self._started = True
        return self

    def create_bucket(self, name: str) -> None:
        """A new bucket (S3's CreateBucket, path-style, in us-east-1)."""
        create_bucket(self.url, name)

    def upload(self, folder: Path, bucket: str, prefix: str) -> int:
        """Every file under `folder` into `bucket` under `prefix` (as `aws s3 sync folder s3://bucket/prefix`
        would: plain PUTs, each object one whole file); returns how many."""
        files = sorted(f for f in folder.rglob("*") if f.is_file())
        for f in files:
            key = "/".join((prefix.strip("/"), f.relative_to(folder).as_posix())).lstrip("/")
            # (a body with no type would go as a form, which the server's web framework parses first)
            request = urllib.request.Request(f"{self.url}/{bucket}/{urllib.parse.quote(key)}", method="PUT",
                                             data=f.read_bytes(), headers={"Content-Type": "application/octet-stream"})
            with _DIRECT.open(request, timeout=300) as got:
                got.read()
        return len(files)

    def stop(self) -> None:
        if self._started:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
        self._started = False

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="A local S3 server (moto) on 127.0.0.1 for trying object storage; "
                                            "everything it holds is in memory and gone when it stops.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free port")
    p.add_argument("--bucket", action="append", default=None,
                   help="a bucket to create (repeatable; default: one named 'bucket')")
    p.add_argument("--upload", type=Path, default=None, metavar="FOLDER",
                   help="copy FOLDER's files into the first bucket under FOLDER's name (raw data to try --raw s3://)")
    args = p.parse_args(argv)
    if args.upload is not None and not args.upload.is_dir():
        print(f"s3server: {args.upload}: no such folder to upload", flush=True)
        return 2
    try:
        server = S3Server(port=args.port)
    except OSError as e:
        print(f"s3server: {e}", flush=True)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server:
        try:
            for name in args.bucket or ["bucket"]:
                server.create_bucket(name)
        except RuntimeError as e:
            print(f"s3server: {e}", flush=True)
            return 2
        if args.upload is not None:
            bucket = (args.bucket or ["bucket"])[0]
            n = server.upload(args.upload, bucket, args.upload.resolve().name)
            print(f"uploaded {n} file(s) of {args.upload} to s3://{bucket}/{args.upload.resolve().name}", flush=True)
        exports = " ".join(f"{k}={v}" for k, v in server.env().items())
        print(f"S3 server on {server.url} with bucket(s) {', '.join(args.bucket or ['bucket'])} (in memory; "
              "Ctrl-C stops it). In another shell:", flush=True)
        print(f"export {exports}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the end asked for
            stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
