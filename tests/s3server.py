"""A real S3 server for the object-storage tests: moto's server mode on 127.0.0.1 (the bytes go over HTTP, as
to AWS; not a mock of the client library), one per test module, and a bucket of its own per test. Import the
fixtures into a test module: `from tests.s3server import s3_server, s3_url  # noqa: F401`."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing-key", "AWS_SECRET_ACCESS_KEY": "testing-secret",
               "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}


def _serialized(app: Callable[..., Any]) -> Callable[..., Any]:
    """One request at a time: S3 applies a conditional write (If-None-Match, If-Match) atomically; moto checks
    the condition and then stores, with no lock between (moto/s3/responses.py, put_object), so two racing PUTs
    could both pass its check on a threaded server. Served in turn, moto is as atomic as S3; the connections
    stay concurrent."""
    lock = threading.Lock()

    def app_in_turn(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with lock:
            return list(app(environ, start_response))

    return app_in_turn


class _Server:
    """moto's ThreadedMotoServer with its WSGI app served one request at a time (see `_serialized`)."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        app = _serialized(DomainDispatcherApplication(create_backend_app))
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-server", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def get_host_and_port(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server started for this module and stopped after it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = _Server()
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_url(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """s3://<a new bucket>/store for this test, with the standard AWS variables pointing at the server."""
    import boto3

    for name, value in {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    bucket = f"t-{uuid.uuid4().hex[:20]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                 aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=bucket)
    assert os.environ["AWS_ENDPOINT_URL"] == s3_server
    return f"s3://{bucket}/store"


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """Each backend in turn: a local folder, and a bucket on the S3 server (the conformance suites' one fixture)."""
    from store.backends import open_backend

    if request.param == "local":
        return open_backend(tmp_path / "store")
    return open_backend(request.getfixturevalue("s3_url"))
