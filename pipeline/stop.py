"""SIGINT (Ctrl-C) and SIGTERM during `make extract`: stop within seconds, keep what is committed, report.

`on_signals()` (the CLI wraps a whole run in it) turns either signal into a `Stopped` exception raised in
the main thread wherever it is (reading manifests, planning, waiting on Ray, between commits); the run
catches it, shuts Ray down (its decode tasks and model actors end with it), saves the run report with
`stopped` and the summary is printed; the exit code is 128 + the signal (130 for SIGINT, 143 for SIGTERM).
A commit is never cut in half: inside `deferred()` (the writer's commit) a signal is only noted and raised
when the block ends (a commit takes milliseconds). A second signal while stopping exits at once
(committed pairs are kept anyway: every commit is atomic); no run report then.

Ray: an exception raised by a signal handler inside Ray's C++ calls (`ray.wait`, `ray.get` check for
signals while they block) comes out as a SystemError, and `ray.init` installs its own SIGTERM handler
(sys.exit, which aborts inside a wait with a stack dump). So everything that talks to Ray runs deferred,
in slices of at most a second, calling `check()` between them (through `raystart.check`, which also asks
whether the run's Ray is alive); `reinstall()` takes the signals back after `ray.init`.

This module knows signals only: what a stopped run reports is pipeline/run.py's (`stopped_run`), how Ray is
ended raystart.py's, handed in as `on_signals(at_force_exit=...)`. So nothing here imports the run, its report,
Ray or the store, and they may all import this.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("siqfeat")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):  # noqa: N818 - a BaseException like KeyboardInterrupt: `except Exception` lets it by
    """A run was asked to stop by a signal."""

    def __init__(self, signum: int) -> None:
        self.signum, self.name = signum, signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self.raised = False  # Stopped has been raised for it
        self.deferring = 0  # depth of deferred() blocks
        self.stage = "starting"  # what the run was doing, for the report
        self.previous: dict[int, Any] = {}
        self.at_force_exit: Callable[[], None] | None = None  # called before a second signal exits at once
        self.echo: Callable[[int], bool] | None = None  # whether a second signal is the first one's echo


_active: _State | None = None


def _handle(signum: int, frame: Any) -> None:
    state = _active
    if state is None:
        return
    if state.signum is not None:  # the user insists: go now, unless it is the first signal's echo
        if state.echo is not None and state.echo(signum):
            log.debug("%s again while stopping: the first one's echo, not a second request", signal.Signals(signum).name)
            return
        with contextlib.suppress(OSError):  # a terminal gone (a pipe to a killed parent) must not stop the exit
            sys.stderr.write(f"\n{signal.Signals(signum).name} again while stopping: exiting at once "
                             "(committed pairs are kept; no run report)\n")
            sys.stderr.flush()
        if state.at_force_exit is not None:
            state.at_force_exit()  # the CLI's: the run's local Ray must not outlive the driver
        os._exit(128 + signum)
    state.signum = signum
    log.warning("%s received during %s: stopping (committed pairs are kept)", signal.Signals(signum).name,
                state.stage)
    if not state.deferring:
        state.raised = True
        raise Stopped(signum)


@contextmanager
def on_signals(at_force_exit: Callable[[], None] | None = None,
               echo: Callable[[int], bool] | None = None) -> Iterator[None]:
    """SIGINT and SIGTERM raise `Stopped` inside the block (main thread only; elsewhere nothing changes).
    `at_force_exit`: called when a second signal ends the process at once (what must not outlive it).
    `echo(signum)`: True when a second signal is no one insisting but the first one's repeat (a supervised
    driver's: the kernel's SIGTERM for a killed parent comes once per thread of it), which is then ignored."""
    global _active
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = _State()
    state.at_force_exit, state.echo = at_force_exit, echo
    state.previous = {s: signal.getsignal(s) for s in SIGNALS}
    _active = state
    reinstall()
    try:
        yield
    finally:
        _active = None
        for s, handler in state.previous.items():
            signal.signal(s, handler)


def reinstall() -> None:
    """Take SIGINT and SIGTERM back (after `ray.init`, which sets its own SIGTERM handler)."""
    if _active is not None and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _handle)


def stage(name: str) -> None:
    """Say what the run is doing now (named in the log line and the report when a signal stops it)."""
    if _active is not None:
        _active.stage = name


def check() -> None:
    """Raise `Stopped` if a signal came during a deferred block (the Ray loop's checkpoint, `raystart.check`,
    calls this each second)."""
    state = _active
    if state is not None and state.signum is not None and not state.raised:
        state.raised = True
        raise Stopped(state.signum)


def current_stage() -> str:
    return _active.stage if _active is not None else "starting"


@contextmanager
def deferred(raise_after: bool = True) -> Iterator[None]:
    """A block a signal does not cut: the signal is noted and `Stopped` raised when the block ends
    (`raise_after=False`: never; the run is over and a late signal changes nothing)."""
    state = _active
    if state is None:
        yield
        return
    state.deferring += 1
    try:
        yield
    finally:
        state.deferring -= 1
        if raise_after and not state.deferring and state.signum is not None and not state.raised:
            state.raised = True
            raise Stopped(state.signum)
