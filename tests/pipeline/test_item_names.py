"""Item names on the command line: an id the store does not hold is an error naming it (exit 2), and nothing
is written (issue 49, point 3). Against testing/info_store.py's store (tiny-a, tiny-b, tiny-c; faces holds
tiny-a, and tiny-b and tiny-c filtered)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pipeline import exitcodes
from pipeline.cli import main
from reading.export import read_csd


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("items,named,hint", [
    ("zz", "'zz'", "e.g. tiny-a, tiny-b, tiny-c"),
    ("tiny-a,tiny-cc", "'tiny-cc'", "did you mean 'tiny-c'?"),  # an unknown one among known ones
    ("tiny-x,tiny-b", "'tiny-x'", "did you mean"),  # in the manifest, but complete in no feature
], ids=["typo", "one-among-known", "not-complete"])
@pytest.mark.parametrize("to", ["--sdk", "--xarray"])
def test_an_unknown_item_is_an_error_naming_it(info_store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                               to: str, items: str, named: str, hint: str) -> None:
    out = tmp_path / ("sdk" if to == "--sdk" else "x.zarr")
    assert main(["export", str(info_store), to, str(out), "--features", "frames", "--items", items]) \
        == exitcodes.BAD_INPUT
    [line] = _errors(caplog)
    assert line.startswith(f"{info_store}: feature 'frames': no complete item {named} (3 held)"), line
    assert hint in line
    assert not out.exists() or not any(out.rglob("*.csd"))


def test_sdk_items_known_to_some_features_are_exported_where_held(info_store: Path, tmp_path: Path) -> None:
    """tiny-b is complete in frames and filtered in faces (exported, listed as filtered): not an error."""
    assert main(["export", str(info_store), "--sdk", str(tmp_path / "sdk"), "--features", "frames,faces",
                 "--items", "tiny-b"]) == exitcodes.OK
    assert sorted(read_csd(next((tmp_path / "sdk").glob("*FACE*.csd")))[1]) == ["tiny-b"]


def test_a_feature_with_no_complete_item_is_nothing_to_export(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from pipeline.config import load_config
    from store.writer import StoreWriter

    out = tmp_path / "s.zarr"
    spec = load_config("sample").specs(["acoustic"])[0]
    with StoreWriter(out, "sample") as w:
        w.write_manifests([], [])
        w.set_feature("acoustic", spec.store_attrs())
    assert main(["export", str(out), "--sdk", str(tmp_path / "sdk")]) == exitcodes.BAD_INPUT
    assert _errors(caplog) == [f"{out}: feature 'acoustic': no complete item to export"]
    assert not (tmp_path / "sdk").exists()


def test_info_item_typo_names_the_nearest(info_store: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(["info", str(info_store), "--item", "tiny-bb"]) == exitcodes.BAD_INPUT
    assert _errors(caplog) == [f"{info_store}: no item 'tiny-bb'; 4 items, did you mean 'tiny-b'?"]
