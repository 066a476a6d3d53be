"""The node check (bench/node_check.py), the one command a GPU node's device call runs: on this CPU machine, with
a kit of the real layout (site/, MANIFEST.json, tokenizers/) whose PyAV FFmpeg libraries are dummies. Each step's
outcome is recorded (ok, failed, timeout, skipped, not run) and the steps after a failure still run; summary.json
has the shape docs/scale.md describes. The whole run on this machine's CPU (`--clips 2`, every step) takes
minutes: it is a documented command (docs/scale.md, "The node check"), not a test."""
from __future__ import annotations

import ast
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from bench import node_check

REPO = Path(__file__).resolve().parents[2]


def _kit(folder: Path, tokenizer: Path | None = None) -> Path:
    """A kit as deploy/bundle.py --kit packs one: site/ (here PyAV's auditwheel-named FFmpeg libraries, empty
    files, and one library torchcodec does not load), MANIFEST.json and the BERT tokenizer's files."""
    stage = folder / "stage"
    libs = stage / "site" / "av.libs"
    libs.mkdir(parents=True)
    for name in ("libavcodec-5e6b81c2.so.62.28.102", "libswscale-88e9f973.so.9.5.102", "libx264-d6533a8d.so.165"):
        (libs / name).write_bytes(b"")
    (stage / "tokenizers" / "bert-base-uncased").mkdir(parents=True)
    for f in tokenizer.iterdir() if tokenizer else ():  # the bert-base-uncased vocabulary (MiniLM's is the same)
        if f.is_file() and f.name.startswith(("vocab", "tokenizer", "special_tokens")):
            shutil.copy(f, stage / "tokenizers" / "bert-base-uncased" / f.name)
    (stage / "MANIFEST.json").write_text(json.dumps({"python": "3.12", "kit_left_out": ["python-discovery"],
                                                     "files": {"av-18.1.0.whl": {},
                                                               "python_discovery-1.9.5-py3-none-any.whl": {}}}))
    kit = folder / "carried"
    (kit / "kit").mkdir(parents=True)
    with tarfile.open(kit / "kit" / node_check.KIT, "w:xz") as tar:
        for item in stage.iterdir():
            tar.add(item, arcname=item.name)
    return kit


