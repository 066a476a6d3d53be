"""Alignment against the real CMU Multimodal SDK's `mmdataset.align`, on the same data, back to back.

    /work/main/.venv/bin/python -m bench.bench_sdk [--minutes 10] [--words-per-s 3]

10 minutes of 100 Hz rows (74 float32 columns, as COVAREP's) aligned to 1,800 words (0.1-0.5 s each, random
starts) and to 1 Hz, with the SDK's tutorial collapse (`numpy.average`); each line also counts the references
whose output differs from the SDK's (0 expected).
Two levels: arrays in memory (`reading.align.collapse` vs the SDK's `align` on sequences loaded into memory), and
from files (`reading.align.align` reading the Zarr store vs `mmdataset(csd files).align` reading HDF5). Times are
CPU seconds of this process (robust to other load on the machine) and wall seconds; ours is the best of 5 runs,
the SDK's one run. The SDK comes from ../shared/realdata/cmu-multimodal-sdk (testing/cmu_sdk.py): where that is
absent this bench says so and prints nothing else.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from reading.align import align, collapse
from reading.export import SDK_TEMPLATE_KEYS, write_csd
from rows import FeatureRows, fixed_rate_intervals
from store import StoreWriter
from testing.cmu_sdk import load_mmdatasdk, sdk_average

COLUMNS = 74


def _clock(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    """(best CPU seconds, best wall seconds, last result) over `repeats` runs."""
    cpu = wall = np.inf
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        result = fn()
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - w0)
    return cpu, wall, result


def _data(minutes: float, words_per_s: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    duration = 60.0 * minutes
    rows = fixed_rate_intervals(duration, 100.0)
    values = rng.normal(size=(len(rows), COLUMNS)).astype(np.float32)
    starts = np.sort(rng.uniform(0, duration - 0.5, int(words_per_s * duration)))
    words = np.stack([starts, starts + rng.uniform(0.1, 0.5, len(starts))], axis=1)
    return rows, values, {f"{len(words)} words": words, "1 Hz": fixed_rate_intervals(duration, 1.0)}


def _csd(path: Path, root: str, features: np.ndarray, intervals: np.ndarray) -> Path:
    meta = {k: "-" for k in SDK_TEMPLATE_KEYS} | {"root name": root, "dimension names": []}
    return write_csd(path, {"clip": (features, intervals)}, meta)


def _sdk_align(mmdatasdk, files: dict[str, Path], in_memory: bool) -> dict[str, np.ndarray]:
    """mmdataset(files).align("ref", [average]); in_memory: the sequences' HDF5 data read into arrays first."""
    ds = mmdatasdk.mmdataset({k: str(v) for k, v in files.items()})
    if in_memory:
        for seq in ds.computational_sequences.values():
            seq.data = {k: {"intervals": g["intervals"][...], "features": g["features"][...]} for k, g in seq.data.items()}
    ds.align("ref", collapse_functions=[sdk_average])
    return {k: v["features"] for k, v in ds["rows"].data.items()}


def bench(minutes: float, words_per_s: float) -> None:
    mmdatasdk = load_mmdatasdk()
    if mmdatasdk is None:
        print("skipped: the CMU Multimodal SDK source (../shared/realdata/cmu-multimodal-sdk) is not here")
        return
    rows, values, refs = _data(minutes, words_per_s)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        w = StoreWriter(tmp / "s.zarr", "bench")
        w.set_feature("rows", {"columns": [f"c{i}" for i in range(COLUMNS)], "rate_hz": 100.0})
        w.commit("rows", "clip", FeatureRows(values, rows), {"duration_s": 60.0 * minutes})
        rows_csd = _csd(tmp / "rows.csd", "rows", values, rows)
        print(f"{len(rows)} rows x {COLUMNS} columns (100 Hz, {minutes:g} min), collapse = average; "
              "ratio = SDK time / ours (CPU | wall)")
        for name, ref in refs.items():
            files = {"rows": rows_csd, "ref": _csd(tmp / "ref.csd", "ref", np.zeros((len(ref), 1), np.float32), ref)}
            for level, in_memory in (("arrays in memory", True), ("from files", False)):
                s_cpu, s_wall, sdk = _clock(lambda: _sdk_align(mmdatasdk, files, in_memory), 1)  # noqa: B023
                if in_memory:
                    o_cpu, o_wall, (out, mask) = _clock(lambda: collapse(ref, rows, values), 5)  # noqa: B023
                else:
                    o_cpu, o_wall, a = _clock(lambda: align(tmp / "s.zarr", "clip", ["rows"], to=ref), 5)  # noqa: B023
                    out, mask = a.values["rows"], a.masks["rows"]
                # the same answer: every reference the SDK aligns, and no other, holds the same average
                sdk_out = np.stack([np.asarray(sdk[f"clip[{j}]"])[0] if f"clip[{j}]" in sdk else np.full(COLUMNS, np.nan)
                                    for j in range(len(ref))])
                differ = int((mask != [f"clip[{j}]" in sdk for j in range(len(ref))]).sum()
                             + (np.abs(out - sdk_out) > 1e-4 * (1 + np.abs(sdk_out))).any(axis=1)[mask].sum())
                print(f"  -> {name:>11} ({level:>16}): SDK {s_cpu * 1e3:8.0f} ms CPU {s_wall * 1e3:8.0f} ms wall | "
                      f"ours {o_cpu * 1e3:7.2f} ms CPU {o_wall * 1e3:7.2f} ms wall | "
                      f"x{s_cpu / o_cpu:6.0f} CPU  x{s_wall / o_wall:6.0f} wall | {differ} of {len(ref)} differ")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--words-per-s", type=float, default=3.0)
    args = p.parse_args()
    bench(args.minutes, args.words_per_s)


if __name__ == "__main__":
    main()
