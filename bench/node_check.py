"""Issue 37's checks on a GPU node, as one device command (docs/scale.md, "The node check").

    python3 -m bench.node_check --kit build/node --out $OUT --budget-s 480      # on the node
    python -m bench.node_check --prepare build/node                             # here, before: what it carries

The node (the device image 'cuda': Python 3.12, its own torch, torchvision, transformers; no ffmpeg, no
espeak-ng, no network) gets the repository's working tree and the carried folder build/node: kit/ (the kit,
`siqfeat-kit-py3.12.tar.xz`, deploy/bundle.py `--kit`: what the image lacks, installed for PYTHONPATH), raw/
(two 60 s bench.scale_raw clips as a Social-IQ 2.0 set), media/ (the test videos of tests/media/test_nvdec.py's CUDA
cases, made with ffmpeg here) and realdata/ (../shared/realdata/speech). Where kit and clips together pass one
call's 64 MiB, a first call carries kit/, media/ and realdata/ and a second, right after it on the same machine,
raw/: the kit the first unpacked is found there (docs/scale.md, "The node check"). Each step runs in a child process with
its own timeout, inside the total budget, and the next one runs whatever the last gave; where the budget is spent
a step is recorded as not run. Steps:

- kit: the kit unpacked; PYTHONPATH = the repository, then the kit; FFmpeg's libraries of the kit's PyAV linked
  under the names torchcodec loads (PyAV 18's FFmpeg 8 is built with NVDEC), LD_LIBRARY_PATH to them;
- facts: nvidia-smi, torch, CUDA, torchcodec and PyAV as the children see them, and `pip list` (a log);
- weights: a BERT-base-shaped model (bert-base-uncased's config and vocabulary, random weights) under
  $SIQ_WEIGHTS_DIR, as ../shared/gpu-run's run had it;
- tests_gpu (CUDA): `FAIL_WITHOUT_CUDA=1 pytest -m gpu tests/media/test_nvdec.py tests/extractors/test_acoustic_torch.py`;
- extract: `--clips` clips (hard links to the two) through `pipeline extract` with bench/node_check.toml
  (frames_decoder "auto", the acoustic set in torch), nvidia-smi sampled every 0.5 s; stopped by SIGINT at its
  timeout, as ../shared/gpu-run's run was, its committed clips counted;
- compare: the first two clips again with bench/node_check_cpu.toml (the CPU paths, the reference), and the two
  stores compared item by item: the same rows, and per feature and column the difference;
- profile_decode (CUDA): `python -m bench.profile_decode --device cuda` on the two clips;
- actor_start (CUDA): `python -m bench.actor_start --device cuda`, each model actor's start with its CUDA context.

Where no CUDA is (this machine), the CUDA steps are recorded as skipped with the reason and the rest runs on the
CPU: `--clips 2` makes it an end-to-end run of the script. Written into --out: summary.json (the figures and each
step's status), steps.log (every child's output), pip-freeze.txt, nvidia-smi.csv, run-report.json (the extract
step's run report). Nothing but the standard library is imported before the kit is in place.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KIT = "siqfeat-kit-py3.12.tar.xz"
CLIPS_PER_S_MIN = 8.0  # issue 37's acceptance: 500 clips at >= 8 clips/s on one node
# step -> (timeout in s, needs CUDA), in the order they run: the acceptance bars' steps first, then the two
# profiles (figures for docs/scale.md, no bar). Each gets the smaller of its timeout and what the budget has left.
STEPS: dict[str, tuple[float, bool]] = {
    "kit": (60, False), "facts": (60, False), "weights": (90, False), "tests_gpu": (110, True),
    "extract": (240, False), "compare": (120, False), "profile_decode": (60, True), "actor_start": (80, True)}
MIN_STEP_S = 5  # a step is not started with less of the budget left
GRACE_S = 20  # after SIGINT, for a stopped run to commit what it has and write its report
COMPARED = 2  # clips of the compare step: the two distinct clips (the others are links to them)
SUBPROCESS_TAIL = 4000


class Check:
    """The steps' bookkeeping: the budget, the environment the children get, the summary and the log."""

    def __init__(self, out: Path, budget_s: float, work: Path, timeouts: dict[str, float]) -> None:
        self.out, self.work = out, work
        self.deadline = time.monotonic() + budget_s
        self.timeouts = timeouts
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "SIQ_CALIBRATE": "0",
                    "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_OFFLINE": "1"}
        self.cuda: bool | None = None  # unknown until `facts`
        self.summary: dict[str, Any] = {"schema": 1, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "budget_s": budget_s, "steps": {}, "facts": {}}
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "steps.log", "a", buffering=1)  # noqa: SIM115 (open for the whole run)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def step(self, name: str, fn: Callable[[float], dict[str, Any] | None]) -> None:
        """Runs `fn(timeout_s)`, recording ok / failed / timeout / skipped / not run, its seconds and figures;
        whatever it raises is recorded and the next step runs."""
        own, needs_cuda = STEPS[name]
        timeout = min(self.timeouts.get(name, own), self.left())
        record: dict[str, Any] = {"status": "ok", "seconds": 0.0}
        self.summary["steps"][name] = record
        if needs_cuda and not self.cuda:
            record.update(status="skipped", reason="torch sees no CUDA" if self.cuda is False
                          else "CUDA unknown: the facts step did not finish")
            return self._logged(name, record)
        if self.left() < MIN_STEP_S:
            record.update(status="not run", reason=f"budget spent ({self.left():.0f} s left)")
            return self._logged(name, record)
        self.log.write(f"\n===== {name} (timeout {timeout:.0f} s) =====\n")
        t0 = time.monotonic()
        try:
            figures = fn(timeout)
            if figures:
                record["figures"] = figures
        except StepTimeout as e:
            record.update(status="timeout", reason=str(e))
        except Exception as e:  # a failed step is a finding: recorded, and the next step runs
            record.update(status="failed", reason=f"{type(e).__name__}: {e}"[:SUBPROCESS_TAIL])
        record["seconds"] = round(time.monotonic() - t0, 1)
        self._logged(name, record)

    def _logged(self, name: str, record: dict[str, Any]) -> None:
        line = f"node_check: {name}: {record['status']} ({record['seconds']} s)" + (
            f": {record['reason'][:300]}" if record.get("reason") else "")
        print(line, flush=True)
        self.log.write(line + "\n")
        self.write()

    def write(self) -> None:
        """summary.json, rewritten after every step: a command killed at its limit still leaves one."""
        self.summary["seconds"] = round(self.left() * -1 + self.summary["budget_s"], 1)
        tmp = self.out / "summary.json.partial"
        tmp.write_text(json.dumps(self.summary, indent=1, default=str))
        tmp.replace(self.out / "summary.json")

    def sh(self, argv: list[str], timeout: float, env: dict[str, str] | None = None,
           stop_signal: int = signal.SIGKILL) -> str:
        """`argv` in a process group of its own, its output appended to steps.log; returns the output. A
        non-zero exit raises with the output's tail; at `timeout` the group gets `stop_signal`, then SIGKILL
        after GRACE_S, and StepTimeout is raised."""
        self.log.write(f"$ {' '.join(argv)}\n")
        proc = subprocess.Popen(argv, cwd=REPO, env=env or self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, stop_signal)
            try:
                out, _ = proc.communicate(timeout=GRACE_S if stop_signal != signal.SIGKILL else 10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            self.log.write(out or "")
            what = " ".join(argv[1:3]) if argv[1:2] == ["-m"] else Path(argv[0]).name
            raise StepTimeout(f"{what} ran past {timeout:.0f} s: stopped ({signal.Signals(stop_signal).name})") from None
        self.log.write(out)
        if proc.returncode:
            raise RuntimeError(f"exit {proc.returncode}: {out[-SUBPROCESS_TAIL:]}")
        return out

    def python(self, code: str, timeout: float) -> Any:
        """`code` run by this Python with the children's environment; its last output line, as JSON."""
        out = self.sh([sys.executable, "-c", code], timeout)
        return json.loads(out.strip().splitlines()[-1])


class StepTimeout(Exception):
    pass


# ---- the steps -------------------------------------------------------------------------------------------------

def kit_step(check: Check, kit_dir: Path | None) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        dest = check.work / "kit"
        if kit_dir is None:
            return {"kit": None, "note": "no --kit: this machine's own environment"}
        if list((kit_dir / "kit").glob(f"{KIT}*")):
            note = _unpack(kit_dir / "kit", dest)
        elif (dest / "MANIFEST.json").is_file():  # the first of two calls left it (docs/scale.md)
            note = f"the kit an earlier call unpacked on this machine ({dest})"
        else:
            raise FileNotFoundError(f"no kit in {kit_dir / 'kit'} and none unpacked in {dest}: a fresh machine, "
                                    "not the one the first call left it on (run the calls one right after the other)")
        site = dest / "site"
        ffmpeg = ffmpeg_links(site, dest / "ffmpeg")
        check.env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(site)])
        check.env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(ffmpeg), os.environ.get("LD_LIBRARY_PATH")]))
        sys.path[1:1] = [str(site)]  # this process too: the set's expansion and the comparison import from it
        manifest = json.loads((dest / "MANIFEST.json").read_text())
        left_out = {n.lower().replace("_", "-") for n in manifest.get("kit_left_out", [])}
        installed = [f for f in manifest["files"] if f.split("-")[0].lower().replace("_", "-") not in left_out]
        return {"kit": note, "python": manifest["python"], "packages": len(installed),
                "ffmpeg_links": sorted(p.name for p in ffmpeg.iterdir())}
    return run


