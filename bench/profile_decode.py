"""Where decode:frames' CPU time goes (issue 37), per 60 s clip of bench/scale_raw.py (640x360 and 1280x720,
30 fps, libx264 as the scale set makes them), in CPU-s (process time: load on other cores does not count):

- `decode:frames (CPU path)`: the whole `decode.decode_frames`, what the decode task runs; and the same with
  GOP tails decoded (`decode.GOP_TAILS = False`, the code before issue 37) and with unwanted non-reference
  pictures decoded (`decode.SKIP_NONREF = False`);
- its parts: `probe_view` (the first frame, for the orientation), `demux` (`_frame_times`: every packet of every
  stream), `decode` (the video decoder over every frame up to the last chosen one; no conversion), `rgb24`
  (swscale's conversion of the chosen frames, `picture.View.rgb`);
- `gop tail`: the share of frames after the last chosen frame of their GOP (what skipping to the next IDR
  keyframe saves: `decode._GopTails`); `non-ref`: the share of frames no other frame refers to (B-frames
  outside a B-pyramid's middle; the scale set's libx264 `ultrafast` clips have none: a B-frame encode shows it,
  `ffmpeg -i clip.mp4 -c:v libx264 -preset veryfast clip-b.mp4`);
- the GPU path's CPU part (media/nvdec.py): `plan_rows` (demux + first frame, on the CPU) and torchcodec's
  exact-mode scan (demuxing again, on the CPU; NVDEC then decodes on the GPU).

    flock /tmp/siq-heavy.lock python -m bench.profile_decode            # makes (or reuses) the two clips
    flock /tmp/siq-heavy.lock python -m bench.profile_decode a.mp4 b.mp4
    python -m bench.profile_decode --device cuda       # on a GPU node: the GPU path's wall and CPU per clip
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench import timed
from media import decode, picture
from media.container import open_media


def _cpu(fn, repeat: int) -> float:
    """The least process time of `repeat` calls of `fn` (the least is the one least disturbed)."""
    return timed(fn, repeat, time.process_time)


def _decode_until(path: Path, last_pts: int, keep: set[int] | None = None) -> list:
    """Every frame decoded up to `last_pts`, one thread, as the CPU path's decoder runs; the frames whose PTS is in
    `keep` returned."""
    out = []
    with open_media(path) as c:
        stream = c.streams.video[0]
        stream.thread_count = 1
        for packet in c.demux(stream):
            for frame in packet.decode():
                if keep is not None and frame.pts in keep:
                    out.append(frame)
                if frame.pts is not None and frame.pts >= last_pts:
                    return out
    return out


def gop_tail(plan: decode.RowPlan) -> float:
    """The share of frames after the last chosen one of their GOP (keyframe to keyframe, display order)."""
    t = plan.timing
    keys = np.sort(t.keys[:, 0])
    wanted = np.sort(t.ticks[plan.index[plan.index >= 0]])
    bounds = np.append(keys, t.ticks[-1] + 1)
    need = 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        w = wanted[(wanted >= a) & (wanted < b)]
        need += int(np.sum((t.ticks >= a) & (t.ticks <= w.max()))) if len(w) else 0
    return 1 - need / len(t.ticks)


def nonref_share(path: Path, last_pts: int) -> float:
    """The share of the frames up to `last_pts` that no other frame refers to (what skip_frame NONREF leaves
    undecoded when unwanted): the pictures a decode with the skip does not give."""
    def count(skip: str) -> int:
        n = 0
        with open_media(path) as c:
            stream = c.streams.video[0]
            stream.thread_count, stream.codec_context.skip_frame = 1, skip
            for packet in c.demux(stream):
                for frame in packet.decode():
                    n += 1
                    if frame.pts is not None and frame.pts >= last_pts:
                        return n
        return n

    everything = count("DEFAULT")
    return 1 - count("NONREF") / everything


def profile_device(path: Path, device: str, repeat: int) -> dict[str, float]:
    """`nvdec.decode_on_device` on `device`: its wall seconds (NVDEC's time and the CPU's together) and its CPU-s
    (demuxing twice, torchcodec's NVDEC parser and submissions, the checks)."""
    import torch

    from media import nvdec

    nvdec.decode_on_device(path, device=device)  # warm: CUDA context, decoder cache
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        nvdec.decode_on_device(path, device=device)
        torch.cuda.synchronize() if device.startswith("cuda") else None
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return {f"GPU path on {device}: wall s": wall, f"GPU path on {device}: CPU-s": cpu}


def profile(path: Path, repeat: int) -> dict[str, float]:
    plan = decode.plan_rows(path)
    chosen = plan.timing.ticks[plan.index[plan.index >= 0]]
    frames = _decode_until(path, int(chosen.max()), set(chosen.tolist()))
    out = {"decode:frames (CPU path)": _cpu(lambda: decode.decode_frames(path), repeat)}
    decode.GOP_TAILS = False  # before issue 37: every GOP decoded to its end
    try:
        out["decode:frames, GOP tails decoded"] = _cpu(lambda: decode.decode_frames(path), repeat)
    finally:
        decode.GOP_TAILS = True
    decode.SKIP_NONREF = False  # unwanted non-reference pictures decoded too
    try:
        out["decode:frames, non-ref decoded"] = _cpu(lambda: decode.decode_frames(path), repeat)
    finally:
        decode.SKIP_NONREF = True

    def probe() -> None:
        with open_media(path) as c:
            picture.probe_view(c, c.streams.video[0], path)

    def demux() -> None:
        with open_media(path) as c:
            decode._frame_times(c, c.streams.video[0], path)

    out["  probe_view"] = _cpu(probe, repeat)
    out["  demux"] = _cpu(demux, repeat)
    out["  decode"] = _cpu(lambda: _decode_until(path, int(chosen.max())), repeat)
    out["  rgb24"] = _cpu(lambda: [plan.view.rgb(f) for f in frames], repeat)
    out["gop tail (share of frames)"] = gop_tail(plan)
    out["non-ref (share of frames)"] = nonref_share(path, int(chosen.max()))
    out["GPU path: plan_rows"] = _cpu(lambda: decode.plan_rows(path), repeat)
    try:
        from torchcodec.decoders import VideoDecoder

        out["GPU path: torchcodec scan"] = _cpu(lambda: VideoDecoder(str(path), device="cpu", seek_mode="exact",
                                                                     num_ffmpeg_threads=1), repeat)
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("videos", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=Path("build/scale"))
    ap.add_argument("--device", help="also run the GPU path (media/nvdec.py) on this device: cuda, cpu")
    args = ap.parse_args()
    videos = args.videos
    if not videos:
        from testing.scale_raw import make_raw

        raw = make_raw(args.cache, 2, 60)
        videos = sorted((raw / "siq2" / "video").glob("*.mp4"))
    rows = {}
    for path in videos:
        with open_media(path) as c:
            s = c.streams.video[0]
            name = f"{path.name} {s.codec_context.width}x{s.codec_context.height}"
        rows[name] = profile(path, args.repeat)
        if args.device:
            rows[name].update(profile_device(path, args.device, args.repeat))
    names = list(rows)
    print(f"{'CPU-s per clip':32s}" + "".join(f"{n:>26s}" for n in names) + f"{'mean':>10s}")
    for stage in rows[names[0]]:
        values = [rows[n].get(stage, float("nan")) for n in names]
        print(f"{stage:32s}" + "".join(f"{v:26.3f}" for v in values) + f"{np.mean(values):10.3f}")


if __name__ == "__main__":
    main()
