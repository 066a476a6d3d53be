"""The `covarep` feature per backend (numpy reference, torch): CPU seconds per clip on one core, where they go, what
a GPU would be asked to do, and the reference's own noise that sets the torch backend's tolerances.

    .venv/bin/python -m bench.bench_acoustic_backends [--source espeak|real] [--seconds 60] [--repeats 3]
    .venv/bin/python -m bench.bench_acoustic_backends --noise      # docs/acoustic.md, "Torch backend"

(on a shared machine under `flock /tmp/siq-heavy.lock`). `espeak`: the speech track of bench.scale_raw's clip 0
(espeak-ng words filling 60 s, the clips of ../shared/gpu-run), resampled to 16 kHz as media/audio.py decodes
it; `real`: ../shared/realdata/speech concatenated and repeated (bench.bench_acoustic's input). Times are process
CPU seconds on one core (numpy, BLAS and torch on one thread), so a loaded machine inflates them less than wall
time. It prints per backend: CPU-s per clip (best and median of `--repeats` after a warm-up call), the seconds
inside each kernel of `acoustic.Kernels` and outside them (what stays on the CPU whatever the backend: WORLD's F0,
the zero-phase filters, the GCI walk, the glue), and for torch the aten ops a clip launches, the bytes they read
and write and the bytes crossing the numpy boundary: the inputs of the GPU estimate in docs/scale.md.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # one core: set before numpy / torch load

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from extractors import acoustic  # noqa: E402
from extractors.base import Audio  # noqa: E402
from testing.synth_voice import FS_HZ, synth_vowel  # noqa: E402

# torch ops that only make a view: no kernel runs for them
VIEW_OPS = ("aten.view", "aten.unfold", "aten.slice", "aten.select", "aten.expand", "aten.t.", "aten.transpose",
            "aten.alias", "aten._unsafe_view", "aten.as_strided", "aten.unsqueeze", "aten.permute", "aten.detach",
            "aten.lift_fresh", "aten.squeeze")  # fmt: skip
# ops whose result a CUDA host must wait for: a data-dependent size, or a value read on the host
SYNC_OPS = ("aten.nonzero", "aten._local_scalar_dense", "aten.is_nonzero", "aten.item", "aten._unique", "aten.unique")


def espeak_speech(seconds: float) -> np.ndarray:
    import librosa

    from manifests.sample import SPEECH_RATE_HZ
    from testing.scale_raw import _speech, clip_specs

    with tempfile.TemporaryDirectory() as tmp:
        track, _ = _speech(clip_specs(1, seconds=round(seconds))[0], Path(tmp), {})
    return librosa.resample(track.astype(np.float64), orig_sr=SPEECH_RATE_HZ, target_sr=FS_HZ, res_type="soxr_hq")


def speech(source: str, seconds: float) -> np.ndarray:
    if source == "espeak":
        return espeak_speech(seconds)
    from bench.bench_acoustic import real_speech

    joined = np.concatenate(list(real_speech().values()))
    n = round(seconds * FS_HZ)
    return np.tile(joined, -(-n // joined.size))[:n]


def timed_kernels(kernels: acoustic.Kernels, spent: dict[str, float]) -> acoustic.Kernels:
    """The same kernels, each adding its CPU seconds to spent[name]."""

    def wrap(name: str, fn):  # noqa: ANN001, ANN202
        def timed(*args, **kw):  # noqa: ANN002, ANN003, ANN202
            t0 = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - t0

        return timed

    return acoustic.Kernels(**{f.name: wrap(f.name, getattr(kernels, f.name)) for f in dataclasses.fields(kernels)})


def cpu_seconds(x: np.ndarray, backend: str, repeats: int) -> None:
    audio = Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ)
    ex = acoustic.Covarep(acoustic.CovarepConfig(backend=backend, device="cpu"))
    spent: dict[str, float] = {}
    ex.kernels = timed_kernels(ex.kernels, spent)
    ex.extract(audio)  # warm-up: the LF table, page faults, torch's first calls
    spent.clear()
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        ex.extract(audio)
        times.append(time.process_time() - t0)
    total, inside = float(np.median(times)), sum(spent.values()) / repeats
    print(f"{backend}: {min(times):.3f} CPU-s best, {total:.3f} median per clip; in kernels {inside:.3f}, outside "
          f"{total - inside:.3f} (stays on the CPU)")  # fmt: skip
    engine = "pyworld" if backend == "numpy" else "extractors/world_f0.py"
    print(f"    F0 stage (WORLD DIO + StoneMask, {engine}): {spent.get('dio', 0.0) / repeats:.3f} CPU-s per clip")
    for name, s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"    {name:16s} {s / repeats:6.3f} s  {100 * s / repeats / total:5.1f} %")


def torch_ops(x: np.ndarray) -> None:
    """What the torch backend asks of a device per clip: kernels launched, bytes read and written by them, bytes
    and transfers across the numpy boundary, FFT points, matmul FLOPs (counted on the CPU: the same ops run on
    CUDA)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from extractors import acoustic_torch

    keys = ("ops", "read", "written", "fft_points", "matmul_flops", "h2d", "h2d_bytes", "d2h", "d2h_bytes", "syncs")
    count, f0_count = dict.fromkeys(keys, 0), dict.fromkeys(keys, 0)
    in_f0 = [False]

    def add(key: str, n: int) -> None:
        count[key] += n
        if in_f0[0]:
            f0_count[key] += n

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
            out = func(*args, **(kwargs or {}))
            name = str(func)
            if name.startswith(VIEW_OPS):
                return out
            add("ops", 1)
            if name.startswith(SYNC_OPS):  # on CUDA these wait for the device (a result's size or a host value)
                add("syncs", 1)
            for o in out if isinstance(out, tuple | list) else [out]:
                if isinstance(o, torch.Tensor):
                    add("written", o.numel() * o.element_size())
            add("read", sum(t.numel() * t.element_size() for t in args if isinstance(t, torch.Tensor)))
            if "fft" in name:
                add("fft_points", args[0].numel())
            if name.startswith(("aten.bmm", "aten.mm")):
                add("matmul_flops", 2 * args[0].numel() * args[1].shape[-1])
            return out

    to_device = acoustic_torch.TorchKernels._t

    def counted(self, a):  # noqa: ANN001, ANN202
        t = to_device(self, a)
        add("h2d", 1)
        add("h2d_bytes", t.numel() * t.element_size())
        return t

    def returned(fn):  # noqa: ANN001, ANN202 (every kernel hands back one numpy array: a device-to-host copy)
        def kernel(*args, **kw):  # noqa: ANN002, ANN003, ANN202
            in_f0[0] = fn.__name__ == "dio"
            try:
                out = fn(*args, **kw)
                add("d2h", 1)
                add("d2h_bytes", out.nbytes)
            finally:
                in_f0[0] = False
            return out

        return kernel

    audio = Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ)
    ex = acoustic.Covarep(acoustic.CovarepConfig(backend="torch", device="cpu"))
    ex.extract(audio)
    ex.kernels = acoustic.Kernels(**{f.name: returned(getattr(ex.kernels, f.name))
                                     for f in dataclasses.fields(ex.kernels)})  # fmt: skip
    acoustic_torch.TorchKernels._t = counted
    try:
        with Count():
            ex.extract(audio)
    finally:
        acoustic_torch.TorchKernels._t = to_device
    for what, c in (("torch per clip", count), ("  of which F0 (world_f0)", f0_count)):
        print(f"{what}: {c['ops']} kernels ({c['syncs']} waiting for the device), {c['read'] / 1e9:.2f} GB read, "
              f"{c['written'] / 1e9:.2f} GB written, {c['fft_points'] / 1e6:.1f} M FFT points, "
              f"{c['matmul_flops'] / 1e9:.2f} GFLOP in matmuls; into the kernels {c['h2d']} arrays, "
              f"{c['h2d_bytes'] / 1e6:.0f} MB; out {c['d2h']} results, {c['d2h_bytes'] / 1e6:.0f} MB")  # fmt: skip


