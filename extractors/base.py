"""The extractor contract: typed config, declared output, a pure function from decoded input to rows.

No Ray, no Zarr, no file layout in here or in any extractor module: the pipeline feeds decoded inputs
(`Frames`, `Audio`, `Words`, `QAText`) and `store/` writes the `FeatureRows` (rows/) that come back.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from extractors.weights import Weights
from rows import FeatureRows, check_intervals

# "frames" is what the visual extractors take: `Frames` from a video, or a `Still` from an image item.
# "caption" and "reactions" are texts an item carries itself (Socratis), decoded to `Texts`.
InputKind = Literal["frames", "audio", "transcript", "qa", "caption", "reactions"]


class ExtractorConfig(BaseModel):
    """Base of every extractor config. `extractor` names the registered extractor."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    extractor: str

    def canonical(self) -> dict[str, Any]:
        """Every field, defaults included, in a JSON-safe form: what the fingerprint hashes."""
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class Frames:
    """Frames sampled at 1 fps: row k stands for `intervals[k]` = [k, k+1) s (the last one clipped)."""

    pixels: np.ndarray  # (N, H, W, 3) uint8 RGB, as displayed: upright, square pixels
    intervals: np.ndarray  # (N, 2) float64 seconds on the clip's timeline
    pts_s: np.ndarray  # (N,) timestamp of the decoded frame chosen for each row
    source_fps: float
    duration_s: float
    # (M, 2) seconds with no decodable frame (damaged data): those rows are left out of `intervals`
    missing_s: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    # how the stored pictures became the displayed ones (media/picture.py `View.attrs`): stored size, SAR,
    # displayed size, rotation; recorded per item by the visual extractors
    picture: dict[str, Any] = field(default_factory=dict)
    # where the file's other streams end, when the video ends well before them (shorter by design, not damage:
    # the rows end at `duration_s`, nothing is missing); None otherwise
    streams_end_s: float | None = None
    # a file with more than one video stream: the one decoded (its index) and the others (media/container.py
    # `stream_note`); None for a file with one
    streams: dict[str, Any] | None = None
    # where the video's first frame starts, when it starts late (an empty edit, `-itsoffset`) and the rows before
    # it have no picture: not damage, those rows are simply not there (not in `missing_s`); None otherwise
    stream_start_s: float | None = None

    def __post_init__(self) -> None:
        if self.pixels.ndim != 4 or self.pixels.shape[-1] != 3 or self.pixels.dtype != np.uint8:
            raise ValueError(f"pixels must be (N, H, W, 3) uint8, got {self.pixels.shape = }, {self.pixels.dtype = }")
        check_intervals(self.intervals, "Frames intervals", len(self.pixels))


@dataclass(frozen=True)
class Still:
    """A still image (not a video): one row for the visual extractors, pixels shaped (1, H, W, 3) so that
    their batch code takes it as it takes a video's frames. A still has no time extent: its row's interval is
    [0, 0], the instant 0 of an item whose duration is 0 (the item's text rows sit at that instant too)."""

    pixels: np.ndarray  # (1, H, W, 3) uint8 RGB, full resolution, upright
    intervals: np.ndarray = field(default_factory=lambda: np.zeros((1, 2)))
    duration_s: float = 0.0
    picture: dict[str, Any] = field(default_factory=dict)  # as `Frames.picture` (the EXIF orientation applied)

    def __post_init__(self) -> None:
        if self.pixels.ndim != 4 or self.pixels.shape[0] != 1 or self.pixels.shape[-1] != 3 \
                or self.pixels.dtype != np.uint8:
            raise ValueError(f"pixels must be (1, H, W, 3) uint8, got {self.pixels.shape = }, {self.pixels.dtype = }")
        check_intervals(self.intervals, "Still intervals", 1)


@dataclass(frozen=True)
class Texts:
    """Short texts of one item, each embedded on its own (Socratis: its caption; its reactions), with
    per-text labels kept beside the vectors (e.g. emotion, reason)."""

    texts: tuple[str, ...]
    labels: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # name -> one value per text

    def __post_init__(self) -> None:
        for name, values in self.labels.items():
            if len(values) != len(self.texts):
                raise ValueError(f"Texts: label {name!r} has {len(values)} values for {len(self.texts)} texts")


@dataclass(frozen=True)
class Audio:
    """Mono audio on the clip's timeline: sample 0 is clip time 0."""

    samples: np.ndarray  # (S,) float32 in [-1, 1]
    sample_rate_hz: int
    duration_s: float
    # (M, 2) seconds that could not be decoded (damaged data), silent in `samples`; rows there are dropped
    missing_s: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    streams_end_s: float | None = None  # as `Frames.streams_end_s`: the audio track is the shorter stream
    streams: dict[str, Any] | None = None  # as `Frames.streams`: the file's audio tracks

    def __post_init__(self) -> None:
        if self.samples.ndim != 1 or self.samples.dtype != np.float32:
            raise ValueError(f"samples must be 1-D float32, got {self.samples.shape = }, {self.samples.dtype = }")
        if self.sample_rate_hz <= 0:
            raise ValueError(f"sample_rate_hz must be positive, got {self.sample_rate_hz}")


