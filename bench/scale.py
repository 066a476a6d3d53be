"""`make bench-scale CLIPS=20 SECONDS=60`: the real extraction on a generated Social-IQ-shaped set, measured.

1. Generates (or reuses, cached by parameters) the raw set: bench/scale_raw.py.
2. Runs `python -m pipeline extract --dataset socialiq --config bench/scale.toml` (what `make extract
   DATASET=socialiq` runs, with offline weights: see bench/scale.toml) as a subprocess on a fresh store.
3. Samples its whole process tree (driver, Ray's GCS/raylet, workers) meanwhile: bench/memory.py.
4. Reads the run report's `stages` (pipeline/stages.py), prints the table and the projection to all of
   Social-IQ, and saves everything as `<store>/_runs/<run id>.scale.json` beside the run report.

Not a `bench_*` module: the plain `make bench` does not run it (a 20-clip run takes about 11 minutes on
2 cores). The figures are explained in docs/scale.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.memory import TreeSampler
from store import runs_dir
from testing.scale_raw import FPS, SIZES, make_raw

CONFIG = Path(__file__).with_name("scale.toml")
GIB = 2**30
MIB = 2**20

# All of Social-IQ (the figures): 1,250 clips, 1,239 annotated minutes -> 74,340 s of video and audio,
# one frame row per second; 8,817 questions in the 2.0 release's qa files (6,159 + 943 + 1,715: CLOSING.md).
FULL = {"clips": 1250, "minutes": 1239, "questions": 8817}
# GPU throughputs measured on an H100 (docs/scale.md, "Batch sizes measured on a GPU"): DenseNet161 and MTCNN at the
# batch their calibration chose, 2026-11-27 (`python -m bench.bench_calibration --device cuda`), per frame size.
GPU_RATES = {
    "frames": ({"360": 1724.0, "720": 820.0}, "frames",
               "DenseNet161 fp16 on an H100 at its calibrated batch: 0.58 ms a frame at 360p (128), 1.22 at 720p (32) "
               "(2026-11-27, bench.bench_calibration; preprocessing of the larger frame included)"),
    "faces": ({"360": 1124.0, "720": 274.0}, "frames",
              "MTCNN (vectorised stages) on an H100 at its calibrated batch, frames with one face: 0.89 ms at 360p "
              "(128), 3.65 at 720p (32) (2026-11-27, bench.bench_calibration; one-frame calls ran 98 / 41 frames/s)"),
    "transcript": (31000.0, "words", "bert_words with BERT-base on an H100, fp32 batch 64: ~31,000 words/s (docs/text.md)"),
    "qa": (4400.0, "questions",
           "no GPU figure for bert_qa: ~600 texts/s on 2 CPU cores with MiniLM (docs/text.md) scaled by bert_words' "
           "H100/CPU ratio (31,000 BERT-base / 4,200 MiniLM words/s): an estimate"),
}
# On CPU a BERT-base-shaped model ran ~260 words/s where MiniLM ran ~4,200 (docs/text.md): the preset's model.
BERT_BASE_OVER_MINILM_CPU = 4200 / 260


def run(args: argparse.Namespace) -> dict[str, Any]:
    raw = make_raw(args.cache, args.clips, args.seconds, args.sizes, args.fps)
    store = args.store or Path(args.cache) / f"store-{args.clips}x{args.seconds}s.zarr"
    shutil.rmtree(store, ignore_errors=True)  # a fresh store: everything is computed
    log = Path(args.cache) / f"extract-{args.clips}x{args.seconds}s.log"
    cmd = [sys.executable, "-m", "pipeline", "extract", "--dataset", "socialiq", "--raw", str(raw),
           "--out", str(store), "--config", str(args.config), *(["--features", args.features] if args.features else [])]
    print("running:", " ".join(cmd), f"(log: {log})", flush=True)
    t0, cpu0 = time.perf_counter(), time.process_time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid, args.interval)
        sampler.start()
        code = proc.wait()
        sampler.stop()
    wall = time.perf_counter() - t0
    reports = sorted(runs_dir(store).glob("*.json"), key=lambda p: p.stat().st_mtime)
    reports = [p for p in reports if not p.name.endswith(".scale.json")]
    if not reports:
        raise RuntimeError(f"the extraction wrote no run report (exit code {code}); see {log}")
    report = json.loads(reports[-1].read_text())
    truth = json.loads((raw / "truth.json").read_text())
    result = {
        "run_id": report["run_id"], "store": str(store), "raw": str(raw), "command": cmd, "exit_code": code,
        "clips": args.clips, "clip_seconds": args.seconds, "sizes": [list(s) for s in args.sizes], "fps": list(args.fps),
        "words": sum(len(t["words"]) for t in truth.values()), "counts": report["counts"],
        "wall_s": round(wall, 2), "run_report_seconds": round(report["seconds"], 2),
        "stages": report.get("stages", {}),
        "resources": {**sampler.result(), "sampler_cpu_s": round(time.process_time() - cpu0, 2)},  # its own cost
    }
    result["store_disk"] = store_disk(store, report["counts"])
    result["summary"] = summarise(result)
    result["projection"] = project(result)
    out = runs_dir(store) / f"{report['run_id']}.scale.json"
    out.write_text(json.dumps(result, indent=1))
    result["saved"] = str(out)
    return result


def store_disk(store: Path, counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Files and bytes of the store after the run (its run reports and manifests included), against the
    (feature, item) pairs it holds: issue 24's "files per pair" (a Zarr v3 part has one zarr.json per array, so a
    store of few items cannot reach the figure a large one does: docs/scale.md, "What each figure means")."""
    files = size = 0
    for p in store.rglob("*"):
        if p.is_file():
            files, size = files + 1, size + p.stat().st_size
    pairs = sum(c.get("done", 0) + c.get("skipped", 0) for c in counts.values())
    return {"files": files, "bytes": size, "pairs": pairs, "files_per_pair": round(files / pairs, 3) if pairs else None}


