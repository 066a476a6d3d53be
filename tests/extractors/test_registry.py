"""Extractors are registered by their module alone (extractors/base.py): found by reading the package's sources,
imported only when asked for."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from extractors.base import _registered_names, extractor_modules


def test_every_extractor_is_found_in_the_module_that_registers_it() -> None:
    """The rule, not a list: the names the sources declare are exactly the names importing every module of the
    package registers, each in its own module (a new extractor is found with no table to edit)."""
    code = ("import importlib, json, pkgutil, extractors; from extractors import base\n"
            "for m in pkgutil.iter_modules(extractors.__path__): importlib.import_module('extractors.' + m.name)\n"
            "print(json.dumps({n: c.__module__ for n, c in base._REGISTRY.items()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2]).stdout
    registered = json.loads(out.strip().splitlines()[-1])
    assert extractor_modules() == registered
    assert {"densenet161", "mtcnn", "bert_words", "bert_qa", "covarep", "rms_loudness"} <= registered.keys()


def test_a_new_extractor_is_one_module(tmp_path: Path) -> None:
    """A module dropped into the package is found and built by name, with no other file touched."""
    pkg = tmp_path / "extractors"
    shutil.copytree(Path(__file__).parents[2] / "extractors", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "speech_rate.py").write_text(
        "from extractors.base import ExtractorConfig, register\n\n\n"
        "class RateConfig(ExtractorConfig):\n    extractor: str = 'speech_rate'\n\n\n"
        "@register\nclass SpeechRate:\n    name = 'speech_rate'\n    config_type = RateConfig\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from extractors.base import extractor_modules, get_extractor; "
            "print(extractor_modules()['speech_rate'], get_extractor('speech_rate').__module__)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    assert out.split() == ["extractors.speech_rate", "extractors.speech_rate"]


def test_asking_for_one_extractor_imports_its_module_alone() -> None:
    """Discovery reads sources; it imports no model library (transformers alone takes seconds)."""
    code = ("import sys; from extractors.base import get_extractor; get_extractor('rms_loudness'); "
            "print(sorted(m for m in sys.modules if m.startswith(('extractors.', 'torch', 'transformers'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2]).stdout
    assert out.strip() == "['extractors.base', 'extractors.loudness']"


def test_a_registered_class_needs_a_literal_name(tmp_path: Path) -> None:
    good = ast.parse("@register\nclass A:\n    name = 'a'\n\n@base.register\nclass B:\n    name: str = 'b'\n"
                     "class C:\n    name = 'not registered'\n")
    assert _registered_names(good, tmp_path / "m.py") == ["a", "b"]
    with pytest.raises(ValueError, match=r"m\.py:3: @register class A needs its name as a literal"):
        _registered_names(ast.parse("\n@register\nclass A:\n    name = NAME\n"), tmp_path / "m.py")
