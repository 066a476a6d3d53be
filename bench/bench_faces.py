"""Faces (MTCNN) throughput: one frame per call vs batched, facenet-pytorch's per-box stages 2/3 vs vectorised.

    /work/main/.venv/bin/python -m bench.bench_faces [--sizes 360x640 720x1280] [--frames 16] [--batch-size 16]
        [--device cpu|cuda] [--threads N] [--repeats 2] [--clock wall|cpu]

Frames are scikit-image's astronaut photo pasted at a different scale and place on each uniform-noise frame,
split into 3 videos of the same size (so batches cross video boundaries as in a real run). For each size it prints
frames/s of the extractor in four ways (facenet-pytorch `MTCNN.detect` or `mtcnn_stages.detect`, batch 1 or
`--batch-size`), checks that all four find the same faces, and splits one batched call into stage 1 (P-net, the
same code in both) and stages 2+3 (per-box loop vs vectorised). Times are the best of `--repeats`; `--clock cpu`
times this process's CPU seconds instead of wall time (with `--threads 1` on a shared machine, other processes then
barely move the figures; a CUDA run needs wall time).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image
from skimage.data import astronaut

from extractors import mtcnn_stages
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


CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["wall"]


def best_s(fn: Callable[[], object], device: str, repeats: int) -> float:
    """Best time of `repeats` calls after one warm-up (first calls allocate and pick kernels)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = clock()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(clock() - start)
    return min(times)


def stage_split_ms(faces: MTCNNFaces, pixels: np.ndarray, repeats: int) -> dict[str, float]:
    """One batched call split into stage 1 and stages 2+3, per frame, for both implementations."""
    batch = torch.from_numpy(pixels).to(faces.device)
    mtcnn, dev, n = faces.mtcnn, faces.device, len(pixels)
    with torch.inference_mode():
        imgs = batch.permute(0, 3, 1, 2).float()
        boxes, _ = mtcnn_stages.stage_one(mtcnn, imgs)
        stage1 = best_s(lambda: mtcnn_stages.stage_one(mtcnn, imgs), dev, repeats)
        facenet = best_s(lambda: mtcnn.detect(batch, landmarks=True), dev, repeats)
        vectorised = best_s(lambda: mtcnn_stages.detect(mtcnn, batch), dev, repeats)
    return {"boxes_per_frame": len(boxes) / n, "stage1": stage1 / n * 1e3,
            "loop23": (facenet - stage1) / n * 1e3, "vec23": (vectorised - stage1) / n * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["360x640", "720x1280"], help="HxW")
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--clock", choices=sorted(CLOCK), default="wall")
    args = parser.parse_args()
    global clock
    clock = CLOCK[args.clock]
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"device={args.device} torch_threads={torch.get_num_threads()} frames={args.frames} "
          f"batch_size={args.batch_size} repeats={args.repeats} (best of) clock={args.clock}")
    for size in args.sizes:
        height, width = (int(v) for v in size.split("x"))
        videos = synthetic_videos(args.frames, height, width)
        fps, counts = {}, {}
        for vectorised in (False, True):
            for batch_size in (1, args.batch_size):
                faces = MTCNNFaces(FacesConfig(batch_size=batch_size, vectorised=vectorised, batch_bytes=2**40),
                                   device=args.device)
                out: list = []
                seconds = best_s(lambda f=faces, o=out, v=videos: o.append(f.extract_batch(v)), args.device, args.repeats)
                fps[vectorised, batch_size] = args.frames / seconds
                counts[vectorised, batch_size] = np.concatenate([r.extras["count"] for r in out[-1]]).tolist()
        same = all(c == counts[False, 1] for c in counts.values())
        split = stage_split_ms(faces, np.concatenate([v.pixels for v in videos])[: args.batch_size], args.repeats)
        base = fps[False, 1]
        print(f"{size}: frames/s (×facenet batch 1)  facenet: batch 1 {base:.1f}, batch {args.batch_size} "
              f"{fps[False, args.batch_size]:.1f} ({fps[False, args.batch_size] / base:.2f}×) | vectorised: batch 1 "
              f"{fps[True, 1]:.1f} ({fps[True, 1] / base:.2f}×), batch {args.batch_size} "
              f"{fps[True, args.batch_size]:.1f} ({fps[True, args.batch_size] / base:.2f}×) | same faces: {same} "
              f"({sum(c > 0 for c in counts[False, 1])}/{args.frames} frames with a face)")
        print(f"{size}: one call of {args.batch_size} frames, ms/frame: stage 1 {split['stage1']:.1f} "
              f"({split['boxes_per_frame']:.0f} candidate boxes/frame); stages 2+3 per-box loop {split['loop23']:.1f} "
              f"vs vectorised {split['vec23']:.1f}")


if __name__ == "__main__":
    main()
