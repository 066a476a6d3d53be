"""The store's on-disk format, in one place (docs/design.md, "Store layout"): every name in its tree, the
schema check at open, and the index log's records with their encoding. Only `store/` code imports this."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rows.identity import canonical_json as canonical_json
from rows.identity import sha256_of as sha256_of

SCHEMA = "siqfeat.store/2"  # packed parts + an index per feature
SCHEMA_V1 = "siqfeat.store/1"  # one folder per (feature, item): only store/migrate.py reads it
META = "zarr.json"  # a zarr group's or array's metadata (the root, a feature, a part, an array)
STAGING = ".staging"
LOCK = ".lock"
MANIFESTS = "_manifests"
RUNS = "_runs"
VIEWS = "_views"
INDEX = "index.log"
PARTS = "parts"
RETIRED = "retired"
NOTES = "damaged"
PART_ATTR = "siqfeat_part"  # a part group's attribute holding its own record (feature, seq, items, files, spans)
RESERVED = (MANIFESTS, RUNS, VIEWS, PARTS, INDEX)  # names that are not features or items

FEATURES = "features"
INTERVALS = "intervals"


def index_path(store: Path, feature: str) -> Path:
    return store / feature / INDEX


def part_dir(store: Path, feature: str, part: str) -> Path:
    return store / feature / PARTS / part


def parts_dir(store: Path, feature: str) -> Path:
    return store / feature / PARTS


def retired_dir(store: Path, feature: str) -> Path:
    return store / feature / RETIRED


def notes_dir(store: Path, feature: str) -> Path:
    return store / feature / NOTES


def manifest_dir(root: Path) -> Path:
    return root / MANIFESTS


def runs_dir(root: Path) -> Path:
    return root / RUNS


def views_dir(root: Path) -> Path:
    return root / VIEWS


def check_schema(root: Path, attrs: dict[str, Any]) -> None:
    """The one check at open, for readers and the writer: a version-2 store, or one without a schema yet
    (a new store, which the writer claims). A version-1 store gets one line naming `migrate`."""
    schema = attrs.get("schema", SCHEMA)
    if schema == SCHEMA_V1:
        raise ValueError(f"{root}: a version-1 store (one folder per item); this code reads and writes version 2. "
                         f"Convert it once with `python -m pipeline migrate {root}`")
    if schema != SCHEMA:
        raise ValueError(f"{root}: store schema {schema!r}, this code knows {SCHEMA!r}")


# ---- identity: what the index's fingerprints and spec hashes are made of (canonical_json and sha256_of from
# rows/identity.py, re-exported here for the engine's callers) ----


def spec_hash(extractor: str, version: str, config: dict[str, Any], weights: str) -> str:
    """What makes two runs of one feature produce the same rows from the same input."""
    return sha256_of({"extractor": extractor, "version": version, "config": config, "weights": weights})[:16]


def fingerprint(spec: str, source: dict[str, Any]) -> str:
    """Declared inputs only: the feature spec and the identity of the files read (never pickled code)."""
    return sha256_of({"spec": spec, "source": source})[:32]


# ---- index records ----

_SUM = 16  # hex digits of the line checksum


class IndexDamaged(ValueError):
    """The index log has a line that fails its checksum (not a torn tail): rebuild it from the parts."""


class IndexOutOfOrder(IndexDamaged):
    """The index log's part lines are in an order no crash makes (store/index.py `LogOrder`): damage `verify`
    reports (exit 4) as well as repairs."""


class Entry(NamedTuple):
    """One item's current rows. `attrs_json`: the per-item attributes, parsed on demand (a million items load fast)."""

    item: str
    part: str
    row0: int  # first row in the part's row-aligned arrays
    n_rows: int
    fingerprint: str
    spec_hash: str
    filtered: bool
    duration_s: float | None
    attrs_json: str
    seq: int
    spans: dict[str, list[int]] | None = None  # arrays not row-aligned: name -> [start, length] along axis 0

    def attrs(self) -> dict[str, Any]:
        return json.loads(self.attrs_json)


@dataclass(frozen=True)
class PartRecord:
    """What a part held when it was committed: its files (size, SHA-256) and arrays (shape, dtype)."""

    part: str
    seq: int
    files: dict[str, list[Any]]
    arrays: dict[str, dict[str, Any]]


class Header(NamedTuple):
    """A log's first line: its generation (a new one per compaction or rebuild)."""

    generation: str


def new_header() -> Header:
    return Header(uuid.uuid4().hex)


def item_row(item: str, row0: int, n_rows: int, attrs: dict[str, Any]) -> list[Any]:
    """An item's row in a part line (and in the part's own metadata)."""
    duration = attrs.get("duration_s")
    return [item, row0, n_rows, str(attrs.get("fingerprint", "")), str(attrs.get("spec_hash", "")),
            bool(attrs.get("filtered", False)), None if duration is None else float(duration),
            json.dumps(attrs, separators=(",", ":"), sort_keys=True, default=str)]