def _unpack(kit_dir: Path, dest: Path) -> str:
    """The kit in `kit_dir` (one KIT file, or its pieces KIT.000, .001, …) unpacked into `dest`, complete or not
    at all."""
    pieces = sorted(kit_dir.glob(f"{KIT}.[0-9][0-9][0-9]")) or [kit_dir / KIT]
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with _Joined(pieces) as joined, tarfile.open(fileobj=joined, mode="r|xz") as tar:
        tar.extractall(partial, filter="data")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    return f"{len(pieces)} piece(s), {sum(p.stat().st_size for p in pieces) / 2**20:.1f} MiB"


class _Joined(io.RawIOBase):
    """The pieces read one after the other as one stream."""

    def __init__(self, pieces: list[Path]) -> None:
        self.pieces, self.current = list(pieces), None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self.current is None:
                if not self.pieces:
                    return 0
                self.current = open(self.pieces.pop(0), "rb")  # noqa: SIM115 (closed below, at its end)
            n = self.current.readinto(buffer)
            if n:
                return n
            self.current.close()
            self.current = None

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
        super().close()


def ffmpeg_links(site: Path, dest: Path) -> Path:
    """PyAV's FFmpeg libraries (av.libs/libavcodec-<hash>.so.62.x: auditwheel's names) linked under the names
    their users look for (libavcodec.so.62), in `dest`: torchcodec loads FFmpeg by those names, and the node has
    no FFmpeg of its own."""
    dest.mkdir(parents=True, exist_ok=True)
    for lib in (site / "av.libs").glob("lib*.so*"):
        m = re.match(r"(lib[a-z0-9_]+)-[0-9a-f]{8}\.so\.(\d+)", lib.name)
        if m and m.group(1) in ("libavcodec", "libavformat", "libavutil", "libavdevice", "libavfilter",
                                "libswscale", "libswresample"):
            link = dest / f"{m.group(1)}.so.{m.group(2)}"
            link.unlink(missing_ok=True)
            link.symlink_to(lib)
    return dest


