"""A Social-IQ-shaped raw set for the scale benchmark, in the Social-IQ 2.0 layout that
`manifests/socialiq.py` reads (siq2/video, audio/wav, transcript, qa, trims.json, current_split.json).

Clip i is `seconds` long; sizes alternate with i (640×360, 1280×720, …) and frame rates with i // 2 (30, 29.97,
…), so every (size, rate) pair occurs. Content is real for the models: the astronaut's face
(skimage.data.astronaut, as in the sample) moves across a gradient background for the whole clip, and
espeak-ng speech fills the clip word by word, each word synthesised alone and placed at a known time, so the
WebVTT carries YouTube-style inline word times (`word<00:00:01.230><c> next</c>`) that are exact. Each clip
has six questions (qa_train/val/test.json as the release has them; test lines unlabelled), an integer trim
in trims.json (the release's trimmed files, so no caption correction applies) and a `youtubeclips` split
listing in current_split.json.

Clips are cached by their own parameters under `<cache>/clips/<key>/` and a set is a folder of hard links
to them (`<cache>/raw-<clips>x<seconds>s-<hash>/siq2`), so a 40-clip set reuses the 20-clip set's clips and
a re-run generates nothing. `truth.json` in the set records every clip's size, rate and words.

    python -m bench.scale_raw build/scale 20 --seconds 60     # prints the RAW folder (this module's main)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from manifests.sample import SPEECH_RATE_HZ, encode_mp4, face_patch, speak, vtt_time, write_wav

GENERATOR_VERSION = "1"  # bump when the same parameters would give different files
SIZES = ((640, 360), (1280, 720))
FPS = ("30", "30000/1001")
QUESTIONS_PER_CLIP = 6
WORD_GAP_S = 0.06
SENTENCE_GAP_S = 0.5
_WORDS = (
    "I you we they she he it that this what why how when where really think know feel want need like love "
    "tell said say go going come look see mean maybe sure right okay well just so but and or because if "
    "not never always again today tomorrow yesterday time people friend family work home party dinner "
    "movie music game story idea plan problem question answer good bad great fine happy sad angry tired "
    "funny strange nice wrong about with from into over after before never very much little more"
)
VOCABULARY = tuple(_WORDS.split())


@dataclass(frozen=True)
class ScaleClip:
    vid: str
    index: int
    width: int
    height: int
    fps: str
    seconds: int
    split: str
    trim_s: int

    @property
    def key(self) -> str:
        text = json.dumps([GENERATOR_VERSION, asdict(self)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def clip_specs(clips: int, seconds: int = 60, sizes=SIZES, fps=FPS) -> list[ScaleClip]:
    out = []
    for i in range(clips):
        w, h = sizes[i % len(sizes)]
        split = "val" if i % 10 == 8 else "test" if i % 10 == 9 else "train"
        out.append(ScaleClip(f"scale{i:04d}", i, w, h, fps[(i // len(sizes)) % len(fps)], seconds, split,
                             trim_s=7 + (i * 13) % 50))
    return out


def _sentences(clip: ScaleClip) -> list[list[str]]:
    """Enough sentences of 4–12 words to fill the clip (speech runs ~2.5 words/s)."""
    rng = np.random.default_rng(clip.index)
    need = int(clip.seconds * 3) + 4
    words = [VOCABULARY[k] for k in rng.integers(0, len(VOCABULARY), need)]
    out, at = [], 0
    while at < len(words):
        n = int(rng.integers(4, 13))
        out.append(words[at:at + n])
        at += n
    return out


def _speech(clip: ScaleClip, tmp: Path, cache: dict[str, np.ndarray]):
    """(track, cues): cues are [(start, end, [(word, start, end)])], the speech fills the clip."""
    track = np.zeros(clip.seconds * SPEECH_RATE_HZ, np.float32)
    cues, t = [], 0.3
    for sentence in _sentences(clip):
        words = []
        for word in sentence:
            if word not in cache:
                cache[word] = speak(word, tmp)
            pcm = cache[word]
            i0 = round(t * SPEECH_RATE_HZ)
            if i0 + len(pcm) > len(track):
                break
            track[i0:i0 + len(pcm)] = pcm
            words.append((word, i0 / SPEECH_RATE_HZ, (i0 + len(pcm)) / SPEECH_RATE_HZ))
            t = words[-1][2] + WORD_GAP_S
        if words:
            cues.append((words[0][1], words[-1][2], words))
        if len(words) < len(sentence):
            break
        t += SENTENCE_GAP_S
    return track, cues


def _vtt(cues) -> str:
    blocks = ["WEBVTT", ""]
    for start, end, words in cues:
        text = words[0][0] + "".join(f"<{vtt_time(s)}><c> {w}</c>" for w, s, _ in words[1:])
        blocks.append(f"{vtt_time(start)} --> {vtt_time(end)}\n{text}\n")
    return "\n".join(blocks)


def _frames(clip: ScaleClip):
    """The face (0.6 of the height) moves on a smooth path over a fixed gradient; one new frame each time."""
    fps = Fraction(clip.fps)
    h, w = clip.height, clip.width
    face = _face(h)
    fh, fw = face.shape[:2]
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    rng = np.random.default_rng(1000 + clip.index)
    c0, c1 = rng.uniform(30, 220, 3), rng.uniform(30, 220, 3)
    back = np.clip(c0 * (1 - x[..., None] / w) + c1 * (x[..., None] / w) + 15 * np.sin(y / 23)[..., None],
                   0, 255).astype(np.uint8)
    frame = np.empty_like(back)
    for i in range(int(clip.seconds * fps)):
        t = float(i / fps)
        left = int((w - fw) * (0.5 + 0.45 * np.sin(t * 0.7 + clip.index)))
        top = int((h - fh) * (0.5 + 0.4 * np.sin(t * 0.45)))
        np.copyto(frame, back)
        frame[top:top + fh, left:left + fw] = face
        yield frame


def _face(height: int) -> np.ndarray:
    from PIL import Image

    patch = face_patch(height)  # 0.7 of the height, square
    size = int(height * 0.6)
    return np.asarray(Image.fromarray(patch).resize((size, size), Image.BILINEAR))


def make_clip(clip: ScaleClip, cache_dir: Path, words: dict[str, np.ndarray] | None = None) -> Path:
    """The clip's folder under `cache_dir/clips/`, generated once (complete when `truth.json` is there)."""
    folder = cache_dir / "clips" / clip.key
    if (folder / "truth.json").exists():
        return folder
    part = folder.with_name(folder.name + f".{os.getpid()}.partial")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        track, cues = _speech(clip, Path(tmp), {} if words is None else words)
    write_wav(part / "audio.wav", track)
    (part / "transcript.vtt").write_text(_vtt(cues))
    encode_mp4(_frames(clip), clip.width, clip.height, clip.fps, part / "audio.wav", part / "video.mp4",
               preset="ultrafast", threads=0)
    truth = {**asdict(clip), "words": [[w, s, e] for _, _, ws in cues for w, s, e in ws]}
    (part / "truth.json").write_text(json.dumps(truth))
    shutil.rmtree(folder, ignore_errors=True)
    part.rename(folder)
    return folder


