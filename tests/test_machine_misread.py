"""What a run does on machines it could misread (issue 52): every documented `scheduler` builds its policy, a
driver's own Python error is not reported as Ray's failure, a GPU Ray advertises but CUDA cannot use ends the run
in one line, and the CPU count honours the cgroup quota and the affinity mask."""

from __future__ import annotations

import typing
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.config import RunConfig, load_config
from pipeline.report import RunReport
from pipeline.runner import Runner


class _FakeActorClass:
    """`ray.remote(ExtractorWorker)` as far as `Runner.start_actors` uses it: nothing starts."""

    def options(self, **_: Any) -> _FakeActorClass:
        return self

    def remote(self, *_: Any) -> Any:
        return SimpleNamespace(ready=SimpleNamespace(remote=lambda: object()))


@pytest.mark.parametrize("policy", typing.get_args(RunConfig.model_fields["scheduler"].annotation))
def test_every_documented_scheduler_builds_its_policy(policy: str) -> None:
    """`scheduler = "fixed"` crashed every run: the runner gave `FixedScheduler` a keyword it did not take."""
    config = load_config("sample", {"scheduler": policy})
    specs = config.specs()
    report = RunReport("r", "sample", "-", {s.name: {} for s in specs})
    runner = Runner(config, specs, None, report)  # type: ignore[arg-type]
    runner.ray, runner.cpus, runner.gpus = SimpleNamespace(remote=lambda cls: _FakeActorClass()), 4, 0
    runner.start_actors({s.name for s in specs})
    assert runner.sched.name == policy
    assert set(runner.sched.pools) == {s.name for s in specs}
