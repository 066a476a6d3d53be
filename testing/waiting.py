"""Extractors that only sleep, one per input kind (GPU-kind for frames, transcript and QA, a CPU one for audio):
bench/engine.py's stand-ins for the models. In a module of their own so that the driver (`python -m bench.engine`
runs as __main__) and the Ray workers register the same classes, found by reference when a config is unpickled."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from extractors.base import Extractor, ExtractorConfig, register
from rows import FeatureRows


class WaitConfig(ExtractorConfig):
    seconds: float = 0.1  # per item


def _rows(n: int) -> list[FeatureRows]:
    return [FeatureRows(np.zeros((1, 1), np.float32), np.array([[0.0, 1.0]])) for _ in range(n)]


class _Wait(Extractor[WaitConfig]):
    version = "1"

    @classmethod
    def columns(cls, config: WaitConfig) -> list[str]:
        return ["x"]

    def extract(self, x: Any) -> FeatureRows:
        return self.extract_batch([x])[0]

    def extract_batch(self, xs: Sequence[Any]) -> list[FeatureRows]:
        time.sleep(self.config.seconds * len(xs))
        return _rows(len(xs))


def _waiter(kind: str, gpu: bool) -> None:
    name = f"wait_{kind}_{'gpu' if gpu else 'cpu'}"
    config = type(f"{name}_config", (WaitConfig,), {"__annotations__": {"extractor": Literal[name]},
                                                      "extractor": name, "__module__": __name__})
    cls = type(name, (_Wait,), {"name": name, "config_type": config, "input_kind": kind, "uses_gpu": gpu,
                                "__module__": __name__})
    globals()[config.__name__], globals()[name] = config, cls  # picklable by reference in the workers
    register(cls)


for _kind in ("frames", "transcript", "qa"):
    _waiter(_kind, True)
for _kind in ("audio", "qa"):  # qa: a CPU feature over texts, for tests that need no media (tests/pipeline/test_scheduler_ray.py)
    _waiter(_kind, False)
