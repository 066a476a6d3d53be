"""Exports: CMU Multimodal SDK computational sequences (.csd), the SDK's Social-IQ QA layout, xarray views
(docs/reading.md, "Exports"). Every key of the SDK's metadata template is filled, or the SDK prompts on stdin;
that includes the key a missing comma in its metadataconfigs.py makes of two ("dimension namescomputational
sequence version"), which released SDK versions check (the two separate keys are written as well)."""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from atomicio import atomic_path
from extractors.base import Extractor, SdkSequence, get_extractor
from reading.align import item_duration_s
from rows import ROLE_ANSWER, ROLE_QUESTION, check_intervals
from store import Store, open_store

log = logging.getLogger(__name__)

SDK_TEMPLATE_KEYS = (
    "root name", "computational sequence description", "dimension names", "computational sequence version",
    "alignment compatible", "dataset name", "dataset version", "creator", "contact", "featureset bib citation",
    "dataset bib citation",
)
SDK_JOINED_KEY = "dimension namescomputational sequence version"  # see the module doc

SOCIAL_IQ_BIB = (
    "@inproceedings{zadeh2019social, title={Social-IQ: A Question Answering Benchmark for Artificial Social "
    "Intelligence}, author={Zadeh, Amir and Chan, Michael and Liang, Paul Pu and Tong, Edmund and Morency, "
    "Louis-Philippe}, booktitle={CVPR}, pages={8807--8817}, year={2019}}"
)
SOCIALIQA_BIB = (
    "@inproceedings{sap2019socialiqa, title={Social IQa: Commonsense Reasoning about Social Interactions}, "
    "author={Sap, Maarten and Rashkin, Hannah and Chen, Derek and Le Bras, Ronan and Choi, Yejin}, "
    "booktitle={EMNLP-IJCNLP}, year={2019}}"
)
SDK_SOCIAL_IQ_QA_BINARY_ROOT = "SOCIAL-IQ_QA_BERT_LASTLAYER_BINARY_CHOICE"
QA_BINARY_AXES = ("question", "pair", "q/a/i", "token")  # the axes before the hidden one, in the QA layout


def _extractor(name: str) -> type[Extractor] | None:
    """The registered extractor that made a feature, for what it says about itself (its citation, the SDK's
    sequence it stands for); None for a name no extractor registers (a view's, an older release's)."""
    try:
        return get_extractor(name)
    except KeyError:
        return None


def featureset_bib(extractor: str, config: Mapping[str, Any]) -> str:
    """The featureset citation: what the extractor of that exact name cites for this config (text extractors:
    their model's paper); "" for an extractor not registered here."""
    found = _extractor(extractor)
    return found.citation(dict(config)) if found else ""


def sdk_sequence(store: Store, feature: str) -> SdkSequence | None:
    """The SDK's released sequence the feature's extractor stands for, if any."""
    found = _extractor(str(store.feature_attrs(feature).get("extractor")))
    return found.sdk_sequence if found else None


def social_iq_version(store: Store) -> str | None:
    """"2.0" or "1.0" when the store's item manifest comes from a Social-IQ layout (the sample is a 2.0
    layout), else None: 2.0 keeps videos as video/<id>.mp4 and transcripts as transcript/<id>.vtt, 1.0 names them
    <id>_trimmed-out.mp4 and <id>_trimmed.vtt."""
    for m in store.media_items():
        for path, v1_suffix, v2_folder, v2_suffix in ((m.video, "_trimmed-out.mp4", "video", ".mp4"),
                                                      (m.transcript, "_trimmed.vtt", "transcript", ".vtt")):
            if path is None:
                continue
            if path.name == f"{m.id}{v1_suffix}":
                return "1.0"
            if path.name == f"{m.id}{v2_suffix}" and path.parent.name == v2_folder:
                return "2.0"
    return None


