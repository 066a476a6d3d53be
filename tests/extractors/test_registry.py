"""One place per name: extractors are registered by their module alone (extractors/base.py), found by reading the
package's sources and imported only when asked for, and say themselves what they load and cite; dataset layouts and
sample datasets are registered by their manifest module (manifests/layouts.py). The rules, not a list of names."""

from __future__ import annotations

import ast
import functools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from extractors.base import Extractor, SdkSequence, _registered_names, extractor_modules, get_extractor, register
from extractors.weights import Weights
from manifests.layouts import layouts, samples

REPO = Path(__file__).parents[2]
PACKAGES = ("pipeline", "reading", "deploy", "store", "media", "extractors", "manifests", "rows", "atomicio", "bench")


@functools.cache
def _registered() -> dict[str, str]:
    """Every extractor name -> the module that registers it, by importing every module of the package (in a child:
    this process keeps importing only what it asks for)."""
    code = ("import importlib, json, pkgutil, extractors; from extractors import base\n"
            "for m in pkgutil.iter_modules(extractors.__path__): importlib.import_module('extractors.' + m.name)\n"
            "print(json.dumps({n: c.__module__ for n, c in base._REGISTRY.items()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_every_extractor_is_found_in_the_module_that_registers_it() -> None:
    """The names the sources declare are exactly the names importing every module of the package registers, each
    in its own module (a new extractor is found with no table to edit)."""
    registered = _registered()
    assert registered and extractor_modules() == registered


def test_every_registered_extractor_says_what_it_loads_and_cites() -> None:
    """Each declares `weights` and `citation` itself (for its default config: Weights, a str), cheaply (no model
    library imported to answer), and an SDK sequence is a SdkSequence or None."""
    for name in extractor_modules():
        cls = get_extractor(name)
        config = cls.config_type()
        weights = cls.weights(config)
        assert isinstance(weights, tuple) and all(isinstance(w, Weights) for w in weights), name
        assert isinstance(cls.citation(config.canonical()), str), name
        assert cls.sdk_sequence is None or isinstance(cls.sdk_sequence, SdkSequence), name
    # what `make weights` and the bundle ask of every extractor is answered without a model library
    code = ("import sys; from pipeline.config import preset_names, weights_for; weights_for(preset_names(), True); "
            "print(sorted(m for m in ('torch', 'torchvision', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "[]"


def test_a_class_that_leaves_weights_or_citation_to_the_base_is_refused() -> None:
    class Quiet(Extractor):
        name = "quiet"
        version = "1"

        @classmethod
        def columns(cls, config):
            return []

        def extract(self, x):
            raise NotImplementedError

    with pytest.raises(TypeError, match=r"extractor 'quiet' .* must declare weights and citation"):
        register(Quiet)

    class Half(Quiet):
        @classmethod
        def weights(cls, config):
            return ()

    with pytest.raises(TypeError, match=r"must declare citation \("):
        register(Half)


NEW_EXTRACTOR = '''
from typing import Literal

import numpy as np

from extractors.base import Audio, Extractor, ExtractorConfig, register
from extractors.weights import Weights
from rows import FeatureRows


class RateConfig(ExtractorConfig):
    extractor: Literal["speech_rate"] = "speech_rate"


@register
class SpeechRate(Extractor[RateConfig]):
    name = "speech_rate"
    version = "1"
    config_type = RateConfig
    input_kind = "audio"

    @classmethod
    def weights(cls, config):
        return (Weights("a syllable model", url="https://example.org/syllables-0123abcd.pt",
                        path="speech_rate/syllables-0123abcd.pt"),)

    @classmethod
    def citation(cls, config):
        return "@misc{rate, title={Speech rate}}"

    @classmethod
    def columns(cls, config):
        return ["syllables_per_s"]

    def extract(self, x: Audio) -> FeatureRows:
        return FeatureRows(np.zeros((1, 1), np.float32), np.array([[0.0, x.duration_s]]))
'''


def _with_module(tmp_path: Path, package: str, module: str, source: str, code: str) -> list[str]:
    """The words `code` prints in a child whose `package` (a copy, first on its path: `sys.argv[1]`) has one more
    module, `source`; nothing in the repository is touched."""
    shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / package / f"{module}.py").write_text(source)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_a_new_extractor_is_one_module(tmp_path: Path) -> None:
    """A module dropped into the package is found by name, configured, fetched by `make weights` (the weights it
    declares) and cited by an export, with no other file touched."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from extractors.base import extractor_modules, get_extractor\n"
            "from pipeline.config import RunConfig, weights_for; from reading.export import featureset_bib\n"
            "c = RunConfig(features={'rate': {'extractor': 'speech_rate'}})\n"
            "print(extractor_modules()['speech_rate'], get_extractor('speech_rate').__module__, "
            "[w.path for w in weights_for([], defaults=True) if w.path and 'speech' in w.path], "
            "featureset_bib('speech_rate', {}))")
    assert _with_module(tmp_path, "extractors", "speech_rate", NEW_EXTRACTOR, code) == ["extractors.speech_rate", "extractors.speech_rate",
                                  "['speech_rate/syllables-0123abcd.pt']", "@misc{rate,", "title={Speech", "rate}}"]


def test_asking_for_one_extractor_imports_its_module_alone() -> None:
    """Discovery reads sources; it imports no model library (transformers alone takes seconds)."""
    code = ("import sys; from extractors.base import get_extractor; get_extractor('rms_loudness'); "
            "print(sorted(m for m in sys.modules if m.startswith(('extractors.', 'torch', 'transformers'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == "['extractors.base', 'extractors.loudness', 'extractors.weights']"


def test_a_registered_class_needs_a_literal_name(tmp_path: Path) -> None:
    good = ast.parse("@register\nclass A:\n    name = 'a'\n\n@base.register\nclass B:\n    name: str = 'b'\n"
                     "class C:\n    name = 'not registered'\n")
    assert _registered_names(good, tmp_path / "m.py") == ["a", "b"]
    with pytest.raises(ValueError, match=r"m\.py:3: @register class A needs its name as a literal"):
        _registered_names(ast.parse("\n@register\nclass A:\n    name = NAME\n"), tmp_path / "m.py")


def _presets() -> dict[str, dict]:
    import tomllib

    return {p.stem: tomllib.loads(p.read_text()) for p in sorted((REPO / "pipeline" / "configs").glob("*.toml"))}


def test_every_layout_resolves_and_every_preset_and_sample_names_a_registered_one() -> None:
    """Each registered layout is found by its name and has its detection, reader and words for messages; each
    preset's layout is registered (or "auto": detected) and the preset loads; each sample dataset is written in a
    registered layout, has its preset naming that layout, and is called sample or sample-* (the Makefile's rule)."""
    from manifests.layouts import get_layout
    from pipeline.config import load_config

    presets = _presets()
    names = {layout.name for layout in layouts()}
    assert names
    for layout in layouts():
        assert get_layout(layout.name) is layout and layout.title and layout.parts and layout.media_noun
        assert callable(layout.detect) and callable(layout.read) and (layout.media_dir is None or callable(layout.media_dir))
    for name, data in presets.items():
        assert data.get("layout", "auto") in names | {"auto"}, name
        load_config(name)
    for dataset, sample in samples().items():
        assert sample.layout in names and re.fullmatch(r"sample(-[a-z0-9]+)?", dataset), dataset
        assert presets[dataset]["dataset"] == dataset and presets[dataset]["layout"] == sample.layout


def test_a_config_names_a_registered_layout_or_hears_which_exist() -> None:
    from pipeline.config import ConfigError, check_config

    with pytest.raises(ConfigError, match=r"layout \(top level\) = 'siq3': unknown layout; did you mean `siq2`\? "
                                          r"\(known: auto, .*siq2.*\)"):
        check_config({"layout": "siq3", "features": {}}, "x.toml")


NEW_LAYOUT = '''
from pathlib import Path

from manifests.layouts import Layout, Sample, register_layout, register_sample
from manifests.records import MediaItem, QAItem


def read_tiny(raw: Path, dataset: str, config, notes) -> tuple[list[MediaItem], list[QAItem]]:
    ids = (raw / "tiny.txt").read_text().split()
    return [MediaItem(id=i, dataset=dataset, video=raw / f"{i}.mp4") for i in ids], []


def write_tiny(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "tiny.txt").write_text("a b")
    for i in "ab":
        (dest / f"{i}.mp4").write_bytes(b"")


register_layout(Layout("tiny", "Tiny", "tiny.txt and <id>.mp4", detect=lambda raw: (raw / "tiny.txt").is_file(),
                       read=read_tiny, media_dir=lambda raw: raw, media_noun="clips", detect_first=0))
register_sample(Sample("sample-tiny", "tiny", write_tiny))
'''


def test_a_new_layout_is_one_manifest_module(tmp_path: Path) -> None:
    """A module dropped into manifests/ is a layout a config may name, that detection finds and the run reads, with
    a sample `extract` can generate: no other file touched (its preset and test are the rest of it)."""
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1])\n"
            "from pipeline.config import RunConfig; from pipeline.sources import detect_layout, load_items\n"
            "from pipeline.cli import _generate_sample\n"
            "raw = Path(sys.argv[1]) / 'raw'; _generate_sample('sample-tiny', raw)\n"
            "items, qa, notes = load_items('sample-tiny', raw, RunConfig(layout='tiny', features={}))\n"
            "print(detect_layout(raw), [i.id for i in items])")
    assert _with_module(tmp_path, "manifests", "tiny", NEW_LAYOUT, code) == ["tiny", "['a',", "'b']"]


