"""A URL becomes an obstore client, and an obstore failure one line a user can act on.

Credentials come the way AWS tools take them: the standard environment variables (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL), else a profile (AWS_PROFILE, ~/.aws)
through boto3 where it is installed. No message made here holds a credential: they name the URL and the
variable to set."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import obstore
from obstore import exceptions as oe
from obstore.store import from_url

__all__ = ["CREDENTIALS", "ENDPOINT", "describe", "from_url", "obstore", "oe", "options", "unsigned"]

# What to set, per failure, in the one line a user sees (never the values themselves).
CREDENTIALS = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
ENDPOINT = "check AWS_ENDPOINT_URL (or the network)"


def options(url: str) -> dict[str, Any]:
    """obstore's options for `url` from the environment: an http:// endpoint (a local server) allows HTTP."""
    opts: dict[str, Any] = {}
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
    if "AccessDenied" in text or "403" in text.split("\n", 1)[0]:
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
