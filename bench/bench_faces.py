"""Faces (MTCNN) throughput: frames/s with frames batched across videos vs one frame per MTCNN call.

    /work/main/.venv/bin/python -m bench.bench_faces [--frames 48] [--height 360] [--width 640] [--batch-size 16]

Frames are scikit-image's astronaut photo pasted at a different scale and place on each uniform-noise frame,
split into 3 videos of the same size (so batches cross video boundaries as in a real run).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from PIL import Image
from skimage.data import astronaut

from extractors.base import Frames
from extractors.faces import FacesConfig, MTCNNFaces


def synthetic_videos(n_frames: int, height: int, width: int, n_videos: int = 3) -> list[Frames]:
    rng = np.random.default_rng(0)
    face = astronaut()
    pixels = rng.integers(0, 256, (n_frames, height, width, 3), dtype=np.uint8)
    for k in range(n_frames):
        side = int(rng.integers(min(height, width) // 3, min(height, width)))
        img = np.asarray(Image.fromarray(face).resize((side, side), Image.BILINEAR))
        y, x = int(rng.integers(0, height - side + 1)), int(rng.integers(0, width - side + 1))
        pixels[k, y : y + side, x : x + side] = img
    videos = []
    for part in np.array_split(np.arange(n_frames), n_videos):
        intervals = np.stack([np.arange(len(part)), np.arange(len(part)) + 1.0], axis=1)
        videos.append(Frames(pixels[part], intervals, intervals[:, 0] + 0.5, 25.0, float(len(part))))
    return videos


def frames_per_s(faces: MTCNNFaces, videos: list[Frames], repeats: int) -> tuple[float, list[np.ndarray]]:
    faces.extract_batch(videos[:1])  # warm-up: first calls allocate and pick kernels
    if faces.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        out = faces.extract_batch(videos)
    elapsed = time.perf_counter() - start
    return repeats * sum(len(v.pixels) for v in videos) / elapsed, [r.extras["count"] for r in out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    videos = synthetic_videos(args.frames, args.height, args.width)
    print(
        f"device={args.device} torch_threads={torch.get_num_threads()} frames={args.frames} size={args.height}x{args.width}"
    )
    figures = {}
    for batch_size in (1, args.batch_size):
        faces = MTCNNFaces(FacesConfig(batch_size=batch_size), device=args.device)
        fps, counts = frames_per_s(faces, videos, args.repeats)
        figures[batch_size] = fps
        n_face = int(sum((c > 0).sum() for c in counts))
        print(f"batch_size={batch_size:3d}: {fps:7.1f} frames/s  ({n_face}/{args.frames} frames with a face)")
    print(f"speed-up batched/one-at-a-time: {figures[args.batch_size] / figures[1]:.2f}x")


if __name__ == "__main__":
    main()
