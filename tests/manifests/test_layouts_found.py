"""A release folder that yields nothing to extract says what it found and what is missing, and extract exits 2
without writing a store (issue 49, point 1): the published Social-IQ 2.0 metadata before its videos are
downloaded, and the like for every layout."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipeline import exitcodes
from pipeline.cli import main
from pipeline.config import load_config
from pipeline.sources import detect_layout, load_items


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _extract(raw: Path, out: Path, dataset: str = "socialiq") -> int:
    return main(["extract", "--dataset", dataset, "--raw", str(raw), "--out", str(out)])


def _siq2_metadata(realdata: Path, raw: Path, nested: bool, video_dir: bool) -> Path:
    root = raw / "siq2" if nested else raw
    root.mkdir(parents=True)
    for name in ("qa", "trims.json", "original_split.json"):
        (root / name).symlink_to(realdata / "siq2" / name)
    if video_dir:
        (root / "video").mkdir()
    return root


@pytest.mark.parametrize("nested,video_dir", [(True, False), (True, True), (False, False)],
                         ids=["siq2-no-video-folder", "siq2-empty-video-folder", "flat-no-video-folder"])
def test_published_siq2_metadata_without_videos_is_an_error_naming_what_is_missing(
        realdata: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, nested: bool, video_dir: bool) -> None:
    raw = tmp_path / "raw"
    _siq2_metadata(realdata, raw, nested, video_dir)
    n_questions = sum(1 for s in ("train", "val", "test")
                      for line in (realdata / f"siq2/qa/qa_{s}.json").read_text().splitlines() if line.strip())
    assert detect_layout(raw) == "siq2"
    out = tmp_path / "s.zarr"
    assert _extract(raw, out) == exitcodes.BAD_INPUT
    assert not out.exists()  # no empty store
    [line] = _errors(caplog)
    video = "siq2/video" if nested else "video"
    assert line.startswith(f"{raw}: Social-IQ 2.0 metadata found ({n_questions:,} questions, ")
    assert line.endswith(f"no videos under {video}: download them first")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


QA2 = json.dumps({"qid": "q1", "q": "Why?", "vid_name": "vid1", "ts": "0.00-60.00", "a0": "a", "a1": "b",
                  "a2": "c", "a3": "d", "answer_idx": 1}) + "\n"


def _siq2_trims_only(raw: Path) -> None:
    _write(raw / "siq2" / "trims.json", '{"vid1": 3}')
    _write(raw / "siq2" / "qa" / "qa_val.json", QA2)


def _siq1_qa_only(raw: Path) -> None:
    _write(raw / "raw" / "qa" / "vid1_trimmed.txt", "q0: Why?\na: Because.\ni: No.\n")


def _tinysocial_no_video(raw: Path) -> None:
    _write(raw / "clips.csv", "clip_id,subset,source,start_s,end_s\nclip1,crowd,x,,\n")
    _write(raw / "qa" / "qa_crowd.jsonl", QA2.replace("vid1", "clip1"))


def _socratis_no_images(raw: Path) -> None:
    _write(raw / "imCaptionEmotionExplanation_formatted.json",
           json.dumps({"p1": [["images/a.jpg", "A caption.", "happy", "Nice."]]}))


@pytest.mark.parametrize("make,layout,found,missing", [
    (_siq2_trims_only, "siq2", "Social-IQ 2.0 metadata found (1 questions, 1 items)", "no videos under siq2/video"),
    (_siq1_qa_only, "siq1", "Social-IQ 1.0 metadata found (1 questions, 1 items)", "no videos under raw/vision/raw"),
    (_tinysocial_no_video, "tinysocial", "TinySocial metadata found (1 questions, 1 items)", "no videos under video"),
    (_socratis_no_images, "socratis", "Socratis metadata found (no questions, 1 items)", "no images under images"),
], ids=["siq2", "siq1", "tinysocial", "socratis"])
def test_a_partial_release_of_each_layout_says_what_it_found(tmp_path: Path, make, layout: str, found: str,
                                                             missing: str) -> None:
    raw = tmp_path / "raw"
    make(raw)
    assert detect_layout(raw) == layout
    with pytest.raises(ValueError) as e:
        load_items("x", raw, load_config("socialiq"))
    assert str(e.value) == f"{raw}: {found}, {missing}: download them first"


def test_some_videos_present_is_not_an_error(tmp_path: Path) -> None:
    """Videos still downloading: the items with a file run, the others fail one by one in the summary."""
    raw = tmp_path / "raw"
    _siq2_trims_only(raw)
    _write(raw / "siq2" / "qa" / "qa_train.json", QA2.replace("vid1", "vid2").replace('"q1"', '"q2"'))
    _write(raw / "siq2" / "video" / "vid2.mp4", "")
    items, qa, _ = load_items("x", raw, load_config("socialiq"))
    assert sorted(i.id for i in items) == ["vid1", "vid2"] and len(qa) == 2


@pytest.mark.parametrize("make", [
    lambda raw: (raw / "qa").mkdir(parents=True),  # once read as Social-IQ 1.0 with 0 items
    lambda raw: _write(raw / "qa" / "notes.txt", "hello"),
    lambda raw: _write(raw / "README.md", "the data comes later"),
    lambda raw: raw.mkdir(),
], ids=["empty-qa-folder", "qa-folder-of-other-files", "unrelated-file", "empty-folder"])
def test_a_folder_of_no_known_layout_says_what_it_holds(tmp_path: Path, make,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    raw = tmp_path / "raw"
    make(raw)
    out = tmp_path / "s.zarr"
    assert _extract(raw, out) == exitcodes.BAD_INPUT
    assert not out.exists()
    [line] = _errors(caplog)
    assert line.startswith(f"{raw}: no known dataset layout; it holds ")
    assert "Social-IQ 2.0: qa/qa_{train,val,test}.json" in line


def test_a_release_with_no_items_is_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    raw = tmp_path / "raw"
    _write(raw / "clips.csv", "clip_id,subset,source,start_s,end_s\n")  # the header only
    out = tmp_path / "s.zarr"
    assert _extract(raw, out, "tinysocial") == exitcodes.BAD_INPUT
    assert not out.exists()
    assert _errors(caplog) == [f"{raw}: TinySocial layout, but no items in it (no questions): nothing to extract"]


def _siq2_without_transcripts(raw: Path) -> Path:
    _write(raw / "siq2" / "trims.json", '{"vid1": 3, "vid2": 0}')
    _write(raw / "siq2" / "qa" / "qa_train.json", QA2 + QA2.replace("vid1", "vid2").replace('"q1"', '"q2"'))
    for vid in ("vid1", "vid2"):
        _write(raw / "siq2" / "video" / f"{vid}.mp4", "")
    return raw


@pytest.mark.parametrize("extra,line", [
    (["--features", "transcript"], "--features transcript: none of the 2 item(s) chosen has the input (transcript): "
                                   "nothing to extract"),
    (["--features", "frames,transcript", "--limit", "1"], "--features transcript: none of the 1 item(s) chosen"),
    (["--limit", "0"], "--limit 0: wants a number of items, at least 1"),
    (["--limit", "-1"], "--limit -1: wants a number of items, at least 1"),
], ids=["feature-without-input", "one-of-two-features", "limit-0", "limit-negative"])
def test_an_empty_selection_is_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture, extra: list[str],
                                        line: str) -> None:
    raw = _siq2_without_transcripts(tmp_path / "raw")
    out = tmp_path / "s.zarr"
    assert main(["extract", "--dataset", "sample", "--raw", str(raw), "--out", str(out), *extra]) \
        == exitcodes.BAD_INPUT
    [error] = _errors(caplog)
    assert error.startswith(line)
    assert not out.exists()


def test_socialiqa_files_without_questions_say_so(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    _write(raw / "socialiqa-train-dev" / "dev.jsonl", "\n")
    _write(raw / "socialiqa-train-dev" / "dev-labels.lst", "")
    assert detect_layout(raw) == "socialiqa"
    with pytest.raises(ValueError) as e:
        load_items("x", raw, load_config("socialiqa"))
    assert str(e.value) == (f"{raw}: SocialIQA layout, but its files hold no questions "
                            "(socialiqa-train-dev/dev.jsonl): nothing to extract")
