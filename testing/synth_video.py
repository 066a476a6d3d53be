"""Index-coded test videos, made in seconds: every frame shows its own index as 18 black/white blocks.

A 64x48 grey frame holds a 6 x 3 grid of 10 x 16 px blocks (bit b at row b // 6, column b % 6, least
significant bit top left); 18 bits count to 262,143 frames, two and a half hours at 29.97 fps. Frames are
piped as raw grey to

    ffmpeg -f rawvideo -pix_fmt gray -s 64x48 -framerate FPS -i - -c:v libx264 -preset ultrafast \
           -bf 3 -g 250 -pix_fmt yuv420p out.mp4

(B-frames on, so presentation order differs from decode order); about 20,000 frames a second on one core.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

W, H = 64, 48
BITS, COLS, BLOCK_W, BLOCK_H = 18, 6, 10, 16


def index_frames(indices: np.ndarray) -> np.ndarray:
    """(N, H, W) uint8 grey frames showing `indices`."""
    bits = (indices[:, None] >> np.arange(BITS)) & 1
    grid = bits.reshape(-1, BITS // COLS, COLS).astype(np.uint8) * 255
    frames = np.zeros((len(indices), H, W), np.uint8)
    frames[:, :, 2:2 + COLS * BLOCK_W] = grid.repeat(BLOCK_H, axis=1).repeat(BLOCK_W, axis=2)
    return frames


def read_index(frame: np.ndarray) -> int:
    """Inverse of `index_frames` on one decoded RGB or grey frame (block centres thresholded at mid-grey)."""
    grey = frame.mean(axis=2) if frame.ndim == 3 else frame
    value = 0
    for b in range(BITS):
        r, c = divmod(b, COLS)
        block = grey[r * BLOCK_H + 4:(r + 1) * BLOCK_H - 4, 2 + c * BLOCK_W + 3:2 + (c + 1) * BLOCK_W - 3]
        value |= int(block.mean() > 128) << b
    return value


def make_index_video(path: Path, fps: str, n_frames: int, extra_args: tuple[str, ...] = ()) -> Path:
    """`n_frames` index-coded frames at `fps` (exact, as ffmpeg takes it: "30000/1001") into `path`."""
    cmd = ["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "gray", "-s", f"{W}x{H}",
           "-framerate", fps, "-i", "-", "-c:v", "libx264", "-preset", "ultrafast", "-bf", "3", "-g", "250",
           "-pix_fmt", "yuv420p", *extra_args, str(path)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    assert proc.stdin is not None
    for start in range(0, n_frames, 4096):
        proc.stdin.write(index_frames(np.arange(start, min(n_frames, start + 4096))).tobytes())
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError(f"ffmpeg failed making {path}")
    return path


def make_timed_video(path: Path, times_ms: list[int]) -> Path:
    """Variable frame rate: frame i (showing index i) at `times_ms[i]` exactly, libx264 with B-frames, via PyAV."""
    from fractions import Fraction

    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", options={"preset": "ultrafast", "bf": "3"})
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.codec_context.time_base = Fraction(1, 1000)
        frames = index_frames(np.arange(len(times_ms)))
        for t_ms, grey in zip(times_ms, frames, strict=True):
            frame = av.VideoFrame.from_ndarray(grey, format="gray").reformat(format="yuv420p")
            frame.pts, frame.time_base = t_ms, Fraction(1, 1000)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def damage_packets(path: Path, out: Path, hit) -> list[tuple[str, float]]:
    """Copy `path` to `out` with every packet for which `hit(stream_type, seconds)` is true overwritten by 0xFF
    bytes (the container's index stays intact, so demuxing works and decoding those packets fails).
    Returns the (stream type, seconds) of the damaged packets."""
    import av

    data = bytearray(path.read_bytes())
    damaged = []
    with av.open(str(path)) as container:
        for packet in container.demux():
            if packet.size and packet.pts is not None:
                t = float(packet.pts * packet.time_base)
                if hit(packet.stream.type, t):
                    data[packet.pos:packet.pos + packet.size] = b"\xff" * packet.size
                    damaged.append((packet.stream.type, t))
    out.write_bytes(bytes(data))
    return damaged
