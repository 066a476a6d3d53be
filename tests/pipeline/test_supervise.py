"""The command line's parent process (pipeline/supervise.py) without Ray: Ray's C++ log lines kept off the terminal
(real lines, as Ray 2.60 printed them on this machine), the driver's journal read back into a summary and a report
when the driver ends without one, its signals forwarded, its leftovers ended. The end-to-end cases (a raylet
killed under a real run; Ctrl-C) are in tests/pipeline/test_raystart.py and tests/pipeline/test_signals.py."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline import exitcodes, supervise
from pipeline.report import RunReport

REPO = Path(__file__).resolve().parents[2]

# from /tmp/ray/session_*/logs/python-core-driver-*.log of runs stopped by Ctrl-C and of a killed raylet, and the
# form Ray's log monitor gives a worker's or the raylet's stderr lines (colour codes included)
NATIVE = [
    "[2026-11-27 12:42:28,060 E 16294 19998] task_manager.cc:1545: Failed to push error to driver for task "
    "c2668a65bda616c197c55454640c9de978d2c5bd01000000",
    "[2026-11-27 13:23:41,957 W 16219 21636] connection.cc:216: The connection to the plasma store is failed. "
    "Terminate the process. Status: IOError: Broken pipe",
    "[2026-11-27 12:42:22,714 W 16294 22039] open_telemetry_metric_recorder.cc:67: Failed to export metrics to the "
    "metrics agent. Result: 1",
    "[mutex.cc : 1418] RAW: Lock blocking 0x55d5c4f0a1c0   @",
    "\x1b[36m(raylet)\x1b[0m [2026-11-27 12:42:28,100 E 16300 16300] node_manager.cc:1234: The raylet "
    "exited",
    "\x1b[33m(ExtractorWorker pid=20001)\x1b[0m [2026-11-27 12:42:28,200 E 20001 20050] core_worker.cc:901: "
    "Failed to disconnect",
]
RECORD = [  # one record over several lines: a protobuf message in braces, a brace inside a quoted string
    "[2026-11-27 12:42:28,060 W 16294 19998] task_manager.cc:1678: Task attempt c2668a65bda616c197c55454640c9de978d2"
    "c5bd01000000 failed with error ACTOR_DIED Fail immediately? 0, status IOError: The actor was restarted, error "
    "info actor_died_error {",
    "  actor_died_error_context {",
    '    error_message: "The actor is dead because its owner has died. Owner Id: 01000000ffff { Owner Ip address"',
    '    owner_ip_address: "192.0.2.2"',
    "    pid: 20001",
    "  }",
    "}",
]
# Ray's out-of-memory note, as its log monitor forwards the raylet's record (a Ray 2.x run's terminal, quoted in
# ray-project/ray#29800 and users' reports): one record, three lines, the last a paragraph
OOM = [
    "\x1b[36m(raylet)\x1b[0m [2026-11-27 15:02:00,117 E 135782 135782] (raylet) node_manager.cc:3069: 12 Workers "
    "(tasks / actors) killed due to memory pressure (OOM), 1 Workers crashed due to other reasons at node (ID: "
    "351e406b196f66bb45eaad02a3b8b4725babfa8cc12949432f7ad7d8, IP: 10.95.143.76) over the last time period. To see "
    "more information about the Workers killed on this node, use `ray logs raylet.out -ip 10.95.143.76`",
    "\x1b[36m(raylet)\x1b[0m ",
    "\x1b[36m(raylet)\x1b[0m Refer to the documentation on how to address the out of memory issue: "
    "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on "
    "this node or reducing task parallelism by requesting more CPUs per task. To adjust the kill threshold, set the "
    "environment variable `RAY_memory_usage_threshold` when starting Ray.",
]
# a worker that segfaulted: abseil's failure handler, then Python's faulthandler dump
SEGV = [
    "(decode_item pid=30001) *** SIGSEGV received at time=1795797405 on cpu 1 ***",
    "(decode_item pid=30001) PC: @     0x7f3b9b8a8eec  (unknown)  (unknown)",
    "(decode_item pid=30001) Fatal Python error: Segmentation fault",
    "(decode_item pid=30001) ",
    "(decode_item pid=30001) Current thread 0x00007f3b9b85a050 (most recent call first):",
]
# a Ray worker that aborted while starting (tests/pipeline/test_signals.py, 16:36 on this machine: abseil's check in the
# worker's .err file, forwarded with its prefix), then its crash dump, which is Ray's noise too (Ray replaces it)
ABORT = [
    "(pid=21435) [mutex.cc : 1957] RAW: Check (v & (kMuWait | kMuWrWait)) != kMuWrWait failed: Lock: Mutex corrupt: "
    "waiting writer with no waiters: 0x5583a4c5afe8",
    "(pid=21435) *** SIGABRT received at time=1795797405 on cpu 0 ***",
    "(pid=21435) PC: @     0x7f3b9b8a8eec  (unknown)  (unknown)",
    "(pid=21435)     @     0x7f3b9b85a050       9360  (unknown)",
    "(pid=21435) Fatal Python error: Aborted",
    "(pid=21435) ",
    "(pid=21435) Extension modules: msgpack._cmsgpack, google._upb._message, psutil._psutil_linux, yaml._yaml, "
    "ray._raylet (total: 39)",
]
OURS = [
    "16:01:02 sample: 3 items, 7 questions from /raw",
    "16:01:09 SIGINT received during extraction: stopping (committed pairs are kept)",
    "[W 2026-11-27] not Ray's format",
    "\x1b[36m(decode_item pid=20400)\x1b[0m WORKER-LATE-LINE",
    "(raylet) a line without Ray's record header",
    "  qa               2        0        0       0     0",
]


def filtered(text: str, verbose: bool = False, chunk: int = 7) -> tuple[str, list[str]]:
    shown = io.BytesIO()
    sink = supervise.NativeFilter(shown, keep_native=verbose)
    data = text.encode()
    for i in range(0, len(data), chunk):  # as a pipe gives it: lines cut anywhere
        sink.feed(data[i:i + chunk])
    sink.close()
    return shown.getvalue().decode(), sink.kept


@pytest.mark.parametrize("line", NATIVE)
def test_ray_native_lines_are_recognised(line: str) -> None:
    assert supervise.is_native(line)


@pytest.mark.parametrize("line", OURS)
def test_other_lines_are_not(line: str) -> None:
    assert not supervise.is_native(line)


def test_the_filter_keeps_ray_lines_off_the_terminal_and_shows_them_with_verbose() -> None:
    mixed = [OURS[0], NATIVE[0], *RECORD, OURS[1], NATIVE[3], OURS[3], NATIVE[4], OURS[5]]
    text = "\n".join(mixed) + "\n"
    shown, kept = filtered(text)
    assert shown.splitlines() == [OURS[0], OURS[1], OURS[3], OURS[5]]
    assert kept == [NATIVE[0], *RECORD, NATIVE[3], NATIVE[4]]
    assert filtered(text, verbose=True) == (text, [])


def test_a_worker_that_aborts_is_kept_off_the_terminal_with_its_crash_dump() -> None:
    other = "(slow_decode pid=21673) SLOW-decode"  # another worker's line, and the driver's, still show
    shown, kept = filtered("\n".join([OURS[0], ABORT[0], other, *ABORT[1:], OURS[1]]) + "\n")
    assert shown.splitlines() == [OURS[0], other, OURS[1]] and kept == ABORT
    shown, kept = filtered("\n".join([NATIVE[5], "(ExtractorWorker pid=20001) a print of its own"]) + "\n")
    assert kept == [NATIVE[5]] and shown == "(ExtractorWorker pid=20001) a print of its own\n"  # no fatal: shown


def test_a_progress_bar_redraw_is_shown_at_once() -> None:
    shown = io.BytesIO()
    sink = supervise.NativeFilter(shown, keep_native=False)
    sink.feed(b"\r 40%|####      | 2/5")
    assert shown.getvalue() == b"\r 40%|####      | 2/5"  # not held back for a newline
    sink.feed(b"\r100%|##########| 5/5\n" + NATIVE[0].encode()[:20])
    assert shown.getvalue().endswith(b"5/5\n")  # the start of a Ray record waits for its end
    sink.feed(NATIVE[0].encode()[20:] + b"\n")
    sink.close()
    assert sink.kept == [NATIVE[0]] and b"task_manager" not in shown.getvalue()


# The command line as `python -m pipeline` runs it, whose extraction (in the driver the parent forks) is faked: it
# keeps its journal as a real one does, starts a "raylet", a "GCS" and a "worker" (sleeps), then ends as DRIVER_END
# says: `ray` SIGKILLs its raylet and exits 1 without a word (what Ray's core worker does to a driver whose raylet
# died), `bug` exits 1, `term` waits for SIGTERM.
SCRIPT = textwrap.dedent('''
    import os, signal, subprocess, sys, time
    from pipeline import cli, supervise
    from pipeline.report import RunReport

    def fake_extract(args):
        end = os.environ["DRIVER_END"]
        report = RunReport("20261127T120000Z-abcdef", "sample", args.out,
                           {"qa": {"done": 0, "skipped": 0, "failed": 0, "n/a": 0}}, planned={"qa": 3})
        raylet = subprocess.Popen(["sleep", "60"])
        gcs, worker = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"], start_new_session=True)
        supervise.note_ray({"raylet": raylet.pid, "gcs_server": gcs.pid})
        supervise.note(report, "extraction")
        supervise.note_commit("qa", ["tiny-a"])
        supervise.note_commit("qa", ["tiny-b"])  # committed after the last snapshot
        if end == "term":
            signal.signal(signal.SIGTERM, lambda *a: os._exit(143))
        print(f"DRIVER pid={os.getpid()} raylet={raylet.pid} gcs={gcs.pid} worker={worker.pid}", flush=True)
        if end == "term":
            time.sleep(60)
        if end == "ray":
            raylet.kill()
            time.sleep(0.2)
        if end == "oom":  # Ray's out-of-memory paragraph on the driver's stderr, as its log monitor prints it
            os.write(2, ("\\n".join(OOM) + "\\n").encode())
            deadline = time.monotonic() + 10
            while not supervise.worker_kills() and time.monotonic() < deadline:
                time.sleep(0.02)
            report.worker_kills = supervise.worker_kills()
            os.makedirs(os.path.join(args.out, "_runs"))
            print(report.summary(), flush=True)
            for p in (raylet, gcs, worker):
                p.kill()
            os._exit(0)
        os._exit(1)

    cli._extract = fake_extract
    sys.exit(cli.main(sys.argv[1:], supervised=True))
''')


def launch(tmp_path: Path, end: str) -> subprocess.Popen:
    (tmp_path / "cmd.py").write_text(SCRIPT.replace("import os,", f"OOM = {OOM!r}\nimport os,", 1))
    return subprocess.Popen([sys.executable, str(tmp_path / "cmd.py"), "extract", "--dataset", "sample", "--raw",
                             str(tmp_path / "raw"), "--out", str(tmp_path / "s.zarr")], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO), "DRIVER_END": end}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def pids_of(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.mark.parametrize("end", ["ray", "bug"])
def test_a_driver_that_ends_without_its_report_gets_one_from_the_parent(tmp_path: Path, end: str) -> None:
    proc = launch(tmp_path, end)
    text, _ = proc.communicate(timeout=60)
    [driver] = [pids_of(line) for line in text.splitlines() if line.startswith("DRIVER ")]
    summary = text.splitlines()[-1]
    if end == "ray":
        assert proc.returncode == exitcodes.RAY, text
        assert summary.startswith(f"  RAY FAILED during extraction: this run's Ray raylet (pid {driver['raylet']}) "
                                  f"ended (killed by SIGKILL), and Ray then ended the run's driver (pid "
                                  f"{driver['pid']}, exit code 1); committed pairs are kept; 1 planned pair(s) not "
                                  "computed: "), text
    else:
        assert proc.returncode == exitcodes.INTERNAL, text
        assert summary == (f"  ENDED during extraction: the run's driver (pid {driver['pid']}) ended (exit code 1); "
                           "committed pairs are kept; 1 planned pair(s) not computed: exit code 1"), text
    [saved] = (tmp_path / "s.zarr" / "_runs").glob("*.json")
    report = json.loads(saved.read_text())
    assert saved.name == "20261127T120000Z-abcdef.json" and report["counts"]["qa"]["done"] == 2
    assert (report["ray_failed"] if end == "ray" else report["crashed"])["during"] == "extraction"
    assert RunReport(**report).exit_code == proc.returncode
    assert all(gone(driver[p]) for p in ("worker", "raylet", "gcs"))  # the run's processes ended with it


def test_signals_reach_the_driver_through_the_parent(tmp_path: Path) -> None:
    proc = launch(tmp_path, "term")
    assert proc.stdout is not None
    driver = pids_of(proc.stdout.readline())
    os.killpg(proc.pid, signal.SIGTERM)  # the parent's group: the driver has its own, and gets it once
    assert proc.wait(timeout=30) == exitcodes.TERMINATED
    assert "RAY FAILED" not in proc.stdout.read() and not list((tmp_path / "s.zarr").glob("_runs/*.json"))
    assert all(gone(driver[p]) for p in ("worker", "raylet", "gcs"))


def test_ray_s_out_of_memory_paragraph_and_a_worker_s_crash_dump_stay_off_the_terminal_and_are_counted() -> None:
    other_node = OOM[0].replace("(raylet)\x1b[0m", "(raylet, ip=10.0.0.2)\x1b[0m", 1).replace(
        "12 Workers", "3 Workers").replace("1 Workers crashed", "0 Workers crashed")
    ours = "(decode_item pid=30002) a print of its own"  # another worker's line, and the driver's, still show
    lines = [OURS[0], *OOM, OURS[1], *SEGV[:2], ours, *SEGV[2:], other_node, OURS[5]]
    shown, kept = filtered("\n".join(lines) + "\n")
    assert shown.splitlines() == [OURS[0], OURS[1], ours, OURS[5]]
    assert kept == [*OOM, *SEGV, other_node]
    counted: list[dict[str, int]] = []
    sink = supervise.NativeFilter(io.BytesIO(), keep_native=False, on_kills=counted.append)
    sink.feed(("\n".join(lines) + "\n").encode())
    assert counted == [{"oom": 12, "crashed": 1}, {"oom": 15, "crashed": 1}]  # each node's period adds
    assert filtered("\n".join(lines) + "\n", verbose=True)[1] == []  # -v: all shown


def test_worker_kills_are_one_summary_line() -> None:
    report = RunReport("20261127T120000Z-abcdef", "sample", "/s.zarr", {"qa": {"done": 1, "skipped": 0, "failed": 0,
                                                                               "n/a": 0}})
    assert "KILLED" not in report.summary()
    report.worker_kills = {"oom": 5, "crashed": 0}
    [line] = [x for x in report.summary().splitlines() if "KILLED" in x]
    assert line.startswith("  WORKERS KILLED by Ray: 5 for lack of memory; ") and "crashed" not in line
    assert line.endswith("_runs/20261127T120000Z-abcdef.ray.log") and report.exit_code == 0
    report.worker_kills = {"oom": 0, "crashed": 2}
    assert "2 that crashed (a segfault, an abort)" in report.summary()


def test_a_run_whose_workers_ray_killed_says_so_in_its_summary_and_not_in_ray_s_words(tmp_path: Path) -> None:
    """The parent counts the raylet's note in the driver's stderr and hands the count to the driver through the
    journal: the summary has one line; Ray's paragraph goes to the run's ray log, none of it to the terminal."""
    proc = launch(tmp_path, "oom")
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, text
    assert "(raylet)" not in text and "Refer to the documentation" not in text and "memory pressure" not in text
    [line] = [x for x in text.splitlines() if "KILLED" in x]
    assert line.startswith("  WORKERS KILLED by Ray: 12 for lack of memory and 1 that crashed"), text
    log = (tmp_path / "s.zarr" / "_runs" / "20261127T120000Z-abcdef.ray.log").read_text()
    assert "12 Workers (tasks / actors) killed due to memory pressure" in log and "Refer to the documentation" in log


# The real command line and stop path, the extraction itself faked: no manifests, then a wait in the driver (what a
# run does between its commits) until a signal stops it.
ORPHAN_SCRIPT = textwrap.dedent('''
    import os, signal, sys, time
    from pipeline import cli, run, supervise

    cli._generate_sample = lambda dataset, raw: None
    run.load_items = lambda dataset, raw, config: ([], [], [])
    run.check_applicable = lambda *a: None  # no items: what the faked extraction below does not need

    def waiting(writer, config, specs, report, *rest):
        report.planned = {s.name: 2 for s in specs}
        supervise.note(report, "extraction")
        run.stop.stage("extraction")  # before the line the test waits for: its kill may follow at once
        print(f"DRIVER pid={os.getpid()}", flush=True)
        time.sleep(60)

    run._extract = waiting
    if os.environ.get("ECHO"):  # the kernel's SIGTERM once more while the driver stops (one per parent thread)
        kills = supervise.worker_kills

        def echoed():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # its handler runs here
            return kills()

        supervise.worker_kills = echoed
    sys.exit(cli.main(sys.argv[1:], supervised=True))
''')


@pytest.mark.parametrize("echo", [False, True])
def test_a_killed_parent_leaves_the_true_cause_the_summary_and_no_journal(tmp_path: Path, echo: bool) -> None:
    """Issue 53 point 4: SIGKILL to the command line's process. The driver gets the kernel's SIGTERM, stops as for
    one, and says why: the report's `stopped` names the killed parent, the summary is written beside the report
    (no terminal is left to show it), and the journal folder is removed. `echo`: the kernel's SIGTERM comes
    again while the driver stops (it sends one per thread of the killed parent; a loaded machine delivers them
    apart): not a second request to exit at once, and no write to the dead terminal cuts the report's save."""
    import time

    (tmp_path / "cmd.py").write_text(ORPHAN_SCRIPT)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "s.zarr"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "cmd.py"), "extract", "--dataset", "sample", "--raw",
                             str(tmp_path / "raw"), "--out", str(out), "--features", "qa"], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp), "ECHO": "1" if echo else ""},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    while line and not line.startswith("DRIVER "):
        line = proc.stdout.readline()
    driver = pids_of(line)["pid"]
    assert [p.name.startswith(f"siqfeat-run-{proc.pid}-") for p in tmp.iterdir()] == [True]
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 60
    while not gone(driver) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(driver)
    [saved] = (out / "_runs").glob("*.json")
    stopped = json.loads(saved.read_text())["stopped"]
    assert stopped["signal"] == "SIGTERM" and stopped["during"] == "extraction"
    assert stopped["cause"] == f"the supervising process (the command line's, pid {proc.pid}) was killed"
    summary = saved.with_suffix(".log").read_text()
    assert (f"STOPPED because the supervising process (the command line's, pid {proc.pid}) was killed (SIGTERM "
            "from the kernel) during extraction: committed pairs are kept; 2 planned pair(s) not computed") in summary
    assert list(tmp.iterdir()) == []  # the journal


def test_the_next_run_removes_journals_whose_processes_are_gone(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"siqfeat-run-{dead.pid}-1-0"
    stale.mkdir()
    (stale / "report.json").write_text("{}")
    live = tmp_path / f"siqfeat-run-{os.getpid()}-1-0"  # this process: alive
    live.mkdir()
    orphan_driver = tmp_path / f"siqfeat-run-{dead.pid}-2-0"  # the parent is gone, its driver (this process) not
    orphan_driver.mkdir()
    (orphan_driver / "driver.pid").write_text(str(os.getpid()))
    assert supervise.clean_stale_journals(tmp_path) == [stale]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, orphan_driver.name])
