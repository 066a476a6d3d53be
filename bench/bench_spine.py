"""Spine figures: `make extract DATASET=sample` wall time against a decode-only floor, DenseNet161
frames/s batched vs one frame at a time, and the peak memory of the whole Ray process tree.

    python -m bench.bench_spine [--device cuda] [--frames 64] [--skip-extract]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bench.memory import run_measured
from extractors.batched import frame_units
from extractors.densenet import DenseNet161, DenseNetConfig
from manifests.sample import make_sample
from media.decode import decode_audio, decode_frames
from store import Store


def decode_floor(raw: Path) -> tuple[float, int]:
    t0, frames = time.perf_counter(), 0
    for video in sorted((raw / "siq2" / "video").glob("*.mp4")):
        frames += len(decode_frames(video).pixels)
        decode_audio(video)
    return time.perf_counter() - t0, frames


def densenet_rates(device: str, n: int, batch: int) -> tuple[float, float]:
    model = DenseNet161(DenseNetConfig(weights="random", batch_size=batch, precision="fp16"), device=device)
    pixels = np.random.default_rng(0).integers(0, 255, (n, 360, 640, 3), dtype=np.uint8)
    model.infer(frame_units(pixels[:batch]))  # warm-up (cuDNN autotune, allocator)

    def rate(step: int) -> float:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(0, n, step):
            model.infer(frame_units(pixels[i:i + step]))  # the extractor's forward, in its precision
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)

    return rate(1), rate(batch)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--frames", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--skip-extract", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_extract:
            raw = make_sample(Path(tmp) / "sample")
            floor_s, n_frames = decode_floor(raw)
            print(f"decode-only floor (frames at 1 fps + 16 kHz audio, one process): {floor_s:.2f} s "
                  f"for {n_frames} frames")
            cmd = [sys.executable, "-m", "pipeline", "extract", "--dataset", "sample", "--raw", str(raw),
                   "--out", str(Path(tmp) / "sample.zarr")]
            wall, peak, code = run_measured(cmd)
            print(f"make extract DATASET=sample (all features, cold store): {wall:.1f} s, exit {code}, "
                  f"ratio to decode floor {wall / floor_s:.1f}x, peak RSS of the process tree {peak / 2**30:.2f} GiB")
            shares = Store(Path(tmp) / "sample.zarr").last_run()["model_seconds"]
            total = sum(shares.values())
            print("model time by feature (share of all extractor time): " + ", ".join(
                f"{f} {t:.1f} s ({100 * t / total:.0f}%)" for f, t in sorted(shares.items(), key=lambda kv: -kv[1])))
            wall2, _, _ = run_measured(cmd)
            print(f"second run (everything cached, no model work): {wall2:.1f} s")
            shutil.rmtree(raw, ignore_errors=True)
    one, batched = densenet_rates(args.device, args.frames, args.batch)
    print(f"DenseNet161 on {args.device} ({torch.get_num_threads()} threads), 360x640 frames incl. preprocessing: "
          f"{one:.2f} frames/s one at a time, {batched:.2f} frames/s in batches of {args.batch} "
          f"({batched / one:.2f}x)")


if __name__ == "__main__":
    main()
