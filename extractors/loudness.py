"""Loudness: the RMS level of the audio in each row of a fixed grid (1 per second by default), as a linear RMS and
in dB relative to full scale (an RMS of 1: a full-scale square wave; a full-scale sine is -3.01 dB).

docs/design.md's worked example of adding an extractor for an existing input kind: this module and its test
(tests/extractors/test_loudness.py, against librosa's RMS) are all of it.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from extractors.base import Audio, Extractor, ExtractorConfig, register
from extractors.weights import Weights
from rows import FeatureRows, fixed_rate_intervals


class LoudnessConfig(ExtractorConfig):
    extractor: Literal["rms_loudness"] = "rms_loudness"
    rate_hz: float = Field(1.0, gt=0)  # rows per second: row k is [k / rate, (k + 1) / rate)
    floor_dbfs: float = Field(-120.0, lt=0)  # the dB of silence (log of 0): rows quieter than this read it


@register
class Loudness(Extractor[LoudnessConfig]):
    name = "rms_loudness"
    version = "1"
    config_type = LoudnessConfig
    input_kind = "audio"

    @classmethod
    def weights(cls, config: LoudnessConfig) -> tuple[Weights, ...]:
        return ()  # arithmetic on the samples: nothing to load, nothing for `make weights` or the bundle

    @classmethod
    def citation(cls, config: dict) -> str:
        return ""  # a plain RMS level: no paper

    @classmethod
    def columns(cls, config: LoudnessConfig) -> list[str]:
        return ["rms", "rms_dbfs"]

    @classmethod
    def rate_hz(cls, config: LoudnessConfig) -> float:
        return config.rate_hz

    def extract(self, x: Audio) -> FeatureRows:
        intervals = fixed_rate_intervals(x.duration_s, self.config.rate_hz)  # the last row clipped to the audio
        bounds = np.clip(np.round(intervals * x.sample_rate_hz).astype(np.int64), 0, x.samples.size)
        samples = x.samples.astype(np.float64)
        # each row's own samples (a row with none, past the samples' end, is silence)
        rms = np.array([np.sqrt(np.mean(np.square(samples[a:b]))) if b > a else 0.0 for a, b in bounds])
        dbfs = 20 * np.log10(np.maximum(rms, 10 ** (self.config.floor_dbfs / 20)))
        return FeatureRows(np.column_stack([rms, dbfs]).astype(np.float32), intervals)
