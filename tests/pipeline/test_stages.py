"""Stage instrumentation (pipeline/stages.py) and the scale set generator (bench/scale_raw.py)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from pipeline import stages


def _union_by_sweep(intervals: list[tuple[float, float]]) -> float:
    """Reference: walk the sorted endpoints with a count of open intervals."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], -x[1]))
    total, open_, last = 0.0, 0, None
    for t, delta in events:
        if open_ > 0:
            total += t - last
        open_ += delta
        last = t
    return total


def test_union_seconds_against_a_sweep() -> None:
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 5, 40):
        starts = rng.uniform(0, 100, n)
        spans = [(float(s), float(s + d)) for s, d in zip(starts, rng.exponential(5, n), strict=True)]
        assert stages.union_seconds(spans) == pytest.approx(_union_by_sweep(spans), abs=1e-9)
    assert stages.union_seconds([(0, 2), (1, 3), (5, 6), (6, 7), (2.5, 2.6)]) == pytest.approx(5.0)


def test_stage_summary_from_known_calls() -> None:
    st = stages.StageStats()
    for start, end, units in ((10.0, 12.0, 60), (11.0, 13.0, 60), (15.0, 16.0, 30)):  # two overlap, one apart
        st.add({"stage": "model:frames", "start_s": start, "end_s": end, "cpu_s": 1.5 * (end - start), "units": units,
                "items": 2, "unit": "frames"})
    st.add({"stage": "decode:audio", "start_s": 0.0, "end_s": 4.0, "units": 60.0, "items": 1, "unit": "audio_s"})
    st.add(None)
    s = st.summary()
    f = s["model:frames"]
    assert (f["calls"], f["items"], f["units"], f["unit"]) == (3, 6, 150, "frames")
    assert f["busy_s"] == pytest.approx(4.0) and f["worker_s"] == pytest.approx(5.0) and f["span_s"] == pytest.approx(6.0)
    assert f["units_per_busy_s"] == pytest.approx(37.5) and f["units_per_worker_s"] == pytest.approx(30.0)
    assert f["cpu_s"] == pytest.approx(7.5) and f["cpu_s_per_unit"] == pytest.approx(0.05)
    assert s["decode:audio"]["units_per_busy_s"] == pytest.approx(15.0)


@pytest.fixture(scope="module")
def scale_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from testing.scale_raw import make_raw

    return make_raw(tmp_path_factory.mktemp("scale"), 4, 3, sizes=((320, 180), (352, 288)))


def test_scale_set_reads_as_social_iq_2(scale_raw: Path) -> None:
    from manifests.socialiq import read_siq2

    notes: list = []
    items, qa = read_siq2(scale_raw, notes=notes)
    truth = json.loads((scale_raw / "truth.json").read_text())
    assert notes == []  # nothing dropped or noted: the layout is the release's
    assert [i.id for i in items] == sorted(truth) and len(qa) == 6 * len(items)
    assert {q.split for q in qa} == {"train"} and all(i.subset == "youtubeclips" for i in items)
    assert [(i.clip_start_s, i.audio is not None, i.transcript is not None) for i in items] == \
        [(float(t["trim_s"]), True, True) for t in truth.values()]
    sizes = {(t["width"], t["height"], t["fps"]) for t in truth.values()}
    assert sizes == {(320, 180, "30"), (352, 288, "30"), (320, 180, "30000/1001"), (352, 288, "30000/1001")}


def test_decode_and_model_calls_report_their_units(scale_raw: Path) -> None:
    """decode_item's call records against the generator's truth (frames, seconds, words, questions), and a model
    call's record (covarep on the decoded audio) counts the audio seconds it was given."""
    from extractors.acoustic import CovarepConfig
    from manifests.socialiq import read_siq2
    from pipeline.actors import ExtractorWorker, decode_item

    items, qa = read_siq2(scale_raw)
    truth = json.loads((scale_raw / "truth.json").read_text())
    item = items[1]
    out = decode_item(item, ["audio", "frames", "qa", "transcript"], [q for q in qa if q.item_id == item.id], 16000)
    calls = {c["stage"]: c for c in out[0]["calls"]}
    t = truth[item.id]
    assert out[1 + 1].pixels.shape[1:3] == (t["height"], t["width"])
    assert float(Fraction(t["fps"])) == pytest.approx(out[2].source_fps, rel=1e-4)
    got = {k: (calls[k]["units"], calls[k]["unit"]) for k in calls}
    assert got == {"decode:frames": (3, "frames"), "decode:audio": (pytest.approx(3.0, abs=0.01), "audio_s"),
                   "decode:qa": (6, "questions"), "decode:transcript": (len(t["words"]), "words")}
    assert all(0 <= c["end_s"] - c["start_s"] < 60 for c in calls.values())
    words = out[4]
    assert np.abs(words.intervals[:, 0] - [w[1] for w in t["words"]]).max() < 0.001  # inline word times, ms
    worker = ExtractorWorker("acoustic", CovarepConfig(), "cpu", threads=1)
    results, call = worker([item.id], out[1])
    assert results[0][0] == item.id and results[0][2] is None
    assert (call["stage"], call["unit"], call["items"]) == ("model:acoustic", "audio_s", 1)
    assert call["units"] == pytest.approx(3.0, abs=0.01) and call["end_s"] >= call["start_s"]
    assert 0 < call["cpu_s"] < 60 and calls["decode:frames"]["cpu_s"] > 0
