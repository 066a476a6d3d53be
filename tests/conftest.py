"""Shared fixtures: test media are generated (documented in manifests/sample.py), never downloaded."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from manifests.sample import ClipSpec, make_sample
from testing.realdata import realdata_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Batch sizes are measured per machine (extractors/calibrate.py) and cached in the home directory: the suite uses
# the fixed defaults instead, so its runs neither depend on the machine's load nor write there. The calibration
# tests (tests/extractors/test_calibrate.py) turn it on with a cache file of their own.
os.environ.setdefault("SIQ_CALIBRATE", "0")

# The files that take longest start first. A file runs whole in one test process (--dist loadfile), so one that
# starts last is the run's tail: the long files start first, the many short ones fill in behind them. The order
# comes from tests/durations.json (seconds per file, setup to teardown, summed over its tests, from a measured
# full run of `make test`), not from a list kept by hand: `SIQ_WRITE_DURATIONS=1 make test` writes it again.
# Only the order changes; a file the record lacks (a new one) runs after the recorded ones in its usual place.
DURATIONS = Path(__file__).with_name("durations.json")
WRITE_DURATIONS = "SIQ_WRITE_DURATIONS"


def _recorded_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):  # absent or unreadable: the usual order, nothing worse
        return {}


def pytest_configure(config: pytest.Config) -> None:
    # xdist's own order (files with the most tests first) would undo the longest-first order
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = _recorded_durations()
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))  # stable: a file's tests keep their order


_timed: dict[str, float] = {}  # this run's seconds per file


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's phases, summed per file (under xdist the controller sees every worker's reports)."""
    name = report.nodeid.split("::")[0].rsplit("/", 1)[-1]
    _timed[name] = _timed.get(name, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """`SIQ_WRITE_DURATIONS=1`: the files this run timed replace their entries in tests/durations.json (written
    by the controller, or by a run without xdist; never by an xdist worker)."""
    if os.environ.get(WRITE_DURATIONS) != "1" or hasattr(session.config, "workerinput") or not _timed:
        return
    merged = {**_recorded_durations(), **{k: round(v, 1) for k, v in _timed.items()}}
    DURATIONS.write_text(json.dumps(dict(sorted(merged.items(), key=lambda kv: -kv[1])), indent=0) + "\n")


# Short clips for end-to-end pipeline runs: DenseNet on CPU costs ~0.2 s a frame, so seconds matter.
TINY_CLIPS = (
    ClipSpec("tiny-a", "30", 320, 240, 3, (0, 1, 2), ((0.3, "Hello there, my friend."),), "train"),
    ClipSpec("tiny-b", "30000/1001", 352, 288, 2, (1,), ((0.2, "I don't know."),), "train"),
    ClipSpec("tiny-c", "25", 320, 180, 3, (), ((1.0, "Maybe later."),), "val"),
)


def _once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Path]) -> Path:
    """`make(folder)` once per run of the suite, not once per test process: under `make test` the xdist workers
    share the parent of their base temp folders, and the first to get the lock generates, the others wait and
    use what it made (read-only for tests, like every session fixture here). Generating the sample costs
    ~12 CPU-s (ffmpeg, espeak-ng), paid once instead of by every worker."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return make(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent
    folder, done = shared / name, shared / f"{name}.done"
    with (shared / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when a worker dies
        if not done.exists():  # a worker that died while making it left no mark: made again
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(str(make(folder)))  # what `make` returns, as the run without xdist gets it
    return Path(done.read_text())


@pytest.fixture(scope="session")
def sample_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full embedded sample dataset (Social-IQ 2.0 layout)."""
    return _once_per_run(tmp_path_factory, "sample", make_sample)


@pytest.fixture(scope="session")
def tiny_root_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _once_per_run(tmp_path_factory, "tiny", lambda folder: make_sample(folder, TINY_CLIPS))


@pytest.fixture
def tiny_root(tiny_root_template: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny dataset that a test may damage (copy2 keeps mtimes: same fingerprints)."""
    dest = tmp_path / "raw"
    shutil.copytree(tiny_root_template, dest, copy_function=shutil.copy2)
    return dest


@pytest.fixture(scope="session")
def info_store(tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny store with a partial, filtered, stale, damaged and failed item each (testing/info_store.py):
    read-only for tests (copy it to change it)."""
    from testing.info_store import build_info_store

    return build_info_store(tiny_root_template, tmp_path_factory.mktemp("info") / "tiny.zarr")


@pytest.fixture
def crash_on(monkeypatch: pytest.MonkeyPatch):
    """`crash_on("decode:<item>,extract:<item>")`: the Ray worker handling that item dies (tests/crashing.py). Ray
    must start after this (its workers read SIQ_* and PYTHONPATH at start-up)."""
    from pipeline import actors
    from tests import crashing

    root = str(Path(__file__).resolve().parents[1])  # the workers import tests.crashing from here
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setattr(actors, "decode_item", crashing.decode_item)
    monkeypatch.setattr(actors, "decode_segment", crashing.decode_segment)
    monkeypatch.setattr(actors, "ExtractorWorker", crashing.CrashingWorker)
    return lambda where: monkeypatch.setenv(crashing.ENV, where)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread_per_test_process():
    """Under `make test` (pytest-xdist, as many test processes as cores) torch in each process runs on one
    thread: with two each, a process's second thread waits for a core the other process holds, and every
    operator's parallel region waits for it. tests/extractors/test_densenet.py's three forward tests on this 2-core
    machine under other work, alternating (session 29): 82-85 CPU-s and 292-309 s with torch's 2 threads,
    36-45 CPU-s and 91-173 s with one. The pipeline's own processes (Ray actors, a command line run in a
    child) set their threads themselves and are not touched; a serial run keeps torch's default."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2 or workers < (os.cpu_count() or 1):
        yield
        return
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session", autouse=True)
def _ray_shutdown():
    yield
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except ImportError:
        pass


@pytest.fixture(scope="session")
def realdata() -> Path:
    """Conformance tests read real files nobody here wrote; a fresh clone without ../shared skips them."""
    path = realdata_dir()
    if path is None:
        pytest.skip("real data not found: ../shared/realdata beside the checkout (or SIQ_REALDATA) is absent")
    return path


@pytest.fixture(scope="session")
def mmdatasdk(realdata: Path):
    """The real CMU Multimodal SDK (`mmsdk.mmdatasdk`, from ../shared/realdata/cmu-multimodal-sdk) as a client."""
    from testing.cmu_sdk import load_mmdatasdk

    sdk = load_mmdatasdk(realdata)
    if sdk is None:
        pytest.skip(f"the CMU Multimodal SDK source is not in {realdata / 'cmu-multimodal-sdk'}")
    return sdk


@pytest.fixture
def torch_one_thread():
    """torch on one CPU thread for the test, as the pipeline's CPU actors run it (pipeline/runner.py): on the
    shared test machine a second, spinning thread costs far more CPU than it saves."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def cuda_or_skip() -> str:
    """GPU tests skip on CPU machines but fail when FAIL_WITHOUT_CUDA=1 (a GPU run must not pass silently)."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("FAIL_WITHOUT_CUDA") == "1":
        pytest.fail("FAIL_WITHOUT_CUDA=1 but CUDA is not available")
    pytest.skip("needs CUDA")
