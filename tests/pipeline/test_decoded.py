"""The run's typed records across the Ray boundary: a decoded input's `Decoded` (media/kinds/decoded.py) says what the
input holds without carrying it, a failure is a `Failure`, and the runner stores from them what the meta dict gave."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from extractors.base import Audio, Frames
from manifests.records import MediaItem
from media.kinds import Decoded
from pipeline.actors import DecodeReport, Failure
from pipeline.config import RunConfig
from pipeline.progress import Progress
from pipeline.report import RunReport
from pipeline.runner import Identity, Runner
from rows import FeatureRows


def _frames(n: int, missing: list[list[float]]) -> Frames:
    return Frames(np.zeros((n, 120, 160, 3), np.uint8), np.array([[k, k + 1.0] for k in range(n)]),
                  np.arange(n, dtype=np.float64) + 0.5, 30.0, float(n), np.array(missing).reshape(-1, 2),
                  streams_end_s=11.00000049, streams={"index": 1, "others": [{"index": 0}]}, stream_start_s=0.2500001)


def test_a_decoded_record_says_what_the_input_holds_and_is_small() -> None:
    frames = _frames(10, [[3.0000004, 4.5]])
    d = Decoded.of("frames", frames, 0.25, segments=3)
    assert (d.kind, d.units, d.seconds, d.duration_s, d.segments) == ("frames", 10, 0.25, 10.0, 3)
    assert d.bytes == frames.pixels.nbytes + frames.intervals.nbytes + frames.pts_s.nbytes + frames.missing_s.nbytes
    assert d.missing_s == ((3.0, 4.5),) and d.streams_end_s == 11.0 and d.stream_start_s == 0.25
    assert d.streams == {"index": 1, "others": [{"index": 0}]}
    assert (d.on_device, d.decoder, d.cpu_reason) == (False, None, None)
    wire = pickle.dumps(d)
    assert pickle.loads(wire) == d and len(wire) < 1024 < frames.pixels.nbytes  # the pixels stay behind
    audio = Audio(np.zeros(16000, np.float32), 16000, 1.0)
    a = Decoded.of("audio", audio)
    assert (a.units, a.bytes, a.missing_s, a.streams_end_s, a.stream_start_s, a.streams) == (1, 64000, (), None, None,
                                                                                              None)
    report = DecodeReport("x", {"frames": d, "audio": Failure("x", "decode:audio", "/raw/x.mp4", "InputError: no")})
    assert pickle.loads(pickle.dumps(report)) == report


def test_a_long_video_s_segments_add_their_seconds_and_damage_to_the_first() -> None:
    first = Decoded.of("frames", _frames(2, [[1.0, 1.5]]), 0.5, segments=2)
    later = Decoded.of("frames", _frames(2, [[0.25, 0.5]]), 0.75)
    joined = first.then(later)
    assert joined.seconds == 1.25 and joined.missing_s == ((1.0, 1.5), (0.25, 0.5))
    assert (joined.segments, joined.duration_s, joined.units) == (2, first.duration_s, first.units)


def test_a_failure_names_the_item_stage_file_and_error() -> None:
    f = Failure.of("v", "decode:frames", Path("/raw/v.mp4"), ValueError("no frame"))
    assert f.record("faces") == {"item": "v", "stage": "decode:frames", "file": "/raw/v.mp4",
                                 "error": "ValueError: no frame", "feature": "faces"}
    assert Failure.of("v", "extract:faces", None, RuntimeError()).error == "RuntimeError: RuntimeError"


def test_the_runner_stores_the_decoded_facts_as_the_item_s_attributes() -> None:
    """Damaged spans sorted (segments come back in any order), the stream notes, the decode time, the planned
    identity; a device decoder's frames get that decoder's identity (`Identity.decoded_by`)."""
    config = RunConfig.model_validate({"features": {"frames": {"extractor": "densenet161", "weights": "random"}}})
    spec = config.specs()[0]
    put: list[tuple] = []
    r = Runner(config, config.specs(), None, RunReport("run", "tiny", "out", {"frames": dict.fromkeys(  # type: ignore[arg-type]
        ("done", "skipped", "failed", "n/a"), 0)}))
    r.progress = Progress(1, bar=False, emit=lambda line: None)
    r.committer = SimpleNamespace(put=lambda *a: put.append(a), store_error=None)
    planned = Identity.of(spec.spec_hash, {"path": "/raw/v.mp4", "name": "v.mp4", "size": 3})
    r.identities["frames", "v"] = planned
    item = MediaItem(id="v", dataset="tiny", video=Path("/raw/v.mp4"))
    decoded = Decoded.of("frames", _frames(4, [[3.5, 4.0]]), 0.123456).then(
        Decoded.of("frames", _frames(2, [[1.0, 1.5]]), 0.1))
    rows = FeatureRows(np.zeros((1, 2208), np.float32), np.array([[0.0, 1.0]]))
    r.commit("frames", item, rows, decoded, 2.0)
    r.commit("frames", item, rows, decoded, 2.0, decoder="nvdec")
    (_, _, _, cpu), (_, _, _, nvdec) = put
    assert cpu["missing_s"] == [[1.0, 1.5], [3.5, 4.0]] and cpu["decode_seconds"] == 0.2235
    assert (cpu["streams_end_s"], cpu["stream_start_s"], cpu["streams"]) == (11.0, 0.25, decoded.streams)
    assert cpu["fingerprint"] == planned.fingerprint and cpu["source"] == planned.source and "decoder" not in cpu
    assert nvdec["decoder"] == "nvdec" and nvdec["source"] == {**planned.source, "decoder": "nvdec"}
    assert nvdec["fingerprint"] == Identity.of(spec.spec_hash, nvdec["source"]).fingerprint != planned.fingerprint
    assert r.report.frames_decoders == {"frames": {"nvdec": 1}}
    assert pytest.approx(cpu["duration_s"]) == 4.0
