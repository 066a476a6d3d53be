"""The covarep feature's torch backend (extractors/acoustic_torch.py) against the numpy reference, through the same
torch code on the CPU and, where present, on CUDA (skipped elsewhere; FAIL_WITHOUT_CUDA=1 makes that a failure);
its F0 (extractors/world_f0.py, WORLD's DIO + StoneMask) also against pyworld alone (docs/acoustic.md, "F0 in torch").

Tolerances (docs/acoustic.md, "Torch backend"): per column, the reference's own noise measured on the five real
recordings of ../shared/realdata/speech, an LF vowel pair and 20 s of espeak-ng speech (bench.bench_acoustic_backends
--noise prints the table):
- BULK, the median |difference| over rows finite in both: what a float32-ULP nudge of every input sample moves the
  reference by (its worst p99 over the signals, rounded up). A backend doing the same arithmetic in float64 in
  another order moves rows far less than that; most rows must be as close.
- TAIL, the 99th percentile, and the NaN-pattern mismatch: what a 1-sample (62.5 us) delay of the input moves the
  reference by (its worst p99 over the signals, rounded up; NaN patterns 2.2 % at worst). A decision that flips
  (a voicing threshold, the argmax of a closure) may move a few rows that far; no use of the features can tell a
  62.5 us shift apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from extractors import acoustic, glottal, harmonics, hmpd, mcep, srh
from extractors.acoustic import FS_HZ, HOP, Covarep, CovarepConfig
from extractors.base import Audio
from pipeline.config import RunConfig
from pipeline.runner import actor_plan
from testing.synth_voice import synth_vowel
from tests.conftest import cuda_or_skip

torch = pytest.importorskip("torch")

# column: (BULK: median |d|, TAIL: p99 |d|); F0 in cents on rows both call voiced
TOLERANCE = {
    "f0": (1e-3, 25.0), "naq": (1e-5, 0.05), "qoq": (1e-6, 0.3), "h1h2": (1e-4, 0.15), "hrf": (1e-4, 0.25),
    "psp": (1e-4, 0.45), "mdq": (1e-6, 0.05), "rd": (1e-4, 0.6), "peak_slope": (1e-5, 0.015),
    **{f"mfcc_{i}": (1e-3, 2.5 if i == 0 else 1.25) for i in range(13)},
}
NAN_MISMATCH = 0.025  # fraction of rows whose NaN-ness differs (vuv: rows whose voicing differs)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(autouse=True)
def one_thread(torch_one_thread: None) -> None:
    """Every test here runs torch on one thread, as the pipeline's CPU actors do."""


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return cuda_or_skip() if request.param == "cuda" else "cpu"


def features(x: np.ndarray, backend: str, device: str = "cpu") -> np.ndarray:
    x = np.asarray(x, np.float32)
    cfg = CovarepConfig(layout="mfcc23", backend=backend, device=device)
    return Covarep(cfg, device=device).extract(Audio(x, FS_HZ, x.size / FS_HZ)).features.astype(float)


def differences(ref: np.ndarray, got: np.ndarray) -> dict[str, tuple[float, float, float]]:
    """Per column: (NaN-pattern mismatch fraction, median |d|, p99 |d|) over rows finite in both."""
    out = {}
    for i, name in enumerate(Covarep.columns(CovarepConfig(layout="mfcc23"))):
        a, b = ref[:, i], got[:, i]
        both = np.isfinite(a) & np.isfinite(b)
        d = 1200 * np.abs(np.log2(a[both] / b[both])) if name == "f0" else np.abs(a[both] - b[both])
        mismatch = np.mean(a != b) if name == "vuv" else np.mean(np.isfinite(a) != np.isfinite(b))
        out[name] = (float(mismatch), *(np.percentile(d, [50, 99]) if d.size else (0.0, 0.0)))
    return out


