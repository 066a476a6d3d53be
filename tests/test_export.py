""".csd exports read back with h5py and checked the way the CMU SDK's reader checks them; xarray view."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from bench.bench_read import build_synthetic_store
from store.export import (
    SDK_JOINED_KEY,
    SDK_TEMPLATE_KEYS,
    export_csd,
    export_qa_binary_csd,
    read_csd,
    to_xarray,
    write_csd,
)
from store.reader import open_store

# The SDK's featuresetMetadataTemplate as released (a missing comma joins two names) and as fixed in forks.
SDK_TEMPLATE_RELEASED = [
    "root name", "computational sequence description", "dimension names" "computational sequence version",
    "alignment compatible", "dataset name", "dataset version", "creator", "contact", "featureset bib citation",
    "dataset bib citation",
]
SDK_TEMPLATE_FIXED = [k for k in SDK_TEMPLATE_KEYS]


@pytest.fixture(scope="module")
def store(tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_synthetic_store(tiny_root_template, tmp_path_factory.mktemp("ex") / "tiny.zarr", 8, 16)


def sdk_style_check(path: Path) -> tuple[str, dict, dict]:
    """What the SDK does on opening a .csd: first root key, its data and metadata, then its format checks."""
    with h5py.File(path, "r") as f:
        roots = list(f.keys())
        assert len(roots) == 1
        root = f[roots[0]]
        assert set(root.keys()) == {"data", "metadata"}
        for item, g in root["data"].items():
            assert set(g.keys()) == {"features", "intervals"}, item
            assert g["intervals"].ndim == 2 and g["intervals"].shape[1] == 2
            assert g["features"].ndim >= 2 and g["features"].shape[0] == g["intervals"].shape[0]
            assert g["intervals"].dtype == np.float64
        for key, ds in root["metadata"].items():
            assert ds.shape == (1,) and h5py.check_string_dtype(ds.dtype) is not None, key
    name, data, meta = read_csd(path)
    assert meta["root name"] == name == roots[0]  # the SDK takes the data from the first key, the name from metadata
    for template in (SDK_TEMPLATE_RELEASED, SDK_TEMPLATE_FIXED):
        assert [k for k in template if k not in meta] == []  # complete_all_missing_metadata would prompt
    return name, data, meta


def test_write_csd_from_arrays_round_trips(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    entries = {"vid-1": (rng.normal(size=(4, 3)).astype(np.float32), np.array([[0, 1], [1, 2], [2, 3], [3, 4.5]])),
               "vid_2": (np.zeros((0, 3), np.float32), np.zeros((0, 2)))}
    meta = {k: f"value of {k}" for k in SDK_TEMPLATE_KEYS} | {"dimension names": ["a", "b", "c"]}
    path = write_csd(tmp_path / "x.csd", entries, meta)
    name, data, got = sdk_style_check(path)
    assert name == "value of root name"
    for item, (f, iv) in entries.items():
        np.testing.assert_array_equal(data[item]["features"], f)
        np.testing.assert_array_equal(data[item]["intervals"], iv)
    assert got["dimension names"] == ["a", "b", "c"]
    assert got[SDK_JOINED_KEY] == [["a", "b", "c"], "value of computational sequence version"]
    assert len(got["uuid"]) == 36 and len(got["md5"]) == 32
    assert not list(tmp_path.glob("*.partial"))


def test_write_csd_refuses_what_the_sdk_would_refuse(tmp_path: Path) -> None:
    meta = {k: "x" for k in SDK_TEMPLATE_KEYS}
    with pytest.raises(ValueError, match=r"missing \['creator'\]"):
        write_csd(tmp_path / "x.csd", {}, {k: v for k, v in meta.items() if k != "creator"})
    with pytest.raises(ValueError, match=r"features \(3, 2\) and intervals \(2, 2\) must share N"):
        write_csd(tmp_path / "x.csd", {"v": (np.zeros((3, 2)), np.zeros((2, 2)))}, meta)
    with pytest.raises(ValueError, match="ends before it starts"):
        write_csd(tmp_path / "x.csd", {"v": (np.zeros((1, 2)), np.array([[2.0, 1.0]]))}, meta)


def test_export_feature_from_store(store: Path, tmp_path: Path) -> None:
    path = export_csd(store, "acoustic", tmp_path / "acoustic.csd", creator="tester")
    name, data, meta = sdk_style_check(path)
    s = open_store(store)
    assert sorted(data) == s.items("acoustic")
    for item in data:
        r = s.read("acoustic", item)
        np.testing.assert_array_equal(data[item]["features"], np.asarray(r.features[:], np.float32))
        np.testing.assert_array_equal(data[item]["intervals"], r.intervals)
    assert meta["creator"] == "tester" and meta["dimension names"][:2] == ["F0", "VUV"]
    assert meta["dataset name"] == "sample" and "Social-IQ" in meta["dataset bib citation"]


def test_qa_binary_choice_layout(store: Path, tmp_path: Path) -> None:
    path = export_qa_binary_csd(store, tmp_path / "qa.csd")
    _, data, meta = sdk_style_check(path)
    s = open_store(store)
    assert sorted(data) == s.items("qa")
    for item, entry in data.items():
        assert entry["features"].shape == (1, 6, 12, 3, 25, 384) and entry["intervals"].shape == (1, 2)
        video_s = max(s.item_attrs(f, item).get("duration_s") or 0.0 for f in s.features() if f != "qa"
                      and item in s.items(f, include_filtered=True))
        assert video_s > 0 and entry["intervals"][0].tolist() == [0.0, video_s]
        ex = s.read("qa", item).extras
        tokens, role, label, q_index = (np.asarray(ex[k][...]) for k in ("tokens", "role", "label", "q_index"))
        for q in range(6):
            stored_q = q % 2  # two questions per sample clip, cycled to six
            q_row = np.flatnonzero((role == 1) & (q_index == stored_q))[0]
            right = np.flatnonzero((role == 2) & (q_index == stored_q) & (label == 1))
            wrong = np.flatnonzero((role == 2) & (q_index == stored_q) & (label == 0))
            assert (len(right), len(wrong)) == (1, 3)
            for p in range(12):
                q_t, a_t, i_t = entry["features"][0, q, p]
                np.testing.assert_array_equal(q_t, tokens[q_row])
                np.testing.assert_array_equal(a_t, tokens[right[0]])
                np.testing.assert_array_equal(i_t, tokens[wrong[p % 3]])
    assert meta["siqfeat layout"]["per_item"]["tiny-a"] == {"questions": 2, "min_pairs": 3, "max_pairs": 3}


def test_xarray_view(store: Path) -> None:
    ds = to_xarray(store, "faces", "tiny-a")
    r = open_store(store).read("faces", "tiny-a")
    assert ds["features"].dims == ("time", "column")
    np.testing.assert_allclose(ds["time"].values, r.intervals.mean(axis=1))
    np.testing.assert_allclose(ds["start_s"].values, r.intervals[:, 0])
    assert list(ds["column"].values[:2]) == ["count", "max_prob"]
    assert ds["boxes"].shape == (len(r.intervals), 1, 4)
    assert json.loads(ds.attrs["filtered"]) is False
    sel = ds["features"].sel(column="count", time=1.5)  # the row covering second 1
    assert float(sel) == 1.0