def noise_table() -> None:
    """Per column, the reference's change under a float32-ULP nudge of every sample and under a 1-sample delay, and
    the torch backend's (CPU) difference from it: NaN-pattern mismatch, median, p99, max |d| (F0 in cents), the
    worst over the real recordings, an LF vowel pair and 20 s of espeak-ng speech."""
    from bench.bench_acoustic import real_speech

    cols = acoustic.Covarep.columns(acoustic.CovarepConfig())
    signals = dict(real_speech())
    signals["lf_vowels"] = synth_vowel(2.0, lambda t: 110 + 40 * t, lambda t: 0.6 + t, [(0.1, 0.9), (1.1, 1.9)],
                                       noise_rms=1e-3).speech  # fmt: skip
    signals["espeak_20s"] = espeak_speech(20.0)

    def run(x: np.ndarray, backend: str = "numpy") -> np.ndarray:
        x = np.asarray(x, np.float32)
        ex = acoustic.Covarep(acoustic.CovarepConfig(backend=backend, device="cpu"))
        return ex.extract(Audio(x, FS_HZ, x.size / FS_HZ)).features.astype(float)

    def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = []
        for i, name in enumerate(cols):
            both = np.isfinite(a[:, i]) & np.isfinite(b[:, i])
            d = np.abs(a[both, i] - b[both, i]) if name != "f0" else 1200 * np.abs(np.log2(a[both, i] / b[both, i]))
            q = np.percentile(d, [50, 99, 100]) if d.size else np.zeros(3)
            out.append([np.mean(np.isfinite(a[:, i]) != np.isfinite(b[:, i])), *q])
        return np.array(out)

    rng = np.random.default_rng(0)
    worst = {}
    for x in signals.values():
        x = np.asarray(x, np.float32)
        ref = run(x)
        nudged = x + np.spacing(x) * rng.choice(np.array([-1, 1], np.float32), x.size)
        for kind, other in (("ULP nudge", run(nudged)), ("1-sample delay", run(np.concatenate([[0], x[:-1]]))),
                            ("torch (cpu)", run(x, "torch"))):  # fmt: skip
            worst[kind] = np.maximum(worst.get(kind, 0), diff(ref, other))
    for kind, table in worst.items():
        print(f"{kind} (worst of {len(signals)} signals): column, NaN mismatch, median, p99, max |d|")
        for name, row in zip(cols, table, strict=True):
            print(f"    {name:10s} {row[0]:.4f} {row[1]:9.3g} {row[2]:9.3g} {row[3]:9.3g}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", choices=["espeak", "real"], default="espeak")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--noise", action="store_true", help="the tolerance table instead")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    if args.noise:
        noise_table()
        return
    x = speech(args.source, args.seconds)
    print(f"covarep on {args.seconds:.0f} s of {args.source} speech, one core, process CPU seconds")
    for backend in ("numpy", "torch"):
        cpu_seconds(x, backend, args.repeats)
    torch_ops(x)


if __name__ == "__main__":
    main()
