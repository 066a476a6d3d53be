"""The CPU a run used as the machine sees it (pipeline/cpuload.py), beside the timed calls' (issue 52): the
summary's `busy` line counted only the calls (cpu 29-44 % while the machine was 100 % busy)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline import cpuload, report


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_sampler_counts_the_process_tree_as_the_kernel_does() -> None:
    """A child that burns ~1 CPU-s, and its own child the same: the tree's CPU seconds the sampler saw against
    what the kernel accounts to the reaped children (os.times)."""
    before = os.times()
    sampler = cpuload.Sampler(every=0.2).start()
    burn = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.8: pass\ntime.sleep(0.4)\n"
    code = f"import subprocess,sys\np=subprocess.Popen([sys.executable,'-c',{burn!r}])\nexec({burn!r})\np.wait()\n"
    subprocess.run([sys.executable, "-c", code], check=True)
    samples = sampler.stop()
    after = os.times()
    kernel = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    t0, t1 = samples[0][0], samples[-1][0]
    tree, machine = cpuload.between(samples, t0, t1)
    assert kernel >= 1.6
    # the last 0.4 s of each process is a sleep: its CPU is seen before it ends; this process's own share is small
    assert tree == pytest.approx(kernel, abs=0.35)
    assert machine >= 0.8 * kernel  # the machine's busy time holds the tree's (and everyone else's)
    assert sampler.cores == os.cpu_count()


def test_the_busy_line_says_the_calls_the_run_and_the_machine() -> None:
    """Two 2-core calls of 10 s on a 4-core run: the calls are 50 % of the cores; the samples say the run's tree
    used 30 CPU-s (75 %) and the machine 36 core-s of its 4 (90 %)."""
    calls = {"decode:frames": [{"stage": "decode:frames", "start_s": 100.0, "end_s": 110.0, "cpu_s": 20.0}],
             "model:frames": [{"stage": "model:frames", "start_s": 100.0, "end_s": 110.0, "cpu_s": 0.0}]}
    samples = [(95.0, 0.0, 0.0), (100.0, 5.0, 10.0), (110.0, 35.0, 46.0), (120.0, 36.0, 50.0)]
    u = report.utilisation(calls, 4, {"frames": 1}, "balanced", samples, machine_cores=4)
    whole = u["run"]["whole"]
    assert u["run"]["busy"]["cpu"] == pytest.approx(0.5)
    assert whole["calls_cpu_s"] == pytest.approx(20.0) and whole["run_cpu_s"] == pytest.approx(30.0)
    assert whole["run"] == pytest.approx(0.75) and whole["machine"] == pytest.approx(0.9)
    [line] = report.utilisation_lines({**u, "steady": None})
    assert "cpu 50 %" in line and "this run 75 % of 4 cores (1.50x the calls')" in line
    assert "the machine 90 % of 4" in line
    # without samples (another OS, an old report) the line is as it was
    assert "machine" not in report.utilisation_lines(report.utilisation(calls, 4, {"frames": 1}, "balanced"))[0]


def test_between_interpolates_inside_a_sample_interval() -> None:
    samples = [(0.0, 0.0, 0.0), (2.0, 4.0, 8.0)]
    assert cpuload.between(samples, 0.5, 1.5) == pytest.approx((2.0, 4.0))
    assert cpuload.between(samples[:1], 0.0, 1.0) is None
