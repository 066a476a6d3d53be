"""DenseNet161's CPU forward as the extractor runs it (channels_last) against the plain NCHW torchvision model:
CPU and wall ms a frame at one batch, interleaved rounds, and the largest feature difference.

    python -m bench.bench_densenet_cpu [--threads 2] [--batch 8] [--rounds 8]

CPU time is the process's (all its threads): on a shared machine it moves less than the wall time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from extractors.densenet import DenseNet161, DenseNetConfig, pooled_features


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ours = DenseNet161(DenseNetConfig(weights="random"))
    plain = DenseNet161(DenseNetConfig(weights="random"))
    plain.model = plain.model.to(memory_format=torch.contiguous_format)
    x = torch.randn(args.batch, 3, 224, 224)
    runs = {"channels_last (ours)": lambda: torch.inference_mode()(pooled_features)(
                ours.model, x.contiguous(memory_format=torch.channels_last)).numpy(),  # as DenseNet161.forward
            "plain NCHW": lambda: torch.inference_mode()(pooled_features)(plain.model, x.contiguous()).numpy()}
    ref, got = runs["plain NCHW"](), runs["channels_last (ours)"]()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            c0, w0 = time.process_time(), time.perf_counter()
            run()
            times[name].append(((time.process_time() - c0) / args.batch, (time.perf_counter() - w0) / args.batch))
    print(f"DenseNet161 on CPU, {args.threads} threads, batch {args.batch}, {args.rounds} interleaved rounds; "
          f"features differ by at most {np.abs(got - ref).max():.2e}")
    base = np.median([c for c, _ in times["plain NCHW"]])
    for name, t in times.items():
        cpu, wall = np.median([c for c, _ in t]), np.median([w for _, w in t])
        print(f"  {name:<22} CPU {cpu * 1e3:7.1f} ms a frame (median; ×{cpu / base:.2f}), wall {wall * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
