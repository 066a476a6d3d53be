"""A real S3 server for the object-storage tests: testing/s3server.py's (moto's server mode on 127.0.0.1: the
bytes go over HTTP, as to AWS; not a mock of the client library), one per test module, and a bucket of its own
per test. Import the fixtures into a test module: `from tests.s3server import s3_server, s3_url  # noqa: F401`."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testing.s3server import CREDENTIALS, S3Server

__all__ = ["CREDENTIALS", "backend", "s3_server", "s3_url"]

_servers: dict[str, S3Server] = {}  # endpoint URL -> its server, for `s3_url` to create buckets on


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a moto S3 server started for this module and stopped after it."""
    with S3Server() as server:
        _servers[server.url] = server
        try:
            yield server.url
        finally:
            del _servers[server.url]


@pytest.fixture
def s3_url(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """s3://<a new bucket>/store for this test, with the standard AWS variables pointing at the server."""
    for name, value in _servers[s3_server].env().items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    bucket = f"t-{uuid.uuid4().hex[:20]}"
    _servers[s3_server].create_bucket(bucket)
    assert os.environ["AWS_ENDPOINT_URL"] == s3_server
    return f"s3://{bucket}/store"


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """Each backend in turn: a local folder, and a bucket on the S3 server (the conformance suites' one fixture)."""
    from store.backends import open_backend

    if request.param == "local":
        return open_backend(tmp_path / "store")
    return open_backend(request.getfixturevalue("s3_url"))
