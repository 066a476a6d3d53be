"""Extractors are registered by their module alone (extractors/base.py): found by reading the package's sources,
imported only when asked for."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from extractors.base import _registered_names, extractor_modules

# what the central table named before (extractors/base.py `_MODULES` at 240bf7f), and the worked example
BEFORE = {"densenet161": "extractors.densenet", "mtcnn": "extractors.faces", "bert_words": "extractors.transcript",
          "bert_qa": "extractors.qa", "covarep": "extractors.acoustic", "bert_caption": "extractors.texts",
          "bert_reactions": "extractors.texts", "rms_loudness": "extractors.loudness"}


def test_every_extractor_is_found_in_its_module() -> None:
    assert extractor_modules() == BEFORE


def test_asking_for_one_extractor_imports_its_module_alone() -> None:
    """Discovery reads sources; it imports no model library (transformers alone takes seconds)."""
    code = ("import sys; from extractors.base import get_extractor; get_extractor('rms_loudness'); "
            "print(sorted(m for m in sys.modules if m.startswith(('extractors.', 'torch', 'transformers'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1]).stdout
    assert out.strip() == "['extractors.base', 'extractors.loudness']"


def test_a_registered_class_needs_a_literal_name(tmp_path: Path) -> None:
    good = ast.parse("@register\nclass A:\n    name = 'a'\n\n@base.register\nclass B:\n    name: str = 'b'\n"
                     "class C:\n    name = 'not registered'\n")
    assert _registered_names(good, tmp_path / "m.py") == ["a", "b"]
    with pytest.raises(ValueError, match=r"m\.py:3: @register class A needs its name as a literal"):
        _registered_names(ast.parse("\n@register\nclass A:\n    name = NAME\n"), tmp_path / "m.py")
