"""Real speech read the way the conformance tests and the acoustic benchmarks read it, and the measures they
compare tracks with: voicing F1, F0 error in cents, Praat's autocorrelation pitch at our row centres (the
reference of tests/extractors/test_acoustic_real.py; docs/acoustic.md, "Real speech")."""

from __future__ import annotations

from pathlib import Path

import librosa
import numpy as np
from scipy.io import wavfile

from extractors.acoustic import FS_HZ, HOP, Covarep, CovarepConfig
from extractors.base import Audio

GROSS_CENTS = 1200 * np.log2(1.2)  # a gross error is more than 20 % off


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    rate, pcm = wavfile.read(path)
    return pcm.astype(np.float64) / 32768.0, rate


def speech_16k(realdata: Path, name: str) -> np.ndarray:
    x, rate = read_wav(realdata / "speech" / f"{name}.wav")
    return x if rate == FS_HZ else librosa.resample(x, orig_sr=rate, target_sr=FS_HZ, res_type="soxr_hq")


def extract(x: np.ndarray, cfg: CovarepConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(f0 with NaN on unvoiced rows, voiced mask) of the default config."""
    rows = Covarep(cfg or CovarepConfig(layout="mfcc23")).extract(Audio(x.astype(np.float32), FS_HZ, x.size / FS_HZ))
    return rows.features[:, 0].astype(float), rows.features[:, 1] == 1


def row_centres_s(n: int) -> np.ndarray:
    return (np.arange(n) + 0.5) * HOP / FS_HZ


def praat_f0(x: np.ndarray, n: int) -> np.ndarray:
    import parselmouth  # a test dependency: ImportError where it is absent (the tests skip, the bench says so)
    pitch = parselmouth.Sound(x, FS_HZ).to_pitch_ac(time_step=0.01, pitch_floor=60, pitch_ceiling=500)
    return np.array([pitch.get_value_at_time(t) for t in row_centres_s(n)], dtype=float)


def f1(ours: np.ndarray, ref: np.ndarray) -> float:
    return 2 * float(np.sum(ours & ref)) / float(ours.sum() + ref.sum())


def cents(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return 1200 * np.abs(np.log2(a / b))
