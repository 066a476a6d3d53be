"""`python -m pipeline extract` as two processes: a light parent (this module: no torch, no Ray, no store) and
the run itself, the driver, as its child (forked once the command line is parsed). Why (issue 35 item 6, issue
36 item 4):

- When the raylet of a running extraction dies (another job's `ray stop --force`; on a cluster, a lost node),
  Ray's core worker ends the driver about 0.1 s later ("The connection to the plasma store is failed. Terminate
  the process": exit 1) before any of the run's code can act. The parent outlives it: from the driver's journal
  (below) it prints the summary with what was committed, saves the run report with `ray_failed` and exits with
  7 (RAY), as for a GCS death the driver sees itself. Any other unexpected end of the driver (a bug's traceback,
  the out-of-memory killer's SIGKILL) gets its summary and report the same way, with its own exit code.
- The parent is the child subreaper of the run: Ray's processes orphaned by the driver's death become its
  children, and it ends every one of them (the driver does so itself whenever it ends on its own).
- Ray's C++ log lines (`task_manager.cc:… Failed to push error …` after Ctrl-C, abseil's `[mutex.cc : …] RAW:`)
  come from the core worker inside the driver and Ray's processes, past Python's logging. The driver's stderr
  goes through the parent (a pty when the parent's stderr is a terminal, so progress bars stay as they are),
  which sends those lines to `<store>/_runs/<run id>.ray.log` instead of the terminal, unless `-v`.
- SIGINT and SIGTERM are forwarded to the driver, once each time they come, and it stops as pipeline/stop.py
  says. The driver runs in its own process group, so Ctrl-C at a terminal (or a signal to the parent's group)
  reaches it only through the parent: exactly once, and not Ray's processes behind its back.

The journal (a folder the parent makes, named to the driver in `JOURNAL_ENV`): `report.json`, the run report
as it stands, rewritten at each stage and while the run commits; `commits.jsonl`, a line per committed batch,
appended by the committer thread right after the batch is in the store (the report's counts lag by up to a
second); `ray.json`, the pids of the run's raylet and GCS; `error.json`, the driver's own Python error, written
before the driver ends its Ray on the way out (with what it knew of its Ray then), so that a traceback is never
reported as Ray's failure because the driver's own clean-up ended the raylet.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from atomicio import atomic_write
from store import runs_dir

# why Ray ended under a run (pipeline/raystart.py says it too); here, not there: raystart imports this module
LOST_HINT = ("something outside this run ended it (`ray stop` ends every Ray on the machine, whoever started it; "
             "the out-of-memory killer: see `dmesg`): run again, only what is not committed is computed")

# set for the driver: the folder of its journal (its being set makes it the child); not SIQ_*: those go to the
# Ray workers (raystart.runtime_env)
JOURNAL_ENV = "SIQFEAT_DRIVER_JOURNAL"
END_GRACE_S = 2.0  # a leftover process gets this long after SIGTERM before SIGKILL
DRAIN_S = 5.0  # after the driver and its leftovers ended: how long the rest of its output may take to arrive
NOTE_EVERY_S = 1.0  # the driver's report snapshot is rewritten at most this often while the run commits
_PR_SET_CHILD_SUBREAPER, _PR_SET_PDEATHSIG = 36, 1  # linux/prctl.h
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# a driver exit code that is the driver's own word on how the run ended (pipeline/exitcodes.py); anything else
# (1: a traceback, or Ray ending the process; death by a signal) is an end the driver could not report
OWN_CODES = {0, 2, 3, 4, 5, 6, 7, 130, 143}

# Ray's C++ log records (spdlog: `[date time,ms L pid tid] file.cc:line: …`) and abseil's raw ones
# (`[mutex.cc : 1418] RAW: …`), as the driver prints them or as Ray forwards a worker's or the raylet's stderr
# with its `(name pid=…)` prefix, colour codes included
_COLOUR = r"(?:\x1b\[[0-9;]*m)*"
RAY_NATIVE = re.compile(_COLOUR + r"(?:\([^()\n]*\)" + _COLOUR + r"\s+)?" + _COLOUR
                        + r"(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [TDIWECF] \d+ \d+\] (?:\(\w+\) )?"
                        + r"[\w./-]+\.(?:cc|h|cpp):\d+:"
                        + r"|\[[\w./-]+\.(?:cc|h) : \d+\] RAW: )")


_QUOTED = re.compile(r'"(?:\\.|[^"\\])*"')  # a quoted string of a protobuf message: its braces are text


_FATAL = re.compile(r"\] RAW: Check .* failed|\[\d{4}-\d\d-\d\d [\d:,]+ [FC] \d+ \d+\]")
_PREFIX = re.compile(_COLOUR + r"(\([^()\n]*pid=\d+[^()\n]*\))")
# the prefix of a line Ray forwards from one of its own processes (the raylet, the GCS: `(raylet)`, `(raylet,
# ip=10.0.0.2)`): a record of theirs spans several such lines (the out-of-memory note is a 900-character paragraph)
_SYSTEM = re.compile(_COLOUR + r"(\((?:raylet|gcs_server|dashboard\w*|autoscaler|monitor)(?:, ip=[^()\n]*)?\))")
# a worker's own crash (a segfault, abort): abseil's failure handler, Python's faulthandler; the rest from that
# worker is its dump
_CRASH = re.compile(r"\*\*\* SIG[A-Z]+ received at time=|Fatal Python error: ")
# the raylet's count of the workers it lost over its last period (one record per node and period)
KILLS = re.compile(r"(\d+) Workers \(tasks / actors\) killed due to memory pressure \(OOM\), (\d+) Workers crashed "
                   r"due to other reasons")
KILLS_FILE = "worker_kills.json"  # in the journal: what the parent counted, for the driver's report


def _prefix(line: str) -> str | None:
    """The `(name pid=N)` Ray puts before a line it forwards from a worker, None for the driver's own lines."""
    m = _PREFIX.match(line)
    return m.group(1) if m else None


