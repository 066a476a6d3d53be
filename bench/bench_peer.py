"""Side by side with v-iashin/video_features, the most used tool for the same 1 fps DenseNet161 features.

    python -m bench.bench_peer [--clips 10] [--seconds 60] [--rounds 1]

1. Throughput: ours (`python -m pipeline extract`, frames only, bench/scale.toml: DenseNet161 with random weights,
   batch chosen by calibration) against the peer's recipe, written here from its documentation (no code of its
   copied): every video re-encoded by ffmpeg to 1 fps (`-filter:v fps=fps=1`, audio re-encoded with it, as its
   command keeps the audio), the re-encoded file decoded frame by frame, each frame through torchvision's
   Resize(256) / CenterCrop(224) / ToTensor / Normalize on a PIL image, then the same torchvision DenseNet161 at
   batch 1 (its ResNet extractor with model_name=densenet161: the classifier's input, 2,208-d). Both run as
   subprocesses on the same generated clips (bench/scale_raw.py: 640x360, 30 fps, H.264 + AAC; cached under
   build/scale), alternating `--rounds` times, each sampled with bench/memory.py (wall, CPU s, peak memory of
   its process tree). The ratio is the peer's wall ÷ ours. `--batches 4,8,16` adds our run with each of those
   DenseNet batch sizes pinned, to compare the calibrated choice with fixed ones. The calibration cache is left as it is: a first run
   on a machine includes our measurement (a few seconds per model and frame size), later runs read it;
   `--fresh-calibration` gives our default run a new cache every round, so that each is a first run. Medians over
   the rounds and the default's wall against the best fixed batch's close the table.
2. Frame choice: on index-coded clips (every frame shows its number: testing/synth_video.py) at 30 and 29.97 fps,
   which source frame each method uses for second k. Ours: the frame nearest k + 0.5 s (media/decode.py);
   the peer's: what ffmpeg's fps filter keeps (round=near: the last frame before k + 0.5 s). docs/design.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

from bench.memory import TreeSampler
from bench.scale import CONFIG
from testing.scale_raw import make_raw

GIB = 2**30


def peer_extract(videos: list[Path], tmp: Path, threads: int) -> int:
    """The peer's recipe on `videos`; returns the number of feature rows (each video's are discarded)."""
    import av
    import torch
    from torchvision import transforms

    from extractors.densenet import DenseNetConfig, load_densenet, pooled_features

    torch.set_num_threads(threads)
    model = load_densenet(DenseNetConfig(weights="random"))
    preprocess = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                                     transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    rows = 0
    for video in videos:
        out = tmp / f"{video.stem}_new_fps.mp4"
        subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", str(video),
                        "-filter:v", "fps=fps=1", str(out)], check=True)
        feats = []
        with av.open(str(out)) as container, torch.inference_mode():
            for frame in container.decode(video=0):
                x = preprocess(frame.to_image()).unsqueeze(0)
                feats.append(pooled_features(model, x).numpy())
        rows += len(feats)
        out.unlink()
    return rows


def _measured(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        sampler = TreeSampler(proc.pid, 1.0)
        sampler.start()
        code = proc.wait()
        sampler.stop()
    if code:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {code}; see {log}")
    r = sampler.result()
    return {"wall_s": time.perf_counter() - t0, "cpu_s": r["tree_cpu_s"], "pss": r["peak_pss_bytes"],
            "rss": r["peak_rss_bytes"], "machine": r["machine_cpu_utilisation"]}


def throughput(args: argparse.Namespace) -> None:
    raw = make_raw(args.cache, args.clips, args.seconds, [(640, 360)], ["30"])
    videos = sorted((raw / "siq2" / "video").glob("*.mp4"))
    frames = args.clips * args.seconds
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        configs = {"ours": CONFIG}
        for b in args.batches:  # the same config with a pinned DenseNet batch
            configs[f"ours b={b}"] = Path(tmp) / f"scale-b{b}.toml"
            configs[f"ours b={b}"].write_text(CONFIG.read_text().replace(
                'weights = "random"\n', f'weights = "random"\nbatch_size = {b}\n', 1))
        cmds = {name: [sys.executable, "-m", "pipeline", "extract", "--dataset", "socialiq", "--raw", str(raw),
                       "--out", str(Path(tmp) / "store.zarr"), "--force", "--config", str(config), "--features", "frames"]
                for name, config in configs.items()}
        cmds["peer"] = [sys.executable, "-m", "bench.bench_peer", "--peer-run", tmp, "--threads", str(args.threads),
                        *map(str, videos)]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in cmds}
        for r in range(args.rounds):
            for name, cmd in cmds.items():
                env = None
                if args.fresh_calibration and name == "ours":  # a new user's first run: it calibrates
                    env = {**os.environ, "SIQ_CALIBRATION_FILE": str(Path(tmp) / f"calibration-{r}.json")}
                runs[name].append(_measured(cmd, args.cache / f"peer-{name.replace(' ', '')}.log", env))
    print(f"{args.clips} clips x {args.seconds} s 640x360 30 fps H.264+AAC ({frames} frame rows), "
          f"{args.rounds} round(s), the runs alternating; machine busy (all users) shown per run")
    print(f"{'run':<12}{'wall s':>9}{'frames/s':>10}{'CPU s':>8}{'peak PSS GiB':>14}{'peak RSS GiB':>14}{'busy':>7}")
    for name, rs in runs.items():
        for m in rs:
            print(f"{name:<12}{m['wall_s']:>9.1f}{frames / m['wall_s']:>10.2f}{m['cpu_s']:>8.0f}"
                  f"{m['pss'] / GIB:>14.2f}{m['rss'] / GIB:>14.2f}{m['machine'] or 0:>7.0%}")
    for r in range(args.rounds):
        p = runs["peer"][r]
        print(f"round {r + 1}: " + "; ".join(
            f"{name} {p['wall_s'] / m[r]['wall_s']:.2f}x the peer's speed ({p['cpu_s'] / m[r]['cpu_s']:.2f}x per CPU s)"
            for name, m in runs.items() if name != "peer"))
    med = {name: statistics.median(m["wall_s"] for m in rs) for name, rs in runs.items()}
    print("medians: " + "; ".join(f"{name} {w:.1f} s, peak PSS ≤ {max(m['pss'] for m in runs[name]) / GIB:.2f} GiB"
                                  for name, w in med.items()))
    print("median ratios: " + "; ".join(f"{name} {med['peer'] / w:.2f}x the peer's speed" for name, w in med.items()
                                        if name != "peer"))
    fixed = {name: w for name, w in med.items() if name.startswith("ours b=")}
    if fixed:
        best = min(fixed, key=fixed.__getitem__)
        print(f"default against the best fixed batch ({best}): {med['ours'] / fixed[best]:.3f}x its wall")


def peer_frames(path: Path, tmp: Path) -> list[int]:
    """Source frame indices the peer's 1 fps re-encode keeps (read back from the index-coded pixels)."""
    import av

    from testing.synth_video import read_index

    out = tmp / f"{path.stem}_1fps.mp4"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", str(path), "-filter:v", "fps=fps=1",
                    str(out)], check=True)
    with av.open(str(out)) as c:
        return [read_index(f.to_ndarray(format="gray")) for f in c.decode(video=0)]


