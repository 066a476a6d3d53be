"""Parts: immutable Zarr v3 groups holding the rows of many items of one feature, concatenated along N, that
plain zarr and xarray read (docs/design.md, "Store layout"); `siqfeat_part` holds a part's own index record."""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import zarr
from zarr.codecs import ZstdCodec
from zarr.storage import MemoryStore

from store import layout
from store.backends import Backend, join, open_backend
from store.layout import META

_CHUNK_BYTES = 1 << 20  # inner chunks of ~1 MiB along N; one shard holds the whole array
# zarr's default compressor (zstd, level 0) with zstd's own content checksum (xxHash64 of each inner chunk,
# checked by every decompression): a changed byte in a chunk fails the read instead of decoding to
# plausible numbers. Parts written before it have no checksum and read as before. The shard index has
# zarr's default crc32c.
CHUNK_CODEC = ZstdCodec(level=0, checksum=True)


def signature(rows: Any) -> tuple:
    """Items whose arrays agree in names, dtypes and trailing shapes share a part."""
    arrays = {layout.FEATURES: rows.features, layout.INTERVALS: rows.intervals, **rows.extras}
    return tuple(sorted((k, _kind(np.asarray(v)), np.asarray(v).shape[1:]) for k, v in arrays.items()))


def _kind(a: np.ndarray) -> str:
    return "str" if a.dtype.kind in "UST" else a.dtype.str


