"""Each stream's own timeline (issue 35 items 10 and 11): a file whose timestamps start late, and streams of
different lengths, are not damage. Generated with ffmpeg: testsrc2 and a sine of known lengths, so the reference is
the length each stream was made with (and, for truncation, the same file whole).

- Timestamps starting at 5 s: Matroska's header duration counts from timestamp 0 (13 s for 8 s from 5 s), where
  lavf's start + duration put the end at 18 s: 5 invented missing seconds, PARTIAL frames and audio.
- Video 8 s over 11 s of audio, or 6 s of audio under 10 s of video: the shorter stream has its own duration and
  nothing missing; only a file whose data as a whole stops short of what it declares is truncated.
"""

from __future__ import annotations

import logging
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from media.decode import decode_audio, decode_frames

CONTAINERS = {  # extension: (video codec arguments, audio codec)
    "mkv": (["-c:v", "libx264"], "aac"),
    "webm": (["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"], "libopus"),
    "mp4": (["-c:v", "libx264"], "aac"),
    "mov": (["-c:v", "libx264"], "aac"),
    "flv": (["-c:v", "libx264"], "aac"),
    "ts": (["-c:v", "libx264"], "aac"),
    "avi": (["-c:v", "libx264"], "libmp3lame"),
}
FRAME_S = 1 / 25


def _make(path: Path, video_s: float, audio_s: float, *extra: str) -> Path:
    vcodec, acodec = CONTAINERS[path.suffix[1:]]
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=s=160x90:r=25:d={video_s}",
                    "-f", "lavfi", "-i", f"sine=d={audio_s}", *vcodec, "-pix_fmt", "yuv420p", "-c:a", acodec, *extra,
                    str(path)], check=True)
    return path


@pytest.mark.parametrize("offset_s", [5])
@pytest.mark.parametrize("ext", ["mkv", "webm", "mp4", "mov", "flv", "ts"])
def test_timestamps_that_start_late_invent_no_missing_seconds(tmp_path: Path, ext: str, offset_s: float) -> None:
    path = _make(tmp_path / f"late.{ext}", 8, 8, "-output_ts_offset", str(offset_s))
    frames, audio = decode_frames(path), decode_audio(path)
    assert frames.duration_s == pytest.approx(8.0, abs=FRAME_S) and len(frames.intervals) == 8
    assert not len(frames.missing_s)
    assert frames.pts_s[0] == pytest.approx(0.48, abs=1e-3)
    assert audio.duration_s == pytest.approx(8.0, abs=0.05) and not len(audio.missing_s)


@pytest.mark.parametrize("ext", ["mkv", "webm", "mp4"])
def test_a_truncated_file_that_starts_late_is_missing_its_tail_only(tmp_path: Path, ext: str) -> None:
    whole = _make(tmp_path / f"late.{ext}", 8, 8, "-output_ts_offset", "5",
                  *(["-movflags", "+faststart"] if ext == "mp4" else []))
    path = tmp_path / f"cut.{ext}"
    path.write_bytes(whole.read_bytes()[:int(whole.stat().st_size * 0.5)])
    frames, audio = decode_frames(path), decode_audio(path)
    n = len(frames.intervals)
    assert 2 <= n < 7 and frames.duration_s == pytest.approx(8.0, abs=FRAME_S)
    d = frames.duration_s  # (WebM declares 8.001 s: its last Opus packet's end)
    assert frames.missing_s.tolist() == [[k, min(k + 1, d)] for k in range(n, math.ceil(d))]
    assert audio.missing_s[-1, 1] == pytest.approx(8.0, abs=0.05)


