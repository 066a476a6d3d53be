"""Materialised aligned views (docs/reading.md, "Materialised views"): modalities aligned once to a reference into
a store of their own, `<store>/_views/aligned-<hash>.zarr`, values filled with 0.0 plus `valid` and `mask`, so
a read is a slice of a part in memory. Incremental: each view item's fingerprint hashes its sources' and
`LAYOUT`, so only new, recomputed or older-layout items are aligned again."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from reading.align import How, Reference, align
from rows import FeatureRows
from rows.identity import sha256_of
from store import Store, StoreWriter, views_dir

log = logging.getLogger(__name__)
PART_BYTES = 48 << 20  # a view's part arrays stay under the reader's whole-array limit (64 MiB)
LAYOUT = 2  # 2: values filled with 0.0 + `valid`; 1 (before): NaN where undefined, validity computed per read


def materialize(store: Path | str, features: Sequence[str], to: Reference = "transcript",
                how: How | Mapping[str, How] = "mean", items: Sequence[str] | None = None) -> Path:
    """Align `features` of every usable item (or of `items`) to `to` once, into a view store; returns its
    path. Already materialised items with unchanged sources are kept."""
    s = Store(store)
    if not isinstance(to, str | int | float) or isinstance(to, bool):
        raise ValueError(f"a view needs a reference feature name or a rate in Hz, got {type(to).__name__}")
    needed = [*features, *([to] if isinstance(to, str) else [])]
    hows = {f: how[f] if isinstance(how, Mapping) else how for f in features}
    specs = {f: s.feature_attrs(f).get("spec_hash") for f in needed}
    spec = sha256_of({"features": list(features), "to": to, "how": hows, "specs": specs, "layout": LAYOUT})[:16]
    out = views_dir(Path(store)) / f"aligned-{spec}.zarr"
    usable = set.intersection(*(set(s.items(f, include_filtered=True)) for f in dict.fromkeys(needed)))
    wanted = sorted(usable if items is None else usable & set(items))
    fps = {i: sha256_of([LAYOUT, *(s.index(f).entries[i].fingerprint for f in needed)])[:32] for i in wanted}
    with StoreWriter(out, f"view-{spec}") as w:
        for f in features:
            w.set_feature(f, {"source": f, "to": to, "how": how if isinstance(how, str) else dict(how),
                              "columns": s.feature_attrs(f).get("columns", []), "spec_hash": spec, "rate_hz": None})
        done = {e.item: e.fingerprint for e in w.index(features[0]).entries.values()}
        todo = [i for i in wanted if done.get(i) != fps[i] or any(i not in w.index(f).entries for f in features)]
        log.info("view %s: %d item(s) to align, %d up to date", out.name, len(todo), len(wanted) - len(todo))
        pending: dict[str, list[tuple[str, FeatureRows, dict[str, Any]]]] = {f: [] for f in features}
        size = 0
        for item in todo:
            a = align(s, item, features, to=to, how=how)
            for f in features:
                values = np.asarray(a.values[f], np.float32)
                valid = np.isfinite(values)
                extras = {"mask": np.asarray(a.masks[f], bool), "valid": valid}
                pending[f].append((item, FeatureRows(np.where(valid, values, np.float32(0.0)), a.ref_intervals, extras),
                                   {"fingerprint": fps[item], "spec_hash": spec}))
                size += values.nbytes + valid.nbytes
            if size >= PART_BYTES:
                _flush(w, pending)
                size = 0
        _flush(w, pending)
    return out


def _flush(w: StoreWriter, pending: dict[str, list[tuple[str, FeatureRows, dict[str, Any]]]]) -> None:
    for f, batch in pending.items():
        if batch:
            w.commit_batch(f, batch)
        batch.clear()