def test_every_step_is_recorded_and_a_failure_does_not_stop_the_rest(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    out, work = tmp_path / "out", tmp_path / "work"
    assert node_check.main(["--out", str(out), "--kit", str(kit), "--raw", str(tmp_path / "no-such-set"),
                            "--work", str(work), "--budget-s", "120", "--steps", "kit,facts,tests_gpu,extract,compare",
                            "--timeout", "facts=0.001"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    steps = summary["steps"]
    assert list(steps) == ["kit", "facts", "tests_gpu", "extract", "compare"]  # STEPS' order, not the option's
    assert steps["kit"]["status"] == "ok", steps["kit"]
    # torchcodec's core8 needs libavcodec.so.62 and libswscale.so.9: linked to PyAV's copies, nothing else
    assert steps["kit"]["figures"]["ffmpeg_links"] == ["libavcodec.so.62", "libswscale.so.9"]
    assert steps["kit"]["figures"]["packages"] == 1  # the closure's wheels less those the kit leaves out
    link = work / "kit" / "ffmpeg" / "libavcodec.so.62"
    assert link.resolve() == (work / "kit" / "site" / "av.libs" / "libavcodec-5e6b81c2.so.62.28.102").resolve()
    assert steps["facts"] | {"seconds": 0} == {"status": "timeout", "seconds": 0,
                                             "reason": f"{Path(sys.executable).name} ran past 0 s: stopped (SIGKILL)"}
    assert steps["tests_gpu"] == {"status": "skipped", "seconds": 0.0,
                                  "reason": "CUDA unknown: the facts step did not finish"}
    assert steps["extract"]["status"] == "failed" and "no-such-set" in steps["extract"]["reason"]
    assert steps["compare"]["status"] == "failed" and "left no store" in steps["compare"]["reason"]
    assert summary["acceptance"] == {"gpu_tests_pass": None, "clips_per_s": None, "clips_per_s_min": 8.0,
                                     "clips_per_s_met": None, "nothing_failed": None, "rows_equal": None,
                                     "acoustic_within_tolerance": None}
    log = (out / "steps.log").read_text()
    assert "node_check: extract: failed" in log and "===== facts" in log
    assert len(list(out.iterdir())) <= 8  # what comes back from a device call


def test_a_spent_budget_leaves_the_steps_not_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    node_check.main(["--out", str(out), "--raw", str(tmp_path), "--work", str(tmp_path / "w"), "--budget-s", "1",
                     "--steps", "kit,facts,extract"])
    steps = json.loads((out / "summary.json").read_text())["steps"]
    assert {k: v["status"] for k, v in steps.items()} == dict.fromkeys(("kit", "facts", "extract"), "not run")


def test_the_acceptance_reads_the_steps_figures() -> None:
    summary = {"steps": {"tests_gpu": {"status": "failed"},
                         "extract": {"status": "ok", "figures": {"clips_per_s": 8.4, "failed_pairs": 0,
                                                                 "stopped": None}},
                         "compare": {"status": "ok", "figures": {
                             "frames": {"rows_equal": True},
                             "acoustic": {"rows_equal": False, "within_tolerance": True}}}}}
    assert node_check.acceptance(summary) == {
        "gpu_tests_pass": False, "clips_per_s": 8.4, "clips_per_s_min": 8.0, "clips_per_s_met": True,
        "nothing_failed": True, "rows_equal": False, "acoustic_within_tolerance": True}
    summary["steps"]["extract"]["figures"].update(clips_per_s=7.9, stopped="ran past 220 s")
    got = node_check.acceptance(summary)
    assert got["clips_per_s_met"] is False and got["nothing_failed"] is False


def test_nothing_the_node_lacks_is_imported_before_the_kit() -> None:
    """The node's Python has no ray, zarr, av, pydantic, …: the module's top level imports the standard library
    alone (what a step needs is imported inside it, after the kit step put the kit on the path)."""
    tree = ast.parse((REPO / "bench" / "node_check.py").read_text())
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, top - set(sys.stdlib_module_names)


def test_a_kit_in_pieces_is_joined_and_a_second_call_finds_it_unpacked(tmp_path: Path) -> None:
    """Where kit and clips do not fit one device call, the first call carries the kit (in pieces, as
    deploy/bundle.py cuts them) and unpacks it; the second carries the clips and finds the kit unpacked on the
    same machine. A fresh machine (nothing unpacked, no kit carried) is a failed step that says so."""
    from deploy.bundle import _split

    kit = _kit(tmp_path)
    whole = kit / "kit" / node_check.KIT
    pieces = _split(whole, whole, whole.stat().st_size // 2 + 1)
    assert [p.name for p in pieces] == [f"{node_check.KIT}.000", f"{node_check.KIT}.001"]
    work = tmp_path / "work"

    def kit_step(carried: Path, out: str) -> dict:
        node_check.main(["--out", str(tmp_path / out), "--kit", str(carried), "--work", str(work), "--steps", "kit"])
        return json.loads((tmp_path / out / "summary.json").read_text())["steps"]["kit"]

    first = kit_step(kit, "first")
    assert first["status"] == "ok" and first["figures"]["kit"].startswith("2 piece(s)"), first
    assert first["figures"]["ffmpeg_links"] == ["libavcodec.so.62", "libswscale.so.9"]
    second = kit_step(tmp_path / "clips-only", "second")
    assert second["status"] == "ok" and "an earlier call unpacked" in second["figures"]["kit"], second
    shutil.rmtree(work / "kit")
    fresh = kit_step(tmp_path / "clips-only", "fresh")
    assert fresh["status"] == "failed" and "a fresh machine" in fresh["reason"], fresh


@pytest.mark.slow
def test_the_node_check_s_cpu_steps_run_on_a_tiny_set(tmp_path: Path) -> None:
    """Issue 52: `python -m bench.node_check`'s non-CUDA steps as the node runs them (the kit unpacked, facts,
    the BERT-base-shaped weights, the extraction, the CPU paths' reference run and the comparison of the two
    stores), on two 3 s clips, so that the day a GPU node is lent the check runs as written. The CUDA steps are
    recorded as skipped with their reason."""
    from extractors.text_model import BUNDLED_MINILM, resolve_model_dir
    from testing.scale_raw import make_raw

    raw = make_raw(tmp_path / "clips", 2, 3, sizes=[(320, 180)], fps=["30"])
    out, work = tmp_path / "out", tmp_path / "work"
    kit = _kit(tmp_path, Path(resolve_model_dir(BUNDLED_MINILM)))
    assert node_check.main(["--out", str(out), "--kit", str(kit), "--raw", str(raw),
                            "--work", str(work), "--clips", "2", "--budget-s", "900", "--tiny-bert",
                            "--steps", "kit,facts,weights,tests_gpu,extract,compare"]) == 0
    steps = json.loads((out / "summary.json").read_text())["steps"]
    assert steps["tests_gpu"]["status"] == "skipped" and "CUDA" in steps["tests_gpu"]["reason"]
    for step in ("kit", "facts", "weights", "extract", "compare"):
        assert steps[step]["status"] == "ok", (step, steps[step], (out / "steps.log").read_text()[-3000:])
    assert steps["weights"]["figures"]["shape"] == node_check.TINY_BERT, steps["weights"]
    extract = steps["extract"]["figures"]
    assert extract["clips_done"] == 2 and extract["failed_pairs"] == 0, extract
