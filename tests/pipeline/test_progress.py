"""pipeline/progress.py with a clock the test moves: lines that add up, one at once, one every 15 s whether or not
a pair finished, and a time left from the rate since the first pair finished."""

from __future__ import annotations

import io
import re

import pytest

from pipeline.progress import Progress, duration_text

LINE = re.compile(r"progress: (\d+)/(\d+) pairs finished \((\d+) stored, (\d+) being committed, (\d+) failed\), "
                  r"(\d+) to go; (.*)")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def adds_up(line: str) -> tuple[int, ...]:
    m = LINE.fullmatch(line)
    assert m, line
    finished, total, stored, committing, failed, left = map(int, m.groups()[:6])
    assert finished == stored + committing + failed and finished + left == total, line
    return finished, total, stored, committing, failed, left


def test_lines_add_up_and_come_without_waiting_for_a_pair() -> None:
    clock, lines = Clock(), []
    p = Progress(25, bar=False, clock=clock, emit=lines.append)
    assert len(lines) == 1 and adds_up(lines[0])[:2] == (0, 25)  # at once: before any model has loaded
    clock.t += 14.9
    p.tick()
    assert len(lines) == 1
    clock.t += 0.2
    p.tick()  # 15 s and nothing finished: a line all the same
    assert len(lines) == 2 and adds_up(lines[1]) == (0, 25, 0, 0, 0, 25)
    for _ in range(20):  # the state the issue saw: 20 closed, 15 of them in the store
        p.handed()
    p.stored(15)
    p.failed(2)
    p.failed(handed=True)  # one handed over, then its commit failed
    p.handed(2)
    clock.t += 16
    p.tick()
    assert adds_up(lines[2]) == (24, 25, 15, 6, 3, 1)


def test_time_left_from_the_rate_since_the_first_pair() -> None:
    clock, lines = Clock(), []
    p = Progress(101, bar=False, clock=clock, emit=lines.append)
    assert p.eta_s() is None
    clock.t += 155  # models loading: not in the rate
    p.handed()
    assert p.eta_s() is None and lines[-1].endswith("time left: after the first pairs")
    clock.t += 10
    p.handed(10)  # 10 pairs in 10 s: 1 pair/s, 90 left
    assert p.eta_s() == pytest.approx(90.0)
    assert p.line().endswith("; about 1 min 30 s left")
    p.handed(90)
    p.stored(101)
    assert p.line().endswith("0 to go; done")


def test_duration_text() -> None:
    assert [duration_text(s) for s in (4.4, 59.6, 61, 3599, 3600, 7325)] == [
        "4 s", "1 min 00 s", "1 min 01 s", "59 min 59 s", "1 h 00 min", "2 h 02 min"]


def test_a_terminal_gets_a_bar_and_no_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    err, lines = io.StringIO(), []
    monkeypatch.setattr(sys, "stderr", err)
    p = Progress(4, bar=True, emit=lines.append)
    p.handed(3)
    p.stored(2)
    p.failed()
    p.tick()
    assert p.bar is not None and p.bar.n == 4
    p.close()
    assert lines == []
    assert "4/4" in err.getvalue() and "stored=2" in err.getvalue() and "failed=1" in err.getvalue()