def assert_equivalent(ref: np.ndarray, got: np.ndarray) -> None:
    assert ref.shape == got.shape
    diff = differences(ref, got)
    bad = {name: d for name, d in diff.items() if d[0] > NAN_MISMATCH}
    bad |= {name: d for name, d in diff.items() if name in TOLERANCE and (d[1] > TOLERANCE[name][0] or
                                                                         d[2] > TOLERANCE[name][1])}  # fmt: skip
    assert not bad, bad


@pytest.fixture(scope="module")
def lf_vowels() -> np.ndarray:
    """Two vowels (F0 110 -> 190 Hz, Rd 0.6 -> 2.6) with a pause and a noise floor: every column is exercised."""
    return synth_vowel(2.0, lambda t: 110 + 40 * t, lambda t: 0.6 + t, [(0.1, 0.9), (1.1, 1.9)], noise_rms=1e-3).speech


def test_lf_vowels_equal_the_reference(lf_vowels: np.ndarray, device: str) -> None:
    x = lf_vowels
    ref = features(x, "numpy")
    assert np.isfinite(ref[:, 2:10]).any(axis=0).all()  # every glottal column has values to compare
    assert_equivalent(ref, features(x, "torch", device))


@pytest.mark.parametrize("name", ["arctic_a0007", "covarep_DB-cresc-a-D4-m1", "covarep_glottalized-m1"])
def test_real_speech_equals_the_reference(realdata, device: str, name: str) -> None:
    from testing.speech import speech_16k

    x = speech_16k(realdata, name)
    assert_equivalent(features(x, "numpy"), features(x, "torch", device))