@dataclass(frozen=True)
class Words:
    """A transcript as words with their own [start, end) seconds on the clip's timeline."""

    words: tuple[str, ...]
    intervals: np.ndarray  # (N, 2) float64
    attrs: dict[str, Any] = field(default_factory=dict)  # e.g. corrections applied while parsing

    def __post_init__(self) -> None:
        check_intervals(self.intervals, "Words intervals", len(self.words))


@dataclass(frozen=True)
class QAText:
    """The questions of one item (a video, or one text-only SocialIQA entry) with their answers."""

    qids: tuple[str, ...]
    questions: tuple[str, ...]
    answers: tuple[tuple[str, ...], ...]  # per question, its answers
    correct: tuple[tuple[bool, ...], ...]  # per question, which answers are correct (empty when unlabelled)
    context: str | None = None
    ts: tuple[tuple[float, float] | None, ...] = ()  # per question, the seconds of the clip it is about, if known


@dataclass(frozen=True)
class SdkSequence:
    """A released CMU Multimodal SDK sequence that an extractor's features stand for (reading/export.py names a
    feature's .csd after it in a Social-IQ store). `columns`: the released dimensions, when a feature has the
    SDK's shape only with exactly these (else it is exported under a name of its own); `undefined_as`: the value
    the released file has where the store keeps NaN (an undefined value), if it has one."""

    root: str
    columns: tuple[str, ...] | None = None
    undefined_as: float | None = None


C = TypeVar("C", bound=ExtractorConfig)


class Extractor(ABC, Generic[C]):
    """One feature set. Subclasses set the class attributes and implement `extract`.

    The model (if any) is loaded once in `__init__`; the pipeline keeps one instance per worker.
    """

    name: ClassVar[str]
    version: ClassVar[str]  # bump whenever the output for the same input and config changes
    config_type: ClassVar[type[ExtractorConfig]]
    input_kind: ClassVar[InputKind]
    uses_gpu: ClassVar[bool] = False
    # per-item numbers in the item attrs worth a histogram on the report page and a word in `info` (name -> label)
    item_measures: ClassVar[dict[str, str]] = {}

    def __init__(self, config: C, device: str = "cpu") -> None:
        self.config = config
        self.device = device

    @classmethod
    def wants_gpu(cls, config: C) -> bool:
        """Whether this config's actors go on the GPUs of a node that has them (pipeline/runner.py's actor_plan):
        `uses_gpu`, unless the extractor lets its config choose (covarep's torch backend)."""
        return cls.uses_gpu

    # What only the extractor knows about itself, asked of it through the registry (no table elsewhere names an
    # extractor): `weights` and `citation` every registered extractor declares, even when the answer is "nothing"
    # (`register` refuses a class that leaves either to this base); `sdk_sequence` where one exists.

    @classmethod
    def weights(cls, config: C) -> tuple[Weights, ...]:
        """What this config loads: what `make weights` fetches into the weights cache, and the packages the offline
        bundle carries (extractors/weights.py `Weights`); () for an extractor that loads nothing. Cheap: it
        imports no model library."""
        raise NotImplementedError(f"{cls.__name__} does not say which weights it loads")

    @classmethod
    def citation(cls, config: dict[str, Any]) -> str:
        """BibTeX of the work the features come from (an export's "featureset bib citation"); "" for none. It
        takes the feature's config as the store keeps it (`ExtractorConfig.canonical`), so that a feature written
        by an older version of the extractor is still cited."""
        raise NotImplementedError(f"{cls.__name__} does not say what its features cite")

    # the CMU Multimodal SDK's released Social-IQ sequence of the same kind, if there is one (reading/export.py)
    sdk_sequence: ClassVar[SdkSequence | None] = None

    @classmethod
    def weights_id(cls, config: C) -> str:
        """Which weights the features come from ("imagenet1k_v1", "random", a model name, "none")."""
        return "none"

    @classmethod
    def filter_reason(cls, attrs: dict[str, Any]) -> str:
        """Why this extractor's policy marked an item `filtered` (in its attrs), in the words of `info`, the run
        summary and the report page. An extractor with a policy says it in its own terms."""
        return "filtered by the feature's policy"

    @classmethod
    @abstractmethod
    def columns(cls, config: C) -> list[str]:
        """Names of the feature columns (len == D)."""

    @classmethod
    def rate_hz(cls, config: C) -> float | None:
        """Row rate for fixed-grid features; None when rows follow the data (words)."""
        return None

    @abstractmethod
    def extract(self, x: Any) -> FeatureRows:
        """Rows for one item's decoded input."""

    def extract_batch(self, xs: Sequence[Any]) -> list[FeatureRows]:
        """Rows for several items; override to batch model calls across items."""
        return [self.extract(x) for x in xs]

    @classmethod
    def join(cls, parts: Sequence[FeatureRows], config: C) -> FeatureRows:
        """One item's rows from the rows of its segments, in time order (a long video is decoded and
        extracted in segments). Per-row extras are stacked, padded along their other axes where segments
        differ (NaN for floats, zero/False otherwise: the padding `_padded` faces use); list attrs are joined
        and every other attr must agree. Override when an attr sums up the whole item (faces' face_ratio)."""
        if len(parts) == 1:
            return parts[0]
        extras = {k: _stack_padded([p.extras[k] for p in parts]) for k in parts[0].extras}
        attrs: dict[str, Any] = {}
        for key, value in parts[0].attrs.items():
            values = [p.attrs.get(key) for p in parts]
            if isinstance(value, list):
                attrs[key] = [v for vs in values for v in vs]
            elif all(v == value for v in values):
                attrs[key] = value
            else:
                raise ValueError(f"{cls.name}: attr {key!r} differs between segments ({values[:3]}…); "
                                 "the extractor must say how to join it")
        return FeatureRows(np.concatenate([p.features for p in parts]),
                           np.concatenate([p.intervals for p in parts]), extras, attrs)


