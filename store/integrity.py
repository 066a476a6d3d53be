"""What a part looked like when it was committed, and whether it still does (docs/design.md, "Integrity"): the
quick check stats each recorded file and parses each array's metadata, the full one also hashes every file."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store import layout
from store.backends import Backend, join, open_backend
from store.layout import META, PartRecord


class DamagedItem(ValueError):
    """An item on disk that does not read back as it was committed; the message names its part folder."""


class DamagedMetadata(ValueError):
    """A store file that is not data but describes it (a manifest, a feature's zarr.json) does not read: damage
    (exit 4), named with its path in one line, not a bad argument."""


class DamagedPart(DamagedItem):
    """A part's array that does not read back (a chunk failing its checksum, a file gone): raised where the
    item is not known; a read of an item turns it into `damaged_item` naming the item."""

    def __init__(self, folder: Path, problem: str) -> None:
        super().__init__(f"{folder}: damaged part ({problem})")
        self.folder, self.problem = folder, problem


def damaged_item(folder: Path, item: str, problem: str) -> DamagedItem:
    return DamagedItem(f"{folder}: damaged item {item} ({problem}); the next `make extract` recomputes it")


@dataclass(frozen=True)
class ItemCheck:
    feature: str
    item: str
    path: Path  # the part folder holding the item's rows
    problem: str | None  # None: the item is as committed (as far as this check looks)

    @property
    def ok(self) -> bool:
        return self.problem is None


def _get(backend: Backend, key: str, where: str) -> bytes:
    try:
        return backend.get(key)
    except FileNotFoundError:
        raise DamagedItem(f"{where} is missing") from None
    except OSError as e:
        raise DamagedItem(f"{where} is unreadable ({type(e).__name__}: {e})") from None


def _read_json(backend: Backend, key: str, where: str) -> dict[str, Any]:
    return _json_object(_get(backend, key, where), where)


def _json_object(raw: bytes, where: str) -> dict[str, Any]:
    try:
        meta = json.loads(raw)
    except ValueError as e:  # invalid JSON or UTF-8
        raise DamagedItem(f"{where} is unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict):
        raise DamagedItem(f"{where} is not a JSON object")
    return meta


def zarr_meta_at(backend: Backend, key: str, where: str, node_type: str) -> dict[str, Any]:
    """The zarr.json at `key` of a backend, describing a Zarr v3 `node_type` ("group" or "array"); else
    DamagedItem naming `where`."""
    return _zarr_meta(_get(backend, key, where), where, node_type)


def _zarr_meta(raw: bytes, where: str, node_type: str) -> dict[str, Any]:
    meta = _json_object(raw, where)
    if meta.get("zarr_format") != 3 or meta.get("node_type") != node_type:
        raise DamagedItem(f"{where} does not describe {'an' if node_type == 'array' else 'a'} {node_type}")
    return meta


def _check_arrays(backend: Backend, part: str, arrays: dict[str, dict[str, Any]],
                  metas: dict[str, bytes | None] | None = None) -> None:
    for name, want in arrays.items():
        where = f"{name}/{META}"
        if metas is not None and name in metas:  # read by the caller (None: there was none)
            raw = metas[name]
            if raw is None:
                raise DamagedItem(f"{where} is missing")
        else:
            raw = _get(backend, join(part, where), where)
        meta = _zarr_meta(raw, where, "array")
        if metas is not None:
            metas[name] = raw
        if want.get("shape") is not None and meta.get("shape") != want["shape"]:
            raise DamagedItem(f"{where}: shape {meta.get('shape')}, committed as {want['shape']}")
        if want.get("dtype") is not None and str(meta.get("data_type")) != want["dtype"]:
            raise DamagedItem(f"{where}: dtype {meta.get('data_type')}, committed as {want['dtype']}")


def _check_files(backend: Backend, part: str, files: dict[str, list[Any]], full: bool,
                 found: dict[str, int | None] | None) -> None:
    if found is None:
        found = backend.sizes(part, files)  # in a bucket one listing, not a request per file
    for rel, (size, digest) in sorted(files.items()):
        key = join(part, rel)
        actual = found[rel]
        if actual is None:
            if not backend.children(part):
                raise DamagedItem("its part folder is missing")
            raise DamagedItem(f"{rel} is missing (committed with {size} bytes)")
        if actual != size:
            raise DamagedItem(f"{rel} has {actual} bytes, committed with {size}")
        if full and backend.sha256(key) != digest:
            raise DamagedItem(f"{rel}: content differs from what was committed (SHA-256 mismatch)")


def check_part(part_dir: Path, record: PartRecord, full: bool = False) -> str | None:
    """None when the part is as committed, else the problem (naming the file within the part)."""
    return check_part_at(open_backend(part_dir), "", record, full)


def check_part_at(backend: Backend, part: str, record: PartRecord, full: bool = False,
                  sizes: dict[str, int | None] | None = None, metas: dict[str, bytes | None] | None = None,
                  ) -> str | None:
    """`check_part` of the part at key `part` of a backend. `sizes`: its files' sizes (`Backend.sizes`) when
    the caller asked for many parts' at once; `metas`: array -> its zarr.json's bytes (None: missing) as the
    caller read them, the others read here and added (a reader opens the arrays from them instead of asking
    for them again)."""
    try:
        if not record.files:
            return "its part folder is missing" if not backend.children(part) else "its index record lists no files"
        _check_files(backend, part, record.files, full, sizes)
        _check_arrays(backend, part, record.arrays, metas)
        if META not in record.files:  # its size unrecorded: parse it at least (it holds the part's own record,
            _read_json(backend, join(part, META), META)  # every item's row: ~128 KB for 512 items, half a plan's JSON)
    except DamagedItem as e:
        return str(e)
    except (OSError, ValueError, TypeError) as e:  # anything odd in the record itself
        return f"{type(e).__name__}: {e}"
    return None


def _backend(store: Path | str | Backend) -> Backend:
    return store if isinstance(store, Backend) else open_backend(store)


def noted_parts(store: Path | Backend, feature: str) -> set[str]:
    """Parts a read found damaged (`<feature>/damaged/<part>`: a chunk failed its checksum)."""
    try:
        return set(_backend(store).children(join(feature, layout.NOTES)))
    except (OSError, RuntimeError):
        return set()


def part_problem(store: Path | Backend, feature: str, part: str, record: PartRecord, full: bool,
                 noted: set[str], sizes: dict[str, int | None] | None = None,
                 metas: dict[str, bytes | None] | None = None) -> str | None:
    """The part's check: in full when `full` or when a read noted it damaged (in `noted`: `noted_parts`), whose
    note is removed (from the store and `noted`) when it reads as committed again (rewritten by hand, a false
    alarm). `sizes`, `metas`: as `check_part_at` takes them."""
    backend = _backend(store)
    problem = check_part_at(backend, join(feature, layout.PARTS, part), record, full or part in noted, sizes, metas)
    if problem is None and part in noted:
        with contextlib.suppress(OSError, RuntimeError):
            backend.delete(join(feature, layout.NOTES, part))
        noted.discard(part)
    return problem


def part_problems(store: Path | Backend, feature: str, records: dict[str, PartRecord], full: bool = False,
                  ) -> dict[str, str]:
    """part -> its problem, for the parts in `records` that fail their check (`part_problem`); for a caller
    that holds the index itself (a run's writer; a `Store` checks its snapshot's parts once per handle)."""
    backend = _backend(store)
    noted = noted_parts(backend, feature)
    sizes, metas = read_ahead(backend, feature, records)
    return {p: q for p, r in records.items()
            if (q := part_problem(backend, feature, p, r, full, noted, sizes.get(p), metas.get(p))) is not None}


def read_ahead(backend: Backend, feature: str, records: dict[str, PartRecord],
               ) -> tuple[dict[str, dict[str, int | None]], dict[str, dict[str, bytes | None]]]:
    """What the quick checks of several parts read, asked for at once: part -> its files' sizes (one
    `Backend.sizes` of the feature's parts: in a bucket a listing per 1,000 objects, not one per part) and
    part -> its arrays' zarr.json's bytes (None: missing), read several at a time (`Backend.get_many`). For
    one part only its metadata (its sizes are one request either way); no metadata when one does not read
    (each part's check then reads its own and names what failed)."""
    sizes: dict[str, dict[str, int | None]] = {}
    if len(records) > 1:
        found = backend.sizes(join(feature, layout.PARTS), [f"{p}/{rel}" for p, r in records.items() for rel in r.files])
        sizes = {p: {rel: found[f"{p}/{rel}"] for rel in r.files} for p, r in records.items()}
    keys = {(p, name): join(feature, layout.PARTS, p, name, META) for p, r in records.items() for name in r.arrays}
    try:
        raw = backend.get_many(keys.values())
    except OSError:
        return sizes, {}
    metas: dict[str, dict[str, bytes | None]] = {}
    for (p, name), k in keys.items():
        metas.setdefault(p, {})[name] = raw[k]
    return sizes, metas
