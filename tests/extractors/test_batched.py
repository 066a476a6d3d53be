"""`extractors.batched.BatchedModel`: the batching every model extractor shares, on a fake model (exact outputs,
the batches it ran), and DenseNet161 on it bit for bit against the forward written out by hand."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from extractors.base import ExtractorConfig, Frames
from extractors.batched import BatchedModel, Frame, Units, frame_runs, frame_units, stacked_frames
from extractors.calibrate import Calibrator
from rows import FeatureRows


class FakeConfig(ExtractorConfig):
    extractor: Literal["fake"] = "fake"
    batch_size: int | Literal["auto"] = "auto"
    batch_bytes: int = 1_000


class Fake(BatchedModel[FakeConfig, str]):
    """Units are an item's words; a word's output is itself upper-cased; words group by their first letter (as
    MTCNN's frames by size), shortest first (as text), a letter counting 10 bytes."""

    name, version, config_type, input_kind, unit_name, by_length = "fake", "1", FakeConfig, "transcript", "word", True

    def __init__(self, config: FakeConfig, **kw) -> None:
        super().__init__(config, **kw)
        self.batches: list[list[str]] = []

    @classmethod
    def columns(cls, config: FakeConfig) -> list[str]:
        return ["n"]

    def units(self, x: str) -> Units:
        return Units(x.split(), plan=x)

    def forward(self, batch: Sequence[str]) -> list[str]:
        assert torch.is_inference_mode_enabled()
        self.batches.append(list(batch))
        return [u.upper() for u in batch]

    def pack(self, x: str, units: Units, outputs: list[str]) -> FeatureRows:
        assert units.plan == x and [u.upper() for u in units] == outputs  # each unit's own output, in item order
        return FeatureRows(np.array([[len(o)] for o in outputs], np.float32).reshape(-1, 1), np.zeros((len(outputs), 2)),
                           {"out": np.array(outputs, dtype=np.str_).reshape(-1)})

    def batch_key(self, reference: str) -> tuple[str, str]:
        return "fake", f"{reference[0]}{len(reference)}"

    def default_batch(self) -> int:
        return 2

    def group(self, unit: str) -> str:
        return unit[0]

    def unit_bytes(self, unit: str) -> int:
        return 10 * len(unit)


ITEMS = ["bb a bbbb", "", "aaa b a", "bbb"]


def test_units_of_all_items_batched_per_group_shortest_first_and_split_back() -> None:
    model = Fake(FakeConfig())
    rows = model.extract_batch(ITEMS)
    assert [list(r.extras["out"]) for r in rows] == [["BB", "A", "BBBB"], [], ["AAA", "B", "A"], ["BBB"]]
    # group "b" first (its first unit comes first), shortest first (stable), 2 a batch (the default)
    assert model.batches == [["b", "bb"], ["bbb", "bbbb"], ["a", "a"], ["aaa"]]
    tight = Fake(FakeConfig(batch_size=8, batch_bytes=35))
    tight.extract_batch(ITEMS)
    assert tight.batches == [["b", "bb"], ["bbb"], ["bbbb"], ["a", "a"], ["aaa"]]  # 40 bytes alone: still runs


def test_calibration_trials_are_the_calls_first_batches(tmp_path: Path) -> None:
    """The calibrator given at construction measures on the group's own units (kept, each unit run once), keyed by
    the group's reference (its median, shortest first); candidates bounded by batch_bytes over the largest unit."""
    cal = Calibrator("fake", "cpu", tmp_path / "c.json", budget_s=1e9, clock=itertools.count().__next__)
    model = Fake(FakeConfig(batch_bytes=20), calibrator=cal)
    items = [" ".join(["a"] * 9), "b"]
    rows = model.extract_batch(items)
    assert [list(r.extras["out"]) for r in rows] == [["A"] * 9, ["B"]]
    # a's trials of 1, 1, 2, 2 (20 bytes / 10 a letter), each re-timed once: its 9 units, each run once, kept; b has
    # one unit: its later trials repeat it and are thrown away
    assert model.batches == [["a"], ["a"], ["a", "a"], ["a", "a"], ["a"], ["a", "a"], ["b"], ["b"], ["b", "b"], ["b", "b"]]
    # every call costs one tick of the clock: the larger batch is the cheaper per unit
    assert {k: (c.batch, c.source) for k, c in cal.choices.items()} == {"a1": (2, "calibrated"), "b1": (2, "calibrated")}
    fixed = Fake(FakeConfig(batch_size=3), calibrator=Calibrator("fake", "cpu", None))
    fixed.extract_batch(items)
    assert {c.source for c in fixed.calibrator.choices.values()} == {"pinned"}


def test_frame_units_slice_numpy_and_torch_alike() -> None:
    """A batch's frames are slices of their items' pixels (no copy of a run), numpy or torch as they came."""
    a = np.arange(4 * 2 * 2 * 3, dtype=np.uint8).reshape(4, 2, 2, 3)
    b = a[:2] + 100
    batch = frame_units(a)[1:] + frame_units(b)[:1]
    runs = frame_runs(batch)
    assert len(runs) == 2 and np.shares_memory(runs[0], a) and np.array_equal(runs[0], a[1:])
    np.testing.assert_array_equal(stacked_frames(batch), np.concatenate([a[1:], b[:1]]))
    t = torch.from_numpy(a)
    got = stacked_frames(frame_units(t)[2:] + [Frame(t, 0)])
    assert isinstance(got, torch.Tensor) and torch.equal(got, t[[2, 3, 0]])
    assert Frame(t, 0).nbytes == Frame(a, 0).nbytes == 12  # what counts against batch_bytes, numpy or torch
    assert len(frame_runs([Frame(a, 1)] * 3)) == 3  # a repeated frame (a thrown-away trial): one run each


def test_densenet_rows_are_the_forward_written_out_by_hand() -> None:
    """DenseNet161 through the base equals, bit for bit, its preprocessing and pooled features called directly on
    the same batches (a batch spanning videos of two sizes; each video's run preprocessed as one slice)."""
    from extractors.densenet import DenseNet161, DenseNetConfig, pooled_features

    rng = np.random.default_rng(0)
    videos = [Frames(px, np.stack([np.arange(n), np.arange(1, n + 1)], 1).astype(float), np.arange(n) + 0.5, 30.0, n)
              for n, px in ((1, rng.integers(0, 255, (1, 64, 80, 3), np.uint8)),
                            (2, rng.integers(0, 255, (2, 48, 100, 3), np.uint8)))]
    model = DenseNet161(DenseNetConfig(weights="random", batch_size=2))
    rows = model.extract_batch(videos)
    a, b = (v.pixels for v in videos)
    with torch.inference_mode():
        batches = [[a[0:1], b[0:1]], [b[1:2]]]
        want = np.concatenate([pooled_features(model.model, torch.cat([model.preprocess(torch.from_numpy(p).permute(
            0, 3, 1, 2)) for p in runs]).contiguous(memory_format=torch.channels_last)).numpy() for runs in batches])
    np.testing.assert_array_equal(np.concatenate([r.features for r in rows]), want)
    assert [r.attrs["precision"] for r in rows] == ["fp32", "fp32"]
