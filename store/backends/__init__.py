"""Where a store's bytes live: one contract (base.py), one module per backend (local.py, objects.py).
`open_backend` turns what a user gave (a path, or a URL such as s3://bucket/prefix) into the backend for it;
nothing above this package learns which one it got."""

from __future__ import annotations

from pathlib import Path

from objectio import is_url  # one list of object-storage schemes, for the store and the raw data alike
from store.backends.base import (
    Backend,
    BackendError,
    Conflict,
    Locked,
    ObjectInfo,
    Pinned,
    join,
    retries,
    retries_since,
)

__all__ = ["Backend", "BackendError", "Conflict", "Locked", "ObjectInfo", "Pinned", "is_url", "join", "location", "open_backend",
           "retries", "retries_since"]


def location(where: str | Path) -> str | Path:
    """A store's location as given: a local path as a Path, an object-storage URL as its text without a trailing
    slash (a Path would fold s3://bucket into s3:/bucket)."""
    return str(where).rstrip("/") if is_url(where) else Path(where)


def open_backend(location: str | Path) -> Backend:
    """The backend of a path (the local folder) or an object-storage URL (s3://bucket/prefix, gs://, az://)."""
    if is_url(location):
        from store.backends.objects import ObjectBackend  # obstore loads only for a URL

        return ObjectBackend(str(location))
    text = str(location)
    if "://" in text and not text.startswith("file://"):
        raise BackendError(f"{text}: unknown storage scheme; give a local path or an s3://, gs:// or az:// URL")
    from store.backends.local import LocalBackend

    return LocalBackend(text.removeprefix("file://"))
