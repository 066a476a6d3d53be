from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision.models import densenet161

from extractors.densenet import DenseNet161, DenseNetConfig, _rename_legacy_keys, load_densenet, weights_file
from extractors.weights import WeightsMissingError
from media.decode import decode_frames

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def reference_preprocess(pixels: np.ndarray) -> torch.Tensor:
    """ImageNet preprocessing written out by hand: resize 256 (bilinear, antialiased), crop 224, normalise."""
    x = torch.from_numpy(pixels.copy()).permute(0, 3, 1, 2)
    x = TF.resize(x, [256], interpolation=TF.InterpolationMode.BILINEAR, antialias=True)
    x = TF.center_crop(x, [224, 224])
    return TF.normalize(x.float() / 255.0, MEAN, STD)


def reference_features(x: torch.Tensor, seed: int = 0) -> np.ndarray:
    """Plain torchvision fp32 forward with the same random init and the classifier removed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = densenet161(weights=None).eval()
    model.classifier = torch.nn.Identity()
    with torch.no_grad():
        return model(x).numpy()


@pytest.fixture(scope="module")
def frames_c(sample_root: Path):
    f = decode_frames(sample_root / "siq2/video/sample-c.mp4")
    return type(f)(pixels=f.pixels[:6], intervals=f.intervals[:6], pts_s=f.pts_s[:6], source_fps=f.source_fps,
                   duration_s=f.duration_s)


@pytest.fixture(scope="module")
def extractor() -> DenseNet161:
    return DenseNet161(DenseNetConfig(weights="random", batch_size=4))


def test_preprocessing_matches_imagenet_recipe(extractor: DenseNet161, frames_c) -> None:
    ours, ref = extractor.prepare(frames_c.pixels), reference_preprocess(frames_c.pixels)
    assert ours.shape == ref.shape == (6, 3, 224, 224)
    # uint8 resize kernels may round a pixel differently by one level: 1/255/std ≈ 0.0175
    assert (ours - ref).abs().max() <= 1 / 255 / min(STD) + 1e-6
    assert (ours - ref).abs().mean() < 1e-3


def test_matches_plain_torchvision_fp32(extractor: DenseNet161, frames_c) -> None:
    rows = extractor.extract(frames_c)
    ref = reference_features(extractor.prepare(frames_c.pixels))
    assert rows.features.shape == (6, 2208)
    np.testing.assert_allclose(rows.features, ref, rtol=1e-4, atol=2e-5)
    np.testing.assert_array_equal(rows.intervals, frames_c.intervals)
    assert rows.attrs["precision"] == "fp32"


def test_cpu_forward_runs_channels_last_with_the_plain_models_features(extractor: DenseNet161, frames_c) -> None:
    """channels_last is a speed choice (oneDNN's layout): at the same batch the features equal the plain
    (contiguous NCHW) torchvision model's within float rounding."""
    conv = extractor.model.features.conv0.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    x = extractor.prepare(frames_c.pixels[:4])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        plain = densenet161(weights=None).eval()
    plain.classifier = torch.nn.Identity()
    with torch.no_grad():
        ref = plain(x.contiguous()).numpy()
    np.testing.assert_allclose(extractor.extract(frames_c).features[:4], ref, rtol=1e-5, atol=1e-5)


def test_batched_across_videos_of_different_sizes(extractor: DenseNet161, frames_c, sample_root: Path) -> None:
    other = decode_frames(sample_root / "siq2/video/sample-a.mp4")
    other = type(other)(pixels=other.pixels[:3], intervals=other.intervals[:3], pts_s=other.pts_s[:3],
                        source_fps=30.0, duration_s=3.0)
    together = extractor.extract_batch([frames_c, other])
    alone = [extractor.extract(frames_c), extractor.extract(other)]
    for t, a in zip(together, alone, strict=True):
        np.testing.assert_allclose(t.features, a.features, rtol=1e-4, atol=1e-5)
    assert [len(t.features) for t in together] == [6, 3]


def test_random_weights_are_recorded_and_seeded() -> None:
    assert DenseNet161.weights_id(DenseNetConfig(weights="random")) == "random"
    assert DenseNet161.weights_id(DenseNetConfig()) == "imagenet1k_v1"
    a, b = load_densenet(DenseNetConfig(weights="random")), load_densenet(DenseNetConfig(weights="random", random_seed=1))
    assert not torch.equal(a.features.conv0.weight, b.features.conv0.weight)


def test_declared_weights_are_torchvisions_file() -> None:
    """The URL spelled in extractors/densenet.py (so that declaring weights imports no torchvision) is torchvision's,
    and it lands where loading looks for it."""
    from torchvision.models import DenseNet161_Weights

    (w,) = DenseNet161.weights(DenseNetConfig())
    assert w.url == DenseNet161_Weights.IMAGENET1K_V1.url
    assert Path("/c") / w.path == weights_file(DenseNetConfig(weights_dir=Path("/c")))
    assert DenseNet161.weights(DenseNetConfig(weights="random")) == ()


def test_missing_pretrained_weights_say_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(WeightsMissingError, match=rf"densenet161-8d451a50\.pth.*make weights WEIGHTS_DIR={tmp_path}`"):
        DenseNet161(DenseNetConfig(weights="imagenet1k_v1", weights_dir=tmp_path))


def test_pretrained_file_with_legacy_keys_loads(tmp_path: Path) -> None:
    """The published file uses 'norm.1'-style keys; loading must map them onto the current module, every tensor the
    file's (the model is built without initialisation and given them): the extractor's features are bit for bit
    those of the network built the plain way (random init, then the weights copied in)."""
    model = load_densenet(DenseNetConfig(weights="random", random_seed=3))
    with torch.no_grad():  # BatchNorm's initial values (ones, zeros) would pass unloaded: give every tensor its own
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.uniform_(0.5, 1.5)
    legacy = {k.replace("norm1", "norm.1").replace("conv2", "conv.2"): v for k, v in model.state_dict().items()
              if "num_batches_tracked" not in k}  # as in the published 2017 file
    assert any("norm.1" in k for k in legacy)
    path = tmp_path / "torchvision" / "densenet161-8d451a50.pth"
    path.parent.mkdir()
    torch.save(legacy, path)
    config = DenseNetConfig(weights="imagenet1k_v1", weights_dir=tmp_path, batch_size=2)
    loaded = load_densenet(config).state_dict()
    assert loaded.keys() == model.state_dict().keys()
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())
    assert _rename_legacy_keys({"classifier.weight": 1}) == {"classifier.weight": 1}
    plain = densenet161(weights=None).eval()  # the way it was built before: initialised, then overwritten
    plain.load_state_dict(_rename_legacy_keys(torch.load(path, weights_only=True)))
    extractor = DenseNet161(config)
    extractor.model.classifier = plain.classifier = torch.nn.Identity()
    x = extractor.prepare(np.random.default_rng(0).integers(0, 255, (2, 240, 320, 3), dtype=np.uint8))
    with torch.inference_mode():
        ours = extractor.model(x.contiguous(memory_format=torch.channels_last))
        theirs = plain.to(memory_format=torch.channels_last)(x.contiguous(memory_format=torch.channels_last))
    assert torch.equal(ours, theirs)


