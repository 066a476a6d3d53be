"""Test videos that say how they must look: each picture as displayed shows its own index and which way is up.

The displayed picture (what a player shows) is 96x64 RGB on mid-grey: its index in presentation order as an
8-bit barcode along the top (block b: 12x16 px at x = 12 b, white = bit set) and a red square in the bottom-left
corner. A file stores that picture as the container expects it to be turned back: rotated/mirrored by the
inverse of its display matrix, or squeezed to 64 px wide with a sample aspect ratio of 3:2. Frames are piped as
raw RGB to

    ffmpeg -f rawvideo -pix_fmt rgb24 -s WxH -framerate 12 -i - <codec args> out.<container>

and a display matrix is set by remuxing with PyAV (`VideoStream.set_display_matrix`, ffmpeg's layout). At 15 fps
k + 0.5 s lies exactly between two frames, so the rule's tie (the earlier frame) is exercised every second.

A machine without ffmpeg (a GPU node: bench/node_check.py) takes the files from $SIQ_SYNTH_MEDIA, a folder they
were written to where ffmpeg is: with it set, each file made is also copied there, each file found there is used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

W, H, FPS = 96, 64, 15
BITS, BLOCK_W, BLOCK_H = 8, 12, 16
RED = (220, 30, 30)
ONE = 1 << 16  # 1.0 in the display matrix's 16.16 fixed point

CODECS = {
    "h264": ("-c:v", "libx264", "-preset", "ultrafast", "-crf", "16", "-g", "12", "-bf", "2", "-pix_fmt", "yuv420p"),
    "hevc": ("-c:v", "libx265", "-preset", "ultrafast", "-crf", "18", "-pix_fmt", "yuv420p",
             "-x265-params", "log-level=error:keyint=12:min-keyint=12:bframes=2"),
    "vp9": ("-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-crf", "20", "-b:v", "0", "-g", "12",
            "-pix_fmt", "yuv420p"),
    "av1": ("-c:v", "libsvtav1", "-preset", "12", "-crf", "25", "-g", "12", "-pix_fmt", "yuv420p",
            ),
    "mpeg4": ("-c:v", "mpeg4", "-q:v", "2", "-g", "12", "-bf", "2"),  # MPEG-4 Part 2, B-frames not packed
    "mpeg4-nob": ("-c:v", "mpeg4", "-q:v", "2", "-g", "12", "-bf", "0"),
    "xvid": ("-c:v", "libxvid", "-q:v", "2", "-g", "12", "-bf", "2"),  # packed B-frames in AVI
}


@dataclass(frozen=True)
class Case:
    container: str  # file extension
    codec: str  # key of CODECS
    rotation_ccw: int = 0  # display matrix: av_display_rotation_set(angle) ...
    mirrored: bool = False  # ... then av_display_matrix_flip(hflip)
    sar: tuple[int, int] | None = None  # stored squeezed to W * q / p px wide with this SAR

    @property
    def name(self) -> str:
        extra = (f"-rot{self.rotation_ccw}" if self.rotation_ccw else "") + ("-mirror" if self.mirrored else "")
        extra += f"-sar{self.sar[0]}_{self.sar[1]}" if self.sar else ""
        return f"{self.codec}{extra}.{self.container}"

    @property
    def matrix(self) -> list[int] | None:
        """ffmpeg's display matrix (av_display_rotation_set, then av_display_matrix_flip)."""
        if not self.rotation_ccw and not self.mirrored:
            return None
        cos, sin = (round(np.cos(np.radians(self.rotation_ccw))), round(np.sin(np.radians(self.rotation_ccw))))
        m = [cos * ONE, -sin * ONE, 0, sin * ONE, cos * ONE, 0, 0, 0, 1 << 30]
        if self.mirrored:
            m[0], m[3] = -m[0], -m[3]
        return m

    @property
    def stored_wh(self) -> tuple[int, int]:
        w, h = (H, W) if self.rotation_ccw in (90, 270) else (W, H)
        return (w * self.sar[1] // self.sar[0], h) if self.sar else (w, h)

    def stored(self, display: np.ndarray) -> np.ndarray:
        """The stored pictures that display as `display` (N, H, W, 3): the matrix maps a stored point (x, y) to
        (a x + c y, b x + d y), y down; undone here: mirror back, then turn clockwise by the angle."""
        out = display[:, :, ::-1] if self.mirrored else display
        out = np.rot90(out, -(self.rotation_ccw // 90), axes=(1, 2))
        if self.sar:  # squeezed to width * q / p by dropping columns (the blocks are wide enough to survive it)
            cols = np.arange(self.stored_wh[0]) * self.sar[0] // self.sar[1]
            out = out[:, :, cols]
        return np.ascontiguousarray(out)


def display_frames(n: int) -> np.ndarray:
    """(n, H, W, 3) uint8: picture i shows index i (mod 256) and the red bottom-left square."""
    frames = np.full((n, H, W, 3), 128, np.uint8)
    bits = (np.arange(n)[:, None] >> np.arange(BITS)) & 1
    for b in range(BITS):
        frames[:, :BLOCK_H, b * BLOCK_W:(b + 1) * BLOCK_W] = (bits[:, b] * 255)[:, None, None, None]
    frames[:, H - 24:, :24] = RED
    return frames


def read_index(picture: np.ndarray) -> int:
    """The index a displayed picture shows (block centres thresholded at mid-grey)."""
    grey = picture.astype(np.float64).mean(axis=2)
    return sum(int(grey[4:12, b * BLOCK_W + 3:(b + 1) * BLOCK_W - 3].mean() > 128) << b for b in range(BITS))


def upright(picture: np.ndarray) -> bool:
    """The red square is in the bottom-left corner and nowhere else a wrong turn would put it."""
    def red(region: np.ndarray) -> bool:
        r, g, b = region.reshape(-1, 3).astype(np.float64).mean(axis=0)
        return r > 150 and g < 90 and b < 90

    h, w = picture.shape[:2]
    return red(picture[h - 20:h - 4, 4:20]) and not red(picture[h - 20:h - 4, w - 20:w - 4]) \
        and not red(picture[4:20, 4:20])


MEDIA_CACHE = "SIQ_SYNTH_MEDIA"


def cached_media(path: Path, key: str, make: Callable[[], None]) -> Path:
    """`path`, made by `make()`, or copied from $SIQ_SYNTH_MEDIA/`key` where that file is (made ahead elsewhere);
    with $SIQ_SYNTH_MEDIA set, a file made here is copied there under `key`. `key` names everything the file
    depends on."""
    cache = Path(os.environ[MEDIA_CACHE]) if os.environ.get(MEDIA_CACHE) else None
    if cache and (cache / key).is_file():
        shutil.copyfile(cache / key, path)
        return path
    make()
    if cache:
        cache.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, cache / key)
    return path


def make_case(case: Case, folder: Path, seconds: int = 3) -> Path:
    """Encode `case` (seconds * FPS pictures) into `folder`; returns the file."""
    path = folder / case.name
    return cached_media(path, f"{seconds}s-{case.name}", lambda: _encode_case(case, path, seconds))


def _encode_case(case: Case, path: Path, seconds: int) -> None:
    stored = case.stored(display_frames(seconds * FPS))
    h, w = stored.shape[1:3]
    encoded = path.with_name(f"enc-{path.name}") if case.matrix else path
    sar = ["-vf", f"setsar={case.sar[0]}/{case.sar[1]}"] if case.sar else []
    tag = ["-tag:v", "hvc1"] if case.codec == "hevc" and case.container in ("mp4", "mov") else []
    cmd = ["ffmpeg", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
           "-framerate", str(FPS), "-i", "-", *sar, *CODECS[case.codec], *tag, str(encoded)]
    env = {**os.environ, "SVT_LOG": "1"}  # SVT-AV1 prints its banner otherwise
    subprocess.run(cmd, input=stored.tobytes(), check=True, env=env)
    if case.matrix:
        _remux_with_matrix(encoded, path, case.matrix)
        encoded.unlink()


def _remux_with_matrix(src: Path, dst: Path, matrix: list[int]) -> None:
    import av

    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        stream = out.add_stream_from_template(inp.streams.video[0])
        stream.set_display_matrix(matrix)
        for packet in inp.demux(inp.streams.video[0]):
            if packet.size:  # not the demuxer's empty flush packet
                packet.stream = stream
                out.mux(packet)


def ffmpeg_display(path: Path, case: Case) -> tuple[np.ndarray, list[np.ndarray]]:
    """(display timestamps in seconds on the file's timeline, pictures) of every frame, as ffmpeg itself shows
    them: ffprobe's best-effort timestamps from the file's start (a single-stream file: the clip's time 0, so an
    AVI whose decoder holds back its first pictures shows them late, as ffmpeg does; a picture without one, the
    last ones flushed out of such a decoder, one frame after the previous, as ffmpeg's own output stamps it),
    and ffmpeg's decode (its autorotation, then `scale=iw*sar:ih`) as PPMs.
    A turned anamorphic picture is scaled before it is turned (ffmpeg's autorotation would turn it first, and
    `scale=iw*sar:ih` would then resample the other axis: the same shape, 3/4 the size)."""
    turn = case.sar and case.rotation_ccw in (90, 270) and not case.mirrored
    vf = "scale=iw*sar:ih,setsar=1" + (f",transpose={'cclock' if case.rotation_ccw == 90 else 'clock'}"
                                       if turn else "")
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                            "frame=best_effort_timestamp_time", "-of", "csv=p=0", str(path)],
                           capture_output=True, text=True, check=True).stdout.split()
    origin = float(subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=start_time", "-of", "csv=p=0",
                                  str(path)], capture_output=True, text=True, check=True).stdout.strip() or 0)
    times = np.array([float(v.strip(",")) if v.strip(",") != "N/A" else np.nan for v in probe])
    for i in np.flatnonzero(np.isnan(times)):
        times[i] = times[i - 1] + 1 / FPS if i else origin
    raw = subprocess.run(["ffmpeg", "-v", "error", *(["-noautorotate"] if turn else []), "-i", str(path), "-vf", vf,
                          "-vsync",
                          "passthrough", "-f", "image2pipe", "-c:v", "ppm", "-"], capture_output=True,
                         check=True).stdout
    pictures, at = [], 0
    while at < len(raw):
        magic, size, depth, rest = raw[at:at + 64].split(b"\n", 3)
        w, h = (int(v) for v in size.split())
        start = at + len(magic) + len(size) + len(depth) + 3
        pictures.append(np.frombuffer(raw, np.uint8, h * w * 3, start).reshape(h, w, 3))
        at = start + h * w * 3
    if len(pictures) != len(times):
        raise RuntimeError(f"{path}: ffprobe lists {len(times)} frames, ffmpeg decoded {len(pictures)}")
    return times - origin, pictures
