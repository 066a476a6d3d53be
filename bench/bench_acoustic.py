"""Throughput of the `covarep` feature on one CPU core: seconds of audio per second of compute, and each group's share.

Run: `.venv/bin/python -m bench.bench_acoustic [--seconds 30] [--repeats 4]`. The audio is synthetic speech-like material
(LF-model vowels with moving F0 and Rd, 65 % voiced, pauses with noise), made in the script.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # one core: set before numpy / numba load

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from extractors import acoustic, glottal  # noqa: E402
from extractors.base import Audio  # noqa: E402
from tests.synth_voice import FS_HZ, synth_vowel  # noqa: E402


def speech_like(seconds: float) -> np.ndarray:
    spans, t = [], 0.1
    rng = np.random.default_rng(0)
    while t < seconds - 0.5:
        length = rng.uniform(0.2, 0.9)
        spans.append((t, min(t + length, seconds - 0.1)))
        t += length + rng.uniform(0.05, 0.4)
    voice = synth_vowel(
        seconds, lambda t: 140 + 50 * np.sin(1.3 * t), lambda t: 1.5 + np.sin(0.4 * t), spans, noise_rms=1e-3
    )
    return voice.speech


def groups(x: np.ndarray, cfg: acoustic.CovarepConfig) -> dict[str, float]:
    """Seconds per parameter group over `cfg.block_s` blocks (the same calls analyse_block makes)."""
    spent = dict.fromkeys(["f0 + voicing (pyworld)", "glottal (IAIF, GCI, NAQ..MDQ)", "peak slope", "mfcc"], 0.0)
    step = round(cfg.block_s * 100) * acoustic.HOP
    for start in range(0, x.size, step):
        block = x[start : start + step]
        n = block.size // acoustic.HOP
        t0 = time.perf_counter()
        f0 = acoustic.f0_rows(block, n, cfg)
        voiced = (f0 >= cfg.f0_floor_hz) & (f0 <= cfg.f0_ceil_hz) & (acoustic.rms_dbfs(block, n) > cfg.silence_dbfs)
        t1 = time.perf_counter()
        x_hp = glottal.highpass(block, FS_HZ)
        acoustic.glottal_rows(x_hp, f0, voiced, cfg)
        t2 = time.perf_counter()
        glottal.peak_slope(x_hp, n, acoustic.HOP)
        t3 = time.perf_counter()
        acoustic.mfcc_rows(block, n, cfg)
        t4 = time.perf_counter()
        for key, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[key] += dt
    return spent


def whole_set(audio: Audio, cfg: acoustic.CovarepConfig, repeats: int) -> tuple[float, float, float]:
    """(first call, median of the later calls, voiced fraction). The first call in a process also pays for
    first-touch page faults (about 200 MB, mostly inside pyworld's DIO); later calls reuse that memory, as a
    long-running pipeline worker does."""
    times, rows = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows = acoustic.Covarep(cfg).extract(audio)
        times.append(time.perf_counter() - t0)
    later = float(np.median(times[1:])) if len(times) > 1 else times[0]
    return times[0], later, rows.attrs["voiced_fraction"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=4, help="whole-set runs with dio (harvest runs once)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    x = speech_like(args.seconds)
    audio = Audio(x, FS_HZ, x.size / FS_HZ)
    acoustic.Covarep(acoustic.CovarepConfig(f0_method="dio")).extract(Audio(x[:16000], FS_HZ, 1.0))  # JIT warm-up
    print(f"covarep on {args.seconds:.0f} s of synthetic speech-like audio, one core")
    for method, repeats in (("dio", max(1, args.repeats)), ("harvest", 1)):
        cfg = acoustic.CovarepConfig(f0_method=method)
        first, later, voiced = whole_set(audio, cfg, repeats)
        print(f"  {method:8s} whole set, first call: {first:6.2f} s -> {args.seconds / first:6.1f}x real time "
              f"(voiced fraction {voiced:.2f})")  # fmt: skip
        if repeats > 1:
            print(f"  {method:8s} whole set, median of the {repeats - 1} later calls: {later:6.2f} s -> "
                  f"{args.seconds / later:6.1f}x real time")  # fmt: skip
        spent = groups(x.astype(np.float64), cfg)
        for key, dt in spent.items():
            print(f"      {key:32s} {dt:6.2f} s  {100 * dt / sum(spent.values()):5.1f} %")


if __name__ == "__main__":
    main()