FACTS = r"""
import json, os, sys
facts = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
import torch
facts.update(torch=torch.__version__, cuda=torch.cuda.is_available(), torch_cuda=torch.version.cuda)
if facts["cuda"]:
    p = torch.cuda.get_device_properties(0)
    facts.update(gpu=p.name, gpu_mib=p.total_memory // 2**20, capability=f"{p.major}.{p.minor}")
for name in ("torchvision", "transformers", "ray", "zarr", "numpy", "av"):
    try:
        facts[name] = __import__(name).__version__
    except Exception as e:
        facts[name] = f"missing: {type(e).__name__}: {e}"[:300]
try:
    import av
    facts["av_ffmpeg"] = av.ffmpeg_version_info
except Exception:
    pass
try:
    import torchcodec
    from torchcodec.decoders import VideoDecoder  # loads its core against an FFmpeg it finds
    facts["torchcodec"] = torchcodec.__version__
except Exception as e:
    facts["torchcodec"] = f"not loaded: {type(e).__name__}: {e}"[:400]
print(json.dumps(facts))
"""


def facts_step(check: Check) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        facts: dict[str, Any] = {"machine": platform.machine(), "kernel": platform.release()}
        if shutil.which("nvidia-smi"):
            out = check.sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                            "--format=csv,noheader"], min(timeout, 20))
            facts["nvidia_smi"] = out.strip()
        else:
            facts["nvidia_smi"] = None
        facts.update(check.python(FACTS, timeout))
        check.cuda = bool(facts["cuda"])
        check.summary["facts"] = facts
        try:
            image = {k: v for k, v in check.env.items() if k != "PYTHONPATH"}  # the node's own, not the kit's
            freeze = check.sh([sys.executable, "-m", "pip", "list", "--format=freeze"], min(timeout, 30), env=image)
            (check.out / "pip-freeze.txt").write_text(freeze)
        except Exception as e:  # facts without the list are still facts
            facts["pip_list"] = f"failed: {e}"[:300]
        return {"cuda": facts["cuda"], "gpu": facts.get("gpu"), "torchcodec": facts["torchcodec"]}
    return run