def test_the_tolerances_catch_a_wrong_kernel(lf_vowels: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bars are tight enough to fail: a Hamming in place of the Hann window of the MFCC frames (a slip an
    equivalence test exists for) moves the MFCC beyond them, and a spectrum kernel tilting its magnitudes by 10 %
    across the band moves the glottal columns (PSP, HRF). (Up to version 7 the slip was IAIF's integrator leaking
    0.98 for 0.99; version 8's cycle measures read a pitch-synchronous flow the torch backend does not compute.)"""
    from extractors import acoustic_torch

    x = lf_vowels
    ref = features(x, "numpy")
    real_basis = acoustic_torch.TorchKernels._mfcc_basis.__wrapped__

    def hamming(self, sr, n_fft, win_length, n_mels, fmin, n_mfcc):  # noqa: ANN001, ANN202
        window, mel, dct = real_basis(self, sr, n_fft, win_length, n_mels, fmin, n_mfcc)
        ham = torch.nn.functional.pad(torch.hamming_window(win_length, dtype=torch.float64), ((n_fft - win_length) // 2,) * 2)
        return ham, mel, dct

    monkeypatch.setattr(acoustic_torch.TorchKernels, "_mfcc_basis", hamming)
    with pytest.raises(AssertionError, match="mfcc"):
        assert_equivalent(ref, features(x, "torch"))
    monkeypatch.undo()
    real_mag = acoustic_torch.TorchKernels.rfft_mag

    def tilted(self, rows, nfft, n_bins):  # noqa: ANN001, ANN202
        return real_mag(self, rows, nfft, n_bins) * (1 + 0.1 * np.arange(n_bins) / n_bins)

    monkeypatch.setattr(acoustic_torch.TorchKernels, "rfft_mag", tilted)
    with pytest.raises(AssertionError, match="naq|qoq|h1h2|hrf|psp|mdq|rd"):
        assert_equivalent(ref, features(x, "torch"))


@pytest.fixture(scope="module")
def block(lf_vowels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x_hp, voiced row centres, f0) of an LF vowel block, for the kernel-level comparisons."""
    x = lf_vowels.astype(np.float64)
    n = x.size // HOP
    x_hp = glottal.highpass(x[: n * HOP], FS_HZ)
    f0 = np.full(n, 140.0)
    return x_hp, np.arange(10, n - 10, 3) * HOP + HOP // 2, f0


def test_each_kernel_equals_its_numpy_twin(block: tuple, device: str) -> None:
    """Kernel by kernel, on the same arrays: equal to float64 rounding (these are the same sums in another order),
    including windows that cross the block's ends and rows without signal (identity filters)."""
    from extractors.acoustic_torch import TorchKernels

    x_hp, centres, _ = block
    k = TorchKernels(torch.device(device), HOP, FS_HZ)
    edge = np.concatenate([[0, 40, x_hp.size - 30], centres])  # windows reaching past both ends
    for name in ("iaif_filters", "gfm_filters"):
        np.testing.assert_allclose(getattr(k, name)(x_hp, edge, FS_HZ, 0.99),
                                   getattr(glottal, name)(x_hp, edge, FS_HZ, 0.99), rtol=1e-6, atol=1e-8)
    frames = glottal.windows(x_hp, edge - 200, 400)
    frames[0] = 0.0  # a row without signal: the identity filter
    np.testing.assert_allclose(k.lpc_rows(frames, 18), glottal.lpc_rows(frames, 18), rtol=1e-6, atol=1e-8)
    n_rows = x_hp.size // HOP
    a = glottal.lpc_rows(glottal.windows(x_hp, np.arange(n_rows) * HOP + HOP // 2 - 200, 400), 18)
    np.testing.assert_allclose(k.inverse_filter(x_hp, a, HOP), glottal.inverse_filter(x_hp, a, HOP), atol=1e-12)
    np.testing.assert_allclose(k.peak_slope(x_hp, n_rows, HOP), glottal.peak_slope(x_hp, n_rows, HOP), atol=1e-9)
    gcis = np.arange(200, x_hp.size - 200, 114)
    search = np.full(gcis.size, 23)
    np.testing.assert_array_equal(k.mdq_dispersion(x_hp, gcis, search), glottal._mdq_dispersion(x_hp, gcis, search))
    np.testing.assert_allclose(k.rfft_mag(frames, 2048, 300), glottal._rfft_mag(frames, 2048, 300), rtol=1e-9,
                               atol=1e-12)
    rows = np.arange(0, n_rows, 7)
    lag = np.full(rows.size, 114)
    length = np.maximum(2 * lag, HOP)
    np.testing.assert_allclose(k.nccf(x_hp, rows, lag, length, tuple(range(-7, 8))),
                               acoustic.nccf(x_hp, rows, lag, length, tuple(range(-7, 8))), atol=1e-12)
    np.testing.assert_allclose(k.mfcc(x_hp, FS_HZ, HOP, 40, 20.0, 13),
                               acoustic.librosa_mfcc(x_hp, FS_HZ, HOP, 40, 20.0, 13), atol=1e-9)


def assert_74_kernels_equal(k, x: np.ndarray) -> None:  # noqa: ANN001 (acoustic_torch.TorchKernels)
    """The 74-column layout's kernels of the block x (its own F0 track, as analyse_block gives them) against their
    numpy twins, with these tolerances (measured on the five recordings of ../shared/realdata/speech, all rows):
    - SRH F0 (srh_f0; an integer argmax over a float32 fs-point DFT in both): equal on at least 99 % of frames,
      since another FFT library's float32 rounding may flip a near tie (measured: equal on all 1547 frames).
    - harmonics (pick; float64): the same counts and NaN pattern, frequencies within 1e-9 relative, amplitudes 1e-12
      relative, phases 1e-12 rad: the peak positions are parabola vertices 0.5 b / a, so the last-digit differences
      of torch's and numpy's log and abs are divided by the curvature a (measured 3e-14, 4e-15, 8e-14).
    - HMPD's 4096-point spectra (frame_spectra, float64) within 1e-12, their harmonics as above.
    - phase distortion phasors (pd_phasors; float64 phasors, as the reference since version 12): the same bins
      without a phase; |dz| within 1e-5 (measured 6e-14 on arctic_a0007). Through the time smoothing, HMPD's 38
      columns within `_check_hmpd`'s bars (test_covarep74.py: PDM float32, PDD float64 on both sides).
    - Rd (rd_covarep; float64, the same Brent steps): every row within Brent's own tolerance TolX = 0.01 and 99 %
      of rows within 1e-9: a comparison of two MSP errors equal to rounding can send one search another way, which
      then stops elsewhere within its tolerance (measured: 4 of 1030 voiced rows differ, by up to 3.3e-4, all in
      DB-cresc; the rest within 5e-13).
    """
    from tests.extractors.test_covarep74 import _check_hmpd

    n = x.size // HOP
    x = np.asarray(x[: n * HOP], np.float64)
    x_hp = glottal.highpass(x, FS_HZ)
    f0, voiced = acoustic.track(x, x_hp, n, CovarepConfig())
    assert voiced.sum() >= 20, "too few voiced rows to compare"
    centres = np.arange(n) * HOP + HOP // 2
    median = float(np.median(f0[voiced]))
    some = centres[::3]  # SRH's fs-point DFTs are the costliest part here
    ref_srh, got_srh = srh.srh_f0(x, some, FS_HZ, median), k.srh_f0(x, some, FS_HZ, median)
    assert np.mean(ref_srh != got_srh) <= 0.01, np.mean(ref_srh != got_srh)
    # SRH's two passes at its instants (HMPD's F0): the same first-pass median, the same F0 on 99 % of frames
    instants = acoustic.srh_instants(x.size)[::3] * HOP
    (ref_srh, ref_med), (got_srh, got_med) = srh.srh_track(x, instants, FS_HZ), k.srh_track(x, instants, FS_HZ)
    assert ref_med == got_med and np.mean(ref_srh != got_srh) <= 0.01, (ref_med, got_med, np.mean(ref_srh != got_srh))
    f0w = acoustic.window_f0(x, f0, voiced, centres, np.arange(n), srh_median=median)
    spec = mcep.frame_spectra(x, centres, f0w, FS_HZ)
    ref, got = harmonics.pick(spec, f0w, FS_HZ), k.pick(spec, f0w, FS_HZ)
    np.testing.assert_array_equal(got.count, ref.count)
    np.testing.assert_allclose(got.freq, ref.freq, rtol=1e-9, atol=0)
    np.testing.assert_allclose(got.amp, ref.amp, rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.nan_to_num(harmonics.wrap(got.phase - ref.phase)), 0.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.isnan(got.phase), np.isnan(ref.phase))
    # HMPD's own frames (version 10, acoustic.hmpd_columns): on the row boundaries, 4096-point spectra
    spec = mcep.frame_spectra(x, centres - HOP // 2, f0w, FS_HZ, dftlen=hmpd.SIN_DFTLEN)
    got_spec = k.frame_spectra(x, centres - HOP // 2, f0w, FS_HZ, dftlen=hmpd.SIN_DFTLEN)
    np.testing.assert_allclose(got_spec, spec, rtol=0, atol=1e-12)
    ref, got = harmonics.pick(spec, f0w, FS_HZ), k.pick(spec, f0w, FS_HZ)
    np.testing.assert_array_equal(got.count, ref.count)
    np.testing.assert_allclose(got.freq, ref.freq, rtol=1e-9, atol=0)
    np.testing.assert_allclose(np.nan_to_num(harmonics.wrap(got.phase - ref.phase)), 0.0, rtol=0, atol=1e-12)
    z_ref, z_got = hmpd.pd_phasors(ref, f0w, FS_HZ), k.pd_phasors(ref, f0w, FS_HZ)
    np.testing.assert_array_equal(z_got == 0, z_ref == 0)
    assert np.abs(z_got - z_ref).max() <= 1e-5, np.abs(z_got - z_ref).max()
    _check_hmpd(hmpd.hmpd_rows(ref, f0w, FS_HZ, phasors=k.pd_phasors), hmpd.hmpd_rows(ref, f0w, FS_HZ))
    skew = 1.0 if glottal.skewness(glottal.lp_residual(x_hp, FS_HZ)) >= 0 else -1.0
    rd_ref, rd_got = glottal.rd_covarep(skew * x_hp, f0, voiced, FS_HZ, HOP)[0], k.rd_covarep(skew * x_hp, f0, voiced,
                                                                                                FS_HZ, HOP)[0]  # fmt: skip
    np.testing.assert_array_equal(np.isnan(rd_got), np.isnan(rd_ref))
    d = np.abs(rd_got - rd_ref)[voiced]
    assert d.max() <= glottal.BRENT_TOL and np.mean(d > 1e-9) <= 0.01, (d.max(), np.mean(d > 1e-9))


@pytest.mark.parametrize("source", ["lf_vowels", "arctic_a0007"])
def test_74_column_kernels_equal_their_numpy_twins(source: str, device: str, request: pytest.FixtureRequest) -> None:
    """SRH, harmonic picking, HMPD's phase distortion and COVAREP's Rd (assert_74_kernels_equal's tolerances) on
    the first LF vowel and 2 s of a real recording (skipped without ../shared/realdata)."""
    from extractors.acoustic_torch import TorchKernels
    from testing.speech import speech_16k

    if source == "lf_vowels":
        x = request.getfixturevalue(source)[: FS_HZ]
    else:
        x = speech_16k(request.getfixturevalue("realdata"), source)[FS_HZ // 2 : FS_HZ // 2 + 2 * FS_HZ]
    assert_74_kernels_equal(TorchKernels(torch.device(device), HOP, FS_HZ), np.asarray(x, np.float64))


def test_backend_is_config_and_not_fingerprint() -> None:
    """backend and device say where the sums run, not what is stored: a store written by either resumes with the
    other (as a model's on CPU and on GPU)."""
    assert CovarepConfig(layout="mfcc23", backend="torch", device="cuda").canonical() == CovarepConfig(layout="mfcc23").canonical()
    assert not Covarep.wants_gpu(CovarepConfig(layout="mfcc23")) and not Covarep.wants_gpu(CovarepConfig(layout="mfcc23", backend="torch", device="cpu"))
    assert Covarep.wants_gpu(CovarepConfig(layout="mfcc23", backend="torch")) and Covarep.wants_gpu(CovarepConfig(layout="mfcc23", backend="torch",
                                                                                                 device="cuda"))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="device = 'cuda' but torch sees no CUDA"):
            Covarep(CovarepConfig(layout="mfcc23", backend="torch", device="cuda"))
        assert Covarep(CovarepConfig(layout="mfcc23", backend="torch"), device="cuda").kernels.nccf.__self__.device.type == "cpu"


def test_torch_acoustic_is_a_gpu_actor_where_there_are_gpus() -> None:
    features_cfg = {"frames": {"extractor": "densenet161", "weights": "random"},
                    "acoustic": {"extractor": "covarep", "backend": "torch"}}
    config = RunConfig.model_validate({"features": features_cfg, "actors_per_gpu": {"acoustic": 4}})
    specs = {s.name: s for s in config.specs()}
    gpu = actor_plan(specs, set(specs), config, cpus=16, gpus=2)
    assert (gpu["acoustic"].actors, gpu["acoustic"].device) == (8, "cuda")  # 4 per GPU: the glue is theirs
    assert gpu["acoustic"].options["num_gpus"] == gpu["frames"].options["num_gpus"] == 1 / 5
    cpu = actor_plan(specs, set(specs), config, cpus=16, gpus=0)  # no GPU: the CPU feature it then is
    assert (cpu["acoustic"].actors, cpu["acoustic"].device, cpu["acoustic"].threads) == (16, "cpu", 1)
    assert cpu["frames"].threads == 16  # the cores are not split with acoustic as with a model
    numpy_cfg = RunConfig.model_validate({"features": {**features_cfg, "acoustic": {"extractor": "covarep"}}})
    specs = {s.name: s for s in numpy_cfg.specs()}
    assert actor_plan(specs, set(specs), numpy_cfg, cpus=16, gpus=2)["acoustic"].device == "cpu"


# -- WORLD's F0 in torch (extractors/world_f0.py) against pyworld, on the tracker's own output ----------------------
# Tolerances (docs/acoustic.md, "F0 in torch"): pyworld's own noise on the real recordings, two synthetic vowels of
# known pitch and 20 s of espeak-ng speech (frames voiced in both; relative F0 difference):
F0_BULK = 1e-8  # median: a float32-ULP nudge of every input sample moves pyworld by <= 5.9e-9 (worst p99)
F0_TAIL = 6e-3  # p99: a 1-sample delay of the input moves pyworld by <= 5.85e-3 (worst p99)
F0_VUV = 2e-3  # frames voiced in one and not the other: a 1-sample delay flips <= 0.16 % (worst)


def world_f0s(x: np.ndarray, device: str, speed: int = 2, **kw: float) -> tuple[np.ndarray, np.ndarray]:
    """(pyworld's DIO + StoneMask F0, world_f0's) on x from half a hop on, as acoustic.f0_rows calls them."""
    from extractors import world_f0

    y = np.ascontiguousarray(np.asarray(x, np.float32)[HOP // 2 :], dtype=np.float64)
    args = {"f0_floor": 60.0, "f0_ceil": 500.0, "frame_period": 10.0} | kw
    import pyworld as pw

    f0, t = pw.dio(y, FS_HZ, speed=speed, **args)
    ref = pw.stonemask(y, f0, t, FS_HZ)
    got = world_f0.dio_stonemask(torch.as_tensor(y, device=device), FS_HZ, speed=speed, **args)
    return ref, got.cpu().numpy()


def assert_same_f0(ref: np.ndarray, got: np.ndarray) -> None:
    assert ref.shape == got.shape
    both = (ref > 0) & (got > 0)
    assert both.sum() > 0.2 * ref.size  # a signal with voice to compare
    rel = np.abs(got[both] / ref[both] - 1)
    vuv = float(np.mean((ref > 0) != (got > 0)))
    med, p99 = np.percentile(rel, [50, 99])
    assert med <= F0_BULK and p99 <= F0_TAIL and vuv <= F0_VUV, (med, p99, vuv)


def test_world_f0_equals_pyworld_on_synthetic_vowels(lf_vowels: np.ndarray, device: str) -> None:
    """The LF vowel pair: known pitch (110 -> 190 Hz), pauses with a noise floor between."""
    assert_same_f0(*world_f0s(lf_vowels, device))


@pytest.mark.parametrize("name", ["arctic_a0007", "covarep_0011.arctic_bdl1", "covarep_DB-cresc-a-D4-m1",
                                  "covarep_glottalized-m1"])  # fmt: skip
def test_world_f0_equals_pyworld_on_real_speech(realdata, device: str, name: str) -> None:
    from testing.speech import speech_16k

    assert_same_f0(*world_f0s(speech_16k(realdata, name), device))


def test_world_f0_equals_pyworld_on_espeak_speech(tmp_path, device: str) -> None:
    import shutil
    import subprocess

    import librosa

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed")
    wav = tmp_path / "s.wav"
    text = "The quick brown fox jumps over the lazy dog, and then it runs away into the forest."
    subprocess.run(["espeak-ng", "-w", str(wav), text], check=True, capture_output=True)
    x, rate = librosa.load(wav, sr=None)
    assert_same_f0(*world_f0s(librosa.resample(x, orig_sr=rate, target_sr=FS_HZ, res_type="soxr_hq"), device))


@pytest.mark.parametrize("kw", [{"speed": 1}, {"speed": 4}, {"speed": 11, "f0_floor": 71.0, "f0_ceil": 800.0},
                                {"channels_in_octave": 3.0, "allowed_range": 0.2, "frame_period": 5.0}],
                         ids=["speed1", "speed4", "speed11-71-800", "channels3-range0.2-5ms"])  # fmt: skip
def test_world_f0_honours_pyworld_parameters(lf_vowels: np.ndarray, device: str, kw: dict) -> None:
    assert_same_f0(*world_f0s(lf_vowels, device, **kw))


def test_the_f0_tolerances_catch_a_wrong_port(realdata, lf_vowels: np.ndarray,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The bars fail a port whose DIO bands are spaced 3 to the octave where WORLD spaces them channels_in_octave
    (2) to it (on arctic_a0007: p99 8.9e-2, 0.5 % of frames voiced differently; a male voice, so not on the LF
    vowels, whose F0 StoneMask brings back from any band), and one whose StoneMask rounds every index a sample
    late (LF vowels: median 4.1e-4)."""
    from extractors import world_f0
    from testing.speech import speech_16k

    x = speech_16k(realdata, "arctic_a0007")
    ref, got = world_f0s(x, "cpu")
    assert_same_f0(ref, got)
    spaced = [60.0 * 2.0 ** ((i + 1) / 3.0) for i in range(len(world_f0.band_boundaries(60.0, 500.0, 2.0)))]
    monkeypatch.setattr(world_f0, "band_boundaries", lambda lo, hi, ch: spaced)
    with pytest.raises(AssertionError):
        assert_same_f0(ref, world_f0s(x, "cpu")[1])
    monkeypatch.undo()
    ref = world_f0s(lf_vowels, "cpu")[0]
    real_round = world_f0.matlab_round
    monkeypatch.setattr(world_f0, "matlab_round", lambda v: real_round(v) + 1.0)
    with pytest.raises(AssertionError):
        assert_same_f0(ref, world_f0s(lf_vowels, "cpu")[1])


def sequential_walks(f0: np.ndarray, cand: np.ndarray, starts: np.ndarray, limits: np.ndarray, allowed: float,
                     chained: bool = True) -> np.ndarray:  # fmt: skip
    """DIO's FixStep3 as WORLD runs it, one walk after the other (chained=False: every walk starts from the contour
    as it was before any walk, which a parallel version without re-runs would give)."""
    f, before = f0.copy(), f0.copy()
    for s, lim in zip(starts, limits, strict=True):
        cur, past = (f[s], f[s - 1]) if chained else (before[s], before[s - 1])
        for j in range(s, lim):
            ref = (cur * 3.0 - past) / 2.0
            best = cand[np.argmin(np.abs(ref - cand[:, j + 1])), j + 1]
            f[j + 1] = 0.0 if abs(1.0 - best / ref) > allowed else best
            past, cur = cur, f[j + 1]
            if f[j + 1] == 0:
                break
    return f


def test_parallel_walks_equal_the_sequential_ones(device: str) -> None:
    """Voiced sections 1-3 frames apart, one band following a smooth contour through the gaps: each walk crosses
    the gap and rewrites the next section up to the next walk's start, so every walk's start depends on the walk
    before. Each section ends on a 30 % step, which stops a walk from the contour as it was at once; from the
    rewritten one it goes on (the unchained result differs). world_f0._walks must give WORLD's sequential result."""
    from extractors import world_f0

    rng = np.random.default_rng(1)
    n = 400
    smooth = 120.0 * (1 + 0.2 * np.sin(np.arange(n) / 40))
    cand = np.vstack([smooth, rng.uniform(60, 500, (5, n)), np.zeros((1, n))])
    f0 = smooth * (1 + rng.uniform(-0.02, 0.02, n))
    gaps = np.cumsum(rng.integers(8, 30, 30))
    for g in gaps[gaps < n - 10]:
        f0[g : g + rng.integers(1, 4)] = 0.0
    f0[:5] = f0[-5:] = 0.0
    voiced = f0 != 0
    starts = np.flatnonzero(~voiced[1:] & voiced[:-1])
    limits = np.append(starts[1:], n - 1)
    f0[starts - 1] *= 0.7
    want = sequential_walks(f0, cand, starts, limits, 0.1)
    assert not np.array_equal(want, sequential_walks(f0, cand, starts, limits, 0.1, chained=False))
    t = {k: torch.as_tensor(v, device=device) for k, v in {"f0": f0, "cand": cand, "s": starts, "l": limits}.items()}
    np.testing.assert_array_equal(world_f0._walks(t["f0"], t["cand"], t["s"], t["l"], 0.1).cpu().numpy(), want)
