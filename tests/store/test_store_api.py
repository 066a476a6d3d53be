"""The engine's public API is `store` itself (store/__init__.py): every name it exports is the object of the module
that defines it, and a light name does not import zarr (pyproject.toml's contract keeps the layers above from the
modules themselves)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import store


def test_every_exported_name_is_its_modules_object() -> None:
    assert store.__all__ == sorted(store._EXPORTS)
    for name, (module, attr) in store._EXPORTS.items():
        assert getattr(store, name) is getattr(importlib.import_module(f"store.{module}"), attr), name
    with pytest.raises(AttributeError, match="module 'store' has no attribute 'layout_of'"):
        store.layout_of  # noqa: B018 - the attribute access is the test


def test_a_light_name_imports_no_zarr() -> None:
    code = "import sys; from store import is_url, spec_hash, runs_dir; print('zarr' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2]).stdout
    assert out.strip() == "False"
