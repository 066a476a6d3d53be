"""Extractors that only wait (no CPU, no model): what a scheduler test needs to see where work went and how long
the run took against its bound. Registered when imported; Ray workers import this module by the config class they
unpickle (tests put tests/ on the workers' PYTHONPATH)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from extractors.base import Extractor, ExtractorConfig, FeatureRows, register


class SleepCPUConfig(ExtractorConfig):
    extractor: Literal["sleep_cpu"] = "sleep_cpu"
    seconds: float = 0.5  # per item


class SleepGPUConfig(ExtractorConfig):
    extractor: Literal["sleep_gpu"] = "sleep_gpu"
    seconds: float = 0.05  # per item, in batches


def _row(x: Any) -> FeatureRows:
    return FeatureRows(np.array([[float(len(x.questions))]], np.float32), np.array([[0.0, 0.0]]))


@register
class SleepCPU(Extractor[SleepCPUConfig]):
    """A CPU feature (the kind of acoustic): one item a call, its seconds each."""

    name, version, config_type, input_kind, uses_gpu = "sleep_cpu", "1", SleepCPUConfig, "qa", False

    @classmethod
    def columns(cls, config: SleepCPUConfig) -> list[str]:
        return ["questions"]

    def extract(self, x: Any) -> FeatureRows:
        time.sleep(self.config.seconds)
        return _row(x)


@register
class SleepGPU(Extractor[SleepGPUConfig]):
    """A GPU-kind feature (the kind of the text models): batches across items."""

    name, version, config_type, input_kind, uses_gpu = "sleep_gpu", "1", SleepGPUConfig, "qa", True

    @classmethod
    def columns(cls, config: SleepGPUConfig) -> list[str]:
        return ["questions"]

    def extract(self, x: Any) -> FeatureRows:
        return self.extract_batch([x])[0]

    def extract_batch(self, xs: Sequence[Any]) -> list[FeatureRows]:
        time.sleep(self.config.seconds * len(xs))
        return [_row(x) for x in xs]