def frame_choice(seconds: int = 10) -> None:
    from media.decode import decode_frames
    from testing.synth_video import make_index_video, read_index

    print("frame used for second k (source frame index, its time - k in ms), ours | peer's:")
    with tempfile.TemporaryDirectory() as tmp:
        for rate in ("30", "30000/1001"):
            fps = Fraction(rate)
            path = make_index_video(Path(tmp) / f"index-{rate.replace('/', '_')}.mp4", rate, int(seconds * fps))
            ours = [read_index(p) for p in decode_frames(path).pixels]
            peer = peer_frames(path, Path(tmp))
            ms = lambda i, k, fps=fps: 1000 * (float(i / fps) - k)  # noqa: E731
            cells = [f"{k}: {o} (+{ms(o, k):.0f}) | {p} (+{ms(p, k):.0f})" for k, (o, p) in enumerate(zip(ours, peer, strict=False))]
            differ = sum(o != p for o, p in zip(ours, peer, strict=False))
            print(f"  {float(fps):.3f} fps, {len(ours)} rows ours, {len(peer)} the peer's, {differ} differ: "
                  + "; ".join(cells[:4]) + " ...")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=10)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=1, help="ours then the peer's, this many times")
    ap.add_argument("--threads", type=int, default=None, help="the peer's torch threads (default: all cores)")
    ap.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                    help="also ours with these DenseNet batch sizes pinned, e.g. 4,8,16")
    ap.add_argument("--fresh-calibration", action="store_true",
                    help="our default run gets a new calibration cache each round, so each one calibrates (a first run)")
    ap.add_argument("--cache", type=Path, default=Path("build/scale"))
    ap.add_argument("--peer-run", type=Path, help=argparse.SUPPRESS)  # the peer's process: tmp dir, then videos
    ap.add_argument("videos", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.threads = args.threads or os.cpu_count() or 1
    if args.peer_run:
        print(f"peer: {peer_extract(args.videos, args.peer_run, args.threads)} rows")
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    frame_choice()
    throughput(args)


if __name__ == "__main__":
    main()
