"""The embedded sample dataset: a few seconds to generate, laid out as Social-IQ 2.0.

Five clips of 20–36 s at 30, 29.97 and 25 fps and four frame sizes. Every frame carries its own
index as a 12-bit barcode in a 16-px strip at the top (white block = bit set, least significant bit
left), so tests can check which frame stands for each second. A real face photo (scikit-image's
astronaut) is shown during known seconds only; espeak-ng speaks known sentences at known times, and
the WebVTT cues span exactly the speech (silence trimmed). `sample_truth.json` records all of it.

Each video is the output of (frames piped as raw RGB):
    ffmpeg -f rawvideo -pix_fmt rgb24 -s WxH -framerate FPS -i - -i speech.wav \
           -c:v libx264 -preset ultrafast -crf 18 -pix_fmt yuv420p -c:a aac -b:a 96k out.mp4
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import wave
import zlib
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from manifests.layouts import Sample, register_sample

BARCODE_BITS = 12
BARCODE_H = 16
SPEECH_RATE_HZ = 22050  # espeak-ng's native rate


@dataclass(frozen=True)
class ClipSpec:
    vid: str
    fps: str  # exact, as ffmpeg takes it ("30000/1001")
    width: int
    height: int
    duration_s: int
    face_seconds: tuple[int, ...]
    sentences: tuple[tuple[float, str], ...]  # (start second, text)
    split: str


CLIPS = (
    ClipSpec("sample-a", "30", 640, 360, 24, tuple(range(24)),
             ((1.0, "Hello there, how are you doing today?"), (9.0, "I don't think that's a good idea."),
              (16.5, "Let's meet again at three thirty.")), "train"),
    ClipSpec("sample-b", "30000/1001", 480, 270, 30, tuple(range(27)),
             ((2.0, "She laughed and said it was fine."), (12.0, "Really? I thought you were angry with me."),
              (22.0, "No, not at all.")), "train"),
    ClipSpec("sample-c", "25", 320, 240, 20, tuple(range(5, 15)),
             ((0.5, "Can you pass me the salt, please?"), (8.0, "Thank you so much, that's very kind.")), "train"),
    ClipSpec("sample-d", "30", 426, 240, 36, (),
             ((3.0, "The weather is lovely this afternoon."), (15.0, "We should go for a walk by the river."),
              (27.0, "Maybe tomorrow, I'm rather tired.")), "val"),
    ClipSpec("sample-e", "25", 640, 360, 22, tuple(range(0, 22, 2)),
             ((1.5, "Why did he leave so early?"), (11.0, "He was upset about the meeting.")), "val"),
)

QUESTIONS = (
    ("How does the first speaker seem to feel?", ("Calm and friendly.", "Furious.", "Terrified.", "Bored to tears."), 0),
    ("Is the conversation tense?", ("Yes, very tense.", "No, it stays relaxed.", "They are fighting.", "Nobody speaks."), 1),
)


def index_barcode(index: int, width: int) -> np.ndarray:
    """(BARCODE_H, width, 3) uint8 strip encoding `index`."""
    strip = np.zeros((BARCODE_H, width, 3), np.uint8)
    block = width // BARCODE_BITS
    for bit in range(BARCODE_BITS):
        if index >> bit & 1:
            strip[:, bit * block:(bit + 1) * block] = 255
    return strip


def read_barcode(frame: np.ndarray) -> int:
    """Inverse of `index_barcode` on a decoded (lossy) frame: block means thresholded at mid-grey. The package never
    calls it: it is the sample's own promise (every frame says which it is) made readable, kept beside the encoder
    so that the two change together; the decode, cut and inspect tests read with it which frame stands for a row."""
    block = frame.shape[1] // BARCODE_BITS
    strip = frame[2:BARCODE_H - 2].astype(np.float32).mean(axis=(0, 2))
    bits = [strip[b * block + 2:(b + 1) * block - 2].mean() > 128 for b in range(BARCODE_BITS)]
    return int(sum(1 << b for b, on in enumerate(bits) if on))


def face_patch(height: int) -> np.ndarray:
    from PIL import Image
    from skimage import data

    img = Image.fromarray(data.astronaut()).resize((int(height * 0.7),) * 2, Image.BILINEAR)
    return np.asarray(img)


def _background(spec: ClipSpec, second: int) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(f"{spec.vid}:{second}".encode()))
    y, x = np.mgrid[0:spec.height, 0:spec.width].astype(np.float32)
    c0, c1 = rng.uniform(30, 220, 3), rng.uniform(30, 220, 3)
    t = (x / spec.width)[..., None]
    img = c0 * (1 - t) + c1 * t + 20 * np.sin(y / rng.uniform(5, 40))[..., None]
    return np.clip(img, 0, 255).astype(np.uint8)


def _frames(spec: ClipSpec):
    fps = Fraction(spec.fps)
    n = int(spec.duration_s * fps)
    face = face_patch(spec.height)
    backgrounds: dict[int, np.ndarray] = {}
    for i in range(n):
        second = int(i / fps)
        if second not in backgrounds:
            backgrounds = {second: _background(spec, second)}
        frame = backgrounds[second].copy()
        if second in spec.face_seconds:
            top, left = spec.height - face.shape[0] - 4, (spec.width - face.shape[1]) // 2 + (second % 3 - 1) * 8
            frame[top:top + face.shape[0], left:left + face.shape[1]] = face
        frame[:BARCODE_H] = index_barcode(i, spec.width)
        yield frame


def speak(text: str, tmp: Path) -> np.ndarray:
    out = tmp / "s.wav"
    subprocess.run(["espeak-ng", "-s", "150", "-w", str(out), text], check=True, capture_output=True)
    with wave.open(str(out)) as w:
        if w.getframerate() != SPEECH_RATE_HZ:
            raise RuntimeError(f"espeak-ng wrote {w.getframerate()} Hz, expected {SPEECH_RATE_HZ}")
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
    loud = np.flatnonzero(np.abs(pcm) > 0.02)
    return pcm[loud[0]:loud[-1] + 1]  # the cue then spans exactly the speech


def vtt_time(t: float) -> str:
    ms = round(t * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def speech_track(sentences, duration_s: int, tmp: Path) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """A float32 track at SPEECH_RATE_HZ with each (start second, text) spoken there, and its cues
    (start, end, text) spanning exactly the speech."""
    track = np.zeros(duration_s * SPEECH_RATE_HZ, np.float32)
    cues = []
    for start_s, text in sentences:
        speech = speak(text, tmp)
        i0 = round(start_s * SPEECH_RATE_HZ)
        track[i0:i0 + len(speech)] = speech[:len(track) - i0]
        cues.append((start_s, start_s + len(speech) / SPEECH_RATE_HZ, text))
    return track, cues


def write_wav(path: Path, track: np.ndarray, rate_hz: int = SPEECH_RATE_HZ) -> None:
    """16-bit mono WAV of a float track in [-1, 1]."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate_hz)
        w.writeframes((np.clip(track, -1, 1) * 32767).astype(np.int16).tobytes())