def _stack_padded(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Concatenate along axis 0, padding the other axes to the largest size."""
    shape = np.max([a.shape[1:] for a in arrays], axis=0).astype(int) if arrays[0].ndim > 1 else ()
    if all(a.shape[1:] == tuple(shape) for a in arrays):
        return np.concatenate(arrays)
    fill = np.nan if np.issubdtype(arrays[0].dtype, np.floating) else 0
    out = np.full((sum(len(a) for a in arrays), *shape), fill, arrays[0].dtype)
    at = 0
    for a in arrays:
        out[(slice(at, at + len(a)), *(slice(0, n) for n in a.shape[1:]))] = a
        at += len(a)
    return out


# Registry by name. An extractor module registers its classes itself (`@register` on a class whose `name` is a
# literal string); nothing else names it. Which module holds which name is read from the package's sources (their
# syntax tree, a few milliseconds) rather than by importing them: asking for one extractor imports that module alone,
# not every model library (transformers alone takes seconds).
_REGISTRY: dict[str, type[Extractor]] = {}

E = TypeVar("E", bound=type[Extractor])
DECLARED = ("weights", "citation")  # what every registered extractor says about itself


def register(cls: E) -> E:
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"extractor {cls.name!r} registered twice")
    undeclared = [m for m in DECLARED if not any(m in k.__dict__ for k in cls.__mro__ if k is not Extractor)]
    if undeclared:  # the one place these facts live: a class that leaves them out fails at import, not in an export
        raise TypeError(f"extractor {cls.name!r} ({cls.__module__}.{cls.__qualname__}) must declare "
                        f"{' and '.join(undeclared)} (extractors/base.py `Extractor`; () and \"\" say \"none\")")
    _REGISTRY[cls.name] = cls
    return cls


@functools.cache
def extractor_modules() -> dict[str, str]:
    """Extractor name -> the module of this package that registers it, found in the modules' sources."""
    import extractors

    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(extractors.__path__):
        module = f"extractors.{info.name}"
        path = Path(extractors.__path__[0]) / f"{info.name}.py"
        if info.ispkg or not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        if "register" not in text:  # most helper modules: nothing to parse
            continue
        for name in _registered_names(ast.parse(text, str(path)), path):
            if name in found:
                raise ValueError(f"extractor {name!r} registered in {found[name]} and in {module}")
            found[name] = module
    return found


def _registered_names(tree: ast.Module, path: Path) -> list[str]:
    """The `name` of each class the module decorates with `register`."""
    names = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or not any(
                isinstance(d, ast.Name) and d.id == "register" or isinstance(d, ast.Attribute) and d.attr == "register"
                for d in node.decorator_list):
            continue
        values = [s.value.value for s in node.body if _assigns_name(s)]
        if len(values) != 1:
            raise ValueError(f"{path}:{node.lineno}: @register class {node.name} needs its name as a literal "
                             "(`name = \"...\"`) so that it is found without importing the module")
        names.append(values[0])
    return names


def _assigns_name(statement: ast.stmt) -> bool:
    """`name = "..."` or `name: ClassVar[str] = "..."`."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign):
        targets = [statement.target]
    else:
        return False
    return (any(isinstance(t, ast.Name) and t.id == "name" for t in targets)
            and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str))


def get_extractor(name: str) -> type[Extractor]:
    if name not in _REGISTRY:
        modules = extractor_modules()
        if name not in modules:
            raise KeyError(f"unknown extractor {name!r}; known: {sorted(modules.keys() | _REGISTRY.keys())}")
        importlib.import_module(modules[name])
    return _REGISTRY[name]


def parse_config(raw: dict[str, Any]) -> ExtractorConfig:
    """Validate a config dict against the config type of the extractor it names."""
    if "extractor" not in raw:
        raise ValueError(f"feature config needs an 'extractor' key, got {sorted(raw)}")
    try:
        extractor = get_extractor(raw["extractor"])
    except KeyError as e:  # a config's mistake, not a bug: pydantic reports a ValueError as a validation error
        raise ValueError(e.args[0]) from None
    return extractor.config_type.model_validate(raw)