def is_native(line: str) -> bool:
    """A line of Ray's C++ logging (the first line of a record)."""
    return RAY_NATIVE.match(line) is not None


class NativeFilter:
    """Splits the driver's stderr: Ray's C++ records (with the lines of a record that spans several: a protobuf
    message printed with `{ … }`) go to `kept`, everything else to `shown`, as it comes (a progress bar's `\\r`
    redraws are not held back waiting for a newline)."""

    def __init__(self, shown: IO[bytes], keep_native: bool,
                 on_kills: Callable[[dict[str, int]], Any] | None = None) -> None:
        """`on_kills`: called with the workers Ray ended so far (`oom`, `crashed`) each time the count grows."""
        self.shown, self.keep_native, self.on_kills = shown, keep_native, on_kills
        self.kept: list[str] = []
        self.kills = {"oom": 0, "crashed": 0}
        self._system: str | None = None  # the Ray process whose kept record the next lines of it continue
        self._tail = b""
        self._depth = 0  # open braces of the record being kept
        # the `(name pid=…)` prefixes of Ray's workers that failed a fatal check (abseil's `RAW: Check … failed`,
        # a record of level F or C): what follows from them is the dump of a worker that Ray replaces
        # (`*** SIGABRT received …`, a stack, `Fatal Python error: Aborted`), its noise too
        self._dying: set[str] = set()

    def feed(self, data: bytes) -> None:
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        for line in lines:
            self._line(line + b"\n")
        # a line under way: shown at once unless it may be the start of a record (those start with `[`, `(` or
        # a colour code and are written whole)
        if self._tail and not self._tail.lstrip(b"\r").startswith((b"[", b"(", b"\x1b")) and not self._depth:
            self._write(self._tail)
            self._tail = b""

    def close(self) -> None:
        if self._tail:
            self._line(self._tail)
            self._tail = b""
        self.shown.flush()

    def _line(self, raw: bytes) -> None:
        text = raw.decode(errors="replace")
        plain = text.replace("\r\n", "\n").rsplit("\r", 1)[-1]  # what a terminal shows of it
        prefix = _prefix(plain)
        system = _SYSTEM.match(plain)
        self._count(plain)
        if prefix and _CRASH.search(plain):
            self._dying.add(prefix)
        continued = system is not None and system.group(1) == self._system
        if self._depth or (not self.keep_native and (is_native(plain) or prefix in self._dying or continued)):
            self.kept.append(plain.rstrip("\n"))
            unquoted = _QUOTED.sub("", plain)
            self._depth = max(0, self._depth + unquoted.count("{") - unquoted.count("}"))
            if prefix and _FATAL.search(plain):  # the rest of that worker's lines are its crash dump
                self._dying.add(prefix)
            self._system = system.group(1) if system else None
            return
        self._system = None
        self._write(raw)

    def _count(self, line: str) -> None:
        m = KILLS.search(line)
        if m is None:
            return
        self.kills = {"oom": self.kills["oom"] + int(m.group(1)), "crashed": self.kills["crashed"] + int(m.group(2))}
        if self.on_kills is not None and (int(m.group(1)) or int(m.group(2))):
            self.on_kills(dict(self.kills))

    def _write(self, raw: bytes) -> None:
        try:
            self.shown.write(raw)
            self.shown.flush()
        except (OSError, ValueError):  # the terminal went away: the run goes on
            pass