WEIGHTS = r"""
import json, shutil, sys, torch
from pathlib import Path
from transformers import BertConfig, BertModel
from deploy.bundle import TOKENIZER_FILES
dest, tokenizer, shape = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
if tokenizer == "-":
    from extractors.text_model import BUNDLED_MINILM, resolve_model_dir
    tokenizer = resolve_model_dir(BUNDLED_MINILM)
partial = dest.with_name(dest.name + ".partial")  # complete or absent: a later call reuses it
shutil.rmtree(partial, ignore_errors=True)
torch.manual_seed(0)
BertModel(BertConfig(**shape)).save_pretrained(partial)  # BertConfig's defaults are bert-base's shape
for name in TOKENIZER_FILES:
    if (Path(tokenizer) / name).exists():
        shutil.copy(Path(tokenizer) / name, partial / name)
partial.rename(dest)
print(json.dumps({"bert_base": str(dest), "shape": shape or "bert-base",
                  "files": sorted(p.name for p in dest.iterdir())}))
"""


# --tiny-bert: BERT's architecture and vocabulary at a dry run's size. A CPU machine checks that the steps run as
# written; bert-base's compute is what the node measures, and on 2 CPU cores its load and its calls in the two runs'
# four actors cost about a minute of the suite.
TINY_BERT = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512}


def weights_step(check: Check, tiny: bool = False) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        weights = check.work / "weights"
        kit_tokenizer = check.work / "kit" / "tokenizers" / "bert-base-uncased"
        tokenizer = str(kit_tokenizer) if kit_tokenizer.is_dir() else "-"
        check.env["SIQ_WEIGHTS_DIR"] = str(weights)
        if (weights / "bert-base-uncased" / "config.json").is_file():  # an earlier call's, on this machine
            return {"bert_base": str(weights / "bert-base-uncased"), "reused": True}
        shape = json.dumps(TINY_BERT if tiny else {})
        out = check.sh([sys.executable, "-c", WEIGHTS, str(weights / "bert-base-uncased"), tokenizer, shape], timeout)
        return json.loads(out.strip().splitlines()[-1])
    return run