@pytest.mark.gpu
def test_cuda_reduced_precision_close_to_fp32() -> None:
    """Runs without ffmpeg/decord (GPU machines may lack them): frames are a real photo, shifted."""
    from conftest import cuda_or_skip
    from skimage import data

    from extractors.base import Frames

    device = cuda_or_skip()
    photo = data.astronaut()
    pixels = np.stack([np.roll(photo, 40 * k, axis=1) for k in range(6)])
    frames_c = Frames(pixels=pixels, intervals=np.stack([np.arange(6.0), np.arange(6.0) + 1], 1),
                      pts_s=np.arange(6.0) + 0.5, source_fps=25.0, duration_s=6.0)
    prepared = DenseNet161(DenseNetConfig(weights="random"), device=device).prepare(frames_c.pixels).cpu()
    ref = reference_features(prepared)  # plain fp32 torchvision on CPU, on the same preprocessed frames
    for precision in ("fp16", "bf16"):
        rows = DenseNet161(DenseNetConfig(weights="random", precision=precision), device=device).extract(frames_c)
        cos = (rows.features * ref).sum(1) / np.linalg.norm(rows.features, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() >= 0.999, (precision, cos.min())
    fp32 = DenseNet161(DenseNetConfig(weights="random", precision="fp32"), device=device).extract(frames_c)
    np.testing.assert_allclose(fp32.features, ref, rtol=1e-4, atol=1e-4)  # TF32 is switched off for fp32


def test_batches_bounded_in_bytes_and_batching_never_changes_features(monkeypatch) -> None:
    """Forwards take at most `batch_size` frames and `batch_bytes` of decoded pixels, across videos of different
    sizes (the splitter's own cases are in test_bounded_batches.py); the features equal one frame per forward within
    fp32 rounding."""
    from skimage import data

    from extractors.base import Frames

    photo = data.astronaut()

    def video(n: int, h: int, w: int) -> Frames:
        pixels = np.stack([np.ascontiguousarray(photo[30 * k : 30 * k + h, 40 * k : 40 * k + w]) for k in range(n)])
        t = np.arange(n, dtype=float)
        return Frames(pixels=pixels, intervals=np.stack([t, t + 1], 1), pts_s=t + 0.5, source_fps=25.0, duration_s=n)

    videos = [video(3, 120, 160), video(2, 90, 300)]  # 57,600 and 81,000 bytes per frame
    calls: list[int] = []
    forward = DenseNet161.forward

    def spy(self, batch):
        calls.append(len(batch))
        return forward(self, batch)

    monkeypatch.setattr(DenseNet161, "forward", spy)
    out = {}
    for name, cfg, expected in [
        ("one", {"batch_size": 1}, [1] * 5),
        ("all", {"batch_size": 8}, [5]),
        ("bytes", {"batch_size": 8, "batch_bytes": 150_000}, [2, 2, 1]),  # 2×57,600; 57,600+81,000; 81,000
    ]:
        calls.clear()
        out[name] = DenseNet161(DenseNetConfig(weights="random", **cfg)).extract_batch(videos)
        assert calls == expected, (name, calls)
    for name, rows in out.items():
        for got, ref, v in zip(rows, out["one"], videos, strict=True):
            assert got.features.shape == (len(v.pixels), 2208)
            np.testing.assert_allclose(got.features, ref.features, rtol=1e-5, atol=1e-6, err_msg=name)
            np.testing.assert_array_equal(got.intervals, v.intervals)
