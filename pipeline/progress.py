"""The run's progress: how many (feature, item) pairs are finished, of which stored, being committed and failed,
how many are left, and an estimated time left.

The counts add up: finished = stored + committing + failed, and finished + left = total. A pair counts as
finished when the runner closes it (its rows handed to the background committer, or its failure recorded);
`stored` counts those whose batch is in the store, `committing` those handed over whose batch is not yet.
On a terminal this is a tqdm bar; otherwise (a cluster job, CI, a pipe) one log line at once and then every
`every_s` seconds, whether or not a pair finished meanwhile: a long model load is no silence.
The time left is the pairs left over the rate since the first pair finished (model loading and the first
decodes are not in the rate: counted from the start, they made the first estimates several times too long).

The bar: its description is the run's phase ("starting Ray", "loading models", then "extracting"), so the
minutes before the first pair are not a frozen `0/N`; the time left is this module's (tqdm's own counts the
model load), and a thread redraws it every second, as elapsed time and the estimate move with no pair
finishing. While it is up, log lines go through `tqdm.write` (printed above the bar, not glued onto it).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

log = logging.getLogger("siqfeat")
EVERY_S = 15.0
REDRAW_S = 1.0  # the bar's redraw period with nothing finishing (elapsed time and the estimate move on)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


def duration_text(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    def __init__(self, total: int, every_s: float = EVERY_S, bar: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, emit: Callable[[str], Any] | None = None,
                 phase: str = "extracting", file: IO[str] | None = None, redraw_s: float = REDRAW_S) -> None:
        """`bar`: a tqdm bar on `file` (stderr) (None: when stderr is a terminal), else log lines through `emit`
        (log.info). `phase`: the bar's first description."""
        self.total, self.every_s, self.clock = total, every_s, clock
        self.handed_over = self.stored_n = self.failed_n = self.failed_handed = 0
        self.first: tuple[float, int] | None = None  # (time, finished) when the first pair finished
        self.emit = emit or log.info
        self.bar = None
        self._redirect = contextlib.ExitStack()
        self._stop = threading.Event()
        self._closed = False
        if bar if bar is not None else sys.stderr.isatty():
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self.bar = tqdm(total=total, desc=phase, unit="pair", file=file or sys.stderr, bar_format=BAR_FORMAT,
                            dynamic_ncols=True)
            # the handlers writing to the terminal (the root's, Ray's own logger's) print above the bar meanwhile
            self._redirect.enter_context(logging_redirect_tqdm([logging.root, logging.getLogger("ray")]))
            self._draw()
            threading.Thread(target=self._redraw, args=(redraw_s,), name="progress-bar", daemon=True).start()
        self.last = self.clock()
        if self.bar is None:
            self.emit(self.line())

    def phase(self, what: str) -> None:
        """What the run is doing before pairs finish ("starting Ray", "loading models"): the bar's description
        (the plain lines say what they always said)."""
        if self.bar is not None and self.bar.desc != what:
            self.bar.set_description_str(what, refresh=False)
            self._draw()

    def _redraw(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self._draw()

    def _draw(self) -> None:
        bar = self.bar
        if bar is None or bar.disable:
            return
        eta = self.eta_s()
        left = self.total - self.finished
        when = "" if not left else f", {duration_text(eta)} left" if eta is not None else ", time left: after the first pairs"
        bar.n = self.finished
        bar.set_postfix_str(f"stored={self.stored_n}, committing={self.committing}, failed={self.failed_n}{when}",
                            refresh=False)
        with contextlib.suppress(OSError, ValueError):  # the terminal went away: the run goes on
            bar.refresh()

    @property
    def finished(self) -> int:
        return self.handed_over + self.failed_n - self.failed_handed

    @property
    def committing(self) -> int:
        return self.handed_over - self.stored_n - self.failed_handed

    def handed(self, n: int = 1) -> None:
        """n pairs' rows went to the committer: finished, not yet stored."""
        self.handed_over += n
        self._moved()

    def stored(self, n: int = 1) -> None:
        """n pairs handed over are in the store."""
        self.stored_n += n
        self._moved()

    def failed(self, n: int = 1, handed: bool = False) -> None:
        """n pairs failed; `handed`: after they were handed over (their commit failed)."""
        self.failed_n += n
        self.failed_handed += n if handed else 0
        self._moved()

    def _moved(self) -> None:
        if self.first is None and self.finished:
            self.first = (self.clock(), self.finished)
            self.phase("extracting")
        self._draw()

    def eta_s(self) -> float | None:
        """Seconds left at the rate since the first pair finished; None until a second pair gives a rate."""
        if self.first is None:
            return None
        t0, n0 = self.first
        elapsed, done = self.clock() - t0, self.finished - n0
        if elapsed <= 0 or done <= 0:
            return None
        return (self.total - self.finished) / (done / elapsed)

    def line(self) -> str:
        eta = self.eta_s()
        left = self.total - self.finished
        when = ("done" if not left else f"about {duration_text(eta)} left" if eta is not None
                else "time left: after the first pairs")
        return (f"progress: {self.finished}/{self.total} pairs finished ({self.stored_n} stored, {self.committing} "
                f"being committed, {self.failed_n} failed), {left} to go; {when}")

    def tick(self) -> None:
        """Called often (each scheduling step): a log line when `every_s` passed since the last."""
        now = self.clock()
        if self.bar is None and now - self.last >= self.every_s:
            self.last = now
            self.emit(self.line())

    def close(self) -> None:
        """The bar's last state, or the last line (once: a second close does nothing)."""
        if self._closed:
            return
        self._closed = True
        if self.bar is not None:
            self._stop.set()
            self.phase("extracting")
            self.bar.close()
            self._redirect.close()
        elif self.finished:
            self.emit(self.line())