def tests_step(check: Check, kit_dir: Path | None) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        env = {**check.env, "FAIL_WITHOUT_CUDA": "1"}
        if kit_dir is not None:  # the test videos made ahead (no ffmpeg there), the real speech carried
            env.update(SIQ_SYNTH_MEDIA=str(kit_dir / "media"), SIQ_REALDATA=str(kit_dir / "realdata"))
        argv = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-rs",
                "tests/media/test_nvdec.py", "tests/extractors/test_acoustic_torch.py"]
        try:
            out = check.sh(argv, timeout, env=env)
        except RuntimeError as e:
            raise RuntimeError(f"{_pytest_counts(str(e))}: {e}") from None
        return _pytest_counts(out)
    return run


def _pytest_counts(out: str) -> dict[str, int]:
    """pytest's last line ("3 failed, 12 passed, 2 skipped, 40 deselected in 9.1s") as counts."""
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed)", out)}


def profile_step(check: Check, raw: Path) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        videos = sorted(str(p) for p in (raw / "siq2" / "video").glob("*.mp4"))
        out = check.sh([sys.executable, "-m", "bench.profile_decode", "--device", "cuda", "--repeat", "1", *videos],
                       timeout)
        return {"table": out.strip().splitlines()[-12:]}
    return run


def actor_start_step(check: Check) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        tokenizer = check.work / "weights" / "bert-base-uncased"
        argv = [sys.executable, "-m", "bench.actor_start", "--rounds", "1", "--device", "cuda",
                "--workdir", str(check.work / "actor-start"), *(["--tokenizer", str(tokenizer)] if tokenizer.is_dir()
                                                              else [])]
        out = check.sh(argv, timeout)
        totals = re.findall(r"^(\w+) actor.*?in all \(median[^)]*\)\s+([\d.]+)\s+([\d.]+)", out, re.M | re.S)
        return {"ready_s": {a: {"wall": float(w), "cpu": float(c)} for a, w, c in totals}}
    return run


def extract(check: Check, raw: Path, store: Path, config: str, timeout: float) -> dict[str, Any]:
    """One `pipeline extract`, SIGINT at `timeout` (a stopped run commits what it has and reports it)."""
    shutil.rmtree(store, ignore_errors=True)
    argv = [sys.executable, "-m", "pipeline", "extract", "--dataset", "socialiq", "--raw", str(raw),
            "--out", str(store), "--config", str(REPO / "bench" / config)]
    t0 = time.monotonic()
    stopped = exit_note = None
    try:
        check.sh(argv, max(timeout - GRACE_S, 5), stop_signal=signal.SIGINT)
    except StepTimeout as e:
        stopped = str(e)
    except RuntimeError as e:  # a run with failed pairs exits non-zero: its report says which
        exit_note = str(e)[:SUBPROCESS_TAIL]
    wall = time.monotonic() - t0
    reports = [p for p in (store / "_runs").glob("*.json") if not p.name.endswith(".scale.json")]
    if not reports:
        raise RuntimeError(f"no run report in {store / '_runs'}: {stopped or exit_note}")
    report = json.loads(max(reports, key=lambda p: p.stat().st_mtime).read_text())
    return {"report": report, "wall_s": wall, "stopped": stopped, "exit": exit_note}