def row_of(e: Entry) -> list[Any]:
    """An entry's row as its part line holds it (`item_row` of the same attributes, without parsing them)."""
    return [e.item, e.row0, e.n_rows, e.fingerprint, e.spec_hash, e.filtered, e.duration_s, e.attrs_json]


class RowColumns(NamedTuple):
    """A part line's rows field by field, each a tuple in row order (`PartLine.columns`): for a reader that
    keeps an index in columns (store/index.py), not an `Entry` per item."""

    items: tuple[str, ...]
    row0: tuple[int, ...]
    n_rows: tuple[int, ...]
    fingerprint: tuple[str, ...]
    spec_hash: tuple[str, ...]
    filtered: tuple[bool, ...]
    duration_s: tuple[float | None, ...]
    attrs_json: tuple[str, ...]


@dataclass(frozen=True)
class PartLine:
    """One committed part as its index line (and its own metadata) holds it. `rows`: `item_row`s, read
    through `columns()` or `fingerprints()`, never by position elsewhere."""

    part: str
    seq: int
    rows: list[list[Any]]
    files: dict[str, list[Any]] = field(default_factory=dict)
    arrays: dict[str, dict[str, Any]] = field(default_factory=dict)
    spans: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    # the seq of the part line before this one in its log (0: right after the header), set when the line is
    # written (store/index.py `chained`): a line deleted, repeated or appended again breaks the chain. None in a
    # part's own metadata and in logs written before it existed (their lines are checked for rising seqs only)
    after: int | None = None

    def columns(self) -> RowColumns:
        """The rows as columns (`item_row`'s fields, one tuple each)."""
        if not self.rows:
            return RowColumns((), (), (), (), (), (), (), ())
        return RowColumns(*zip(*self.rows, strict=True))

    def fingerprints(self) -> list[tuple[str, str]]:
        """(item, fingerprint) of each row: all that planning keeps."""
        return [(row[0], row[3]) for row in self.rows]

    def to_json(self) -> dict[str, Any]:
        rec = {"kind": "part", "part": self.part, "seq": self.seq, "items": self.rows, "files": self.files,
               "arrays": self.arrays}
        if self.spans:
            rec["spans"] = self.spans
        if self.after is not None:
            rec["after"] = self.after
        return rec

    @classmethod
    def from_json(cls, rec: dict[str, Any]) -> PartLine:
        after = rec.get("after")
        return cls(str(rec["part"]), int(rec["seq"]), rec["items"], rec.get("files") or {}, rec.get("arrays") or {},
                   rec.get("spans") or {}, None if after is None else int(after))


Record = Header | PartLine


def encode(record: Record) -> bytes:
    value = {"kind": "header", "generation": record.generation} if isinstance(record, Header) else record.to_json()
    body = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return f"{hashlib.sha256(body.encode()).hexdigest()[:_SUM]} {body}\n".encode()


def _from_json(rec: dict[str, Any]) -> Record:
    kind = rec.get("kind")
    if kind == "header":
        return Header(str(rec.get("generation", "")))
    if kind == "part":
        return PartLine.from_json(rec)
    raise ValueError(f"unknown index record kind {kind!r}")


def decode(line: bytes | bytearray) -> Record | None:
    """The record of one line (without its newline); None when it fails its checksum or is not JSON."""
    try:
        text = line.decode()
        digest, body = text[:_SUM], text[_SUM + 1:]
        if len(text) <= _SUM + 1 or text[_SUM] != " " or hashlib.sha256(body.encode()).hexdigest()[:_SUM] != digest:
            return None
        rec = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return None
    return _from_json(rec) if isinstance(rec, dict) else None


def fold(data: bytes | bytearray, where: Path, visit: Callable[[Record], None]) -> tuple[int, bool]:
    """Hand each committed record of a log's bytes to `visit`, in order; returns (the good prefix's length,
    whether the log ends in a torn line). A torn (unterminated) last line is no record; a complete line
    that fails its checksum, wherever it is, raises IndexDamaged. The lines are decoded one at a time,
    never all held at once: a reader that keeps only part of each record (planning) keeps only that."""
    pos, end = 0, len(data)
    k = 0
    while pos < end:
        k += 1
        stop = data.find(b"\n", pos)
        rec = decode(data[pos:end if stop < 0 else stop])
        if rec is None:
            if stop < 0:  # no newline: the tail of a killed append
                return pos, True
            raise IndexDamaged(f"{where}: line {k} fails its checksum (the index is damaged; "
                               "`python -m pipeline verify` rebuilds it from the parts)")
        if stop < 0:  # a complete record without its newline: the append was cut before the newline
            return pos, True
        visit(rec)
        pos = stop + 1
    return pos, False
