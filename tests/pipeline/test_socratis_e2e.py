"""The sample-socratis preset through the Ray pipeline on the three-pair sample plus three broken pairs, then
(image, caption, emotion, reason) samples read back with a DataLoader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from manifests.socratis import FILE_NAMES, write_sample_socratis
from pipeline.config import load_config
from pipeline.run import run_extract
from store.reader import open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    raw = write_sample_socratis(tmp_path_factory.mktemp("socratis-raw"))
    shutil.copy(raw / "images" / "coffee.jpg", raw / "images" / "uneven.jpg")
    data = json.loads((raw / FILE_NAMES[0]).read_text())
    data["soc-no-image"] = [["x/never-unpacked.jpg", "A caption whose image is missing.", "puzzled", "Where is it?"]]
    data["soc-empty"] = []
    data["soc-uneven"] = [["uneven.jpg", "Two emotions, one reason.", ["glad", "wary"], ["Only one reason."]]]
    (raw / FILE_NAMES[0]).write_text(json.dumps(data))
    out = tmp_path_factory.mktemp("socratis-out") / "socratis.zarr"
    return raw, out, run_extract("sample-socratis", raw, out, load_config("sample-socratis"))


def test_good_pairs_complete_and_bad_ones_fail_alone(extracted) -> None:
    raw, out, report = extracted
    c = report.counts
    assert (c["frames"]["done"], c["frames"]["failed"], c["frames"]["n/a"]) == (4, 1, 1)  # no image / no entries
    assert (c["faces"]["done"], c["faces"]["failed"], c["faces"]["n/a"]) == (4, 1, 1)
    assert (c["caption"]["done"], c["caption"]["failed"]) == (5, 1)  # only the pair with no entries has none
    assert (c["reactions"]["done"], c["reactions"]["failed"]) == (4, 2)
    errors = {(f["feature"], f["item"]): f for f in report.failures}
    assert not any("text-only" in note for note in report.notes)  # stills are media
    assert "never-unpacked.jpg: image file does not exist" in errors["frames", "soc-no-image"]["error"]
    assert errors["reactions", "soc-empty"]["error"].endswith(f"{raw / FILE_NAMES[0]}: pair soc-empty: no reactions")
    assert "pair soc-uneven, worker entry 0: 2 emotion(s)" in errors["reactions", "soc-uneven"]["error"]
    store = open_store(out)
    for item in ("soc-0001", "soc-0002", "soc-0003"):
        assert store.read("frames", item).features.shape == (1, 2208)
        assert store.read("frames", item).intervals[:].tolist() == [[0.0, 0.0]]
        assert store.read("caption", item).features.shape == (1, 384)
    assert np.asarray(store.read("faces", "soc-0001").extras["count"][:]).tolist() == [1]  # the astronaut
    assert store.item_attrs("frames", "soc-0001")["duration_s"] == 0.0


def test_reaction_samples_match_the_json(extracted) -> None:
    from torch.utils.data import DataLoader

    from reading.datasets import SocratisReactions, collate_reactions

    raw, out, _ = extracted
    data = json.loads((raw / FILE_NAMES[0]).read_text())
    expected = []
    for pair in ("soc-0001", "soc-0002", "soc-0003"):
        for w, (_, _, emotions, reasons, _) in enumerate(data[pair]):
            emotions, reasons = ([emotions], [reasons]) if isinstance(emotions, str) else (emotions, reasons)
            reasons = [reasons] if isinstance(reasons, str) else reasons
            expected += [(pair, e, r, w) for e, r in zip(emotions, reasons, strict=True)]
    ds = SocratisReactions(out, text="tokens")
    got = [(s["item"], s["emotion"], s["reason"], s["worker"]) for s in (ds[i] for i in range(len(ds)))]
    assert sorted(got) == sorted(expected) and len(got) == 9
    assert ds.dropped["item missing or failed in a feature"] == 3
    batch = collate_reactions([ds[0], ds[1]])
    assert batch["caption"].shape == (2, 64, 384) and batch["reaction_mask"].shape == (2, 64)
    assert batch["image"]["frames"]["x"].shape == (2, 2208) and batch["image"]["faces"]["valid"].shape == (2, 7)
    pooled = SocratisReactions(out, text="pooled", image_features=("frames",))
    loader = DataLoader(pooled, batch_size=4, collate_fn=collate_reactions)
    first = next(iter(loader))
    assert first["reaction"].shape == (4, 1, 384) and len(first["emotion"]) == 4