@pytest.mark.parametrize("ext", ["mkv", "mp4", "avi"])
def test_video_shorter_than_its_audio_is_not_truncated(tmp_path: Path, ext: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    path = _make(tmp_path / f"v8a11.{ext}", 8, 11)
    with caplog.at_level(logging.INFO):
        frames, audio = decode_frames(path), decode_audio(path)
    late = 2 * FRAME_S if ext == "avi" else 0  # (H.264 in AVI: ffmpeg shows the first picture 2 frames late)
    assert frames.duration_s == pytest.approx(8.0 + late, abs=1e-3) and not len(frames.missing_s)
    assert len(frames.intervals) == (9 if late else 8)
    assert audio.duration_s == pytest.approx(11.0, abs=0.06) and not len(audio.missing_s)
    assert not any("truncated" in r.getMessage() for r in caplog.records)
    assert any(str(path) in r.getMessage() and "shorter stream" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("ext", ["mkv", "mp4", "avi"])
def test_audio_shorter_than_its_video_is_not_truncated(tmp_path: Path, ext: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    path = _make(tmp_path / f"v10a6.{ext}", 10, 6)
    with caplog.at_level(logging.INFO):
        frames, audio = decode_frames(path), decode_audio(path)
    assert audio.duration_s == pytest.approx(6.0, abs=0.05) and not len(audio.missing_s)
    assert frames.duration_s == pytest.approx(10.0, abs=0.1) and not len(frames.missing_s)
    assert not any("truncated" in r.getMessage() for r in caplog.records)
    assert any(str(path) in r.getMessage() and "shorter track" in r.getMessage() for r in caplog.records)


def runner_books(out: Path, config, item, meta: dict, intervals: np.ndarray) -> tuple:
    """(run report, the pairs as committed) of `item` through the runner's books without Ray: each feature's
    rows (zeros over `intervals`) committed with the decode task's `meta`, as `Runner.commit` and `committed` keep
    them, into a store at `out`."""
    from pipeline.committer import Outcome
    from pipeline.progress import Progress
    from pipeline.report import RunReport
    from pipeline.runner import Runner
    from rows import FeatureRows
    from store.writer import StoreWriter

    specs = config.specs()
    report = RunReport("run", "tiny", str(out), {s.name: dict.fromkeys(("done", "skipped", "failed", "n/a"), 0)
                                                 for s in specs})
    put: list[tuple] = []
    with StoreWriter(out, "tiny") as writer:
        r = Runner(config, specs, writer, report)
        r.progress = Progress(2, bar=False, emit=lambda line: None)
        r.committer = type("Committer", (), {"put": lambda self, *a: put.append(a), "store_error": None})()
        for spec in specs:
            writer.set_feature(spec.name, spec.store_attrs())
            r.fingerprints[spec.name, item.id], r.sources[spec.name, item.id] = "fp", {"path": str(item.video)}
            rows = FeatureRows(np.zeros((len(intervals), len(spec.extractor.columns(spec.config))), np.float32),
                               intervals)
            r.commit(spec.name, item, rows, meta, 0.1)
        for feature, item_id, rows, attrs in put:
            writer.commit(feature, item_id, rows, attrs)
        r.committed([Outcome(feature, item_id, None) for feature, item_id, _, _ in put])
    return report, put


def test_a_matroska_duration_counted_from_the_first_timestamp_cuts_no_audio(tmp_path: Path) -> None:
    """The same file with its header's Duration rewritten to 8 s (from the first timestamp, as a muxer might count
    it): read as an end at 8 s of the container's timeline, it cut the audio to its first 3 s."""
    import struct

    path = _make(tmp_path / "late.mkv", 8, 8, "-output_ts_offset", "5")
    data = path.read_bytes()
    at = data.find(b"\x44\x89\x88")  # Info/Duration, an 8-byte float in milliseconds
    assert struct.unpack(">d", data[at + 3:at + 11]) == (13000.0,)
    path.write_bytes(data[:at + 3] + struct.pack(">d", 8000.0) + data[at + 11:])
    frames, audio = decode_frames(path), decode_audio(path)
    assert frames.duration_s == pytest.approx(8.0, abs=FRAME_S) and not len(frames.missing_s)
    assert audio.duration_s == pytest.approx(8.0, abs=0.05) and not len(audio.missing_s)


def test_a_shorter_stream_is_a_note_in_the_run_report_its_summary_and_info(tmp_path: Path) -> None:
    """Per item and stream (issue 35 item 11): the run report's `shorter`, a summary line, the item's
    `streams_end_s` and a line of `info`; nothing PARTIAL. The decode is real, the runner's books without Ray."""
    from manifests.records import MediaItem
    from pipeline import actors
    from pipeline.config import RunConfig
    from pipeline.info import store_info

    path = _make(tmp_path / "v8a11.mkv", 8, 11)
    item = MediaItem(id="v8a11", dataset="tiny", video=path, audio=path)
    meta, frames, audio = actors.decode_item(item, ["frames", "audio"], [], 16000)
    assert meta["shorter"] == {"frames": pytest.approx(11.0, abs=0.05)} and not meta["missing"]
    assert frames.streams_end_s == meta["shorter"]["frames"] and audio.streams_end_s is None
    config = RunConfig.model_validate({"features": {"frames": {"extractor": "densenet161", "weights": "random"},
                                                    "acoustic": {"extractor": "covarep"}}})
    report, _ = runner_books(tmp_path / "s.zarr", config, item, meta, np.array([[0.0, 1.0], [1.0, 2.0]]))
    [note] = report.shorter
    assert note == {"feature": "frames", "item": "v8a11", "file": str(path), "stream": "video",
                    "duration_s": pytest.approx(8.0, abs=1e-3), "streams_end_s": meta["shorter"]["frames"]}
    assert not report.partial and report.counts["frames"]["done"] == report.counts["acoustic"]["done"] == 1
    assert f"  shorter stream frames/v8a11 {path}: the video ends at 8.00 s, the file's other streams at 11.0" \
        in report.summary()
    info = store_info(tmp_path / "s.zarr")
    shorter = {f.name: f.shorter for f in info.features}
    assert shorter["acoustic"] == [] and [s["item"] for s in shorter["frames"]] == ["v8a11"]
    assert "shorter stream frames/v8a11: ends at 8 s, the file's other streams at 11" in info.summary()