# --- the driver's side ------------------------------------------------------------------------------------------

def _journal() -> Path | None:
    folder = os.environ.get(JOURNAL_ENV)
    return Path(folder) if folder else None


_last_note = 0.0


def note(report: Any, stage: str, force: bool = True) -> None:
    """The driver's run report as it stands, for the parent should the driver end before it saves it (nothing
    outside a supervised driver). `force=False`: at most every NOTE_EVERY_S."""
    global _last_note
    folder = _journal()
    if folder is None or (not force and time.monotonic() - _last_note < NOTE_EVERY_S):
        return
    _last_note = time.monotonic()
    _write_json(folder / "report.json", {"stage": stage, "report": report.as_dict()})


def note_commit(feature: str, items: list[str]) -> None:
    """A batch is in the store (the committer's thread, right after its index line)."""
    folder = _journal()
    if folder is not None:
        with contextlib.suppress(OSError), open(folder / "commits.jsonl", "a") as f:
            f.write(json.dumps({"feature": feature, "items": items}) + "\n")


def worker_kills() -> dict[str, int]:
    """The Ray workers the parent saw Ray end so far (`oom`: its memory monitor, `crashed`: a segfault, an abort),
    from the raylet's own count; {} when none (or not supervised)."""
    folder = _journal()
    try:
        kills = json.loads((folder / KILLS_FILE).read_text()) if folder else {}
    except (OSError, ValueError):
        return {}
    return kills if any(kills.values()) else {}


def note_ray(pids: dict[str, int]) -> None:
    """The run's local raylet and GCS (their death is Ray's failure, not the driver's)."""
    folder = _journal()
    if folder is not None:
        _write_json(folder / "ray.json", pids)


def note_error(error: BaseException, ray_lost: str | None) -> None:
    """The driver is ending on a Python error of its own (before it ends its Ray, which the parent would otherwise
    find dead and blame): the error's line, and `ray_lost`, what had already happened to the run's Ray then
    (None: it was alive, so this is the driver's error, not Ray's)."""
    folder = _journal()
    if folder is not None:
        first = (str(error).strip().splitlines() or [""])[0][:300]
        _write_json(folder / "error.json", {"error": f"{type(error).__name__}: {first}" if first
                                            else type(error).__name__, "ray_lost": ray_lost})


def _write_json(path: Path, value: Any) -> None:
    # whole or not at all (the parent may read it at any moment); no fsync: the journal outlives only the driver.
    # A journal gone (its parent killed, the folder cleaned) is no reason to stop the run
    with contextlib.suppress(OSError):
        atomic_write(path, json.dumps(value, default=str), durable=False)


def die_with_parent() -> None:
    """In the driver: SIGTERM when the parent ends (killed itself), so the run stops as for a SIGTERM rather than
    going on alone."""
    if _journal() is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    global _parent
    parent = _parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # it ended before the line above
        os.kill(os.getpid(), signal.SIGTERM)


_parent: int | None = None  # the driver's parent, the command line's process (set in the driver)


