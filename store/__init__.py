"""The storage engine, the only code that knows the Zarr layout: writer, reader, index, parts, planning, compaction,
verification and repair. Reading conveniences (alignment, views, datasets, exports, pictures) live in reading/,
which imports this package; nothing here imports reading/.

This namespace is the engine's public API: code above store/ (reading/, pipeline/, deploy/, bench/) imports from
`store` alone, never from a module of it (an import-linter contract in pyproject.toml holds that), so the modules
and their helpers may change without a caller noticing. A name is imported on first use (PEP 562 `__getattr__`):
asking for `is_url` or `spec_hash` does not import zarr.
"""

# ruff: noqa: F401 - the TYPE_CHECKING imports at the end are this package's re-exports (`__all__`, built from _EXPORTS)
from __future__ import annotations

import importlib
import warnings as _warnings
from typing import TYPE_CHECKING, Any

# The store keeps plain files beside its groups (_manifests/, _runs/, .staging/); zarr lists and ignores them.
_warnings.filterwarnings("ignore", message="Object at .* is not recognized as a component of a Zarr hierarchy")

# public name -> (module of this package, its name there)
_EXPORTS: dict[str, tuple[str, str]] = {
    # opening, reading, writing
    "open_store": ("reader", "open_store"), "Store": ("reader", "Store"), "ItemFeature": ("reader", "ItemFeature"),
    "StoreWriter": ("writer", "StoreWriter"), "StoreError": ("writer", "StoreError"),
    "StoreLocked": ("writer", "StoreLocked"), "STORAGE_ERRNOS": ("writer", "STORAGE_ERRNOS"),
    "DamagedMetadata": ("integrity", "DamagedMetadata"), "part_problems": ("integrity", "part_problems"),
    # what a run asks before it computes: which pairs are missing or stale
    "Wanted": ("plan", "Wanted"), "make_plan": ("plan", "make_plan"),
    # identity: what makes two runs' rows the same
    "spec_hash": ("layout", "spec_hash"), "fingerprint": ("layout", "fingerprint"),
    # the names in a store's tree that callers read or write beside the engine
    "RUNS": ("layout", "RUNS"), "runs_dir": ("layout", "runs_dir"), "views_dir": ("layout", "views_dir"),
    "FEATURES": ("layout", "FEATURES"), "INTERVALS": ("layout", "INTERVALS"),
    # partial items (missing spans), in the words of reports
    "partial_record": ("partial", "partial_record"), "partial_line": ("partial", "partial_line"),
    "spans_text": ("partial", "spans_text"),
    # maintenance
    "compact_store": ("compact", "compact_store"), "verify_store": ("verify", "verify_store"),
    "migrate_store": ("migrate", "migrate_store"), "gc_paused": ("index", "gc_paused"),
    # local folders and object storage
    "is_url": ("backends", "is_url"), "location": ("backends", "location"), "join": ("backends", "join"),
    "open_backend": ("backends", "open_backend"),
    "BackendError": ("backends", "BackendError"),
    # object storage's requests retried with backoff, by kind (the run report's `storage_retries`)
    "retries": ("backends", "retries"), "retries_since": ("backends", "retries_since"),
    # a part a model actor wrote to the store itself (object storage), and the record it sends the driver
    "WrittenRows": ("workerparts", "WrittenRows"), "write_worker_parts": ("workerparts", "write"),
    # reading/datasets.py's cache of sample plans under _views/
    "plan_cache_key": ("plancache", "key"), "load_plan": ("plancache", "load"), "save_plan": ("plancache", "save"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module(f"store.{module}"), attr)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers and editors see; at run time `__getattr__` imports each on first use
    from store.backends import BackendError, is_url, join, location, open_backend, retries, retries_since
    from store.compact import compact_store
    from store.index import gc_paused
    from store.integrity import DamagedMetadata, part_problems
    from store.layout import FEATURES, INTERVALS, RUNS, fingerprint, runs_dir, spec_hash, views_dir
    from store.migrate import migrate_store
    from store.partial import partial_line, partial_record, spans_text
    from store.plan import Wanted, make_plan
    from store.plancache import key as plan_cache_key
    from store.plancache import load as load_plan
    from store.plancache import save as save_plan
    from store.reader import ItemFeature, Store, open_store
    from store.verify import verify_store
    from store.workerparts import WrittenRows
    from store.workerparts import write as write_worker_parts
    from store.writer import STORAGE_ERRNOS, StoreError, StoreLocked, StoreWriter
