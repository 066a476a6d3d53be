"""`ObjectPath`: an object in a bucket as the manifest readers and the decoders use a file (pathlib's `/`, name,
suffix, exists, is_file, glob, iterdir, read_bytes, open, stat), so `--raw s3://bucket/prefix` runs the same
manifest code as a folder does.

The raw root is listed once (`raw_root`): every existence test, glob and size under it is answered from that
listing, with no request per file; it also holds each object's ETag, the object's identity in the fingerprint
(media/kinds/base.py). An ObjectPath sent to a worker carries its own size and ETag, not the listing; there, the
object's bytes are read through the node's cache (objectio/cache.py).

Errors: a raw root that cannot be listed (no bucket, no credentials, denied, unreachable) is `RawUnavailable`,
one line naming the URL and what to set; an object that is not there is FileNotFoundError naming its URL.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import os
import stat as stat_mod
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SCHEMES = ("s3://", "s3a://", "gs://", "az://", "abfs://", "abfss://")


def is_url(location: object) -> bool:
    """Whether `location` names object storage rather than a local path."""
    return isinstance(location, str) and location.startswith(SCHEMES)


class RawUnavailable(ValueError):
    """The raw root cannot be read at all (no bucket, no credentials, denied, unreachable): exit 2, before work."""


@dataclass(frozen=True)
class ObjectStat:
    """What a caller of Path.stat() reads: a regular file (or a "folder": a prefix with objects under it).
    There is no mtime: an object's identity is its size and ETag."""

    st_size: int
    st_mode: int
    etag: str


@dataclass
class _Listing:
    """Every object under a raw prefix: key -> (size, ETag); and every "folder" (a prefix with objects under it)."""

    files: dict[str, tuple[int, str]]
    dirs: set[str]
    # where a decoder's copies of these objects go (objectio/cache.py `spec`: a run's own folder or a kept one,
    # and their bound); None: as the environment says
    cache: tuple[str | None, str | None, int | None] | None = None


# The environment variables the object-storage clients read (objectio/client.py `options`, and obstore itself for
# credentials): endpoint, region, credentials, profile.
SETTINGS_PREFIXES = ("AWS_", "GOOGLE_", "AZURE_")


def settings_key() -> str:
    """A fingerprint of the object-storage settings this process has now (every AWS_*, GOOGLE_* and AZURE_*
    variable): a client, or a Ray whose workers were started, under other settings is not used under these (a
    notebook that points AWS_ENDPOINT_URL elsewhere, or refreshes AWS_SESSION_TOKEN, between two runs). A hash:
    the values, secrets among them, are kept nowhere else."""
    import hashlib

    found = sorted((k, v) for k, v in os.environ.items() if k.startswith(SETTINGS_PREFIXES))
    return hashlib.sha256(repr(found).encode()).hexdigest()


