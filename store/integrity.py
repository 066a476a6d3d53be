"""What an item looked like when it was committed, and whether it still does.

At commit the writer records, in the item's own attributes (`integrity`), every file of the item
folder below its `zarr.json` (array metadata and chunk files) with its size and SHA-256, and each
array's shape and dtype. Chunks equal to the fill value are never written by zarr, so the file list,
not the chunk grid, says which chunk files must exist.

Two depths of check:
- quick (every plan, `Store.items()`, `Store.read()`): the item's metadata parses and says complete,
  each array's metadata parses and has the recorded shape and dtype, each recorded file exists with its
  recorded size. Catches truncated or unreadable metadata and missing or truncated chunks; costs one
  `stat` per file.
- full (`python -m pipeline verify`, `extract --verify`): also the SHA-256 of every recorded file, so a
  flipped byte anywhere is found.
Items committed before the record existed have no `integrity` attribute: they get the metadata checks
and, in a full check, every array is decoded; their chunk bytes cannot be compared with anything.
Which items those are is written down once: the first writer that opens a store sets the root attribute
`integrity_records` = {version, legacy: {feature: [items it found without a record]}}. In a store with that
attribute every other item must carry its record: one without is damaged (deleting the record must not
hide changed bytes). A store without it (never opened by such a writer) keeps the old rule.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store import layout

RECORD = "integrity"  # the item attribute holding the record
STORE_RECORDS = "integrity_records"  # root attribute: from then on every committed item carries a record
RECORD_VERSION = 1
META = "zarr.json"


class DamagedItem(ValueError):
    """An item on disk that does not read back as it was committed; the message names its folder."""


@dataclass(frozen=True)
class ItemCheck:
    feature: str
    item: str
    path: Path
    problem: str | None  # None: the item is as committed (as far as this check looks)
    attrs: dict[str, Any] | None = None  # the item's attributes when they could be read
    recorded: bool = True  # False: committed before integrity records existed

    @property
    def ok(self) -> bool:
        return self.problem is None


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(item_dir: Path) -> list[str]:
    """Relative paths of the item's files below its own metadata, sorted."""
    out = []
    for folder, _, names in os.walk(item_dir):
        for name in names:
            rel = os.path.relpath(os.path.join(folder, name), item_dir)
            if rel != META:
                out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def attrs_digest(attrs: dict[str, Any]) -> str:
    """Hash of an item's attributes, leaving out the record itself and the `complete` flag written after it."""
    return layout.sha256_of({k: v for k, v in attrs.items() if k not in (RECORD, "complete")})


def make_record(item_dir: Path) -> dict[str, Any]:
    """The record the writer stores with a staged item, once its arrays and attributes are written (the
    attributes hashed as they read back from disk, so later checks compare like with like)."""
    attrs = _read_json(item_dir / META).get("attributes", {})
    files = _files(item_dir)
    arrays = {}
    for rel in files:
        name, _, last = rel.rpartition("/")
        if last == META and "/" not in name:
            meta = _read_json(item_dir / rel, rel)
            arrays[name] = {"shape": meta.get("shape"), "dtype": str(meta.get("data_type"))}
    return {"version": RECORD_VERSION, "arrays": arrays, "attrs_sha256": attrs_digest(attrs),
            "files": {rel: [(item_dir / rel).stat().st_size, _sha256(item_dir / rel)] for rel in files}}


