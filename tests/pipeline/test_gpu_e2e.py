"""The real `pipeline extract` on a GPU node (issue 33): a Social-IQ-shaped set (bench/scale_raw.py clips, 60 s,
640x360 and 1280x720, speech with word-timed captions, six questions each) through every feature of
bench/scale.toml (the socialiq preset's models with offline weights), its GPU features on CUDA actors. Every
(feature, clip) pair must be stored, readable and of the clip's length, and the binding resource of the run
report's `utilisation` (pipeline/report.py) busy >= 80 % over the steady part (first model call's end to the
last: models loaded and calibrated, the pipeline full), the figure a node's throughput depends on.

    FAIL_WITHOUT_CUDA=1 pytest -m gpu tests/pipeline/test_gpu_e2e.py

Skipped without CUDA (CI has no GPU; the CPU tests of the scheduling policy catch a regression there), failed
then under FAIL_WITHOUT_CUDA=1. The clips: SIQ_GPU_E2E_CLIPS (default 96) hard links to two generated clips (as
../shared/gpu-run's 500 were), so the set costs two clips to make; bench.scale_raw caches them under
build/scale (generated where ffmpeg and espeak-ng are, else carried there). SIQ_GPU_E2E_RAW: a ready set
instead. A node runs the set at ~3.5 clips/s or better when the run is bound by its hardware: 96 clips is
~30 s of steady work there, enough to read a busy fraction from. Batch sizes are the extractors' fixed CUDA
defaults (DenseNet 64, MTCNN 32, text 16), as everywhere in the suite (tests/conftest.py: SIQ_CALIBRATE=0, which
the run inherits); SIQ_CALIBRATE=1 measures them instead, in the first calls at each input size."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testing.scale_raw import expand_set as expand

REPO = Path(__file__).resolve().parents[2]
BUSY_MIN = 0.80
STEADY_MIN_S = 10.0  # a shorter steady part says little about utilisation: more clips (SIQ_GPU_E2E_CLIPS)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_gpu_node_stores_every_pair_and_keeps_its_binding_resource_busy(tmp_path: Path) -> None:
    from conftest import cuda_or_skip

    cuda_or_skip()
    n = int(os.environ.get("SIQ_GPU_E2E_CLIPS", "96"))
    if os.environ.get("SIQ_GPU_E2E_RAW"):
        src = Path(os.environ["SIQ_GPU_E2E_RAW"])
    else:
        from testing.scale_raw import make_raw

        if not list((REPO / "build" / "scale").glob("raw-2x60s-*/truth.json")) and not (
                shutil.which("ffmpeg") and shutil.which("espeak-ng")):
            pytest.skip("no clips: ffmpeg and espeak-ng make them (bench.scale_raw), or carry build/scale/raw-2x60s-*")
        src = make_raw(REPO / "build" / "scale", 2, 60)
    raw, store = tmp_path / "raw", tmp_path / "out.zarr"
    vids = expand(src, raw, n)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pipeline", "extract", "--dataset", "socialiq", "--raw", str(raw), "--out", str(store),
           "--config", str(REPO / "bench" / "scale.toml")]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1700)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    (path,) = [p for p in (store / "_runs").glob("*.json") if not p.name.endswith(".scale.json")]
    report = json.loads(path.read_text())

    features = ("frames", "faces", "transcript", "qa", "acoustic")
    assert {f: report["counts"][f]["done"] for f in features} == dict.fromkeys(features, n), report["counts"]
    assert not any(c["failed"] for c in report["counts"].values()), report["counts"]
    from store.reader import open_store

    truth = json.loads((src / "truth.json").read_text()) if (src / "truth.json").exists() else {}
    seconds = {v: truth[b]["seconds"] for v, b in zip(vids, (sorted(truth)[i % len(truth)] for i in range(n)),
                                                      strict=True)} if truth else {}
    reader = open_store(store)
    for item in vids:  # every pair readable, and frames and sound span the clip
        for feat in features:
            assert len(reader.read(feat, item).features[:]) > 0, (feat, item)
        for feat in ("frames", "acoustic") if seconds else ():
            end = float(reader.read(feat, item).intervals[:][-1, 1])
            assert 0.9 * seconds[item] <= end <= seconds[item] + 1, (feat, item, end, seconds[item])

    u = report["utilisation"]
    assert any(k.startswith("gpu ") for k in u["steady"]["busy"]), u  # the GPU features ran on a GPU
    steady, binding = u["steady"], u["binding"]
    assert steady["seconds"] >= STEADY_MIN_S, f"steady part {steady['seconds']} s: too short to judge, raise SIQ_GPU_E2E_CLIPS"
    assert steady["busy"][binding] >= BUSY_MIN, (
        f"binding resource {binding} busy {100 * steady['busy'][binding]:.0f} % of the steady {steady['seconds']} s "
        f"(< {100 * BUSY_MIN:.0f} %): {steady['busy']}; {n} clips in {report['seconds']:.0f} s")


def test_the_gpu_set_is_a_social_iq_layout_of_its_own_clips(tmp_path: Path) -> None:
    """On CPU: the expanded set reads as n Social-IQ 2.0 items, each with its base clip's six questions under
    its own ids, splits and trims kept (the manifest reader is the reference)."""
    if not (shutil.which("ffmpeg") and shutil.which("espeak-ng")):
        pytest.skip("ffmpeg and espeak-ng make the clips (make install)")
    from pipeline.config import load_config
    from pipeline.sources import load_items
    from testing.scale_raw import make_raw

    src = make_raw(tmp_path / "cache", 2, 2)
    vids = expand(src, tmp_path / "raw", 5)
    items, qa, notes = load_items("socialiq", tmp_path / "raw", load_config(str(REPO / "bench" / "scale.toml")))
    assert sorted(i.id for i in items) == vids == [f"gpu{i:04d}" for i in range(5)] and not notes
    base, base_qa, _ = load_items("socialiq", src, load_config(str(REPO / "bench" / "scale.toml")))
    assert len(qa) == 6 * 5 and {q.item_id for q in qa} == set(vids)
    assert len({q.qid for q in qa}) == 30  # each copy's questions under ids of its own
    by_id = {i.id: i for i in base}
    for item in items:  # trims (clip_start_s) and splits as the base clip's
        b = by_id[sorted(by_id)[int(item.id[3:]) % 2]]
        assert (item.clip_start_s, item.split) == (b.clip_start_s, b.split) and b.clip_start_s > 0
        mine = sorted(q.question for q in qa if q.item_id == item.id)
        assert mine == sorted(q.question for q in base_qa if q.item_id == b.id)
    assert (tmp_path / "raw/siq2/video/gpu0002.mp4").samefile(src / "siq2/video/scale0000.mp4")  # a link, no copy