def parent_gone() -> int | None:
    """In a supervised driver: the pid of its parent when that process has ended (killed: a SIGKILL leaves it no
    word, the kernel's SIGTERM (`die_with_parent`) is all the driver gets), else None."""
    if _parent is None or _journal() is None:
        return None
    # the kernel's SIGTERM comes as the parent's first thread ends, while its others may still be ending: the
    # driver is then still its child for a moment, the parent's main thread already a zombie
    deadline = time.monotonic() + PARENT_CHECK_S
    while True:
        if os.getppid() != _parent or _state(_parent) in (None, "Z", "X"):
            return _parent
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def parent_death_echo(signum: int) -> bool:
    """In a supervised driver: whether a signal that came while stopping is the kernel's SIGTERM for the killed
    parent once more. The kernel sends the parent-death signal each time the parent's thread holding the
    driver ends and hands it to the next (kernel/exit.c, forget_original_parent): the parent's pump threads
    make a SIGKILL of it several SIGTERMs, which a loaded machine delivers apart. A SIGTERM while the parent
    lives is someone insisting."""
    return signum == signal.SIGTERM and parent_gone() is not None


PARENT_CHECK_S = 0.5  # how long a stopping driver looks for its parent's end (a forwarded signal: it never comes)


def _state(pid: int) -> str | None:
    """A process's state letter (/proc/<pid>/stat), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


PARENT_KILLED = "the supervising process (the command line's, pid {pid}) was killed"


def orphaned_summary(out: Path, run_id: str, summary: str) -> Path | None:
    """A driver whose parent was killed has no one to show its summary to (its stderr went through the parent):
    it is written beside the run report, `<store>/_runs/<run id>.log`, and the journal removed."""
    path = runs_dir(out) / f"{run_id}.log"
    try:
        atomic_write(path, summary + "\n", durable=False)
    except OSError:
        path = None
    folder = _journal()
    if folder is not None:
        _remove_journal(folder)
    return path


def _remove_journal(folder: Path) -> None:
    with contextlib.suppress(OSError):
        for f in folder.iterdir():
            f.unlink(missing_ok=True)
        folder.rmdir()


def clean_stale_journals(base: Path) -> list[Path]:
    """Journal folders of earlier runs whose parent and driver have both ended (a parent killed with SIGKILL
    cannot remove its own): removed, so that /tmp does not fill with them."""
    removed = []
    for folder in base.glob("siqfeat-run-*"):
        m = re.fullmatch(r"siqfeat-run-(\d+)-\d+-\d+", folder.name)
        if m is None or not folder.is_dir():
            continue
        pids = [int(m.group(1))]
        with contextlib.suppress(OSError, ValueError):
            pids.append(int((folder / "driver.pid").read_text()))
        if not any(_alive(p) for p in pids):
            _remove_journal(folder)
            removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


# --- the parent's side ------------------------------------------------------------------------------------------

def wanted() -> bool:
    """Whether this process runs the extraction as a parent (not already the driver; Linux: the subreaper)."""
    return JOURNAL_ENV not in os.environ and sys.platform.startswith("linux")


def supervise(out: Path, verbose: bool) -> int | None:
    """Fork the driver, and see it to its end. Returns the exit code in this process (the parent); None in the
    driver, which goes on to run the extraction (a fork, not a second interpreter: no second start-up, and what
    the process set up before, a test's patches included, holds in the driver too)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    journal = _journal_folder()
    read_fd, write_fd = _stderr_channel(_is_terminal(sys.stderr))
    # stdout and stderr one file (a terminal, `2>&1`): the driver's both through the channel, so what it prints
    # keeps its order (its summary after its last log line)
    merged = _same_file(sys.stdout, sys.stderr)
    global _started
    _started = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the driver
        os.close(read_fd)
        os.setpgid(0, 0)  # signals reach it through the parent only (module docstring)
        os.dup2(write_fd, 2)
        if merged:
            os.dup2(write_fd, 1)
        os.close(write_fd)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)  # the driver's own Ray sets it again (raystart.py)
        os.environ[JOURNAL_ENV] = str(journal)
        die_with_parent()
        return None
    os.close(write_fd)
    with contextlib.suppress(OSError):  # for the next run's `clean_stale_journals`, should this process be killed
        (journal / "driver.pid").write_text(str(pid))
    previous = {s: signal.signal(s, lambda signum, frame: _forward(pid, signum)) for s in SIGNALS}
    sink = NativeFilter(sys.stderr.buffer, keep_native=verbose,
                        on_kills=lambda kills: _write_json(journal / KILLS_FILE, kills))
    reader = threading.Thread(target=_pump, args=(read_fd, sink), name="driver-stderr", daemon=True)
    reader.start()
    try:
        rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])  # (a signal meanwhile: forwarded, waited again)
        if rc not in OWN_CODES:
            rc = _ended_unexpectedly(pid, rc, journal, out, reader, sink)
        else:
            _end_leftovers()
            reader.join(DRAIN_S)
        sink.close()
        _save_native(sink.kept, journal, out)
        return rc
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for f in journal.iterdir():
            f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            journal.rmdir()