def summarise(r: dict[str, Any]) -> dict[str, Any]:
    stages = r["stages"]
    work = {k: v for k, v in stages.items() if not k.startswith("commit:")}
    busiest = max(work, key=lambda k: work[k]["busy_s"]) if work else None
    span = (max(v["last_end_s"] for v in stages.values()) - min(v["first_start_s"] for v in stages.values())
            if stages else None)
    return {
        "busiest_stage": busiest, "busiest_busy_s": work[busiest]["busy_s"] if busiest else None,
        "pipeline_span_s": round(span, 2) if span else None,
        "overlap_efficiency": round(r["wall_s"] / work[busiest]["busy_s"], 3) if busiest else None,
        "overlap_efficiency_in_span": round(span / work[busiest]["busy_s"], 3) if busiest else None,
        "cpu_s_total": round(sum(v["cpu_s"] for v in stages.values()), 1),
    }


def _full_units(stage: str, unit: str, r: dict[str, Any]) -> float:
    """The stage's units for all of Social-IQ. Words: this set's words per minute × 1,239 minutes."""
    minutes = FULL["minutes"]
    if unit in ("frames", "audio_s"):
        return minutes * 60.0
    if unit == "words":
        return r["words"] / (r["clips"] * r["clip_seconds"] / 60) * minutes
    if unit == "questions":
        return float(FULL["questions"])
    return float(FULL["clips"])  # items: one per clip (commits)


