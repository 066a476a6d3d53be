"""Messages that say what to do (issue 36): each problem a new user met ends in one line that names the fix, and
the datasets' batched path keeps what a subclass adds."""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pipeline import exitcodes
from pipeline.cli import main


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_inspect_of_an_unknown_item_is_one_line(info_store: Path, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "pipeline.inspect", str(info_store), "no-such-item",
                          str(tmp_path / "x.png")], capture_output=True, text=True)
    assert run.returncode == exitcodes.BAD_INPUT
    assert "Traceback" not in run.stderr
    (line,) = [x for x in run.stderr.splitlines() if "no-such-item" in x]
    assert "e.g. tiny-a, tiny-b, tiny-c" in line
    assert not (tmp_path / "x.png").exists()


def test_migrate_on_a_current_store_says_nothing_to_do(info_store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "c.zarr"
    shutil.copytree(info_store, copy)
    code, text = run_cli("migrate", "--out", str(copy))
    assert code == exitcodes.OK
    assert text.strip() == f"nothing to migrate: {copy} is already siqfeat.store/2"


def test_compact_rewrites_only_what_gains_and_says_each_thing_once(info_store: Path, tmp_path: Path,
                                                                   capfd: pytest.CaptureFixture) -> None:
    copy = tmp_path / "c.zarr"
    shutil.copytree(info_store, copy)
    assert main(["compact", "--out", str(copy)]) == exitcodes.OK
    first = capfd.readouterr()
    lines = (first.out + first.err).splitlines()
    # every feature had 3 one-item parts (frames also tiny-b's superseded rows): each rewritten, said once
    for feature in ("acoustic", "faces", "frames", "qa", "transcript"):
        assert sum(f"compacted {feature}:" in x for x in lines) == 1, lines
    assert main(["compact", "--out", str(copy)]) == exitcodes.OK
    again = capfd.readouterr()
    assert again.out.splitlines()[0] == f"compact {copy}: 0 feature(s) rewritten"
    assert "compacted" not in again.out + again.err
    # transcript keeps its damaged part beside the new one: still nothing to gain
    for feature, parts in (("acoustic", "1 part"), ("transcript", "2 parts")):
        assert f"  {feature}: already compact ({parts}, no superseded row), left as it is" in again.out.splitlines()


def test_decoders_take_a_str_path(tiny_root_template: Path) -> None:
    from media.decode import decode_audio, decode_frames

    video = tiny_root_template / "siq2/video/tiny-a.mp4"
    frames = decode_frames(str(video))
    np.testing.assert_array_equal(frames.pixels, decode_frames(video).pixels)
    assert decode_audio(str(video)).samples.shape == decode_audio(video).samples.shape


def test_weights_offline_says_so_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """No network: a proxy on a closed port refuses every connection, as an offline machine does."""
    for var in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    # urlopen's opener keeps the proxies of its first use for the whole process: this test's dead one must not
    # outlive it (the S3 tests in the same worker were refused by it)
    import urllib.request
    monkeypatch.setattr(urllib.request, "_opener", None)
    target = tmp_path / "new" / "weights"
    caplog.set_level("INFO", logger="siqfeat")
    assert main(["weights", "--dir", str(target)]) == exitcodes.BAD_INPUT
    (line,) = [m for m in caplog.messages if "cannot download" in m]
    assert "from this machine" in line and "on a machine with internet" in line.lower() and "SIQ_WEIGHTS_DIR" in line
    assert list(tmp_path.iterdir()) == []  # not even the folders it would have filled


def test_socialiqa3_on_a_text_only_store_names_modalities(tmp_path: Path) -> None:
    from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
    from reading.datasets import SocialIQA3
    from testing.qa_store import write_qa_store

    write_sample_socialiqa(tmp_path / "raw", n=3)
    media, qa = read_socialiqa(tmp_path / "raw")
    store = write_qa_store(tmp_path / "siqa.zarr", media, qa)
    with pytest.raises(ValueError, match=r"no feature 'frames'.*text-only store.*modalities=\(\)"):
        SocialIQA3(store, split="dev")
    assert len(SocialIQA3(store, split="dev", modalities=())) > 0


def test_socratis_dropped_lists_no_reason_without_items(tmp_path: Path) -> None:
    from manifests.records import MediaItem
    from reading.datasets import SocratisReactions
    from rows import FeatureRows
    from store.writer import StoreWriter

    with StoreWriter(tmp_path / "s.zarr", "socratis") as w:
        w.write_manifests([MediaItem(id="p1", dataset="socratis", image=tmp_path / "p1.jpg", caption="c")], [])
        for feature in ("frames", "faces", "caption", "reactions"):
            w.set_feature(feature, {"extractor": feature, "version": "0", "config": {}, "columns": ["a"],
                                    "rate_hz": None, "weights": "none", "spec_hash": "s"})
            w.commit(feature, "p1", FeatureRows(np.zeros((1, 1), np.float32), np.zeros((1, 2))),
                     {"spec_hash": "s", "fingerprint": "-", "duration_s": None})
    ds = SocratisReactions(tmp_path / "s.zarr")
    assert len(ds) == 1
    assert dict(ds.dropped) == {}  # no reason with a count of 0


@pytest.fixture(scope="module")
def siqa_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
    from testing.qa_store import write_qa_store

    root = tmp_path_factory.mktemp("hook")
    write_sample_socialiqa(root / "raw", n=6)
    media, qa = read_socialiqa(root / "raw")
    return write_qa_store(root / "siqa.zarr", media, qa, vectors=True)


def test_a_subclass_getitem_holds_in_dataloader_batches(siqa_store: Path) -> None:
    from reading.datasets import SocialIQA3, collate_qa

    class WithLength(SocialIQA3):
        def __getitem__(self, i: int) -> dict:
            out = super().__getitem__(i)
            out["n_answers"] = torch.tensor(out["answers"].shape[0])
            return out

    ds = WithLength(siqa_store, split="train", modalities=())
    batches = list(DataLoader(ds, batch_size=4, collate_fn=collate_qa))
    assert sum(len(b["qid"]) for b in batches) == len(ds)
    for b in batches:
        assert b["n_answers"].tolist() == [3] * len(b["qid"])
    singles = collate_qa([ds[i] for i in range(4)])
    assert torch.equal(batches[0]["answers"], singles["answers"])


def test_the_extend_hook_runs_on_both_paths(siqa_store: Path) -> None:
    from reading.datasets import SocialIQA3, collate_qa

    class Tagged(SocialIQA3):
        def extend(self, sample: dict, smp) -> dict:
            return {**sample, "rows": torch.tensor([smp.question_row, *smp.answer_rows])}

    ds = Tagged(siqa_store, split="train", modalities=())
    batched = ds.__getitems__([0, 1, 2])
    for i, sample in enumerate(batched):
        assert torch.equal(sample["rows"], ds[i]["rows"])
        assert sample["rows"].tolist() == [ds.samples[i].question_row, *ds.samples[i].answer_rows]
    batch = next(iter(DataLoader(ds, batch_size=3, collate_fn=collate_qa)))
    assert batch["rows"].shape == (3, 4)
