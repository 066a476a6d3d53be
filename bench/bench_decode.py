"""Decode throughput of the 1 fps sampling: rows (picked frames) per second and source frames per second, on a
60 min 29.97 fps 64x48 clip (testing/synth_video.py) and a 60 s 1280x720 30 fps testsrc2 clip (libx264 veryfast,
B-frames), with decord's get_batch on the same rows as the before figure (decord was the decoder until
DECODE_VERSION 3). One process, one thread each; run under the shared lock, timings are load-dependent."""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from media.decode import decode_frames


def _decord_rows(path: Path, index: np.ndarray) -> int | None:
    try:  # no longer a dependency: the before figure is printed where it is installed
        import decord
    except ImportError:
        return None

    reader = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1)
    reader.get_frame_timestamp(range(len(reader)))
    return len(reader.get_batch(index.tolist()).asnumpy())


def main() -> None:
    from testing.synth_video import make_index_video

    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        long_clip = make_index_video(Path(tmp) / "long.mp4", "30000/1001", int(args.minutes * 60 * 30000 / 1001))
        hd = Path(tmp) / "hd.mp4"
        subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30:duration=60",
                        "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", str(hd)], check=True)
        for name, path in (("60 min 64x48 29.97 fps", long_clip), ("60 s 1280x720 30 fps", hd)):
            t0 = time.perf_counter()
            frames = decode_frames(path)
            pyav_s = time.perf_counter() - t0
            n_source = round(frames.duration_s * frames.source_fps)
            t0 = time.perf_counter()
            index = np.round(frames.pts_s * frames.source_fps).astype(int)
            runs = [("PyAV (now)", pyav_s)]
            if _decord_rows(path, index) is not None:
                runs.append(("decord (before)", time.perf_counter() - t0))
            else:
                print(f"{name}: decord (before): not installed, skipped")
            for what, secs in runs:
                print(f"{name}: {what}: {len(frames.pixels)} rows in {secs:.2f} s = {len(frames.pixels) / secs:.0f} rows/s "
                      f"({n_source / secs:.0f} source frames/s)")


if __name__ == "__main__":
    main()
