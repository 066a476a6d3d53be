"""Peak RSS growth of one frame-model call (MTCNN or DenseNet161 with random weights), on CPU.

    /work/main/.venv/bin/python -m bench.bench_model_memory [faces|densenet HEIGHT WIDTH FRAMES] [--batch-bytes N]

Without a model it runs a default set, each in its own process (`make bench` imports every benchmark into one
process, whose high-water mark earlier benchmarks would already have raised). The figure is the growth of the process's RSS high-water mark
(`resource.getrusage`) over one `extract_batch` of FRAMES astronaut frames, taken after a small warm-up call and
with the frames already in memory, so it is what the model call itself holds at its peak.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys

import torch

from bench.bench_faces import synthetic_videos


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


DEFAULT_SET = [
    ["faces", "720", "1280", "1"], ["faces", "720", "1280", "8"], ["faces", "3000", "4000", "1"],
    ["densenet", "3000", "4000", "3"], ["densenet", "3000", "4000", "3", "--batch-bytes", "40000000"],
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", choices=["faces", "densenet"])
    parser.add_argument("height", nargs="?", type=int)
    parser.add_argument("width", nargs="?", type=int)
    parser.add_argument("frames", nargs="?", type=int)
    parser.add_argument("--batch-bytes", type=int, default=2**40, help="default: no byte limit")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="frames per forward (pinned: no calibration)")
    args = parser.parse_args()
    if args.model is None:
        for argv in DEFAULT_SET:
            subprocess.run([sys.executable, "-m", "bench.bench_model_memory", *argv, "--threads", str(args.threads)],
                           check=True)
        return
    if args.frames is None:
        parser.error("give HEIGHT WIDTH FRAMES with the model")
    torch.set_num_threads(args.threads)
    videos = synthetic_videos(args.frames, args.height, args.width, n_videos=1)
    if args.model == "faces":
        from extractors.faces import FacesConfig, MTCNNFaces

        model = MTCNNFaces(FacesConfig(batch_size=args.batch, batch_bytes=args.batch_bytes))
    else:
        from extractors.densenet import DenseNet161, DenseNetConfig

        model = DenseNet161(DenseNetConfig(weights="random", batch_size=args.batch, batch_bytes=args.batch_bytes))
    model.extract_batch(synthetic_videos(1, 120, 160, n_videos=1))
    before = peak_rss_bytes()
    model.extract_batch(videos)
    growth, pixels = peak_rss_bytes() - before, videos[0].pixels.nbytes
    limit = "none" if args.batch_bytes >= 2**40 else args.batch_bytes
    print(f"{args.model} {args.frames} frames {args.height}x{args.width} batch {args.batch} batch_bytes={limit}: "
          f"pixels {pixels / 2**20:.0f} MiB, peak RSS growth {growth / 2**20:.0f} MiB ({growth / pixels:.1f}x)")


if __name__ == "__main__":
    main()
