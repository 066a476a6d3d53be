"""bench/scale.py end to end on a tiny set (2 clips × 3 s, the cheap features): the saved JSON has every field the
table and the projection need, the stages the run report collected, and figures from the process tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import scale


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    cache = tmp_path_factory.mktemp("scale")
    args = scale.parse_args(["--clips", "2", "--seconds", "3", "--sizes", "160x90", "192x108", "--cache", str(cache),
                             "--features", "acoustic,qa,transcript", "--interval", "0.3"])
    return scale.run(args)


def test_bench_scale_json_has_the_fields(result: dict) -> None:
    saved = json.loads(Path(result["saved"]).read_text())
    assert Path(result["saved"]).parent == Path(result["store"]) / "_runs"  # beside the run report
    assert (Path(result["store"]) / "_runs" / f"{saved['run_id']}.json").exists()
    assert saved["exit_code"] == 0 and saved["words"] > 0
    assert set(saved["stages"]) == {"decode:audio", "decode:qa", "decode:transcript", "model:acoustic", "model:qa",
                                    "model:transcript", "commit:acoustic", "commit:qa", "commit:transcript"}
    audio = saved["stages"]["decode:audio"]
    assert audio["unit"] == "audio_s" and audio["units"] == pytest.approx(6.0, abs=0.05) and audio["calls"] == 2
    assert saved["stages"]["decode:transcript"]["units"] == saved["words"]
    assert saved["stages"]["model:qa"]["units"] == 12  # six questions a clip
    res = saved["resources"]
    assert res["samples"] > 3 and res["tree_cpu_s"] > 0 and 0 < res["tree_cpu_utilisation"] <= 1
    assert res["peak_pss_bytes"] > 100 * 2**20 and res["peak_rss_bytes"] >= res["peak_pss_bytes"] >= res["peak_uss_bytes"]
    assert any("raylet" in p["name"] for p in res["processes_at_peak"])  # Ray's processes are in the tree
    assert res["object_store_peak_bytes"] is not None, res["object_store_error"]
    assert res["gpu_utilisation_mean"] is None or res["gpu_utilisation_mean"] >= 0
    summ = saved["summary"]
    assert summ["busiest_stage"].startswith(("model:", "decode:")) and summ["overlap_efficiency"] >= 1
    proj = saved["projection"]
    assert proj["full"]["frames"] == 74340 and proj["full"]["words"] > 0
    assert proj["this_machine"]["wall_lower_bound_s (socialiq preset: BERT-base)"] > \
        proj["this_machine"]["wall_lower_bound_s (as run: MiniLM)"] > 0
    assert proj["16_cores_1_gpu"]["wall_lower_bound_s"] > 0 and "model:transcript" in proj["16_cores_1_gpu"]["gpu_s_by_stage"]
    assert "projection to all of Social-IQ" in scale.table(saved)
    disk = saved["store_disk"]  # counted on disk when the run ended (the scale.json was written after)
    assert disk["pairs"] == 6 and disk["files"] > 6 and disk["files_per_pair"] == round(disk["files"] / 6, 3)
    assert "files a pair" in scale.table(saved)
