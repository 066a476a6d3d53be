"""The GPU decode path (media/nvdec.py) against the CPU path (media/decode.py), the reference.

On CPU the same code runs with torchcodec's CPU decoder (device="cpu"): the same rows, the same source frames
(PTS equal, tick for tick) and, since both convert with swscale's rgb24, the same pixels exactly. On CUDA
(marked gpu, skipped without it) NVDEC decodes and torchcodec's kernel converts NV12 to RGB: the frames must be
the same ones and the pixels within colour-conversion rounding (`CUDA_MAX_ABS`, `CUDA_MEAN_ABS`). Files the path
cannot show as the CPU path does go to it, with a reason."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import numpy as np
import pytest

from media import decode, nvdec
from media.picture import View
from testing.synth_display import Case, make_case, read_index, upright

# NVDEC's output is NV12; torchcodec converts it on the device with its own BT.601/709 kernel, swscale with
# its fixed-point tables and its own chroma siting: the two round differently, and chroma upsampling differs
# at the sharp colour edges of these test pictures. A level or two on average, tens at a hard colour edge;
# the barcode (read_index) and the red corner (upright) must still read the same.
CUDA_MAX_ABS = 64
CUDA_MEAN_ABS = 3.0

SHOWN = [Case("mp4", "h264"), Case("mkv", "h264"), Case("mp4", "h264", rotation_ccw=90),
         Case("mov", "h264", rotation_ccw=180), Case("mp4", "hevc"), Case("webm", "vp9"), Case("mkv", "av1")]


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nvdec")


def _same_rows(gpu, cpu) -> None:
    np.testing.assert_array_equal(gpu.intervals, cpu.intervals)
    np.testing.assert_array_equal(gpu.pts_s, cpu.pts_s)  # the same source frames
    np.testing.assert_array_equal(gpu.missing_s, cpu.missing_s)
    assert gpu.duration_s == cpu.duration_s and gpu.picture == cpu.picture


@pytest.mark.parametrize("case", SHOWN, ids=lambda c: c.name)
def test_the_gpu_path_on_cpu_takes_the_cpu_paths_frames_and_pixels(case: Case, media: Path) -> None:
    path = make_case(case, media)
    cpu = decode.decode_frames(path)
    frames = nvdec.decode_on_device(path, device="cpu")
    assert frames.decoder == "torchcodec-cpu"
    _same_rows(frames, cpu)
    host = frames.pixels.cpu().numpy()
    np.testing.assert_array_equal(host, cpu.pixels)  # swscale both ways: exact
    assert all(upright(p) for p in host)


def test_a_cut_clip_takes_the_same_frames(media: Path) -> None:
    path = make_case(Case("mp4", "h264"), media, seconds=4)
    clip = (0.7, 3.2)
    cpu = decode.decode_frames(path, clip)
    frames = nvdec.decode_on_device(path, clip, device="cpu")
    _same_rows(frames, cpu)
    np.testing.assert_array_equal(frames.pixels.cpu().numpy(), cpu.pixels)


def test_a_rotate_tag_is_followed_as_the_cpu_path_does(media: Path) -> None:
    """A `rotate` tag without a display matrix: the CPU path turns it clockwise; torchcodec may not read it,
    the rest of the turn is done on the device."""
    src = make_case(Case("mp4", "h264"), media)
    path = media / "tagged.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(src), "-c", "copy", "-metadata:s:v:0",
                    "rotate=90", str(path)], check=True)
    cpu = decode.decode_frames(path)
    frames = nvdec.decode_on_device(path, device="cpu")
    _same_rows(frames, cpu)
    np.testing.assert_array_equal(frames.pixels.cpu().numpy(), cpu.pixels)


def _encode(media: Path, name: str, *args: str, size: str = "96x64") -> Path:
    path = media / name
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=s={size}:r=15:d=2", *args,
                    str(path)], check=True)
    return path


@pytest.mark.parametrize("name, args, reason", [
    ("prores.mov", ("-c:v", "prores_ks"), "codec prores"),
    ("mjpeg.avi", ("-c:v", "mjpeg"), "codec mjpeg"),
    ("xvid.avi", ("-c:v", "mpeg4"), "codec mpeg4"),
    ("yuv444.mp4", ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv444p"), "pixel format yuv444p"),
    ("sar.mp4", ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-vf", "setsar=4/3"),
     "non-square pixels"),
])
def test_what_nvdec_cannot_show_goes_to_the_cpu_path_with_its_reason(name: str, args: tuple[str, ...], reason: str,
                                                                      media: Path) -> None:
    path = _encode(media, name, *args)
    with pytest.raises(nvdec.CpuFallback) as caught:
        nvdec.decode_on_device(path, device="cpu")
    assert caught.value.reason.startswith(reason) and str(path) in str(caught.value)
    frames, _, why = nvdec.plan_for_device(path, None, "cpu", "x", ("frames",))  # the decode task's side
    assert why == caught.value.reason
    reference = decode.decode_frames(path)
    _same_rows(frames, reference)
    np.testing.assert_array_equal(frames.pixels, reference.pixels)


def test_a_mirrored_matrix_and_damage_go_to_the_cpu_path(media: Path) -> None:
    mirrored = make_case(Case("mp4", "h264", mirrored=True), media)
    assert nvdec.plan_for_device(mirrored, None, "cpu", "x", ("frames",))[2].startswith("mirrored display matrix")
    whole = make_case(Case("mp4", "h264"), media, seconds=4)
    cut = media / "truncated.mp4"
    data = whole.read_bytes()
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(whole), "-c", "copy", "-movflags", "faststart",
                    str(cut)], check=True)
    cut.write_bytes(cut.read_bytes()[: len(data) * 2 // 3])  # the index says 4 s, the data stops before
    frames, _, why = nvdec.plan_for_device(cut, None, "cpu", "x", ("frames",))
    assert why is not None and why.startswith("damaged data")
    reference = decode.decode_frames(cut)
    _same_rows(frames, reference)


def test_nvdecs_size_limits_hold_on_cuda_only(media: Path) -> None:
    """96x64 is under NVDEC's HEVC minimum (144x144): the CPU path on CUDA; H.264's (48x16) takes it."""
    hevc = decode.plan_rows(make_case(Case("mp4", "hevc"), media))
    assert nvdec.cpu_reason(hevc, "cuda").startswith("size 96x64 outside NVDEC's hevc range")
    assert nvdec.cpu_reason(hevc, "cpu") is None
    assert nvdec.cpu_reason(decode.plan_rows(make_case(Case("mp4", "h264"), media)), "cuda") is None
    odd = dataclasses.replace(hevc, view=View((95, 63)))  # (ffmpeg's encoders here round 4:2:0 sizes down)
    assert nvdec.cpu_reason(odd, "cpu") == "odd size 95x63"


@pytest.mark.gpu
@pytest.mark.parametrize("case", [Case("mp4", "h264"), Case("mp4", "h264", rotation_ccw=90), Case("webm", "vp9"),
                                  Case("mkv", "av1")], ids=lambda c: c.name)
def test_nvdec_takes_the_cpu_paths_frames_within_rounding(case: Case, media: Path) -> None:
    """NVDEC against the CPU path: the same frames; pixels within colour-conversion rounding. 96x64 pictures are
    under NVDEC's VP9/AV1 minimum: those are made at 192x128 (each block doubled)."""
    from conftest import cuda_or_skip

    device = cuda_or_skip()
    path = make_case(case, media, seconds=3)
    if case.codec in ("vp9", "av1"):
        path = _encode_scaled(path, media / f"big-{path.name}", case)
    cpu = decode.decode_frames(path)
    frames = nvdec.decode_on_device(path, device=device)
    assert frames.decoder == "nvdec" and frames.pixels.device.type == "cuda"
    _same_rows(frames, cpu)
    host = frames.pixels.cpu().numpy()
    diff = np.abs(host.astype(np.int16) - cpu.pixels.astype(np.int16))
    assert diff.max() <= CUDA_MAX_ABS and diff.mean() <= CUDA_MEAN_ABS, (diff.max(), diff.mean())
    if cpu.pixels.shape[1:3] == (64, 96):
        assert [read_index(p) for p in host] == [read_index(p) for p in cpu.pixels]
        assert all(upright(p) for p in host)


def _encode_scaled(src: Path, dst: Path, case: Case) -> Path:
    from testing.synth_display import CODECS, cached_media

    return cached_media(dst, f"3s-big-{case.name}", lambda: subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-i", str(src), "-vf", "scale=iw*2:ih*2:flags=neighbor",
         *CODECS[case.codec], str(dst)], check=True))


def test_frames_the_decoder_gives_for_other_times_are_refused(media: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PTS check is what makes "the same source frames" hold: asked one frame later, the path refuses."""
    path = make_case(Case("mp4", "h264"), media)
    middles = nvdec._showing_middles
    monkeypatch.setattr(nvdec, "_showing_middles", lambda plan, chosen: middles(plan, chosen) + 1 / 15)
    with pytest.raises(nvdec.CpuFallback, match="torchcodec gave the frame at PTS"):
        nvdec.decode_on_device(path, device="cpu")