def _chunk_rows(shape: tuple[int, ...], itemsize: int) -> int:
    row_bytes = max(1, int(np.prod(shape[1:], dtype=np.int64)) * itemsize)
    return max(1, min(max(shape[0], 1), _CHUNK_BYTES // row_bytes))


def write_array(group: zarr.Group, name: str, data: np.ndarray, dim0: str = "row") -> None:
    """`dim0`: the first axis's dimension name ("row" for row-aligned arrays, which xarray lines up)."""
    data = np.asarray(data)
    if data.dtype.kind == "O":
        raise ValueError(f"array {name!r}: object arrays cannot be stored; got {data.dtype}")
    text = data.dtype.kind in "UST"  # T: numpy's StringDType, what zarr reads strings back as
    if text and data.dtype.kind != "T":
        data = data.astype(str)
    dims = [dim0, *(f"{name}_dim{k}" for k in range(1, data.ndim))]
    rows = _chunk_rows(data.shape, 64 if text else data.dtype.itemsize)
    chunks = (rows, *data.shape[1:])
    shards = (-(-max(data.shape[0], 1) // rows) * rows, *data.shape[1:]) if data.shape[0] > rows else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr warns that string dtypes are not in the v3 core spec yet
        arr = group.create_array(name, shape=data.shape, dtype=str if text else data.dtype, chunks=chunks,
                                 shards=shards, dimension_names=dims, compressors=CHUNK_CODEC)
        if data.size:
            arr[...] = data


def concat(items: list[tuple[str, Any, dict[str, Any]]]) -> tuple[dict[str, np.ndarray], list[list[Any]],
                                                                  dict[str, dict[str, list[int]]]]:
    """Arrays of a batch of (item, rows, attrs) of one signature, their index entries and the spans of
    arrays that are not row-aligned."""
    names = [layout.FEATURES, layout.INTERVALS, *items[0][1].extras]
    pieces: dict[str, list[np.ndarray]] = {n: [] for n in names}
    entries, spans, offsets = [], {}, dict.fromkeys(names, 0)
    row0 = 0
    for item, rows, attrs in items:
        n = len(rows.features)
        arrays = {layout.FEATURES: rows.features, layout.INTERVALS: np.asarray(rows.intervals, np.float64),
                  **rows.extras}
        own = {}
        for name in names:
            a = np.asarray(arrays[name])
            a = a.reshape(1) if a.ndim == 0 else a
            if name not in (layout.FEATURES, layout.INTERVALS) and (a.shape[0] != n or offsets[name] != row0):
                own[name] = [offsets[name], int(a.shape[0])]
            pieces[name].append(a)
            offsets[name] += a.shape[0]
        if own:
            spans[item] = own
        entries.append(layout.item_row(item, row0, n, attrs))
        row0 += n
    out = {}
    for name, parts in pieces.items():
        if any(p.dtype.kind in "UST" for p in parts) and len({p.dtype.kind for p in parts}) > 1:
            parts = [p.astype(np.dtypes.StringDType()) for p in parts]  # fixed-width and variable strings
        out[name] = np.concatenate(parts) if len(parts) > 1 else parts[0]
    return out, entries, spans


class Staged(NamedTuple):
    """A part staged in memory (`MemoryPart`): its group (attributes still to be put), arrays, the items'
    row entries, their spans, its data files hashed (`own`, each [size, SHA-256]) and every file's
    bytes (`files`: the part's own zarr.json too, as it is when read)."""

    group: zarr.Group
    arrays: dict[str, np.ndarray]
    entries: list[list[Any]]
    spans: dict[str, dict[str, list[int]]]
    own: dict[str, list[Any]]
    files: dict[str, Any]  # relative key -> zarr's Buffer of it

    def bytes_of(self, rel: str) -> bytes:
        return self.files[rel].to_bytes()


class MemoryPart:
    """A part staged in memory (zarr's MemoryStore) instead of a folder: the same files, byte for byte (zarr
    encodes alike whatever it writes to; tests/store/test_worker_parts.py compares them), for a part uploaded to
    object storage, where a local folder was only a place to hash it from and cost a file write, a read back
    and a removal per file. `write()` writes its arrays one by one and hands over each array's files as soon
    as they are written (an uploader sends them while the next array is encoded); `staged()` then."""

    def __init__(self, members: list[tuple[str, Any, dict[str, Any]]]) -> None:
        self.arrays, self.entries, self.spans = concat(members)
        self.files: dict[str, Any] = {}  # relative key -> zarr's Buffer of it
        self.group = zarr.open_group(MemoryStore(self.files), mode="w")

    def write(self) -> Iterator[tuple[str, bytes]]:
        """Write the arrays; yields (relative key, bytes) of each data file once it is written (never the
        part's own zarr.json: its attributes are still to come)."""
        n_rows = len(self.arrays[layout.FEATURES])
        for name, data in self.arrays.items():
            before = set(self.files)
            write_array(self.group, name, data, "row" if len(data) == n_rows else f"{name}_dim0")
            for rel in sorted(set(self.files) - before - {META}):
                yield rel, self.files[rel].to_bytes()

    def staged(self) -> Staged:
        """The part as written (`write()` run through), its data files hashed."""
        own = {rel: [len(b), hashlib.sha256(b).hexdigest()]
               for rel in sorted(self.files) if rel != META for b in [self.files[rel].to_bytes()]}
        return Staged(self.group, self.arrays, self.entries, self.spans, own, self.files)


def _data_files_at(backend: Backend, part: str) -> dict[str, list[Any]]:
    at = len(part) + 1
    return {i.key[at:]: [i.size, backend.sha256(i.key)] for i in backend.list(part) if i.key[at:] != META}


def _record_files_at(backend: Backend, part: str, own: dict[str, Any],
                     ) -> tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]:
    return _record_files(lambda rel: backend.get(join(part, rel)), own)


def record_staged(staged: Staged) -> tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]:
    """`record_files` of a part staged in memory, its attributes put."""
    return _record_files(staged.bytes_of, staged.own)


def _record_files(get: Callable[[str], bytes], own: dict[str, Any],
                  ) -> tuple[dict[str, list[Any]], dict[str, dict[str, Any]]]:
    raw = get(META)
    arrays = {}
    for rel in own:
        name, _, last = rel.rpartition("/")
        if last == META and name and "/" not in name:
            meta = json.loads(get(rel))
            arrays[name] = {"shape": meta.get("shape"), "dtype": str(meta.get("data_type"))}
    return {**{rel: list(v) for rel, v in own.items()}, META: [len(raw), hashlib.sha256(raw).hexdigest()]}, arrays


def _record_at(backend: Backend, part: str) -> layout.PartLine:
    meta = json.loads(backend.get(join(part, META)))["attributes"][layout.PART_ATTR]
    own = meta.get("files")
    # written before parts kept their files: hashed as they are now
    files, arrays = _record_files_at(backend, part, own if isinstance(own, dict) else _data_files_at(backend, part))
    return layout.PartLine(part.rsplit("/", 1)[-1], int(meta["seq"]), meta["items"], files, arrays,
                           meta.get("spans") or {})


def part_names(store: Path | Backend, feature: str) -> list[str]:
    """The part folders of a feature in the store, indexed or not."""
    backend = store if isinstance(store, Backend) else open_backend(store)
    return backend.children(join(feature, layout.PARTS))


def records_on_disk(store: Path | Backend, feature: str, names: list[str] | None = None,
                    ) -> tuple[list[layout.PartLine], dict[str, str]]:
    """The records of the feature's parts (`names`, else all) read from their own metadata, in commit order
    (as a log holds them: later parts supersede), and part -> why for those whose metadata does not read."""
    backend = store if isinstance(store, Backend) else open_backend(store)
    found, unreadable = [], {}
    for name in part_names(store, feature) if names is None else names:
        try:
            found.append(_record_at(backend, join(feature, layout.PARTS, name)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            unreadable[name] = f"{type(e).__name__}: {e}"
    found.sort(key=lambda r: (r.seq, r.part))
    return found, unreadable