def encode_mp4(frames, width: int, height: int, fps: str, wav_path: Path, out: Path,
               preset: str = "ultrafast", threads: int = 1) -> None:
    """H.264 + AAC mp4 from RGB frames (an iterable of (height, width, 3) uint8) and a WAV: the command in
    the module doc."""
    cmd = ["ffmpeg", "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
           "-s", f"{width}x{height}", "-framerate", fps, "-i", "-", "-i", str(wav_path),
           "-c:v", "libx264", "-preset", preset, "-crf", "18", "-pix_fmt", "yuv420p", "-threads", str(threads),
           "-c:a", "aac", "-b:a", "96k", str(out)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE)
    for frame in frames:
        proc.stdin.write(frame.tobytes())
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError(f"ffmpeg failed making {out}")


def _make_clip(spec: ClipSpec, root: Path, tmp: Path) -> dict:
    track, cues = speech_track(spec.sentences, spec.duration_s, tmp)
    wav_path = root / "audio" / "wav" / f"{spec.vid}.wav"
    write_wav(wav_path, track)
    vtt = ["WEBVTT", ""] + [f"{vtt_time(s)} --> {vtt_time(e)}\n{t}\n" for s, e, t in cues]
    (root / "transcript" / f"{spec.vid}.vtt").write_text("\n".join(vtt))
    encode_mp4(_frames(spec), spec.width, spec.height, spec.fps, wav_path, root / "video" / f"{spec.vid}.mp4")
    return {**asdict(spec), "cues": cues}


def _qa_lines(spec: ClipSpec) -> list[str]:
    lines = []
    for k, (q, answers, idx) in enumerate(QUESTIONS):
        row = {"qid": f"{spec.vid}-q{k}", "q": q, "vid_name": spec.vid, "ts": f"0.00-{spec.duration_s:.2f}",
               "answer_idx": idx, "idx_types": k, **{f"a{i}": a for i, a in enumerate(answers)}}
        lines.append(json.dumps(row))
    return lines


def make_sample(dest: Path, clips: tuple[ClipSpec, ...] = CLIPS) -> Path:
    """Write the sample dataset under `dest/siq2`; returns `dest`. Replaces what was there."""
    for tool in ("ffmpeg", "espeak-ng"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: run `make install` (it installs the Debian packages)")
    root = dest / "siq2"
    if root.exists():
        shutil.rmtree(root)
    for sub in ("video", "audio/wav", "transcript", "qa"):
        (root / sub).mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        truth = {spec.vid: _make_clip(spec, root, Path(tmp)) for spec in clips}
    for split in ("train", "val"):
        lines = [line for spec in clips if spec.split == split for line in _qa_lines(spec)]
        (root / "qa" / f"qa_{split}.json").write_text("\n".join(lines) + "\n")
    (root / "trims.json").write_text(json.dumps({spec.vid: 0.0 for spec in clips}))
    (root / "current_split.json").write_text(json.dumps({"subsets": {"youtubeclips": {  # the release's shape
        split: [s.vid for s in clips if s.split == split] for split in ("train", "val", "test")}}}))
    (root / "sample_truth.json").write_text(json.dumps(truth, indent=1))
    from manifests.socialiqa import write_sample_socialiqa

    write_sample_socialiqa(dest / "socialiqa")  # the text-only SocialIQA layout, for DATASET=sample-socialiqa
    return dest


register_sample(Sample("sample", "siq2", make_sample, marker="siq2"))  # written under --raw/siq2


if __name__ == "__main__":
    import sys

    print(make_sample(Path(sys.argv[1] if len(sys.argv) > 1 else "build/sample")))
