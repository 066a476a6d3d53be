"""Run configuration: which features, with which extractor configs, and how the run is shaped."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from extractors.base import ExtractorConfig, get_extractor, parse_config
from manifests.limits import InputLimits
from manifests.records import check_id
from store import layout

CONFIG_DIR = Path(__file__).parent / "configs"


class FeatureSpec(BaseModel):
    """A feature as the store sees it: a name, its extractor and config, and what that implies."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    name: str
    config: ExtractorConfig

    @property
    def extractor(self):
        return get_extractor(self.config.extractor)

    @property
    def weights_id(self) -> str:
        return self.extractor.weights_id(self.config)

    @property
    def spec_hash(self) -> str:
        ext = self.extractor
        return layout.spec_hash(ext.name, ext.version, self.config.canonical(), self.weights_id)

    def store_attrs(self) -> dict[str, Any]:
        ext = self.extractor
        return {
            "extractor": ext.name, "version": ext.version, "config": self.config.canonical(),
            "columns": ext.columns(self.config), "rate_hz": ext.rate_hz(self.config),
            "weights": self.weights_id, "input": ext.input_kind, "spec_hash": self.spec_hash,
        }


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str | None = None  # the dataset this config is for: `extract --dataset` must agree (or may be left out)
    layout: Literal["siq2", "siq1", "socialiqa", "tinysocial", "socratis", "auto"] = "auto"
    folds: Path | None = None  # Social-IQ 1.0: the SDK's std-folds file
    features: dict[str, ExtractorConfig]
    audio_rate_hz: int = 16000
    # which stream of a file with several of a kind is decoded: "video" or "audio" -> the stream's index in the
    # file, or a language code as the container tags it ("eng"); unset: the one ffmpeg plays (the default-flagged,
    # then the best: media/container.py `choose_stream`). A file without the named stream fails with its streams
    tracks: dict[Literal["video", "audio"], int | str] = Field(default_factory=dict)
    frames_per_batch: int = Field(256, ge=1)  # frames gathered across videos before one model call
    items_per_batch: int = Field(8, ge=1)  # items gathered for non-frame features
    # decoded items (or segments) alive at once; None: no count, the scheduler decodes ahead of the models only as
    # far as they need (pipeline/schedule.py) and never past max_inflight_bytes
    max_inflight_items: int | None = Field(None, ge=1)
    # "balanced" (pipeline/schedule.py), or "fixed": the policy of runs before 2026-12, kept for comparison
    scheduler: Literal["balanced", "fixed"] = "balanced"
    # bytes of decoded input (pixels, samples) in one model call; a video whose frames take more is decoded
    # and extracted in segments of at most this; one input bigger than it (a huge still) runs alone
    batch_bytes: int = Field(256 * 2**20, ge=1)
    max_inflight_bytes: int = Field(2 * 2**30, ge=1)  # decoded data alive at once: no new decode above it
    cpu_actors: int | None = None  # actors per CPU-only feature; default: half the CPUs
    # GPU features: actors per GPU (fractional GPUs: several MTCNN actors can share one); default 1
    actors_per_gpu: dict[str, int] = Field(default_factory=dict)
    model_threads: int | None = Field(None, ge=1)  # torch threads per GPU-feature actor without a GPU
    decode_retries: int = 2
    # where videos' frames are decoded (media/nvdec.py; docs/design.md, "Frames decoded on the GPU"): "auto": by
    # the frames features' model actors on their GPU (NVDEC) where those run on GPUs and torchcodec is installed,
    # routed by `gpu_decode_queue`, else by the CPU decode tasks; "cpu": always the CPU decode tasks (the
    # reference); "gpu": every video by the model actors on their device, also without a GPU (torchcodec's CPU
    # decoder: how the tests run this path). A file the actors' decoder cannot show as the CPU path does is
    # decoded on the CPU whatever the setting, its reason in the run report.
    frames_decoder: Literal["auto", "cpu", "gpu"] = "auto"
    # "auto": videos sent to the actors' decoder and not yet decoded there (first call not back), at most; past
    # it the next video is decoded by a CPU task (pipeline/schedule.py `_on_device`). None: 2 per frames actor
    gpu_decode_queue: int | None = Field(None, ge=0)
    # store commits (pipeline/committer.py): pairs and bytes per atomic batch of one feature (one packed part),
    # and the longest a finished pair waits for its batch; a kill loses at most the open batches
    commit_batch_items: int = Field(512, ge=1)
    commit_batch_bytes: int = Field(128 * 2**20, ge=1)
    commit_batch_s: float = Field(10.0, gt=0)
    # what one input file may cost before it fails alone (manifests/limits.py; README, "Input limits"): bytes and
    # nesting of QA/annotation JSON, bytes and cues of a caption file
    limits: InputLimits = Field(default_factory=InputLimits)

    @field_validator("features", mode="before")
    @classmethod
    def _features(cls, value: dict[str, Any]) -> dict[str, ExtractorConfig]:
        out = {}
        for name, raw in value.items():
            check_id(name)
            out[name] = raw if isinstance(raw, ExtractorConfig) else parse_config(raw)
        return out

    @model_validator(mode="after")
    def _actors_per_gpu(self) -> RunConfig:
        for feat, n in self.actors_per_gpu.items():
            if feat not in self.features or n < 1:
                raise ValueError(f"actors_per_gpu: {feat} = {n}: wants a feature of this config "
                                 f"({sorted(self.features)}) and at least 1 actor")
        return self

    def specs(self, only: list[str] | None = None) -> list[FeatureSpec]:
        unknown = set(only or []) - set(self.features)
        if unknown:
            raise ValueError(f"unknown feature(s) {sorted(unknown)}; this config has {sorted(self.features)}")
        return [FeatureSpec(name=n, config=c) for n, c in self.features.items() if not only or n in only]


def load_config(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """A preset name (pipeline/configs/<name>.toml) or a TOML file path; `overrides` replace its keys, a dotted
    key one nested value ("features.acoustic.backend")."""
    path = Path(name_or_path)
    if not path.suffix:
        path = CONFIG_DIR / f"{name_or_path}.toml"
    if not path.exists():
        presets = sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))
        raise FileNotFoundError(f"no config {name_or_path!r}: not a file, nor one of the presets {presets}")
    data = tomllib.loads(path.read_text())
    for key, value in (overrides or {}).items():
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return RunConfig.model_validate(data)