def _read_json(path: Path, where: str = META) -> dict[str, Any]:
    """`where`: the file's path inside the item, for the message (an array's metadata is `<array>/zarr.json`)."""
    try:
        meta = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise DamagedItem(f"{where} is missing") from None
    except (OSError, ValueError) as e:  # ValueError: invalid JSON or UTF-8
        raise DamagedItem(f"{where} is unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict):
        raise DamagedItem(f"{where} is not a JSON object")
    return meta


def read_group_attrs(folder: Path) -> dict[str, Any]:
    """The attributes of a group's `zarr.json` (an item, a feature or the store); DamagedItem when the file
    is missing, unreadable or describes no group."""
    meta = _read_json(folder / META)
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "group" or not isinstance(meta.get("attributes"), dict):
        raise DamagedItem(f"{META} does not describe a group")
    return meta["attributes"]


def read_item_attrs(item_dir: Path) -> dict[str, Any]:
    """The attributes of a complete item group; DamagedItem (without the folder) otherwise."""
    attrs = read_group_attrs(item_dir)
    if attrs.get("complete") is not True:
        raise DamagedItem("not marked complete (the writer only ever places complete items)")
    return attrs


def _check_arrays(item_dir: Path, arrays: dict[str, dict[str, Any]]) -> None:
    for name, want in arrays.items():
        where = f"{name}/{META}"
        meta = _read_json(item_dir / where, where)
        if meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
            raise DamagedItem(f"{where} does not describe an array")
        if want.get("shape") is not None and meta.get("shape") != want["shape"]:
            raise DamagedItem(f"{where}: shape {meta.get('shape')}, committed as {want['shape']}")
        if want.get("dtype") is not None and str(meta.get("data_type")) != want["dtype"]:
            raise DamagedItem(f"{where}: dtype {meta.get('data_type')}, committed as {want['dtype']}")


def _check_files(item_dir: Path, files: dict[str, list[Any]], full: bool) -> None:
    for rel, (size, digest) in files.items():
        path = item_dir / rel
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            raise DamagedItem(f"{rel} is missing (committed with {size} bytes)") from None
        if actual != size:
            raise DamagedItem(f"{rel} has {actual} bytes, committed with {size}")
        if full and _sha256(path) != digest:
            raise DamagedItem(f"{rel}: content differs from what was committed (SHA-256 mismatch)")


def _decode_all(item_dir: Path) -> None:
    """Old items: read every array through zarr, so unreadable metadata or chunks show up."""
    import zarr

    try:
        group = zarr.open_group(item_dir, mode="r")
        for _, arr in group.arrays():
            arr[...]
    except Exception as e:
        raise DamagedItem(f"does not decode ({type(e).__name__}: {str(e)[:200]})") from None


def check_item(item_dir: Path, feature: str, item: str, full: bool = False, required: bool = False) -> ItemCheck:
    """Check one item folder (see the module docstring for what quick and full look at). `required`: the
    store records every item of this name (`records_required`), so an item without a record is damaged."""
    attrs = None
    try:
        attrs = read_item_attrs(item_dir)
        record = attrs.get(RECORD)
        if record is None and required:
            raise DamagedItem(f"its {RECORD} record is missing, and this store records one at every commit "
                              "(its bytes cannot be checked)")
        if record is None:
            _check_arrays(item_dir, {layout.FEATURES: {}, layout.INTERVALS: {}})
            if full:
                _decode_all(item_dir)
            return ItemCheck(feature, item, item_dir, None, attrs, recorded=False)
        if not isinstance(record, dict) or {"files", "arrays", "attrs_sha256"} - set(record):
            raise DamagedItem(f"its {RECORD} record is malformed")
        if attrs_digest(attrs) != record["attrs_sha256"]:
            raise DamagedItem(f"its attributes in {META} differ from what was committed")
        _check_arrays(item_dir, record["arrays"])
        _check_files(item_dir, record["files"], full)
    except DamagedItem as e:
        return ItemCheck(feature, item, item_dir, str(e), attrs)
    except (OSError, ValueError, TypeError) as e:  # anything odd in the record itself
        return ItemCheck(feature, item, item_dir, f"{type(e).__name__}: {e}", attrs)
    return ItemCheck(feature, item, item_dir, None, attrs)


def item_dirs(feature_dir: Path) -> list[tuple[str, Path]]:
    """Every item folder of a feature, read or not: a damaged item must still be seen to be reported."""
    try:
        entries = list(os.scandir(feature_dir))
    except FileNotFoundError:
        return []
    return sorted((e.name, Path(e.path)) for e in entries if e.is_dir() and not e.name.startswith("."))


def records_marker(root_attrs: dict[str, Any] | None) -> dict[str, set[str]] | None:
    """feature -> items allowed without a record, from the store's root attributes; None: the store predates
    records (every item may lack one). An unreadable root (None passed) requires records everywhere."""
    if root_attrs is None:
        return {}
    marker = root_attrs.get(STORE_RECORDS)
    if not isinstance(marker, dict):
        return None
    return {f: set(items) for f, items in (marker.get("legacy") or {}).items()}


def record_required(marker: dict[str, set[str]] | None, feature: str, item: str) -> bool:
    return marker is not None and item not in marker.get(feature, ())


def new_marker(store: Path, reserved: tuple[str, ...]) -> dict[str, Any]:
    """The root attribute the first recording writer sets: the items it finds without a record (older code's
    commits) are listed, so that later only they may lack one."""
    legacy: dict[str, list[str]] = {}
    for feature, folder in item_dirs(store):
        if feature in reserved:
            continue
        for item, path in item_dirs(folder):
            try:
                if RECORD not in read_item_attrs(path):
                    legacy.setdefault(feature, []).append(item)
            except DamagedItem:
                continue  # damaged either way
    return {"version": RECORD_VERSION, "legacy": legacy}
