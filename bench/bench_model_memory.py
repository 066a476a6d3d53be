"""Peak RSS growth of one frame-model call (MTCNN or DenseNet161 with random weights), on CPU.

    /work/main/.venv/bin/python -m bench.bench_model_memory faces|densenet HEIGHT WIDTH FRAMES [--batch-bytes N]

Run one measurement per process: the figure is the growth of the process's RSS high-water mark
(`resource.getrusage`) over one `extract_batch` of FRAMES astronaut frames, taken after a small warm-up call and
with the frames already in memory, so it is what the model call itself holds at its peak.
"""

from __future__ import annotations

import argparse
import resource

import torch

from bench.bench_faces import synthetic_videos


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=["faces", "densenet"])
    parser.add_argument("height", type=int)
    parser.add_argument("width", type=int)
    parser.add_argument("frames", type=int)
    parser.add_argument("--batch-bytes", type=int, default=2**40, help="default: no byte limit")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    videos = synthetic_videos(args.frames, args.height, args.width, n_videos=1)
    if args.model == "faces":
        from extractors.faces import FacesConfig, MTCNNFaces

        model = MTCNNFaces(FacesConfig(batch_size=64, batch_bytes=args.batch_bytes))
    else:
        from extractors.densenet import DenseNet161, DenseNetConfig

        model = DenseNet161(DenseNetConfig(weights="random", batch_size=64, batch_bytes=args.batch_bytes))
    model.extract_batch(synthetic_videos(1, 120, 160, n_videos=1))
    before = peak_rss_bytes()
    model.extract_batch(videos)
    growth, pixels = peak_rss_bytes() - before, videos[0].pixels.nbytes
    limit = "none" if args.batch_bytes >= 2**40 else args.batch_bytes
    print(f"{args.model} {args.frames} frames {args.height}x{args.width} batch_bytes={limit}: "
          f"pixels {pixels / 2**20:.0f} MiB, peak RSS growth {growth / 2**20:.0f} MiB ({growth / pixels:.1f}x)")


if __name__ == "__main__":
    main()