def extract_step(check: Check, raw: Path, clips: int) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        from testing.scale_raw import expand_set

        big = check.work / "raw-set"
        shutil.rmtree(big, ignore_errors=True)
        expand_set(raw, big, clips)
        sampler = _sample_gpu(check.out / "nvidia-smi.csv")
        try:
            got = extract(check, big, check.work / "gpu.zarr", "node_check.toml", timeout)
        finally:
            if sampler:
                sampler.terminate()
                sampler.wait()
        report = got["report"]
        (check.out / "run-report.json").write_text(json.dumps(report, indent=1))
        counts = report.get("counts", {})
        done = min((c.get("done", 0) for c in counts.values()), default=0)  # clips with every feature stored
        failed = sum(c.get("failed", 0) for c in counts.values())
        seconds = float(report.get("seconds") or got["wall_s"])
        # the extraction alone (first decode to last commit: Ray's start and the first actor loads before it),
        # the figure bench.simulate's steady state is compared with; clips_per_s is the user's whole wait
        window = ((report.get("utilisation") or {}).get("run") or {}).get("seconds")
        figures = {"clips": clips, "clips_done": done, "failed_pairs": failed, "run_s": round(seconds, 1),
                   "wall_s": round(got["wall_s"], 1), "clips_per_s": round(done / seconds, 3) if seconds else None,
                   "extraction_s": window, "clips_per_s_extraction": round(done / window, 3) if window else None,
                   "stopped": got["stopped"], "exit": got["exit"], "frames_decoders": report.get("frames_decoders"),
                   "utilisation": report.get("utilisation"), "gpu_busy": _gpu_busy(check.out / "nvidia-smi.csv")}
        check.summary["counts"] = counts
        return figures
    return run


def _sample_gpu(path: Path) -> subprocess.Popen | None:
    if not shutil.which("nvidia-smi"):
        return None
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used",
                             "--format=csv,noheader,nounits", "-lms", "500"], stdout=open(path, "w"),  # noqa: SIM115
                            stderr=subprocess.DEVNULL)


def _gpu_busy(path: Path) -> dict[str, Any] | None:
    """From nvidia-smi's samples: their number, mean utilization.gpu, the fraction over 50 %, the most memory."""
    if not path.is_file():
        return None
    util, mem = [], []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[1].isdigit():
            util.append(int(parts[1]))
            mem.append(int(parts[2]) if parts[2].isdigit() else 0)
    if not util:
        return {"samples": 0}
    return {"samples": len(util), "mean_util_pct": round(sum(util) / len(util), 1),
            "over_50pct": round(sum(u > 50 for u in util) / len(util), 3), "max_mem_mib": max(mem)}


# The two runs' stores, item by item: the same rows (intervals) for every feature; the acoustic set judged per
# column as tests/extractors/test_acoustic_torch.py judges the torch backend against the numpy one (its `differences`,
# TOLERANCE and NAN_MISMATCH: one table of tolerances, not two); the model features' largest difference beside
# the size of their values (DenseNet and MTCNN see NVDEC's pixels, within colour-conversion rounding of swscale's).
COMPARE = r"""
import json, sys
import numpy as np
from store import open_store
from tests.extractors.test_acoustic_torch import NAN_MISMATCH, TOLERANCE, differences
gpu, cpu = open_store(sys.argv[1]), open_store(sys.argv[2])
out = {}
for feat in ("frames", "faces", "transcript", "qa", "acoustic"):
    got = out[feat] = {"rows_equal": True}
    for item in json.loads(sys.argv[3]):
        try:
            g, c = gpu.read(feat, item), cpu.read(feat, item)
        except Exception as e:
            got.update(rows_equal=False, error=f"{item}: {type(e).__name__}: {e}"[:300])
            break
        gf, cf = np.asarray(g.features[:], float), np.asarray(c.features[:], float)
        if gf.shape != cf.shape or not np.array_equal(np.asarray(g.intervals[:]), np.asarray(c.intervals[:])):
            got.update(rows_equal=False, error=f"{item}: rows {gf.shape} on the GPU paths, {cf.shape} on the CPU's")
            break
        if feat == "acoustic":
            diff = differences(cf, gf)
            bad = {n: d for n, d in diff.items() if d[0] > NAN_MISMATCH or (n in TOLERANCE and (
                d[1] > TOLERANCE[n][0] or d[2] > TOLERANCE[n][1]))}
            got.setdefault("outside_tolerance", {}).update({f"{item}:{n}": d for n, d in bad.items()})
            got["within_tolerance"] = not got["outside_tolerance"]
        else:
            both = np.isfinite(gf) & np.isfinite(cf)
            d = np.abs(gf[both] - cf[both])
            got["max_abs"] = max(got.get("max_abs", 0.0), float(d.max()) if d.size else 0.0)
            got["p99_abs"] = max(got.get("p99_abs", 0.0), float(np.percentile(d, 99)) if d.size else 0.0)
            got["p99_value"] = max(got.get("p99_value", 0.0), float(np.percentile(np.abs(cf[both]), 99)) if d.size else 0.0)
print(json.dumps(out))
"""