def test_split_and_limit_log_the_chosen_counts(tmp_path, caplog: pytest.LogCaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`--split dev --limit 2` on SocialIQA (one item per question): the line counts 2 items and their 2 questions,
    the dataset's 12 in brackets. Nothing is computed: the run stops right after that line."""
    import pipeline.run as run_module
    from manifests.socialiqa import write_sample_socialiqa
    from pipeline.config import load_config

    write_sample_socialiqa(tmp_path / "raw", n=8)  # 8 train + 4 dev questions, one item each

    def stop_here(*args, **kwargs):
        raise SystemExit(0)

    monkeypatch.setattr(run_module, "_extract", stop_here)
    caplog.set_level("INFO", logger="siqfeat")
    with pytest.raises(SystemExit):
        run_module.run_extract("socialiqa", tmp_path / "raw", tmp_path / "s.zarr", load_config("socialiqa-minilm"),
                               split="dev", limit=2)
    (line,) = [m for m in caplog.messages if " questions from " in m]
    assert line.startswith("socialiqa: 2 items, 2 questions from ") and line.endswith("(of 12 items, 12 questions: "
                                                                                       "--split/--limit)")


def test_ray_is_quiet_unless_verbose(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    import pipeline.cli as cli

    monkeypatch.setattr(cli, "_extract", lambda args: 0)
    token_log = logging.getLogger(cli.RAY_QUIET_LOGGERS[0])
    monkeypatch.setattr(token_log, "level", logging.NOTSET)
    assert cli.main(["-v", "extract", "--dataset", "sample", "--raw", "r", "--out", "o"]) == 0
    assert token_log.isEnabledFor(logging.WARNING)
    assert cli.main(["extract", "--dataset", "sample", "--raw", "r", "--out", "o"]) == 0
    assert not token_log.isEnabledFor(logging.WARNING) and token_log.isEnabledFor(logging.ERROR)


def screen(written: str) -> list[str]:
    """The lines a terminal shows after `written`: `\\r` goes back to the start of the line and what follows
    overwrites it (as tqdm redraws its bar and clears it for `tqdm.write`); control sequences are dropped."""
    rows, row, col = [], [], 0
    for ch in re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", written):
        if ch == "\n":
            rows.append("".join(row).rstrip())
            row, col = [], 0
        elif ch == "\r":
            col = 0
        else:
            row[col:col + 1] = [ch]
            col += 1
    return [r for r in [*rows, "".join(row).rstrip()] if r]


def test_the_bar_shows_the_phase_prints_log_lines_above_itself_and_keeps_its_estimate_moving(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user sees on a terminal: "starting Ray", "loading models", then "extracting"; a log line on its own
    line above the bar; the time left from the rate since the first pair (the 155 s of model loading are not in
    it: tqdm's own estimate counts them), redrawn with no pair finishing."""
    import logging
    import sys
    import time

    err, clock = io.StringIO(), Clock()
    monkeypatch.setattr(sys, "stderr", err)
    handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [handler])
    monkeypatch.setattr(root, "level", logging.INFO)
    p = Progress(101, bar=True, clock=clock, phase="starting Ray", redraw_s=0.05)
    assert screen(err.getvalue())[-1].startswith("starting Ray:")
    assert "0/101" in screen(err.getvalue())[-1] and "time left: after the first pairs" in screen(err.getvalue())[-1]
    p.phase("loading models")
    logging.getLogger("siqfeat").info("scheduler: fixed")
    shown = screen(err.getvalue())
    assert shown[-2:-1] == ["scheduler: fixed"]  # a line of its own, above the bar
    assert shown[-1].startswith("loading models:") and "0/101" in shown[-1]
    clock.t += 155
    p.handed()
    clock.t += 10
    p.handed(10)  # 10 pairs in the 10 s since the first: 90 left at 1 pair/s
    bar = screen(err.getvalue())[-1]
    assert bar.startswith("extracting:") and "11/101" in bar and "1 min 30 s left" in bar, bar
    clock.t += 30  # no pair for 30 s: 10 pairs in 40 s, 90 left at 0.25 pair/s; nothing calls the bar meanwhile
    deadline = time.monotonic() + 5
    while "6 min 00 s left" not in screen(err.getvalue())[-1] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "6 min 00 s left" in screen(err.getvalue())[-1]
    p.close()
    assert root.handlers == [handler]  # logging as it was once the bar is gone
    logging.getLogger("siqfeat").info("after the bar")
    assert screen(err.getvalue())[-1] == "after the bar"


def test_close_twice_prints_the_last_line_once() -> None:
    lines: list[str] = []
    p = Progress(2, bar=False, emit=lines.append)
    p.handed(2)
    p.close()
    p.close()
    assert len(lines) == 2
