"""Parts written by the workers that computed their rows (docs/design.md, "On object storage"): a model actor
uploads a finished part's data files (its arrays' chunks and metadata, hashed as the writer hashes them)
straight to the store under a unique name, and hands the driver only a `WrittenRows` per item: the part's
name, files and shapes, and the item's place in it. The driver's writer then writes the part's own
`zarr.json` (its record: the items with the attributes only the driver knows, the sequence number) and
publishes it in its batched commit. A part without its `zarr.json` is not whole: no reader takes it for data,
and the next writer to open the feature removes it (store/repair.py `open_index`), as it removes a
killed upload's. So a worker's part that was never published (its run was killed, its pair failed later) is
swept, as a local run's `.staging/` is."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import zarr
from zarr.storage import MemoryStore

from rows import FeatureRows
from store import layout, parts
from store.backends import Backend, join, open_backend

log = logging.getLogger(__name__)

_BACKENDS: dict[str, Backend] = {}  # one client per store and process: an actor writes many parts


@dataclass(frozen=True)
class WrittenPart:
    """A part whose data files a worker uploaded: what its record needs besides the driver's attributes."""

    name: str
    items: tuple[str, ...]  # in row order: every item the part holds (the driver publishes all or none)
    rows: tuple[tuple[int, int], ...]  # (first row, rows) of each item
    files: dict[str, list[Any]]  # data file -> [size, SHA-256], as a part's record keeps them
    arrays: dict[str, dict[str, Any]]  # array -> shape and dtype, as a part's record keeps them
    spans: dict[str, dict[str, list[int]]]  # the spans of arrays that are not row-aligned, as `parts.concat`
    nbytes: int = 0  # the arrays' bytes as uploaded: what did not travel to the driver


@dataclass(frozen=True)
class WrittenRows:
    """One item's rows, as stored by a worker in `part`: what the driver holds in place of a `FeatureRows`.
    `attrs` are the rows' own attributes (the extractor's), as `FeatureRows.attrs`."""

    part: WrittenPart
    item: str
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def n_rows(self) -> int:
        return self.part.rows[self.part.items.index(self.item)][1]

    def with_attrs(self, attrs: dict[str, Any]) -> WrittenRows:
        return replace(self, attrs=attrs)


def backend_of(url: str) -> Backend:
    if url not in _BACKENDS:
        _BACKENDS[url] = open_backend(url)
    return _BACKENDS[url]


def write(url: str, feature: str, members: list[tuple[str, FeatureRows]]) -> dict[str, WrittenRows]:
    """Upload the parts of `members` (one per array signature) to the store at `url` under unique names, each
    part's data files only (its own zarr.json is the driver's to write, with the record); item -> its stand-in.
    A part whose upload fails is removed, and the error raised."""
    groups: dict[tuple, list[tuple[str, FeatureRows, dict[str, Any]]]] = {}
    for item, rows in members:
        groups.setdefault(parts.signature(rows), []).append((item, rows, {}))
    out: dict[str, WrittenRows] = {}
    backend = backend_of(url)
    for group in groups.values():
        part = _write_one(backend, feature, group)
        for item, rows, _ in group:
            out[item] = WrittenRows(part, item, dict(rows.attrs))
    return out


def _write_one(backend: Backend, feature: str, group: list[tuple[str, FeatureRows, dict[str, Any]]]) -> WrittenPart:
    # named by no sequence number: the driver numbers it when it publishes it
    name = f"w{uuid.uuid4().hex}"
    part, key = parts.MemoryPart(group), join(feature, layout.PARTS, name)
    try:  # never its own zarr.json: the part is not whole until the driver writes it
        backend.put_many((join(key, rel), data) for rel, data in part.write())
    except BaseException:
        backend.delete_prefix(key)
        raise
    staged = part.staged()  # hashed once, here, as the driver's are
    _, shapes = parts.record_staged(staged)
    entries = staged.entries
    return WrittenPart(name, tuple(e[0] for e in entries), tuple((int(e[1]), int(e[2])) for e in entries),
                       staged.own, shapes, staged.spans, int(sum(a.nbytes for a in staged.arrays.values())))


def part_meta(feature: str, seq: int, part: WrittenPart, rows: list[list[Any]]) -> bytes:
    """The bytes of a worker's part's own zarr.json with its record (`rows`: its items' `item_row`s, in the
    part's row order): made by zarr itself, as the writer's own parts' are, so both are the same format."""
    files: dict[str, Any] = {}
    g = zarr.open_group(MemoryStore(files), mode="w")
    g.attrs.put({layout.PART_ATTR: {"feature": feature, "seq": seq, "items": rows, "spans": part.spans,
                                    "files": part.files}})
    return bytes(files[layout.META].to_bytes())
