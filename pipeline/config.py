"""Run configuration: which features, with which extractor configs, and how the run is shaped."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from extractors.base import ExtractorConfig, extractor_modules, get_extractor, parse_config
from extractors.weights import Weights
from manifests.layouts import layout_names
from manifests.limits import InputLimits
from manifests.records import check_id
from store import spec_hash as spec_hash_of

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
        return spec_hash_of(ext.name, ext.version, self.config.canonical(), self.weights_id)

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
    # a registered layout (manifests/layouts.py: each manifest module registers its own), or "auto": detected from
    # the files under --raw
    layout: str = "auto"
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
    # a store on object storage: each model actor uploads the parts of its calls' rows itself and the driver
    # receives their records only (pipeline/ownparts.py); False: every row goes through the driver
    worker_parts: bool = True
    # raw data in a bucket (--raw s3://…): each node decodes from copies in the run's own folder in its temporary
    # folder, removed when the run ends (objectio/cache.py); `raw_cache`: one folder on every node kept across
    # runs instead, where a re-run finds its copies (each checked against the object's ETag). `raw_cache_bytes`:
    # the copies' bound per node, least recently used removed first (None: SIQ_RAW_CACHE_BYTES, else 8 GiB)
    raw_cache: Path | None = None
    raw_cache_bytes: int | None = Field(None, ge=1)
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

    @field_validator("layout")
    @classmethod
    def _layout(cls, value: str) -> str:
        known = layout_names()
        if value != "auto" and value not in known:
            raise ValueError(f"unknown layout{_nearest(value, known)} (known: auto, {', '.join(known)})")
        return value

    @model_validator(mode="after")
    def _actors_per_gpu(self) -> RunConfig:
        for feat, n in self.actors_per_gpu.items():
            if feat not in self.features or n < 1:
                raise ValueError(f"actors_per_gpu: {feat} = {n}: wants a feature of this config "
                                 f"({sorted(self.features)}) and at least 1 actor")
        return self

    def specs(self, only: list[str] | None = None) -> list[FeatureSpec]:
        unknown = sorted(set(only or []) - set(self.features))
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}{_nearest(unknown[0], self.features)} (this config has "
                             f"{', '.join(sorted(self.features))})")
        return [FeatureSpec(name=n, config=c) for n, c in self.features.items() if not only or n in only]


class ConfigError(ValueError):
    """Every problem of one config file as one block: the file, then a line per problem naming its table and key,
    what is wrong and, for an unknown name, the nearest valid one."""


def _nearest(name: str, valid: Any) -> str:
    near = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1, cutoff=0.6)
    return f"; did you mean `{near[0]}`?" if near else ""


def _where(table: tuple[Any, ...], key: Any) -> str:
    return f"[{'.'.join(map(str, table))}] {key}" if table else f"{key} (top level)"


def _problems(e: ValidationError, model: type[BaseModel], prefix: tuple[Any, ...] = ()) -> list[tuple[tuple, str]]:
    """(where, line) per pydantic error, in TOML terms: no pydantic URLs, the feature's table kept in the path."""
    lines = []
    for err in e.errors(include_url=False):
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        table, key = (*prefix, *loc[:-1]), loc[-1] if loc else None
        if not loc:  # a whole-model check: its message names what it is about
            line = f"[{'.'.join(map(str, prefix))}] {msg}" if prefix else msg
        elif err["type"] == "extra_forbidden":
            line = f"{_where(table, key)}: unknown key{_nearest(key, model.model_fields if len(loc) == 1 else ())}"
        elif err["type"] == "missing":
            line = f"{_where(table, key)}: missing (required)"
        else:
            line = f"{_where(table, key)} = {err['input']!r}: {msg}"
        lines.append((loc, line))
    return lines


def _feature_problems(features: Any) -> list[str]:
    """Each [features.<name>] table against the config type of the extractor it names."""
    if not isinstance(features, dict):
        return [] if features is None else [f"features (top level) = {features!r}: wants tables [features.<name>]"]
    known = sorted(extractor_modules())
    lines = []
    for name, raw in features.items():
        table = ("features", name)
        if not isinstance(raw, dict):
            lines.append(f"{_where(table[:1], name)} = {raw!r}: wants a table with an `extractor` key")
            continue
        extractor = raw.get("extractor")
        if extractor is None:
            lines.append(f"{_where(table, 'extractor')}: missing (required); known extractors: {', '.join(known)}")
        elif extractor not in known:
            lines.append(f"{_where(table, 'extractor')} = {extractor!r}: unknown extractor{_nearest(extractor, known)}"
                         f" (known: {', '.join(known)})")
        else:
            config_type = get_extractor(extractor).config_type
            try:
                config_type.model_validate(raw)
            except ValidationError as e:
                lines += [line for _, line in _problems(e, config_type, table)]
    return lines


def check_config(data: dict[str, Any], source: str) -> RunConfig:
    """`data` (a parsed TOML file) as a RunConfig, or one ConfigError listing every problem found."""
    problems = _feature_problems(data.get("features"))
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as e:
        # the features were checked table by table above: RunConfig's view of them, and its whole-model checks
        # (which need the features), would only repeat those problems
        problems += [line for loc, line in _problems(e, RunConfig)
                     if not (loc[:1] == ("features",) or (problems and not loc))]
    if problems:
        raise ConfigError(f"{source}: {len(problems)} problem(s) in this config:\n  " + "\n  ".join(problems))
    return config


def load_config(name_or_path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    """A preset name (pipeline/configs/<name>.toml) or a TOML file path; `overrides` replace its keys, a dotted
    key one nested value ("features.acoustic.backend"). A bad file is one ConfigError (exit 2)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = CONFIG_DIR / f"{name_or_path}.toml"
    if not path.exists():
        presets = preset_names()
        raise FileNotFoundError(f"no config {name_or_path!r}: not a file, nor one of the presets {presets}"
                                f"{_nearest(name_or_path, presets)}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    for key, value in (overrides or {}).items():
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return check_config(data, str(path))


def preset_names() -> list[str]:
    """The presets in pipeline/configs, by name."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def weights_for(presets: list[str], defaults: bool = False) -> list[Weights]:
    """What the features of `presets` load, as their extractors declare it (`Extractor.weights`), each once, in
    order. `defaults`: first what every registered extractor's default config loads (an extractor no preset uses
    yet gets its weights too); an extractor whose config has no default (a required key) has its presets' only."""
    configs: list[ExtractorConfig] = []
    if defaults:
        for name in extractor_modules():
            try:
                configs.append(get_extractor(name).config_type())
            except ValidationError:
                continue
    configs += [c for p in presets for c in load_config(p).features.values()]
    return list(dict.fromkeys(w for c in configs for w in get_extractor(c.extractor).weights(c)))
