"""`python -m bench.engine` runs (it did not at one point: the runner's `readying` and `commit` had changed under
it), on a few clips of sleeping work, both of our policies one after the other in one local Ray: the fixed
policy's only real run in the suite. Two features (frames on the logical GPU, acoustic on a CPU actor) and 4
logical CPUs: each actor's start and each of Ray's worker processes costs a second or more of this machine's 2
cores (all five features, 8 CPUs and a Ray for each policy took 54 s here, this 12-20 s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_bench_engine_runs_both_policies_on_a_few_clips() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    # 4 logical CPUs: under the fixed policy the GPU actor and the acoustic actor hold one each, decodes get 2
    proc = subprocess.run([sys.executable, "-m", "bench.engine", "--clips", "4", "--cpus", "4", "--gpus", "1",
                           "--scale", "0.05", "--cpu-actors", "1", "--features", "frames,acoustic", "--one-ray",
                           "--engines", "fixed,balanced"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    bound = float(re.search(r"resource bound ([\d.]+) s", proc.stdout).group(1))
    for policy in ("fixed", "balanced"):
        m = re.search(rf"{policy}: +([\d.]+) s first decode to last clip", proc.stdout)
        assert m, proc.stdout
        assert bound <= float(m.group(1)) < 60  # 4 clips of sleeps: seconds, not a hang