_started = 0.0


def _journal_folder() -> Path:
    """A new private folder under the temporary directory (not `tempfile`: its import is most of this module's);
    the folders of earlier runs whose processes are all gone are removed first."""
    base = Path(os.environ.get("TMPDIR") or "/tmp")
    clean_stale_journals(base)
    for attempt in range(100):
        folder = base / f"siqfeat-run-{os.getpid()}-{time.time_ns()}-{attempt}"
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"{base}: no new folder for the run's journal")


def _same_file(a: Any, b: Any) -> bool:
    try:
        sa, sb = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino, sa.st_rdev) == (sb.st_dev, sb.st_ino, sb.st_rdev)


def _is_terminal(stream: Any) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def _stderr_channel(terminal: bool) -> tuple[int, int]:
    """(read end, the driver's stderr): a pty the size of the parent's terminal, else a pipe."""
    if not terminal:
        return os.pipe()
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()
    with contextlib.suppress(OSError):
        fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(sys.stderr.fileno(), termios.TIOCGWINSZ, b"\0" * 8))
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # the parent's terminal adds its own \r
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    return master, slave


def _pump(fd: int, sink: NativeFilter) -> None:
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: a pty whose every writer has closed it
            break
        if not data:
            break
        sink.feed(data)
    os.close(fd)


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _ended_unexpectedly(pid: int, rc: int, journal: Path, out: Path, reader: threading.Thread,
                        sink: NativeFilter) -> int:
    """The driver ended without its summary: Ray's failure (its raylet or GCS dead) or its own. What is left of
    its Ray is ended first (and its output drained), then the report from the journal is saved and summarised."""
    error = _driver_error(journal)
    # a driver that ended on its own Python error had ended its Ray itself (pipeline/cli.py): Ray's death is Ray's
    # failure only when the driver found it dead, or said nothing before it ended (Ray's core worker ends it)
    ray_death = error["ray_lost"] if error else _ray_death(journal)  # before anything else reaps the dead raylet
    _end_leftovers()
    reader.join(DRAIN_S)
    sink.close()
    how = how_ended(rc)
    try:
        snapshot = json.loads((journal / "report.json").read_text())
    except (OSError, ValueError):
        sys.stderr.write(f"the run's driver (pid {pid}) ended ({how}) before it had planned anything; nothing was "
                         "computed\n")
        return _exit_code(rc, ray_death)
    from pipeline.report import RunReport

    report = RunReport(**snapshot["report"])
    if any(sink.kills.values()):
        report.worker_kills = dict(sink.kills)
    _count_commits(report, journal)
    during = snapshot.get("stage") or "starting"
    record = {"during": during, "not_computed": not_computed(report)}
    if ray_death:
        report.ray_failed = {"what": f"{ray_death}, and Ray then ended the run's driver (pid {pid}, {how})",
                             "hint": LOST_HINT, **record}
    else:
        said = f" on {error['error']}" if error else ""
        report.crashed = {"what": f"the run's driver (pid {pid}) ended{said} ({how})",
                          "exit_code": _exit_code(rc, None), **record}
    report.seconds = max(report.seconds, time.monotonic() - _started)
    try:
        from store import StoreWriter

        with StoreWriter(out, report.dataset) as writer:
            writer.write_run_report(report.run_id, report.as_dict())
    except Exception as e:  # noqa: BLE001 - the summary still reaches the user, and says so
        report.not_saved = str(e)
    sys.stderr.flush()
    print(report.summary(), flush=True)
    return report.exit_code