def _qa_lines(clip: ScaleClip) -> list[str]:
    rng = np.random.default_rng(2000 + clip.index)
    lines = []
    for k in range(QUESTIONS_PER_CLIP):
        answers = [" ".join(VOCABULARY[j] for j in rng.integers(0, len(VOCABULARY), 6)) + "." for _ in range(4)]
        row = {"qid": f"{clip.vid}-q{k}", "q": f"Why does the person say {VOCABULARY[(clip.index + k) % 40]}?",
               "vid_name": clip.vid, "ts": f"{k * clip.seconds / QUESTIONS_PER_CLIP:.2f}-{clip.seconds:.2f}",
               **{f"a{i}": a for i, a in enumerate(answers)}}
        if clip.split != "test":  # the release's test questions carry no label
            row["answer_idx"] = int(rng.integers(0, 4))
        lines.append(json.dumps(row))
    return lines


def make_raw(cache_dir: Path, clips: int, seconds: int = 60, sizes=SIZES, fps=FPS) -> Path:
    """The raw set (pass it as RAW; it holds `siq2/`), generated or reused from `cache_dir`."""
    cache_dir = Path(cache_dir).absolute()
    specs = clip_specs(clips, seconds, tuple(map(tuple, sizes)), tuple(fps))
    tag = hashlib.sha256(json.dumps([c.key for c in specs]).encode()).hexdigest()[:10]
    raw = cache_dir / f"raw-{clips}x{seconds}s-{tag}"
    if (raw / "truth.json").exists():
        return raw
    for tool in ("ffmpeg", "espeak-ng"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: run `make install` (it installs the Debian packages)")
    words: dict[str, np.ndarray] = {}
    folders = [make_clip(c, cache_dir, words) for c in specs]
    shutil.rmtree(raw, ignore_errors=True)
    root = raw / "siq2"
    for sub in ("video", "audio/wav", "transcript", "qa"):
        (root / sub).mkdir(parents=True)
    for c, folder in zip(specs, folders, strict=True):
        for name, dest in (("video.mp4", f"video/{c.vid}.mp4"), ("audio.wav", f"audio/wav/{c.vid}.wav"),
                           ("transcript.vtt", f"transcript/{c.vid}.vtt")):
            os.link(folder / name, root / dest)
    for split in ("train", "val", "test"):
        lines = [line for c in specs if c.split == split for line in _qa_lines(c)]
        if lines:  # no file for a split without questions: an empty QA file is a manifest note (issue 35)
            (root / "qa" / f"qa_{split}.json").write_text("".join(line + "\n" for line in lines))
    (root / "trims.json").write_text(json.dumps({c.vid: c.trim_s for c in specs}))
    (root / "current_split.json").write_text(json.dumps({"subsets": {"youtubeclips": {
        split: [c.vid for c in specs if c.split == split] for split in ("train", "val", "test")}}}))
    truth = {c.vid: json.loads((f / "truth.json").read_text()) for c, f in zip(specs, folders, strict=True)}
    (raw / "truth.json").write_text(json.dumps(truth))  # written last: the set is complete
    return raw


def expand_set(src: Path, dst: Path, n: int) -> list[str]:
    """A Social-IQ 2.0 set of `n` clips in `dst`, clip i a hard link to the i-th (mod their number) clip of
    `src` (a bench.scale_raw set) with its captions, audio, trim and questions under a name of its own (a copy
    where `dst` is on another file system). tests/pipeline/test_gpu_e2e.py and bench/node_check.py run such sets."""
    root, out = src / "siq2", dst / "siq2"
    base = sorted(p.stem for p in (root / "video").glob("*.mp4"))
    trims = json.loads((root / "trims.json").read_text())
    qa = {split: [json.loads(line) for line in path.read_text().splitlines() if line]
          for split in ("train", "val", "test") if (path := root / "qa" / f"qa_{split}.json").is_file()}
    split_of = {q["vid_name"]: s for s, lines in qa.items() for q in lines}
    for sub in ("video", "audio/wav", "transcript", "qa"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    vids, lines, new_trims = [], {s: [] for s in qa}, {}
    for i in range(n):
        b, v = base[i % len(base)], f"gpu{i:04d}"
        for sub, ext in (("video", "mp4"), ("audio/wav", "wav"), ("transcript", "vtt")):
            _link(root / sub / f"{b}.{ext}", out / sub / f"{v}.{ext}")
        new_trims[v] = trims[b]
        vids.append(v)
        split = split_of.get(b, "train")
        lines[split] += [json.dumps({**q, "vid_name": v, "qid": q["qid"].replace(b, v)}) for q in qa[split]
                         if q["vid_name"] == b]
    for split, got in lines.items():
        (out / "qa" / f"qa_{split}.json").write_text("".join(line + "\n" for line in got))
    (out / "trims.json").write_text(json.dumps(new_trims))
    subsets = {s: [v for v, b in zip(vids, (base[i % len(base)] for i in range(n)), strict=True)
                   if split_of.get(b, "train") == s] for s in qa}
    (out / "current_split.json").write_text(json.dumps({"subsets": {"youtubeclips": subsets}}))
    return vids


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system (EXDEV), or links refused
        shutil.copyfile(src, dst)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cache", type=Path)
    p.add_argument("clips", type=int)
    p.add_argument("--seconds", type=int, default=60)
    args = p.parse_args(argv)
    print(make_raw(args.cache, args.clips, args.seconds))


if __name__ == "__main__":
    main()
