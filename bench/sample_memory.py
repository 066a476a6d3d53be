"""The sample run's peak memory and CPU: `make extract`'s command (all five features) on the sample generated into
an empty folder, its process tree sampled by bench/memory.py, with a fresh batch-calibration cache.

    python -m bench.sample_memory [--work /tmp/siq-sample-memory]

Not a `bench_*` module (the plain `make bench` does not run it): it runs the whole sample (~1-2 min on 2 cores).
The figures are discussed in docs/scale.md ("The sample run's memory").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.memory import TreeSampler

GIB, MIB = 2**30, 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/siq-sample-memory"), help="emptied, then filled")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    env = {**os.environ, "SIQ_CALIBRATION_FILE": str(args.work / "calibration.json")}
    cmd = [sys.executable, "-m", "pipeline", "extract", "--dataset", "sample", "--raw", str(args.work / "sample"),
           "--out", str(args.work / "sample.zarr")]
    t0 = time.perf_counter()
    with open(args.work / "extract.log", "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid, 1.0)
        sampler.start()
        code = proc.wait()
        sampler.stop()
        sampler.join()
    r = sampler.result()
    print(f"sample run: exit {code}, {time.perf_counter() - t0:.1f} s wall, {r['tree_cpu_s']} CPU s; peak PSS "
          f"{r['peak_pss_bytes'] / GIB:.2f} GiB, summed RSS {r['peak_rss_bytes'] / GIB:.2f} GiB, USS "
          f"{r['peak_uss_bytes'] / GIB:.2f} GiB, object store {(r['object_store_peak_bytes'] or 0) / GIB:.2f} GiB")
    for p in sorted(r["processes_at_peak"], key=lambda p: -p["pss"])[:10]:
        print(f"  {p['pss'] / MIB:7.0f} MiB PSS {p['rss'] / MIB:7.0f} MiB RSS  {p['name'][:80]}")
    (args.work / "memory.json").write_text(json.dumps(r, indent=1))
    print(f"log: {args.work / 'extract.log'}")


if __name__ == "__main__":
    main()