def compare_step(check: Check, raw: Callable[[], Path]) -> Callable[[float], dict[str, Any]]:
    def run(timeout: float) -> dict[str, Any]:
        from testing.scale_raw import expand_set

        gpu = check.work / "gpu.zarr"
        if not gpu.is_dir():
            raise FileNotFoundError(f"{gpu}: the extract step left no store to compare")
        # a set of its own with the big set's first clips under the same names (one of each base clip: --limit
        # would take the manifest's first, which may be two of one base clip)
        small = check.work / "raw-compare"
        shutil.rmtree(small, ignore_errors=True)
        items = expand_set(raw(), small, COMPARED)
        got = extract(check, small, check.work / "cpu.zarr", "node_check_cpu.toml", timeout - 30)
        if got["stopped"]:
            raise StepTimeout(f"the CPU paths' run: {got['stopped']}")
        out = check.sh([sys.executable, "-c", COMPARE, str(gpu), str(check.work / "cpu.zarr"), json.dumps(items)],
                       min(60, check.left()))
        return json.loads(out.strip().splitlines()[-1])
    return run


# ---- preparing the carried folder (here, with ffmpeg and espeak-ng) ----------------------------------------------

MEDIA = r"""
import os, sys
from pathlib import Path
import tests.media.test_nvdec as t
from testing.synth_display import make_case
os.environ["SIQ_SYNTH_MEDIA"] = sys.argv[1]
tmp = Path(sys.argv[2])
(case_mark,) = [m for m in t.test_nvdec_takes_the_cpu_paths_frames_within_rounding.pytestmark if m.name == "parametrize"]
for case in case_mark.args[1]:
    path = make_case(case, tmp, seconds=3)
    if case.codec in ("vp9", "av1"):
        t._encode_scaled(path, tmp / f"big-{path.name}", case)
print(sorted(os.listdir(sys.argv[1])))
"""