_CLIENTS: dict[tuple[str, str], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def client(bucket_url: str) -> Any:
    """One obstore client per bucket per process (it holds the connection pool), made again when the settings
    (`settings_key`) changed since it was made."""
    key = (bucket_url, settings_key())
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            from objectio.client import from_url, options

            for old in [k for k in _CLIENTS if k[0] == bucket_url]:  # made under other settings: never used again
                del _CLIENTS[old]
            _CLIENTS[key] = from_url(bucket_url, **options(bucket_url))
        return _CLIENTS[key]


def _split(url: str) -> tuple[str, str]:
    scheme, rest = url.split("://", 1)
    bucket, _, key = rest.partition("/")
    return f"{scheme}://{bucket}", key.strip("/")


class ObjectPath:
    """An object (or a prefix) in a bucket. Built by `raw_root` (listed) or by `/` from one; compared, hashed and
    ordered by its URL. Never a str path: `Path(obj)` is a TypeError, not a silently folded `s3:/bucket`."""

    __slots__ = ("bucket", "key", "_listing", "_info", "_cache")

    def __init__(self, bucket: str, key: str = "", listing: _Listing | None = None,
                 info: tuple[int, str] | None = None, cache: tuple[str | None, str | None, int | None] | None = None,
                 ) -> None:
        self.bucket, self.key = bucket.rstrip("/"), key.strip("/")
        self._listing, self._info, self._cache = listing, info, cache

    @property
    def cache(self) -> tuple[str | None, str | None, int | None] | None:
        """Where the decoders' copies of this object go (its listing's, as `raw_root` was given it)."""
        return self._listing.cache if self._listing is not None else self._cache

    def with_cache(self, cache: tuple[str | None, str | None, int | None] | None) -> ObjectPath:
        """This path, and every one made from it, with the decoders' copies going where `cache` says (a root
        listed before the run that reads it was set up: the CLI lists it first, to fail before any work)."""
        listing = None if self._listing is None else dataclasses.replace(self._listing, cache=cache)
        return ObjectPath(self.bucket, self.key, listing, self._info, cache)

    # ---- pure path ----
    def __str__(self) -> str:
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # a worker gets the object's URL and its size and ETag as the driver listed them, not the whole listing,
        # and where the run wants its copies made
        return ObjectPath, (self.bucket, self.key, None, self._found(), self.cache)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: ObjectPath) -> bool:
        return str(self) < str(other)

    def __truediv__(self, name: str) -> ObjectPath:
        key = f"{self.key}/{str(name).strip('/')}" if self.key else str(name).strip("/")
        return ObjectPath(self.bucket, key, self._listing)

    def joinpath(self, *names: str) -> ObjectPath:
        out = self
        for n in names:
            out = out / n
        return out

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def suffix(self) -> str:
        name = self.name
        i = name.rfind(".")
        return name[i:] if 0 < i < len(name) - 1 else ""

    @property
    def stem(self) -> str:
        return self.name[: len(self.name) - len(self.suffix)] if self.suffix else self.name

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.bucket, self.key.rpartition("/")[0], self._listing)

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def with_suffix(self, suffix: str) -> ObjectPath:
        return self.parent / (self.stem + suffix)

    def relative_to(self, other: ObjectPath) -> str:
        if not self.is_relative_to(other):
            raise ValueError(f"{self} is not under {other}")
        return self.key[len(other.key):].lstrip("/") if other.key else self.key

    def is_relative_to(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and other.bucket == self.bucket and (
            not other.key or self.key == other.key or self.key.startswith(other.key + "/"))

    def resolve(self) -> ObjectPath:
        return self

    absolute = resolve

    # ---- what is there (the listing; a HEAD where there is none) ----
    def _found(self) -> tuple[int, str] | None:
        """(size, ETag) of the object, None if there is none."""
        if self._info is not None:
            return self._info
        if self._listing is not None:
            return self._listing.files.get(self.key)
        from objectio.client import obstore, oe

        try:
            meta = obstore.head(client(self.bucket), self.key)
        except (oe.NotFoundError, FileNotFoundError):
            return None
        except Exception as e:
            raise _failure(e, self) from None
        self._info = (int(meta["size"]), str(meta.get("e_tag") or meta.get("version") or ""))
        return self._info

    def is_file(self) -> bool:
        return bool(self.key) and self._found() is not None

    def is_dir(self) -> bool:
        if self._listing is not None:
            return self.key in self._listing.dirs
        return not self.key  # a bucket's root; with no listing a prefix is never taken for a folder

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def is_symlink(self) -> bool:
        return False

    def stat(self) -> ObjectStat:
        found = self._found()
        if found is not None:
            return ObjectStat(found[0], stat_mod.S_IFREG | 0o444, found[1])
        if self.is_dir():
            return ObjectStat(0, stat_mod.S_IFDIR | 0o555, "")
        raise FileNotFoundError(f"{self}: no such object")

    def _entries(self) -> Iterator[str]:
        """Every key and folder under this prefix, relative to it."""
        if self._listing is None:
            raise NotADirectoryError(f"{self}: not a listed raw folder")
        top = f"{self.key}/" if self.key else ""
        for k in (*self._listing.files, *self._listing.dirs):
            if k.startswith(top) and k != self.key:
                yield k[len(top):]

    def iterdir(self) -> Iterator[ObjectPath]:
        if not self.is_dir():
            raise NotADirectoryError(f"{self}: not a folder")
        return iter(sorted(self / r for r in self._entries() if "/" not in r))

    def glob(self, pattern: str) -> Iterator[ObjectPath]:
        """pathlib's glob for patterns of `*`, `?` and `[...]` per part (case-sensitive, as on Linux); `**` as
        rglob's."""
        if pattern.startswith("**/"):
            return self.rglob(pattern[3:])
        parts = pattern.split("/")
        return iter(sorted(self / r for r in self._entries() if len(r.split("/")) == len(parts)
                           and all(fnmatch.fnmatchcase(a, b) for a, b in zip(r.split("/"), parts, strict=True))))

    def rglob(self, pattern: str) -> Iterator[ObjectPath]:
        return iter(sorted(self / r for r in self._entries() if fnmatch.fnmatchcase(r.rsplit("/", 1)[-1], pattern)))

    # ---- reading ----
    def read_bytes(self) -> bytes:
        from objectio.client import obstore

        try:
            return bytes(obstore.get(client(self.bucket), self.key).bytes())
        except Exception as e:
            raise _failure(e, self) from None

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def open(self, mode: str = "r", encoding: str | None = None, errors: str | None = None,
             newline: str | None = None) -> Any:
        if set(mode) - {"r", "b", "t"}:
            raise PermissionError(f"{self}: raw data is read only (open mode {mode!r})")
        data = io.BytesIO(self.read_bytes())
        return data if "b" in mode else io.TextIOWrapper(data, encoding=encoding or "utf-8", errors=errors,
                                                          newline=newline)

    def identity(self) -> dict[str, Any]:
        """What the fingerprint knows the object by: its name, size and ETag (a new upload is a new ETag, even
        with the same bytes in a multipart upload: then it is recomputed once; docs/design.md, "Raw data in a
        bucket")."""
        found = self._found()
        return {"name": self.name} if found is None else {"name": self.name, "size": found[0], "etag": found[1]}


def _failure(e: BaseException, path: ObjectPath) -> Exception:
    from objectio.client import describe, unsigned

    found = describe(e, str(path), path.bucket, unsigned(path.bucket), use="read")
    if found is None:
        return e if isinstance(e, Exception) else RuntimeError(str(e))
    what, line = found
    return FileNotFoundError(line) if what == "missing" else RawUnavailable(line)


def raw_root(url: str, cache: tuple[str | None, str | None, int | None] | None = None) -> ObjectPath:
    """The raw root at `url`, listed once (one LIST of the prefix, paged): RawUnavailable naming the URL when the
    storage cannot be read, FileNotFoundError when nothing is under the prefix. `cache`: where the decoders'
    copies of its objects go, on whatever node decodes them (objectio/cache.py `spec`)."""
    from objectio.client import obstore, oe

    bucket, prefix = _split(url.rstrip("/"))
    try:
        store = client(bucket)
    except (oe.BaseError, ValueError) as e:
        from objectio.client import CREDENTIALS, ENDPOINT, first_line

        raise RawUnavailable(f"{url}: cannot open this object store ({first_line(e)}); {CREDENTIALS}, "
                             f"{ENDPOINT}") from None
    files: dict[str, tuple[int, str]] = {}
    try:
        for chunk in obstore.list(store, f"{prefix}/" if prefix else None):
            for m in chunk:
                files[m["path"]] = (int(m["size"]), str(m.get("e_tag") or m.get("version") or ""))
    except Exception as e:
        raise _failure(e, ObjectPath(bucket, prefix)) from None
    if not files:
        raise FileNotFoundError(f"{url}: raw data root does not exist (no object under this prefix)")
    dirs = {""}
    for k in files:
        parts = k.split("/")[:-1]
        dirs.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return ObjectPath(bucket, prefix, _Listing(files, dirs, cache))


def as_path(location: Any) -> Any:
    """A local path as a Path, an object as it is (an ObjectPath, or an object URL: not listed): where code took
    `Path(x)` of what a caller passed, so that a bucket's object is never folded into `s3:/bucket/...`."""
    if isinstance(location, ObjectPath):
        return location
    if is_url(location):
        bucket, key = _split(location)
        return ObjectPath(bucket, key)
    from pathlib import Path

    return Path(location)
