"""A mistake in a config file is one block naming the file, the table and key, what is wrong and the nearest valid
name; exit 2, never a traceback or pydantic's dump (issue 49, point 4)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pipeline import exitcodes
from pipeline.cli import main
from pipeline.config import ConfigError, load_config

BASE = 'dataset = "sample"\n\n[features.qa]\nextractor = "bert_qa"\n\n[features.faces]\nextractor = "mtcnn"\n'


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("text,line", [
    (BASE.replace('"bert_qa"\n', '"bert_qa"\nmax_tokenz = 64\n'),
     "[features.qa] max_tokenz: unknown key; did you mean `max_tokens`?"),
    (BASE + "min_face_ratoi = 0.5\n", "[features.faces] min_face_ratoi: unknown key; did you mean `min_face_ratio`?"),
    ("items_per_bacth = 4\n" + BASE, "items_per_bacth (top level): unknown key; did you mean `items_per_batch`?"),
    ("commit_batch_secs = 4\n" + BASE, "commit_batch_secs (top level): unknown key; did you mean `commit_batch_s`?"),
    (BASE.replace('"mtcnn"', '"mtccn"'), "[features.faces] extractor = 'mtcnn'"),
    (BASE.replace('"bert_qa"', '"bert-qa"'), "[features.qa] extractor = 'bert-qa': unknown extractor; did you mean "
                                             "`bert_qa`? (known: bert_caption, bert_qa, "),
    (BASE + 'min_face_ratio = "high"\n', "[features.faces] min_face_ratio = 'high': Input should be a valid number"),
    ("frames_per_batch = 0\n" + BASE, "frames_per_batch (top level) = 0: Input should be greater than or equal to 1"),
    (BASE.replace('extractor = "bert_qa"\n', 'model = "x"\n'), "[features.qa] extractor: missing (required); known "
                                                              "extractors: bert_caption, "),
    (BASE + "\n[actors_per_gpu]\nfaces = true\nframes = 2\n", "actors_per_gpu: frames = 2: wants a feature of this"),
], ids=["feature-key", "other-feature-key", "top-key", "other-top-key", "extractor-typo", "extractor-dash",
        "wrong-type", "out-of-range", "no-extractor", "model-check"])
def test_one_block_naming_file_table_key_and_nearest(tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str,
                                                     line: str) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text(text)
    assert main(["extract", "--config", str(cfg), "--raw", str(tmp_path / "raw"), "--out",
                 str(tmp_path / "s.zarr")]) == exitcodes.BAD_INPUT
    [block] = _errors(caplog)
    head, *problems = block.splitlines()
    assert head == f"{cfg}: 1 problem(s) in this config:"
    if "mtccn" in text:  # the expected line is built from the typo
        line = "[features.faces] extractor = 'mtccn': unknown extractor; did you mean `mtcnn`?"
    assert len(problems) == 1 and problems[0].strip().startswith(line), problems
    assert "pydantic" not in block and "http" not in block and "Traceback" not in block


def test_every_problem_of_a_file_at_once(tmp_path: Path) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text("items_per_batchh = 4\n" + BASE.replace('"bert_qa"\n', '"bert_qa"\nmax_tokenz = 64\n')
                   + "\n[features.frames]\nextractor = \"densenet16\"\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert [line.split(":")[0].strip() for line in str(e.value).splitlines()[1:]] == [
        "[features.qa] max_tokenz", "[features.frames] extractor = 'densenet16'", "items_per_batchh (top level)"]


def test_an_unknown_extractor_exits_2_with_the_known_names(info_store: Path, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    from extractors.base import extractor_modules

    cfg = tmp_path / "my.toml"
    cfg.write_text(BASE.replace('"mtcnn"', '"retinaface"'))
    assert main(["info", str(info_store), "--config", str(cfg)]) == exitcodes.BAD_INPUT
    [block] = _errors(caplog)
    assert f"(known: {', '.join(sorted(extractor_modules()))})" in block


def test_bad_toml_and_unknown_presets_and_features(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text(BASE + "[features.x\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}: not valid TOML: "):
        load_config(cfg)
    with pytest.raises(FileNotFoundError, match="did you mean `socialiqa`"):
        load_config("socialiqaa")
    with pytest.raises(ValueError, match=r"unknown feature\(s\) \['face'\]; did you mean `faces`"):
        load_config("sample").specs(["face"])
