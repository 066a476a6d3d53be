"""What the manifest saw and did not take as it was reaches the run summary and _runs/<run id>.json."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.config import load_config
from pipeline.run import run_extract


def test_manifest_notes_reach_the_summary_and_the_run_record(tiny_root: Path, tmp_path: Path) -> None:
    root = tiny_root / "siq2"
    for vtt in (root / "transcript").glob("*.vtt"):
        vtt.unlink()  # transcript is then n/a everywhere: the run needs no Ray and no model
    (root / "trims.json").write_text(json.dumps({"tiny-a": "n/a", "tiny-b": 0.0, "tiny-c": 4.5}))
    for name in ("bad id.mp4", "zarr.json.mp4", "ümlaut.mp4"):
        (root / "video" / name).write_bytes(b"")
    out = tmp_path / "s.zarr"
    report = run_extract("sample", tiny_root, out, load_config("sample"), only=["transcript"])
    assert report.counts["transcript"] == {"done": 0, "skipped": 0, "failed": 1, "n/a": 2}
    assert report.exit_code == 3  # a failed pair, even one the manifest failed, makes the run exit non-zero
    text = report.summary()
    assert f"FAILED transcript/tiny-a [manifest] {root / 'trims.json'}: bad trim: ValueError: trim 'n/a'" in text
    for vid in ("bad id", "zarr.json", "ümlaut"):
        assert f"DROPPED video {vid!r} {root / 'video' / vid}.mp4: unusable id" in text
    assert "note: 1 trim(s): trim is 0" in text and "tiny-b" in text
    saved = json.loads(next((out / "_runs").glob("*.json")).read_text())
    assert saved["manifest"] == report.manifest
    listed = {(n["kind"], n["id"]) for n in saved["manifest"]}
    assert listed == {("failed", "tiny-a"), ("dropped", "bad id"), ("dropped", "zarr.json"), ("dropped", "ümlaut"),
                      ("note", "tiny-b")}
    assert [f["item"] for f in saved["failures"]] == ["tiny-a"]