def project(r: dict[str, Any], cores_big: int = 16) -> dict[str, Any]:
    """Time for all of Social-IQ from the measured per-unit costs. CPU stages: core-seconds per unit (the calls'
    process CPU time) × units, spread over the cores with perfect overlap (a lower bound). GPU stages on the
    16-core + 1 GPU machine: the H100 rates in GPU_RATES, one GPU shared by the models in turn. The driver's
    commits run in one process: a serial floor on any machine."""
    stages, cores = r["stages"], r["resources"]["cores"]
    here, big, gpu = {}, {}, {}
    for name, s in stages.items():
        units = _full_units(name, s["unit"], r)
        core_s = (s["cpu_s_per_unit"] or 0.0) * units
        feature = name.split(":", 1)[1]
        if name.startswith("model:") and feature in ("transcript", "qa"):
            here[name + " (BERT-base)"] = core_s * BERT_BASE_OVER_MINILM_CPU
        here[name] = core_s
        if name.startswith("model:") and feature in GPU_RATES:
            rate, unit, source = GPU_RATES[feature]
            if isinstance(rate, dict):  # per frame size: this set's mix of 360p and 720p frames
                share720 = sum(1 for w, h in _clip_sizes(r) if h >= 720) / max(1, r["clips"])
                seconds = units * (share720 / rate["720"] + (1 - share720) / rate["360"])
                gpu[name + " (360p only)"] = {"s": units / rate["360"], "source": source}
            else:
                seconds = units / rate
            gpu[name] = {"s": seconds, "units": units, "unit": unit, "source": source}
        else:
            big[name] = core_s
    as_run = {k: v for k, v in here.items() if "(BERT-base)" not in k}
    preset = {k: here.get(f"{k} (BERT-base)", v) for k, v in as_run.items()}
    commits = sum(v for k, v in here.items() if k.startswith("commit:"))
    gpu_total = sum(v["s"] for k, v in gpu.items() if not k.endswith("(360p only)"))
    cpu_big = sum(big.values()) / cores_big
    return {
        "full": {**FULL, "frames": FULL["minutes"] * 60, "audio_s": FULL["minutes"] * 60,
                 "words": round(_full_units("", "words", r)),
                 "words_note": "words per minute of this generated set × 1,239 minutes (espeak-ng, one word at a time)"},
        "this_machine": {
            "cores": cores, "core_s_by_stage": {k: round(v, 1) for k, v in here.items()},
            "wall_lower_bound_s (as run: MiniLM)": round(sum(as_run.values()) / cores, 1),
            "wall_lower_bound_s (socialiq preset: BERT-base)": round(sum(preset.values()) / cores, 1),
            "wall_at_this_runs_efficiency_s": round(r["wall_s"] * FULL["minutes"] * 60 / (r["clips"] * r["clip_seconds"]), 1),
        },
        f"{cores_big}_cores_1_gpu": {
            "cpu_core_s_by_stage": {k: round(v, 1) for k, v in big.items()},
            "cpu_wall_lower_bound_s": round(cpu_big, 1),
            "gpu_s_by_stage": {k: {**v, "s": round(v["s"], 1)} for k, v in gpu.items()},
            "gpu_wall_s": round(gpu_total, 1), "driver_commit_floor_s": round(commits, 1),
            "wall_lower_bound_s": round(max(cpu_big, gpu_total, commits), 1),
            "bound_by": max((("CPU stages", cpu_big), ("GPU", gpu_total), ("driver commits", commits)),
                            key=lambda x: x[1])[0],
            "assumes": "this machine's per-core speed on the 16 cores; perfect scaling of CPU stages; GPU models "
                       "one after another on one GPU at the rates measured alone; decode and models overlapping",
        },
    }


def _clip_sizes(r: dict[str, Any]) -> list[tuple[int, int]]:
    sizes = [tuple(s) for s in r["sizes"]]
    return [sizes[i % len(sizes)] for i in range(r["clips"])]


def _rate(s: dict[str, Any]) -> str:
    v = s["units_per_busy_s"]
    if v is None:
        return "-"
    return f"{v:,.2f} ×RT" if s["unit"] == "audio_s" else f"{v:,.1f} {s['unit']}/s"


