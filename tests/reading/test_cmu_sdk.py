"""The real CMU Multimodal SDK as the client: it loads our .csd files, unifies and aligns them as its tutorials do,
and its `align` must agree with ours. Skips where ../shared/realdata (the SDK's source) is absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from extractors.base import Audio
from reading.align import align
from reading.export import export_csd, write_csd
from rows import FeatureRows
from store.reader import open_store
from store.writer import StoreWriter
from testing.cmu_sdk import sdk_nanaverage

SPEECH = ("amfm_sample.wav", "arctic_a0007.wav", "covarep_0011.arctic_bdl1.wav", "covarep_DB-cresc-a-D4-m1.wav",
          "covarep_glottalized-m1.wav", "arctic_a0007.wav", "amfm_sample.wav")  # ~20 s: boundaries 17-19 s count
WORDS = "lattifai__lattifai-python__SA1_multi_speaker.vtt"  # real word times (0.48-31.98 s)


def sdk_aligned(mmdatasdk, sequences: dict[str, Path], reference: str, collapse=sdk_nanaverage) -> dict:
    """mmdataset(recipe).align(reference, [collapse]) as the SDK's tutorial does: root -> {"<item>[j]": features}."""
    ds = mmdatasdk.mmdataset({k: str(v) for k, v in sequences.items()})
    ds.align(reference, collapse_functions=[collapse])
    return {k: {e: np.asarray(ds[k].data[e]["features"]) for e in ds[k].data} for k in ds.computational_sequences}


def assert_agrees(ours: np.ndarray, mask: np.ndarray, ref: np.ndarray, sdk: dict, item: str, what: str) -> None:
    """Every reference longer than the SDK's epsilon with a row: the same value; the SDK has no entry for others."""
    expected = {j for j in range(len(ref)) if mask[j] and ref[j, 1] - ref[j, 0] > 1e-5}
    got = {int(k[len(item) + 1 : -1]) for k in sdk if k.split("[")[0] == item}
    assert got == expected, what
    for j in sorted(expected):
        np.testing.assert_allclose(ours[j], sdk[f"{item}[{j}]"][0], rtol=2e-5, atol=1e-4, equal_nan=True,
                                   err_msg=f"{what}, reference {j} {ref[j].tolist()}")


@pytest.fixture(scope="module")
def real_acoustic_store(realdata: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Covarep rows of ~20 s of real recorded speech, and real caption word times as the transcript."""
    import librosa
    import soundfile

    from extractors.acoustic import Covarep, CovarepConfig
    from media.captions import parse_captions

    parts = []
    for name in SPEECH:
        x, sr = soundfile.read(realdata / "speech" / name, dtype="float32", always_2d=True)
        parts.append(librosa.resample(x.mean(axis=1), orig_sr=sr, target_sr=16000) if sr != 16000 else x.mean(axis=1))
    samples = np.concatenate(parts).astype(np.float32)
    config = CovarepConfig(f0_method="dio")  # the faster F0 tracker: the rows' times are under test here
    rows = Covarep(config).extract(Audio(samples, 16000, samples.size / 16000))
    words = parse_captions(realdata / "captions" / WORDS)
    keep = words.intervals[:, 0] < samples.size / 16000
    out = tmp_path_factory.mktemp("real") / "real.zarr"
    w = StoreWriter(out, "realspeech")
    w.set_feature("acoustic", {"extractor": "covarep", "version": Covarep.version, "config": config.canonical(),
                               "columns": Covarep.columns(config), "rate_hz": 100.0, "weights": "none", "spec_hash": "a"})
    w.set_feature("transcript", {"extractor": "bert_words", "version": "-", "config": {}, "columns": ["h0"],
                                 "rate_hz": None, "weights": "none", "spec_hash": "t"})
    duration = {"duration_s": samples.size / 16000, "fingerprint": "-"}
    w.commit("acoustic", "speech", rows, duration | {"spec_hash": "a"})
    w.commit("transcript", "speech", FeatureRows(np.ones((int(keep.sum()), 1), np.float32), words.intervals[keep],
                                                 {"words": np.asarray(words.words)[keep]}), duration | {"spec_hash": "t"})
    return out


def test_real_acoustic_rows_share_their_boundaries(real_acoustic_store: Path) -> None:
    iv = open_store(real_acoustic_store).read("acoustic", "speech").intervals
    assert len(iv) > 1900
    np.testing.assert_array_equal(iv[1:, 0], iv[:-1, 1])  # no ~1e-15 s overlaps between neighbours
    np.testing.assert_array_equal(iv[:, 0], np.arange(len(iv)) / 100.0)


@pytest.mark.parametrize("to", ["transcript", 1.0])
def test_real_acoustic_rows_align_as_the_sdk_aligns_them(
    mmdatasdk, real_acoustic_store: Path, tmp_path: Path, to: str | float,
) -> None:
    s = open_store(real_acoustic_store)
    ours = align(s, "speech", ["acoustic"], to=to)
    export_csd(s, "acoustic", tmp_path / "a.csd", root_name="acoustic")
    ref_meta = {"dimension names": ["none"]}
    write_csd(tmp_path / "r.csd", {"speech": (np.zeros((len(ours.ref_intervals), 1), np.float32), ours.ref_intervals)},
              {k: "-" for k in ("root name", "computational sequence description", "computational sequence version",
                                "alignment compatible", "dataset name", "dataset version", "creator", "contact",
                                "featureset bib citation", "dataset bib citation")} | ref_meta | {"root name": "ref"})
    sdk = sdk_aligned(mmdatasdk, {"acoustic": tmp_path / "a.csd", "ref": tmp_path / "r.csd"}, "ref")
    assert_agrees(ours.values["acoustic"], ours.masks["acoustic"], ours.ref_intervals, sdk["acoustic"], "speech",
                  f"acoustic -> {to!r}")
