"""A URL becomes an obstore client, and an obstore failure one line a user can act on.

Credentials come the way AWS tools take them: the standard environment variables (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL), else a profile (AWS_PROFILE, ~/.aws)
through boto3 where it is installed. No message made here holds a credential: they name the URL and the
variable to set."""

from __future__ import annotations

import contextlib
import os
import random
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import obstore
from obstore import exceptions as oe
from obstore.store import from_url

__all__ = ["CREDENTIALS", "ENDPOINT", "NO_RETRY", "OBSTORE_RETRY", "RETRY", "RetryPolicy", "describe", "from_url",
           "obstore", "oe", "options", "status", "transient", "unsigned"]

# What to set, per failure, in the one line a user sees (never the values themselves).
CREDENTIALS = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
ENDPOINT = "check AWS_ENDPOINT_URL (or the network)"


@dataclass(frozen=True)
class RetryPolicy:
    """How a request that failed for a passing reason is tried again: exponential backoff with jitter (AWS's
    advice for 503 SlowDown), each wait between half and all of min(max_s, first_s * base^(n-1)) before the
    n-th retry, so a throttled client always slows down; at most `attempts` tries in all and none started after
    `deadline_s`. A refused connection is tried `connect_attempts` times only: the endpoint is down or wrong
    more often than busy, and the user hears so in a second, not after a minute of retries."""

    attempts: int = 10
    connect_attempts: int = 3
    first_s: float = 0.1
    max_s: float = 5.0
    base: float = 2.0
    deadline_s: float = 120.0

    def delay(self, retry: int) -> float:
        cap = min(self.max_s, self.first_s * self.base ** (retry - 1))
        return cap / 2 + random.uniform(0, cap / 2)


RETRY = RetryPolicy()

# The backend's own requests are retried here, not by obstore (its client has max_retries 0): obstore retries
# a conditional PUT whose answer was lost and reports the server's 412 for the copy it wrote itself as a lost
# race (a publish or a lease taken would fail as "another writer"), and it says nothing of how often it
# retried, which the run report counts. The zarr store over the same bucket (array chunks the readers read)
# keeps obstore's own retries, set to the same policy; those are not counted.
NO_RETRY: dict[str, Any] = {"max_retries": 0}
OBSTORE_RETRY: dict[str, Any] = {
    "max_retries": RETRY.attempts - 1, "retry_timeout": timedelta(seconds=RETRY.deadline_s),
    "backoff": {"init_backoff": timedelta(seconds=RETRY.first_s), "max_backoff": timedelta(seconds=RETRY.max_s),
                "base": RETRY.base}}

STATUS_RE = re.compile(r"non-2xx status code: (\d{3})")


def status(text: str) -> int | None:
    """The HTTP status an obstore error reports, if any."""
    found = STATUS_RE.search(text)
    return int(found.group(1)) if found else None


def transient(e: BaseException) -> str | None:
    """The kind of a failure worth trying again (store/backends/base.py RETRY_KINDS), from obstore's error text (it has no
    classes for them); None for the others (no such object, refused credentials, a lost conditional write)."""
    if not isinstance(e, oe.GenericError):
        return None
    text = str(e)
    found = STATUS_RE.search(text)
    if found:
        code = int(found.group(1))
        if code == 503 or code == 429 or "SlowDown" in text:
            return "throttled"
        return "server" if code >= 500 else None
    if "kind: Connect" in text or "tcp connect error" in text:
        return "connect"
    if any(m in text for m in ("error sending request", "response body error", "IncompleteBody", "timed out",
                               "Timeout", "connection closed", "Connection reset", "broken pipe")):
        return "dropped"
    return None


def options(url: str, retry: dict[str, Any] | None = None) -> dict[str, Any]:
    """obstore's options for `url` from the environment: an http:// endpoint (a local server) allows HTTP;
    `retry`: obstore's own retries (OBSTORE_RETRY unless said: raw data read from a bucket, array chunks)."""
    opts: dict[str, Any] = {"retry_config": OBSTORE_RETRY if retry is None else retry}
    if url.startswith(("s3://", "s3a://")):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            opts["config"] = {"endpoint": endpoint}
            if endpoint.startswith("http://"):
                opts["client_options"] = {"allow_http": True}
        if not os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_PROFILE") is not None:
            with contextlib.suppress(ImportError):  # boto3 reads profiles; without it, the variables only
                from obstore.auth.boto3 import Boto3CredentialProvider

                opts["credential_provider"] = Boto3CredentialProvider()
    return opts


def unsigned(url: str) -> bool:
    """S3 with nothing to sign with: a refusal then means "no credentials", not "these may not"."""
    return url.startswith(("s3://", "s3a://")) and not (
        os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE")
        or os.path.exists(os.path.expanduser("~/.aws/credentials")) or os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE")
        or os.environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"))


def describe(e: BaseException, where: str, bucket_url: str, is_unsigned: bool, use: str = "read and write"
             ) -> tuple[str, str] | None:
    """(what, one line) for a failure of the storage: what is "missing" for an object that is not there,
    "storage" for the storage failing as a whole (no bucket, no credentials, denied, unreachable: the line names
    the URL and what to set); None for anything else (kept as it is)."""
    if isinstance(e, (oe.NotFoundError, FileNotFoundError)) and "NoSuchBucket" not in str(e):
        return "missing", f"{where}: no such object"
    text = str(e)
    denied = isinstance(e, (oe.PermissionDeniedError, oe.UnauthenticatedError)) or any(
        code in text for code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403 Forbidden"))
    if denied and is_unsigned:
        return "storage", f"{where}: no credentials found; {CREDENTIALS}"
    if isinstance(e, oe.UnauthenticatedError):
        return "storage", f"{where}: the credentials were refused; {CREDENTIALS}"
    if isinstance(e, oe.PermissionDeniedError):
        return "storage", f"{where}: access denied; use credentials allowed to {use} it"
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return "storage", f"{bucket_url}: no such bucket; create it or correct the URL"
    if "AccessDenied" in text or status(text) == 403:  # (not any "403": a bucket's name or a port may hold it)
        return "storage", f"{where}: access denied; use credentials allowed to {use} it"
    if "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text:
        return "storage", f"{where}: the credentials were refused; {CREDENTIALS}"
    if "credential" in text.lower():
        return "storage", f"{where}: no credentials found; {CREDENTIALS}"
    if "error sending request" in text or "connect" in text.lower():
        return "storage", f"{where}: the endpoint is unreachable; {ENDPOINT}"
    return None


def first_line(e: BaseException) -> str:
    return str(e).strip().split("\n", 1)[0][:200]