def table(r: dict[str, Any]) -> str:
    res, summ = r["resources"], r["summary"]
    lines = [f"bench-scale: {r['clips']} clips × {r['clip_seconds']} s, sizes {r['sizes']}, fps {r['fps']} "
             f"({r['words']} words), exit code {r['exit_code']}",
             f"{'stage':<20}{'units':>10} {'unit':<10}{'calls':>6}{'busy s':>9}{'worker s':>10}{'cpu s':>9}"
             f"{'throughput (busy)':>20}{'cpu s/unit':>12}"]
    for name, s in r["stages"].items():
        lines.append(f"{name:<20}{s['units']:>10,.0f} {s['unit']:<10}{s['calls']:>6}{s['busy_s']:>9.1f}"
                     f"{s['worker_s']:>10.1f}{s['cpu_s']:>9.1f}{_rate(s):>20}{(s['cpu_s_per_unit'] or 0):>12.4f}")
    gb = lambda b: f"{b / GIB:.2f} GiB" if b is not None else "n/a"  # noqa: E731
    top = ", ".join(f"{p['name'][:40]} {p['pss'] / MIB:.0f}" for p in res["processes_at_peak"][:6])
    lines += [
        f"end-to-end wall {r['wall_s']:.1f} s (run report {r['run_report_seconds']:.1f} s; first to last stage call "
        f"{summ['pipeline_span_s']} s)",
        f"busiest stage {summ['busiest_stage']} busy {summ['busiest_busy_s']} s: overlap efficiency "
        f"{summ['overlap_efficiency']} (wall ÷ busiest; {summ['overlap_efficiency_in_span']} within the span)",
        f"CPU: tree {res['tree_cpu_s']:.0f} core-s = {res['tree_cpu_utilisation']:.0%} of {res['cores']} cores × wall; "
        f"machine busy {res['machine_cpu_utilisation']:.0%} (all users); GPU "
        + (f"{res['gpu_utilisation_mean']} % mean" if res["gpu_utilisation_mean"] is not None else "none"),
        f"peak memory of the tree: PSS {gb(res['peak_pss_bytes'])}, RSS {gb(res['peak_rss_bytes'])} "
        f"(summed, shared pages counted in each), USS {gb(res['peak_uss_bytes'])}; "
        f"{res['samples']} samples every {res['interval_s']} s",
        f"  at the PSS peak ({res['peak_at_s']} s, MiB PSS): {top}",
        f"Ray object store peak {gb(res['object_store_peak_bytes'])}"
        + (f" ({res['object_store_error']})" if res["object_store_error"] else ""),
    ]
    if "store_disk" in r:
        d = r["store_disk"]
        lines.append(f"store after the run: {d['files']} files, {d['bytes'] / 1e6:.1f} MB for {d['pairs']} (feature, item) "
                     f"pairs: {d['files_per_pair']} files a pair")
    p = r["projection"]
    here, big = p["this_machine"], p["16_cores_1_gpu"]
    lines += [
        f"projection to all of Social-IQ ({p['full']['clips']} clips, {p['full']['frames']:,} frames, "
        f"{p['full']['audio_s'] / 3600:.1f} h audio, ~{p['full']['words']:,} words [{p['full']['words_note']}], "
        f"{p['full']['questions']:,} questions):",
        f"  this machine ({here['cores']} cores): ≥ {here['wall_lower_bound_s (as run: MiniLM)'] / 3600:.1f} h as run "
        f"(MiniLM), ≥ {here['wall_lower_bound_s (socialiq preset: BERT-base)'] / 3600:.1f} h with BERT-base; "
        f"{here['wall_at_this_runs_efficiency_s'] / 3600:.1f} h at this run's wall per clip-second",
    ]
    lines += [f"    {k:<32}{v / 3600:>8.2f} core-h" for k, v in here["core_s_by_stage"].items()]
    lines += [f"  16 cores + 1 GPU: ≥ {big['wall_lower_bound_s']:.0f} s ({big['wall_lower_bound_s'] / 60:.1f} min), "
              f"bound by {big['bound_by']}: CPU stages {big['cpu_wall_lower_bound_s']:.0f} s, GPU {big['gpu_wall_s']:.0f} s, "
              f"driver commits {big['driver_commit_floor_s']:.0f} s"]
    lines += [f"    GPU {k:<28}{v['s']:>8.0f} s  [{v['source']}]" for k, v in big["gpu_s_by_stage"].items()]
    lines += [f"    CPU {k:<28}{v / 16:>8.0f} s on 16 cores" for k, v in big["cpu_core_s_by_stage"].items()]
    lines.append(f"saved: {r.get('saved')}")
    return "\n".join(lines)


def _size(text: str) -> tuple[int, int]:
    w, h = text.lower().split("x")
    return int(w), int(h)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="the scale benchmark (docs/scale.md)")
    p.add_argument("--clips", type=int, default=20)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--sizes", type=_size, nargs="+", default=list(SIZES), help="e.g. 640x360 1280x720 (alternating)")
    p.add_argument("--fps", nargs="+", default=list(FPS), help="exact rates, alternating: 30 30000/1001")
    p.add_argument("--cache", type=Path, default=Path("build/scale"), help="generated sets and stores")
    p.add_argument("--store", type=Path, help="default: <cache>/store-<clips>x<seconds>s.zarr (replaced)")
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--features", help="a subset, comma-separated")
    p.add_argument("--interval", type=float, default=1.0, help="sampling interval, seconds")
    args = p.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> None:
    print(table(run(parse_args(argv))))


if __name__ == "__main__":
    main()