def _owners() -> dict[str, str]:
    """Every extractor, layout and sample dataset name -> the module that registers it."""
    owners = dict(_registered())
    owners |= {layout.name: layout.read.__module__ for layout in layouts()}
    owners |= {s.dataset: s.write.__module__ for s in samples().values()}
    return owners


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _strings(e)]
    return []


def name_tables(root: Path, owners: dict[str, str]) -> list[str]:
    """Where code outside a name's own module decides by that name: a comparison with it (`== "covarep"`, `in
    ("siq2", ...)`), a table keyed by it (a dict literal, a subscript, a Literal[...])."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Compare):
                    names = [v for side in (node.left, *node.comparators) for v in _strings(side)]
                elif isinstance(node, ast.Dict):
                    names = [v for key in node.keys if key is not None for v in _strings(key)]
                elif isinstance(node, ast.Subscript):
                    names = _strings(node.slice)
                else:
                    continue
                found += [f"{path.relative_to(root)}:{node.lineno}: {v!r} (registered in {owners[v]})"
                          for v in names if v in owners and owners[v] != module]
    return found


def test_no_code_outside_a_names_module_decides_by_it(tmp_path: Path) -> None:
    """No `if name == "covarep"`, no table keyed by extractor, layout or sample names outside the module that
    registers the name: such facts are asked of the registry."""
    owners = _owners()
    assert name_tables(REPO, owners) == []
    # the check sees what it is for: the report page's old special case, a config's old Literal of layouts, a table
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "old.py").write_text('def f(x):\n    return x.extractor == "covarep"\n'
                                                  'layout: Literal["siq2", "auto"] = "auto"\nT = {"mtcnn": 1}\n')
    assert sorted(line.split(": ", 1)[1] for line in name_tables(tmp_path, owners)) == [
        "'covarep' (registered in extractors.acoustic)", "'mtcnn' (registered in extractors.faces)",
        "'siq2' (registered in manifests.socialiq)"]
