"""`python -m pipeline info` and `export`: against the store testing/info_store.py builds (what it planted is the
reference), and against the store's own reads for the exported values."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline import exitcodes
from pipeline.cli import main
from reading.export import read_csd
from store.reader import open_store
from testing.info_store import EXPECTED, RUN_ID, info_json


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_info_lists_what_was_planted(info_store: Path) -> None:
    info = info_json(info_store)
    assert (info["media_items"], info["questions"]) == (4, 7)
    found = {f["name"]: f for f in info["features"]}
    assert sorted(found) == sorted(EXPECTED)
    for name, want in EXPECTED.items():
        f = found[name]
        assert f["items"] == want["items"], name
        for kind in ("partial", "failed", "filtered", "stale", "damaged"):
            assert [x["item"] for x in f[kind]] == want[kind], (name, kind)
    frames = found["frames"]
    assert frames["rows"] == 3 + 2 + 3 and frames["superseded_rows"] == 2  # tiny-b's first version
    assert frames["partial"][0]["missing_s"] == [[1.0, 2.0]] and frames["partial"][0]["missing_total_s"] == 1.0
    assert frames["failed"][0]["stage"] == "decode:frames" and frames["failed"][0]["run_id"] == RUN_ID
    assert [x["reason"] for x in found["faces"]["filtered"]] == ["face_ratio 0.50 < 0.80 (faces policy)",
                                                                 "face_ratio 0.00 < 0.80 (faces policy)"]
    assert "part" in found["transcript"]["damaged"][0] and "committed with" in found["transcript"]["damaged"][0]["problem"]
    assert found["acoustic"]["rows"] == 300 + 200 + 300 and found["acoustic"]["extractor"] == "covarep"
    # bytes: the files each part's index line records (read here with json alone), all three qa parts current
    lines = [json.loads(line.split(" ", 1)[1]) for line in (info_store / "qa/index.log").read_text().splitlines()]
    assert found["qa"]["bytes"] == sum(size for rec in lines if rec["kind"] == "part" for size, _ in rec["files"].values())
    assert found["qa"]["parts"] == 3 and found["frames"]["parts"] == 3  # frames: tiny-b's first part holds no current row
    assert info["runs"][0]["binding_stage"] == "extract:frames" and info["runs"][0]["failed"] == 1
    assert info["exit_code"] == exitcodes.FAILURES


def test_info_text_and_exit_codes(info_store: Path, tmp_path: Path) -> None:
    code, text = cli("info", str(info_store))
    assert code == exitcodes.FAILURES
    assert "FAILED frames/tiny-x [decode:frames]" in text and "PARTIAL frames/tiny-b: 1 s missing (1-2 s)" in text
    assert "DAMAGED transcript/tiny-a" in text and "STALE acoustic/tiny-c" in text
    # without the failed pair (a later run computed it), the damaged item is what is left: exit 4
    copy = tmp_path / "copy.zarr"
    shutil.copytree(info_store, copy)
    report = copy / "_runs" / f"{RUN_ID}.json"
    report.write_text(json.dumps({**json.loads(report.read_text()), "failures": []}))
    assert cli("info", str(copy))[0] == exitcodes.DAMAGED
    # and without the damage, nothing is wrong: partial, filtered and stale items are facts, not errors
    shutil.rmtree(copy / "transcript")
    assert cli("info", str(copy))[0] == exitcodes.OK
    assert main(["info", str(tmp_path / "nothing")]) == exitcodes.BAD_INPUT


def test_one_item_across_features(info_store: Path) -> None:
    code, text = cli("info", str(info_store), "--item", "tiny-b", "--json")
    assert code == exitcodes.OK
    status = {f: v["status"] for f, v in json.loads(text)["features"].items()}
    assert status == {"acoustic": "ok", "faces": "filtered", "frames": "partial", "qa": "ok", "transcript": "ok"}
    code, text = cli("info", str(info_store), "--item", "tiny-x", "--json")
    assert code == exitcodes.FAILURES
    found = json.loads(text)["features"]
    assert found["frames"]["status"] == "failed" and found["qa"]["status"] == "absent"
    assert cli("info", str(info_store), "--item", "tiny-a")[0] == exitcodes.DAMAGED
    assert main(["info", str(info_store), "--item", "no-such-item"]) == exitcodes.BAD_INPUT


def test_config_finds_items_whose_source_changed(tiny_root: Path, tmp_path: Path) -> None:
    """An item is stale when `make extract --config` would recompute it: here the video of tiny-b is touched."""
    from manifests.socialiq import read_siq2
    from media.kinds import identity
    from pipeline.config import load_config
    from store import layout
    from store.writer import StoreWriter
    from testing.info_store import FeatureRows

    items, qa = read_siq2(tiny_root)
    (spec,) = load_config("sample").specs(["frames"])
    out = tmp_path / "s.zarr"
    with StoreWriter(out, "sample") as w:  # fingerprints as run_extract records them
        w.write_manifests(items, qa)
        w.set_feature("frames", spec.store_attrs())
        for item in items:
            source = identity(item, "frames", [], load_config("sample").audio_rate_hz)
            fp = layout.fingerprint(spec.spec_hash, {k: v for k, v in source.items() if k != "path"})
            w.commit("frames", item.id, FeatureRows(np.zeros((1, 4), np.float32), np.array([[0.0, 1.0]])),
                     {"fingerprint": fp, "spec_hash": spec.spec_hash, "duration_s": 1.0})
    stale = lambda: json.loads(cli("info", str(out), "--json", "--config", "sample")[1])["features"][0]["stale"]  # noqa: E731
    assert stale() == []
    video = tiny_root / "siq2/video/tiny-b.mp4"
    os.utime(video, ns=(video.stat().st_atime_ns, video.stat().st_mtime_ns + 10**9))
    assert [(x["item"], "source file changed" in x["reason"]) for x in stale()] == [("tiny-b", True)]
    # without --config only the spec the feature records is compared: nothing is stale by that
    assert json.loads(cli("info", str(out), "--json")[1])["features"][0]["stale"] == []


def test_export_sdk_folder_and_items(info_store: Path, tmp_path: Path) -> None:
    code, text = cli("export", str(info_store), "--sdk", str(tmp_path / "sdk"), "--features", "frames,acoustic",
                     "--items", "tiny-a,tiny-c")
    assert code == exitcodes.OK
    written = sorted(p.name for p in (tmp_path / "sdk").glob("*.csd"))
    assert written == ["SOCIAL_IQ_COVAREP.csd", "SOCIAL_IQ_DENSENET161_1FPS.csd"]
    s = open_store(info_store)
    _, data, _ = read_csd(tmp_path / "sdk" / "SOCIAL_IQ_DENSENET161_1FPS.csd")
    assert sorted(data) == ["tiny-a", "tiny-c"]
    for item in data:
        np.testing.assert_array_equal(data[item]["features"], np.asarray(s.read("frames", item).features[...], np.float32))
        np.testing.assert_array_equal(data[item]["intervals"], s.read("frames", item).intervals)
    # tiny-c's acoustic rows are stale: not a complete item, not exported
    assert sorted(read_csd(tmp_path / "sdk" / "SOCIAL_IQ_COVAREP.csd")[1]) == ["tiny-a"]


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_export_xarray_one_feature(info_store: Path, tmp_path: Path, suffix: str) -> None:
    import xarray as xr

    out = tmp_path / f"faces{suffix}"
    assert cli("export", str(info_store), "--xarray", str(out), "--features", "faces")[0] == exitcodes.OK
    ds = xr.open_zarr(out, consolidated=False) if suffix == ".zarr" else xr.open_dataset(out)
    s = open_store(info_store)
    items = s.items("faces", include_filtered=True)
    assert list(ds["item_id"].values) == items == ["tiny-a", "tiny-b", "tiny-c"]
    for item in items:
        rows = np.asarray(ds["item"].values) == item
        r = s.read("faces", item)
        np.testing.assert_array_equal(ds["features"].values[rows], np.asarray(r.features[...]))
        np.testing.assert_array_equal(ds["start_s"].values[rows], r.intervals[:, 0])
        np.testing.assert_array_equal(ds["count"].values[rows], np.asarray(r.extras["count"][...]))
        np.testing.assert_array_equal(ds["mask"].values[rows].astype(bool), np.asarray(r.extras["mask"][...]))
    assert list(ds["column"].values) == s.feature_attrs("faces")["columns"]
    assert ds.attrs["extractor"] == "mtcnn"
    ds.close()
    assert main(["export", str(info_store), "--xarray", str(out), "--features", "faces"]) == exitcodes.BAD_INPUT


def test_export_refuses_what_it_cannot_do(info_store: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "x.nc")
    assert main(["export", str(info_store), "--xarray", out, "--features", "faces,frames"]) == exitcodes.BAD_INPUT
    assert main(["export", str(info_store), "--xarray", out, "--features", "nope"]) == exitcodes.BAD_INPUT
    assert main(["export", str(info_store), "--xarray", out, "--features", "frames", "--items", "zz"]) == exitcodes.BAD_INPUT
    assert not Path(out).exists()


def test_verify_reports_a_partial_item_as_partial_with_its_missing_seconds(info_store: Path) -> None:
    """Partial is not damage (its rows are as committed: exit code 0), but not "ok" either (issue 36)."""
    code, text = cli("verify", "--out", str(info_store), "--features", "frames,faces")
    assert code == exitcodes.OK, text
    lines = text.splitlines()
    assert lines[1].split() == ["feature", "ok", "partial", "damaged"]
    assert lines[2].split() == ["faces", "3", "0", "0"] and lines[3].split() == ["frames", "2", "1", "0"], text
    [partial] = [line for line in lines if "PARTIAL" in line]
    assert partial.startswith("  PARTIAL frames/tiny-b ") and partial.endswith(": 1.00 of 2.00 s did not decode (1-2 s)")
    code, text = cli("verify", "--out", str(info_store), "--features", "transcript")
    assert code == exitcodes.DAMAGED and "PARTIAL" not in text