def not_computed(report: Any) -> int | None:
    """Planned pairs neither done nor failed (a manifest failure was never planned)."""
    if not report.planned:
        return None
    computed = sum(c["done"] for c in report.counts.values()) + sum(f["stage"] != "manifest" for f in report.failures)
    return sum(report.planned.values()) - computed


def _count_commits(report: Any, journal: Path) -> None:
    """The pairs committed: the committer's own lines (the snapshot may lag them by up to a second)."""
    done: dict[str, set[str]] = {}
    with contextlib.suppress(OSError):
        for line in (journal / "commits.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError):
                rec = json.loads(line)
                done.setdefault(rec["feature"], set()).update(rec["items"])
    for feature, items in done.items():
        if feature in report.counts:
            report.counts[feature]["done"] = max(report.counts[feature]["done"], len(items))


def _driver_error(journal: Path) -> dict[str, Any] | None:
    """What the driver noted of its own Python error (`note_error`), None when it noted none."""
    try:
        return json.loads((journal / "error.json").read_text())
    except (OSError, ValueError):
        return None


def _ray_death(journal: Path) -> str | None:
    """'this run's Ray raylet (pid N) ended (killed by SIGKILL)' when the run's raylet or GCS is gone. A dead
    one that the driver had not reaped is this process's child now (the subreaper): its status says how."""
    try:
        pids = json.loads((journal / "ray.json").read_text())
    except (OSError, ValueError):
        return None
    for name in ("raylet", "gcs_server"):
        pid = pids.get(name)
        if not pid:
            continue
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not this process's child: reaped by the driver already, or still alive
            if not _alive(pid):
                return f"this run's Ray {name} (pid {pid}) ended"
            continue
        if got:
            return f"this run's Ray {name} (pid {pid}) ended ({how_ended(os.waitstatus_to_exitcode(status))})"
    return None


def _exit_code(rc: int, ray_death: str | None) -> int:
    if ray_death:
        return 7  # pipeline/exitcodes.py RAY (not imported: this module stays light)
    return 128 - rc if rc < 0 else rc


def how_ended(rc: int) -> str:
    """A process's end as the summary says it: `killed by SIGKILL`, `exit code 1`."""
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def _children() -> list[int]:
    """This process's children (`/proc/self/task/*/children`: the parent imports no psutil and scans no /proc)."""
    kids: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            kids += [int(pid) for pid in (task / "children").read_text().split()]
    return kids


def _end_leftovers() -> None:
    """End whatever of the run is still alive: SIGTERM, SIGKILL after END_GRACE_S, every child reaped. The driver's
    orphans are this process's children (it is their subreaper), and so are theirs once they are ended: rounds
    until none is left."""
    _reap()
    signalled: dict[int, float] = {}
    deadline = time.monotonic() + 4 * END_GRACE_S
    while (kids := _children()) and time.monotonic() < deadline:
        now = time.monotonic()
        for pid in kids:
            sig = signal.SIGTERM if pid not in signalled else signal.SIGKILL
            if pid in signalled and now - signalled[pid] < END_GRACE_S:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
            signalled.setdefault(pid, now)
        time.sleep(0.05)
        _reap()


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return


def _save_native(lines: list[str], journal: Path, out: Path) -> None:
    """Ray's C++ lines of the run, beside its report (`<store>/_runs/<run id>.ray.log`)."""
    if not lines or not runs_dir(out).is_dir():
        return
    try:
        run_id = json.loads((journal / "report.json").read_text())["report"]["run_id"]
    except (OSError, ValueError, KeyError):
        run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-unknown"
    with contextlib.suppress(OSError), open(runs_dir(out) / f"{run_id}.ray.log", "a") as f:
        f.write("\n".join(lines) + "\n")