def _md5(entries: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> str:
    h = hashlib.md5()
    for item in sorted(entries):
        for arr in entries[item]:
            h.update(item.encode())
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _check_entries(entries: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What the SDK's validate_data_format checks: features at least 2-D, intervals (N, 2), same N."""
    out = {}
    for item, (features, intervals) in entries.items():
        if not item or "/" in item:
            raise ValueError(f"item {item!r}: not usable as an HDF5 group name")
        features = np.asarray(features)
        intervals = check_intervals(intervals, f"{item} intervals")
        if features.ndim < 2 or len(features) != len(intervals):
            raise ValueError(f"{item}: features {features.shape} and intervals {intervals.shape} must share N, "
                             "with features at least 2-D")
        out[item] = (features, intervals)
    return out


def write_csd(
    path: Path | str, entries: Mapping[str, tuple[np.ndarray, np.ndarray]], metadata: Mapping[str, Any],
) -> Path:
    """Write a computational sequence. `metadata` needs every key of SDK_TEMPLATE_KEYS; the joined SDK key,
    "uuid" and "md5" (of the data) are filled when absent. Written to a temporary name, then renamed."""
    import h5py

    entries = _check_entries(entries)
    missing = [k for k in SDK_TEMPLATE_KEYS if k not in metadata]
    if missing:
        raise ValueError(f"CSD metadata is missing {missing}: the SDK would stop and prompt for them")
    meta = dict(metadata)
    meta.setdefault(SDK_JOINED_KEY, [meta["dimension names"], meta["computational sequence version"]])
    meta.setdefault("uuid", str(uuid.uuid4()))
    meta.setdefault("md5", _md5(entries))
    root = str(meta["root name"])
    path = Path(path)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        data = f.create_group(root).create_group("data")
        for item, (features, intervals) in entries.items():
            g = data.create_group(item)
            g.create_dataset("features", data=features)
            g.create_dataset("intervals", data=intervals)
        group = f[root].create_group("metadata")
        for key, value in meta.items():
            ds = group.create_dataset(key, (1,), dtype=h5py.string_dtype())
            ds[0] = json.dumps(value)
    return path


def read_csd(path: Path | str) -> tuple[str, dict[str, dict[str, np.ndarray]], dict[str, Any]]:
    """(root name, {item: {"features", "intervals"}}, metadata) the way the SDK's read_CSD sees the file."""
    import h5py

    with h5py.File(path, "r") as f:
        root = list(f.keys())[0]
        data = {k: {"features": g["features"][...], "intervals": g["intervals"][...]}
                for k, g in f[root]["data"].items()}
        meta = {}
        for key, ds in f[root]["metadata"].items():
            raw = ds[0].decode() if isinstance(ds[0], bytes) else ds[0]
            meta[key] = json.loads(raw)
    return root, data, meta


def csd_metadata(store: Store, feature: str, root_name: str, **overrides: Any) -> dict[str, Any]:
    """Every SDK metadata key, filled from the store's feature attrs; `overrides` (underscores for spaces) win."""
    fa = store.feature_attrs(feature)
    extractor = str(fa.get("extractor", feature))
    config = fa.get("config") or {}
    siq = social_iq_version(store)
    socialiqa = siq is None and any(q.context for q in store.qa_items())
    meta = {
        "root name": root_name,
        "computational sequence description": (
            f"{feature}: {extractor} v{fa.get('version')} (weights {fa.get('weights')}), "
            f"rate {fa.get('rate_hz') or 'per row'} Hz; config {json.dumps(config, sort_keys=True)}"),
        "dimension names": list(fa.get("columns", [])),
        "computational sequence version": f"{extractor}-{fa.get('version')}-{str(fa.get('spec_hash', ''))[:8]}",
        "alignment compatible": True,
        "dataset name": str(store.attrs.get("dataset", "")),
        # the data's version, not the store's schema: known for the Social-IQ layouts, else given by the caller
        "dataset version": f"Social-IQ {siq}" if siq else "unknown",
        "creator": f"siqfeat {store.attrs.get('package_version', '')}".strip(),
        "contact": "siqfeat maintainers",
        "featureset bib citation": featureset_bib(extractor, config),
        "dataset bib citation": SOCIAL_IQ_BIB if siq else SOCIALIQA_BIB if socialiqa else "",
    }
    meta.update({k.replace("_", " "): v for k, v in overrides.items()})
    return meta


def sdk_shape_ok(store: Store, feature: str) -> bool:
    """Does the feature have the shape of the SDK's sequence of its extractor? Where the released sequence has
    fixed dimensions (covarep: COVAREP's 74 columns in the SDK's order; its 23-column layout, or a store from before
    version 8, is another sequence), exactly those."""
    seq = sdk_sequence(store, feature)
    if seq is not None and seq.columns is not None:
        return tuple(store.feature_attrs(feature).get("columns") or ()) == seq.columns
    return True


def default_root_name(store: Store, feature: str) -> str:
    """The SDK's Social-IQ root name for the feature's extractor in a Social-IQ store when the feature has the
    SDK's shape; a feature of another shape than its SDK sequence's is `<dataset>_<feature>_<D>D` (its width in the
    name, never the SDK's name for other dimensions); anything else <dataset>_<feature>."""
    fa = store.feature_attrs(feature)
    seq = sdk_sequence(store, feature)
    if seq is not None and not sdk_shape_ok(store, feature):
        return f"{store.attrs.get('dataset', 'store')}_{feature}_{len(fa.get('columns') or ())}D"
    if social_iq_version(store) and seq is not None:
        return seq.root
    return f"{store.attrs.get('dataset', 'store')}_{feature}"


def default_qa_root_name(store: Store) -> str:
    """SOCIAL-IQ_QA_BERT_LASTLAYER_BINARY_CHOICE in a Social-IQ store, else <dataset>_QA_BINARY_CHOICE."""
    return SDK_SOCIAL_IQ_QA_BINARY_ROOT if social_iq_version(store) else f"{store.attrs.get('dataset', 'store')}_QA_BINARY_CHOICE"


def export_csd(
    store: Path | str | Store, feature: str, out: Path | str, root_name: str | None = None,
    items: list[str] | None = None, include_filtered: bool = True, **metadata: Any,
) -> Path:
    """One store feature as a .csd file; features as float32 (what the SDK's baselines expect). Filtered items
    are included and listed under "siqfeat filtered": the SDK's `unify()` keeps only the items every loaded
    sequence holds, so leaving them out of one file would drop them from all. root_name: default_root_name()."""
    s = open_store(store)
    root_name = root_name or default_root_name(s, feature)
    seq = sdk_sequence(s, feature)
    as_sdk = seq if seq is not None and root_name == seq.root else None  # written as the SDK's own sequence
    if as_sdk is not None and not sdk_shape_ok(s, feature):
        n = len(s.feature_attrs(feature).get("columns") or ())
        raise ValueError(f"{feature}: {n} columns, not the {len(as_sdk.columns or ())} of the SDK's {root_name} "
                         f"(its extractor's layout of the released dimensions); export it under another root name")
    every, filtered = s.items(feature, include_filtered=True), s.filtered(feature)
    if items is None:
        items = every if include_filtered else sorted(set(every) - set(filtered))
    entries = {}
    for item in items:
        r = s.read(feature, item)
        features = np.asarray(r.features[...], np.float32)
        if as_sdk is not None and as_sdk.undefined_as is not None:  # the released file's value where the store has NaN
            features = np.where(np.isnan(features), np.float32(as_sdk.undefined_as), features)
        entries[item] = (features, r.intervals)
    meta = csd_metadata(s, feature, root_name, **metadata)
    meta["siqfeat filtered"] = filtered
    return write_csd(out, entries, meta)


def check_items(s: Store, features: list[str], items: list[str] | None, include_filtered: bool = True,
                qa_feature: str | None = None) -> None:
    """KeyError naming the asked ids that no feature of `features` holds complete (with the nearest ids held),
    or when the features hold no item at all: an export never writes files with nothing asked for in them."""
    held: set[str] = set()
    for f in features:
        held.update(s.items(f) if f == qa_feature else s.items(f, include_filtered=include_filtered))
    where = f"{s.path}: {'feature ' + repr(features[0]) if len(features) == 1 else 'features ' + ', '.join(features)}"
    if not held:
        raise KeyError(f"{where}: no complete item to export")
    unknown = [i for i in dict.fromkeys(items or ()) if i not in held]
    if unknown:
        near = [m for i in unknown[:5] for m in difflib.get_close_matches(i, held, n=1)]
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else f"; e.g. {', '.join(sorted(held)[:5])}"
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise KeyError(f"{where}: no complete item {', '.join(map(repr, unknown[:5]))}{more} "
                       f"({len(held)} held){hint}")


def export_sdk_folder(
    store: Path | str | Store, out_dir: Path | str, features: list[str] | None = None, qa_feature: str = "qa",
    qa_dir: Path | str | None = None, include_filtered: bool = True, items: list[str] | None = None,
) -> dict[str, Path]:
    """Every feature but the QA one as `<root name>.csd` in `out_dir`, the folder `mmdatasdk.mmdataset` reads; the
    QA feature in the binary-choice layout in `qa_dir` (default `out_dir/qa`), since the SDK's `align` cannot
    collapse its rows (docs/reading.md). `items`: only these (each feature those it holds). Root name -> path."""
    s = open_store(store)
    features = features if features is not None else s.features()
    check_items(s, features, items, include_filtered, qa_feature)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for feature in features:
        if feature == qa_feature:
            root, folder = default_qa_root_name(s), Path(qa_dir) if qa_dir is not None else out_dir / "qa"
            folder.mkdir(parents=True, exist_ok=True)
            written[root] = export_qa_binary_csd(s, folder / f"{root}.csd", feature, root, items=items)
        else:
            root = default_root_name(s, feature)
            held = None
            if items is not None:
                every = set(s.items(feature, include_filtered=include_filtered))
                held = [i for i in items if i in every]
            written[root] = export_csd(s, feature, out_dir / f"{root}.csd", root, items=held,
                                       include_filtered=include_filtered)
    return written


# ---- the SDK's Social-IQ QA layout ---------------------------------------------------------------------


def _cycle(values: list, n: int) -> list:
    return [values[k % len(values)] for k in range(n)]


def qa_binary_choice(
    tokens: np.ndarray, role: np.ndarray, q_index: np.ndarray, label: np.ndarray, n_questions: int = 6,
    n_pairs: int = 12,
) -> tuple[np.ndarray, dict[str, int]]:
    """One item's (n_questions, n_pairs, 3, T, D) array: per question, (q, a, i) token states for each
    (correct a, incorrect i) pair, correct-major in stored order. Items with fewer questions or pairs are
    filled by cycling their own (the baselines need fixed shapes); extra ones are cut. Returns the counts."""
    questions = sorted({int(q) for q in q_index[role == ROLE_QUESTION]})
    if not questions:
        raise ValueError("item has no question rows")
    per_q, n_found = [], []
    for q in questions:
        q_row = int(np.flatnonzero((role == ROLE_QUESTION) & (q_index == q))[0])
        right = np.flatnonzero((role == ROLE_ANSWER) & (q_index == q) & (label == 1))
        wrong = np.flatnonzero((role == ROLE_ANSWER) & (q_index == q) & (label == 0))
        if not len(right) or not len(wrong):
            raise ValueError(f"question {q}: needs a correct and an incorrect answer, has {len(right)} and {len(wrong)}")
        pairs = [(q_row, int(a), int(i)) for a in right for i in wrong]
        n_found.append(len(pairs))
        per_q.append(np.stack([tokens[list(p)] for p in _cycle(pairs, n_pairs)]))
    out = np.stack(_cycle(per_q, n_questions))
    return out, {"questions": len(questions), "min_pairs": min(n_found), "max_pairs": max(n_found)}


def export_qa_binary_csd(
    store: Path | str | Store, out: Path | str, feature: str = "qa", root_name: str | None = None,
    n_questions: int = 6, n_pairs: int = 12, items: list[str] | None = None, **metadata: Any,
) -> Path:
    """The QA feature as the SDK's SOCIAL-IQ_QA_BERT_LASTLAYER_BINARY_CHOICE layout (docs/reading.md): per item
    one row, features (1, n_questions, n_pairs, 3, T, D) and intervals [0, `align.item_duration_s`]."""
    s = open_store(store)
    entries, fills, skipped = {}, {}, {}
    media = {f: set(s.items(f, include_filtered=True)) for f in s.features() if f != feature}
    for item in s.items(feature) if items is None else [i for i in s.items(feature) if i in set(items)]:
        r = s.read(feature, item)
        ex = {k: np.asarray(r.extras[k][...]) for k in ("role", "q_index", "label")}
        try:
            arr, counts = qa_binary_choice(np.asarray(r.extras["tokens"][...], np.float32), ex["role"],
                                           ex["q_index"], ex["label"], n_questions, n_pairs)
        except ValueError as e:  # unlabelled (test split) or one-sided questions have no pairs to offer
            log.warning("%s: %s not exported: %s", out, item, e)
            skipped[item] = str(e)
            continue
        dur = item_duration_s(s, item, [f for f, have in media.items() if item in have])
        entries[item] = (arr[None], np.array([[0.0, float(dur)]]))
        fills[item] = counts
    meta = csd_metadata(s, feature, root_name or default_qa_root_name(s), **metadata)
    # "dimension names" names the last (hidden) axis, as for every sequence; the axes before it are ours to name
    meta["siqfeat layout"] = {"axes": [*QA_BINARY_AXES, "hidden"], "n_questions": n_questions, "n_pairs": n_pairs,
                              "per_item": fills, "skipped": skipped}
    return write_csd(out, entries, meta)


# ---- xarray --------------------------------------------------------------------------------------------


def to_xarray(store: Path | str | Store, feature: str, item: str, extras: bool = True):  # -> xarray.Dataset
    """One (feature, item) as an xarray Dataset: `features` (time, column) with time = interval middles and
    start_s / end_s coordinates; row-aligned extras (faces boxes, words, ...) as further variables."""
    import xarray as xr

    s = open_store(store)
    r = s.read(feature, item)
    iv = r.intervals
    coords = {"time": iv.mean(axis=1) if len(iv) else np.zeros(0), "start_s": ("time", iv[:, 0]),
              "end_s": ("time", iv[:, 1]), "column": r.columns or list(range(r.features.shape[1]))}
    variables = {"features": (("time", "column"), np.asarray(r.features[...]))}
    for name, arr in r.extras.items() if extras else ():
        if arr.ndim >= 1 and arr.shape[0] == len(iv):
            variables[name] = (("time", *(f"{name}_dim{k}" for k in range(1, arr.ndim))), np.asarray(arr[...]))
    return xr.Dataset(variables, coords=coords, attrs={"feature": feature, "item": item,
                                                       **{k: json.dumps(v) for k, v in r.attrs.items()}})


def feature_to_xarray(store: Path | str | Store, feature: str, items: list[str] | None = None):  # -> xarray.Dataset
    """A whole feature as one xarray Dataset, its items' rows one after another along `row` (its variables:
    docs/reading.md, "xarray"). `items`: these (default every complete item, filtered ones included)."""
    import xarray as xr

    s = open_store(store)
    every = s.items(feature, include_filtered=True)
    check_items(s, [feature], items)
    chosen = every if items is None else [i for i in every if i in set(items)]
    reads = [s.read(feature, i) for i in chosen]
    fa = s.feature_attrs(feature)
    columns = list(fa.get("columns") or [])
    feats = [np.asarray(r.features[...]) for r in reads]
    width = feats[0].shape[1] if feats else len(columns)
    features = np.concatenate(feats) if feats else np.zeros((0, width), np.float32)
    intervals = np.concatenate([r.intervals for r in reads]) if reads else np.zeros((0, 2))
    variables: dict[str, Any] = {
        "features": (("row", "column"), features),
        "item": ("row", np.repeat(np.asarray(chosen, dtype=str), [len(r.intervals) for r in reads])),
        "start_s": ("row", intervals[:, 0]), "end_s": ("row", intervals[:, 1]),
        "item_attrs": ("item_id", np.asarray([json.dumps(r.attrs, sort_keys=True) for r in reads], dtype=str)),
    }
    names = set.intersection(*(set(r.extras) for r in reads)) if reads else set()
    for name in sorted(names):
        arrays = [np.asarray(r.extras[name][...]) for r in reads]
        if all(a.ndim >= 1 and a.shape[0] == len(r.intervals) for a, r in zip(arrays, reads, strict=True)) \
                and len({a.shape[1:] for a in arrays}) == 1:
            joined = np.concatenate(arrays)
            variables[name] = (("row", *(f"{name}_dim{k}" for k in range(1, joined.ndim))), joined)
    coords = {"column": columns if len(columns) == width else list(range(width)), "item_id": chosen}
    attrs = {"feature": feature, "dataset": str(s.attrs.get("dataset", "")),
             **{k: v if isinstance(v, str | int | float) else json.dumps(v, sort_keys=True)
                for k, v in fa.items() if v is not None}}
    return xr.Dataset(variables, coords=coords, attrs=attrs)


def export_xarray(store: Path | str | Store, feature: str, out: Path | str, items: list[str] | None = None) -> Path:
    """`feature_to_xarray` written to `out`: a Zarr store where `out` ends in .zarr, else NetCDF (xarray picks
    the engine it has: scipy's NetCDF3 here, so float16 goes out as float32 and booleans as int8)."""
    ds = feature_to_xarray(store, feature, items)
    out = Path(out)
    if out.exists():
        raise ValueError(f"{out}: already exists; export writes a new file (remove it or pick another name)")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".zarr":
        for name in [*ds.data_vars, *ds.coords]:  # Zarr v3 specifies variable-length strings, not fixed-width ones
            if ds[name].dtype.kind == "U":
                ds[name] = ds[name].astype(object)
        with warnings.catch_warnings():  # zarr's note that v3 has no consolidated metadata in its spec yet
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
            ds.to_zarr(out, mode="w-", consolidated=True)  # xr.open_zarr warns on a store without it
    else:
        for name, var in ds.data_vars.items():
            if var.dtype == np.float16:
                ds[name] = var.astype(np.float32)
            elif var.dtype == bool:
                ds[name] = var.astype(np.int8)
        ds.to_netcdf(out)
    return out