def prepare(dest: Path, python: str, build_kit: bool) -> None:
    """What the node check carries, in `dest`: kit/ (the kit), raw/ (the two clips), media/ (tests/media/test_nvdec.py's
    CUDA videos) and realdata/speech."""
    import tempfile

    from testing.scale_raw import make_raw

    dest.mkdir(parents=True, exist_ok=True)
    src = make_raw(REPO / "build" / "scale", 2, 60)
    shutil.rmtree(dest / "raw", ignore_errors=True)
    shutil.copytree(src, dest / "raw")  # files, not links to the cache: the device call sends this folder alone
    shutil.rmtree(dest / "media", ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", MEDIA, str(dest / "media"), tmp], cwd=REPO, check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    speech = Path(os.environ.get("SIQ_REALDATA") or REPO.parent / "shared" / "realdata") / "speech"
    shutil.rmtree(dest / "realdata", ignore_errors=True)
    if speech.is_dir():
        shutil.copytree(speech, dest / "realdata" / "speech")
    if build_kit:
        from deploy import bundle

        bundle.build(python, dest / "kit", present=bundle.read_present(REPO / "bench" / "node_image.txt"),
                     presets=["socialiq"], kit=True)
    sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in sorted(dest.iterdir())}
    for name, size in sizes.items():
        print(f"{name:32s} {size / 2**20:7.1f} MiB")
    print(f"{'in all':32s} {sum(sizes.values()) / 2**20:7.1f} MiB (with the working tree, at most 64 MiB a call: "
          "docs/scale.md, 'The node check', says which calls carry what)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.node_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where summary.json and the logs go ($OUT on the node)")
    ap.add_argument("--kit", type=Path, help="the carried folder (build/node): kit/, raw/, media/, realdata/, each "
                    "where carried; without it, this machine's environment and --raw")
    ap.add_argument("--raw", type=Path, help="the two-clip set (default: KIT/raw, else a bench.scale_raw one here)")
    ap.add_argument("--budget-s", type=float, default=480, help="all steps together, seconds")
    ap.add_argument("--clips", type=int, default=500, help="clips of the extract step (issue 37: 500)")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {','.join(STEPS)}")
    ap.add_argument("--timeout", action="append", default=[], metavar="STEP=S", help="a step's own timeout")
    ap.add_argument("--work", type=Path, default=REPO / "build" / "node-check",
                    help="scratch (the set's links must be on the same file system as the carried clips)")
    ap.add_argument("--tiny-bert", action="store_true",
                    help="the weights step's BERT at a dry run's size (2 layers, 128 wide) instead of bert-base's")
    ap.add_argument("--prepare", type=Path, metavar="DIR", help="here, before: write the carried folder and exit")
    ap.add_argument("--python", default="3.12", help="--prepare: the node's Python, for the kit")
    ap.add_argument("--no-kit", action="store_true", help="--prepare: everything but the kit")
    args = ap.parse_args(argv)
    if args.prepare:
        prepare(args.prepare, args.python, not args.no_kit)
        return 0
    if args.out is None:
        ap.error("--out is required")
    steps = args.steps.split(",")
    unknown = set(steps) - set(STEPS)
    if unknown:
        ap.error(f"unknown steps {sorted(unknown)}: {', '.join(STEPS)}")
    timeouts = {k: float(v) for k, v in (t.split("=", 1) for t in args.timeout)}
    check = Check(args.out, args.budget_s, args.work, timeouts)
    def raw() -> Path:  # made here only where asked for and not given (ffmpeg and espeak-ng make it)
        if args.raw or args.kit:
            return args.raw or args.kit / "raw"
        from testing.scale_raw import make_raw

        return make_raw(REPO / "build" / "scale", 2, 60)

    runners = {"kit": lambda: kit_step(check, args.kit), "facts": lambda: facts_step(check),
               "weights": lambda: weights_step(check, args.tiny_bert), "tests_gpu": lambda: tests_step(check, args.kit),
               "profile_decode": lambda: profile_step(check, raw()), "actor_start": lambda: actor_start_step(check),
               "extract": lambda: extract_step(check, raw(), args.clips), "compare": lambda: compare_step(check, raw)}
    for name in STEPS:
        if name in steps:
            check.step(name, runners[name]())
    check.summary["acceptance"] = acceptance(check.summary)
    check.write()
    print(json.dumps(check.summary["acceptance"]), flush=True)
    return 0


def acceptance(summary: dict[str, Any]) -> dict[str, Any]:
    """Issue 37's node bars, each None where its step did not give the figure."""
    steps = summary["steps"]
    ex = steps.get("extract", {}).get("figures") or {}
    cmp_ = steps.get("compare", {}).get("figures") or {}
    tests = steps.get("tests_gpu", {})
    return {
        "gpu_tests_pass": None if tests.get("status") in (None, "skipped", "not run") else tests["status"] == "ok",
        "clips_per_s": ex.get("clips_per_s"), "clips_per_s_min": CLIPS_PER_S_MIN,
        "clips_per_s_met": None if ex.get("clips_per_s") is None else ex["clips_per_s"] >= CLIPS_PER_S_MIN,
        "nothing_failed": None if not ex else ex.get("failed_pairs") == 0 and not ex.get("stopped"),
        "rows_equal": None if not cmp_ else all(f.get("rows_equal") for f in cmp_.values()),
        "acoustic_within_tolerance": (cmp_.get("acoustic") or {}).get("within_tolerance"),
    }


if __name__ == "__main__":
    sys.exit(main())
