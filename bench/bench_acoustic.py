"""Throughput of the `covarep` feature on one CPU core, each stage's share, and the voicing table on real speech.

Run: `.venv/bin/python -m bench.bench_acoustic [--seconds 60] [--repeats 5]` (on a shared machine:
`flock /tmp/siq-heavy.lock taskset -c 0 .venv/bin/python -m bench.bench_acoustic`). The audio is the real recordings
of ../shared/realdata/speech (tests/conftest.py's realdata_dir()) at 16 kHz, concatenated and repeated up to
`--seconds`; where they are absent, synthetic speech-like LF vowels (said in the output).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # one core: set before numpy / numba load

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from extractors import acoustic, glottal, harmonics, mcep, rd_conf  # noqa: E402
from extractors.base import Audio  # noqa: E402
from pipeline.actors import keep_heap  # noqa: E402
from testing.realdata import realdata_dir  # noqa: E402
from testing.synth_voice import FS_HZ, synth_vowel  # noqa: E402

SPEECH = ("arctic_a0007", "amfm_sample", "covarep_0011.arctic_bdl1", "covarep_DB-cresc-a-D4-m1",
          "covarep_glottalized-m1")  # fmt: skip
BEFORE = acoustic.CovarepConfig(f0_method="harvest", voicing_nccf=0.0, f0_refine=False)  # version 2's default


def real_speech() -> dict[str, np.ndarray]:
    root = realdata_dir()
    if root is None:
        return {}
    from testing.speech import speech_16k

    return {name: speech_16k(root, name) for name in SPEECH if (root / "speech" / f"{name}.wav").is_file()}


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
    return voice.speech.astype(np.float64)


def stages(x: np.ndarray, cfg: acoustic.CovarepConfig) -> dict[str, float]:
    """Seconds per stage over `cfg.block_s` blocks (the calls analyse_block and extract make, in their order)."""
    spent: dict[str, float] = {}

    def timed(key: str, fn, *args, **kwargs):  # noqa: ANN001, ANN202, ANN003
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        spent[key] = spent.get(key, 0.0) + time.perf_counter() - t0
        return out

    step = round(cfg.block_s * 100) * acoustic.HOP
    for start in range(0, x.size, step):
        block = x[start : start + step]
        n = block.size // acoustic.HOP
        block = block[: n * acoustic.HOP]
        f0 = timed("f0 (DIO + StoneMask)" if cfg.f0_method == "dio" else "f0 (Harvest)", acoustic.f0_rows, block, n, cfg)
        x_hp = timed("high-pass", glottal.highpass, block, FS_HZ)
        floor = timed("voicing (RMS gate + NCCF)", acoustic.relative_floor_dbfs, block, n, cfg)
        voiced = timed("voicing (RMS gate + NCCF)", acoustic.voicing, block, x_hp, f0, cfg, floor)
        loud = timed("voiced runs grown (NCCF)", acoustic.loud_rows, block, n, cfg, floor)
        f0, voiced = timed("voiced runs grown (NCCF)", acoustic.grow_voicing, x_hp, f0, voiced, loud, cfg)
        if cfg.seed_acf > 0:
            f0, seeded = timed("autocorrelation seeds", acoustic.seed_voicing, x_hp, f0, voiced, loud, cfg)
            if (seeded & ~voiced).any():
                f0, voiced = timed("autocorrelation seeds", acoustic.grow_voicing, x_hp, f0, seeded, loud, cfg, seeded & ~voiced)
        if cfg.harmonic_check:
            f0, voiced = timed("harmonic check (NCCF)", acoustic.harmonic_check, x_hp, f0, voiced, loud, cfg)
        if cfg.f0_refine:
            f0 = timed("F0 refinement (NCCF peak)", acoustic.refine_f0, x_hp, f0, voiced, cfg)
        cols = timed("glottal (IAIF, GCI, NAQ..Rd)", acoustic.glottal_rows, x_hp, f0, voiced, cfg)
        timed("peak slope", acoustic.peak_slope_rows, x_hp, n, cfg)
        if cfg.layout == "mfcc23":
            timed("mfcc", acoustic.mfcc_rows, block, n, cfg)
            continue
        # spectral_rows, stage by stage
        sign = float(cols.get("polarity", np.ones(1))[0])
        centres = np.arange(n) * acoustic.HOP + acoustic.HOP // 2
        track = timed("SRH (COVAREP's instants)", acoustic.srh_track, block)
        f0_srh = acoustic.srh_instant_f0(track, np.flatnonzero(acoustic.srh_rows(f0, voiced, np.arange(n))))
        f0w = acoustic.window_f0(block, f0, voiced, centres, np.arange(n), srh_median=track[2], srh_f0_rows=f0_srh)
        spec = timed("3-period spectra + harmonics", mcep.frame_spectra, sign * block, centres, f0w, FS_HZ)
        h = timed("3-period spectra + harmonics", harmonics.pick, spec, f0w, FS_HZ)
        timed("MCEP (true envelope)", mcep.mcep_rows, spec, f0w, FS_HZ)
        timed("HMPD (4096-point spectra, harmonics, PD)", acoustic.hmpd_columns, block, f0, voiced, sign, track=track)
        timed("Rd_conf (MSP)", rd_conf.rd_conf_rows, h)
    timed("band check (Welch)", acoustic.low_band, x)
    return spent


def voicing_table(files: dict[str, np.ndarray]) -> None:
    """Voicing F1 and F0 errors against Praat per file: version 2's default (Harvest) and this one."""
    try:
        from testing.speech import GROSS_CENTS, cents, extract, f1, praat_f0
    except ImportError:  # parselmouth is a test dependency
        print("  (voicing table skipped: praat-parselmouth not installed)")
        return
    print("  voicing vs Praat (to_pitch_ac 60-500 Hz); F0 on rows both call voiced: median cents / gross > 20 %")
    print(f"  {'file':28s} {'s':>5s} | {'before: harvest':>26s} | {'after: dio + NCCF, refined':>26s}")
    pooled: dict[str, list] = {"before": [], "after": []}
    for name, x in files.items():
        cells = []
        for key, cfg in (("before", BEFORE), ("after", acoustic.CovarepConfig())):
            f0, voiced = extract(x, cfg)
            praat = praat_f0(x, f0.size)
            both = voiced & np.isfinite(praat)
            err = cents(f0[both], praat[both])
            pooled[key].append((voiced, np.isfinite(praat)))
            cells.append(f"F1 {f1(voiced, np.isfinite(praat)):.3f} {np.median(err):4.1f} c "
                         f"{100 * np.mean(err > GROSS_CENTS):4.1f} %")  # fmt: skip
        print(f"  {name:28s} {x.size / FS_HZ:5.1f} | {cells[0]:>26s} | {cells[1]:>26s}")
    tot = [f1(np.concatenate([v for v, _ in p]), np.concatenate([r for _, r in p])) for p in pooled.values()]
    print(f"  {'all files (pooled rows)':28s} {'':5s} | {'F1 ' + format(tot[0], '.3f'):>26s} | "
          f"{'F1 ' + format(tot[1], '.3f'):>26s}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=5, help="whole-set calls; the first pays page faults")
    parser.add_argument("--default-heap", action="store_true",
                        help="leave glibc's malloc thresholds as they are (the pipeline's workers set them)")
    args = parser.parse_args()
    # the run's extractor workers keep big temporaries in the heap (pipeline.actors.keep_heap): without it each call
    # pays their page faults again (about 5 % of the 74-column set), so the figure is a worker's only with it
    heap = "glibc's defaults" if args.default_heap or not keep_heap() else "as the pipeline's extractor workers set them"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    files = real_speech()
    n = round(args.seconds * FS_HZ)
    if files:
        joined = np.concatenate(list(files.values()))
        x = np.tile(joined, -(-n // joined.size))[:n]
        what = f"real speech ({len(files)} files of ../shared/realdata/speech, {joined.size / FS_HZ:.1f} s, repeated)"
    else:
        x, what = speech_like(args.seconds), "synthetic speech-like LF vowels (no ../shared/realdata)"
    audio = Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ)
    cfg = acoustic.CovarepConfig()
    print(f"covarep on {args.seconds:.0f} s of {what}, one core, malloc thresholds {heap}")
    for layout in ("covarep74", "mfcc23"):
        times, cpu, rows = [], [], None
        for _ in range(max(2, args.repeats)):
            t0, c0 = time.perf_counter(), time.process_time()
            rows = acoustic.Covarep(acoustic.CovarepConfig(layout=layout)).extract(audio)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        later, later_cpu = np.array(times[1:]), np.array(cpu[1:])
        print(f"  layout {layout}: first call {times[0]:.2f} s -> {args.seconds / times[0]:.0f}x real time (pays "
              f"one-off tables and page faults); later calls: best {later.min():.2f} s -> "
              f"{args.seconds / later.min():.0f}x, median {np.median(later):.2f} s -> "
              f"{args.seconds / np.median(later):.0f}x real time; CPU time: best {later_cpu.min():.2f} s -> "
              f"{args.seconds / later_cpu.min():.0f}x, median {args.seconds / np.median(later_cpu):.0f}x "
              f"(voiced fraction {rows.attrs['voiced_fraction']:.2f})")  # fmt: skip
    spent = stages(x, cfg)
    for key, dt in spent.items():
        print(f"      {key:32s} {dt:6.3f} s  {100 * dt / sum(spent.values()):5.1f} %")
    if files:
        voicing_table(files)


if __name__ == "__main__":
    main()
