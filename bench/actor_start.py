"""What a model actor's start costs, step by step, in a fresh process each (as Ray starts one): the process itself,
each import in the order the actor meets it, each model's construction and weights load, and its first call.

    python -m bench.actor_start [--actor frames|text|acoustic|all] [--rounds 2] [--threads 1] [--device cuda]

Per step: wall and CPU seconds (the process's, all threads: on a shared machine the CPU seconds move less). Imports
are counted once, where first met (torchvision's share includes the `torch._dynamo` its ops module imports; that
step is shown on its own). The actors are the GPU node's (pipeline/runner.py `actor_plan`), run here on the CPU:
- frames: the shared frames actor (MTCNN hosting DenseNet161, as where frames are decoded on the device). DenseNet
  is built as the extractor builds it (`load_densenet`, from a weights file of DenseNet161's shape) and, for the
  comparison, as it was built before (random initialisation, then the weights copied in);
- text: BERT-base (bert-base-uncased's shape, random weights saved once with the bundled model's WordPiece
  vocabulary, as the H100 run's) through `bert_words`' own loading;
- acoustic: the `covarep` extractor with the torch backend.
The first call runs one small input (8 frames of 640x360; one 28-word transcript; 5 s of a synthetic vowel).
The weights files are made once under --workdir. `--device cuda` builds the models there, as a GPU node's actors
do, with the CUDA context's creation a step of its own; `--tokenizer DIR` takes the WordPiece files from DIR where
the MiniLM package is not installed (a GPU node's kit: docs/scale.md, "The node check").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ACTORS = ("frames", "text", "acoustic")
SENTENCE = ("so what do you think she meant when she said that to him at the party last night i mean it sounded "
            "like a joke but nobody laughed")  # the text actor's first call: 28 words
IMPORTS = {  # in the order the actor meets them (pipeline/actors.py first: what Ray unpickles the actor class from)
    "frames": ["pipeline.actors", "torch", "torch._dynamo", "torchvision", "facenet_pytorch"],
    "text": ["pipeline.actors", "torch", "transformers", "transformers.models.bert.modeling_bert"],
    "acoustic": ["pipeline.actors", "torch", "librosa", "scipy.signal", "extractors.acoustic",
                 "extractors.acoustic_torch"],
}


class _Steps:
    """Wall and CPU seconds of each step of one process."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []

    def __call__(self, name: str, fn: Any) -> Any:
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        self.rows.append((name, time.perf_counter() - w0, time.process_time() - c0))
        return out


def _child(actor: str, workdir: str, threads: int, spawned_at: float, device: str = "cpu") -> None:
    """One actor's start in this (fresh) process; prints its steps as JSON."""
    import importlib

    begun_wall = time.time()
    steps = _Steps()
    # the interpreter's own start, as seen from the parent's clock, and the CPU it took (before our first line)
    steps.rows.append(("process start (python)", begun_wall - spawned_at, time.process_time()))
    for name in IMPORTS[actor]:
        steps(f"import {name}", lambda n=name: importlib.import_module(n))
    import torch

    torch.set_num_threads(threads)
    if device.startswith("cuda"):
        steps("CUDA context (first tensor on the device)", lambda: torch.zeros(1, device=device).cpu())
    if actor == "frames":
        _frames(steps, Path(workdir), device)
    elif actor == "text":
        _text(steps, Path(workdir), device)
    else:
        _acoustic(steps, device)
    print(json.dumps(steps.rows))


def _frames(steps: _Steps, workdir: Path, device: str) -> None:
    import numpy as np
    import torch
    from torchvision.models import densenet161

    from extractors import densenet
    from extractors.base import Frames
    from extractors.faces import FacesConfig, MTCNNFaces

    config = densenet.DenseNetConfig(weights="imagenet1k_v1", weights_dir=workdir, batch_size=8)
    path = densenet.weights_file(config)
    state = steps("densenet161: torch.load weights", lambda: torch.load(path, map_location="cpu", weights_only=True))

    def before() -> Any:  # the way it was built up to 2026-11-27: initialised, then the weights copied over
        model = densenet161(weights=None)
        model.load_state_dict(densenet._rename_legacy_keys(state))
        return model

    steps("densenet161: initialised, then weights copied (before)", before)

    def meta() -> Any:
        with torch.device("meta"):
            return densenet161(weights=None)

    steps("densenet161: built on the meta device alone", meta)
    steps("densenet161: load_densenet (meta, weights assigned)", lambda: densenet.load_densenet(config))
    dn = steps("densenet161: DenseNet161(...) in all", lambda: densenet.DenseNet161(config, device))
    mt = steps("mtcnn: MTCNNFaces(...)", lambda: MTCNNFaces(FacesConfig(batch_size=8), device))
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (8, 360, 640, 3), dtype=np.uint8)
    frames = Frames(pixels=pixels, intervals=np.stack([np.arange(8.0), np.arange(8.0) + 1], 1),
                    pts_s=np.arange(8.0) + 0.5, source_fps=30.0, duration_s=8.0)
    steps("densenet161: first call (8 frames)", lambda: dn.extract(frames))
    steps("densenet161: second call", lambda: dn.extract(frames))
    steps("mtcnn: first call (8 frames)", lambda: mt.extract(frames))
    steps("mtcnn: second call", lambda: mt.extract(frames))


def _text(steps: _Steps, workdir: Path, device: str) -> None:
    from transformers import BertModel

    from extractors.base import Words
    from extractors.transcript import TranscriptConfig, TranscriptExtractor

    config = TranscriptConfig(model="bert-base-shaped", weights_dir=workdir, batch_size=8)
    from transformers import BertConfig

    steps("bert-base: BertModel(config) (random init, for comparison)", lambda: BertModel(BertConfig()))
    ex = steps("bert-base: TranscriptExtractor(...) (from_pretrained)", lambda: TranscriptExtractor(config, device))
    words = _words(Words)
    steps("bert-base: first call (28 words)", lambda: ex.extract(words))
    steps("bert-base: second call", lambda: ex.extract(words))


def _words(words_type: Any) -> Any:
    import numpy as np

    text = SENTENCE.split()
    starts = np.arange(len(text), dtype=np.float64) * 0.4
    return words_type(words=tuple(text), intervals=np.stack([starts, starts + 0.35], 1))


def _acoustic(steps: _Steps, device: str) -> None:
    import numpy as np

    from extractors.base import Audio, parse_config

    ex = steps("covarep (torch): extractor(...)", lambda: _covarep(parse_config, device))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from synth_voice import FS_HZ, synth_vowel

    voice = synth_vowel(5.0, lambda t: 120.0 + 20.0 * np.sin(t), 1.0)
    audio = Audio(samples=np.asarray(voice.speech, np.float32), sample_rate_hz=FS_HZ, duration_s=5.0)
    steps("covarep (torch): first call (5 s)", lambda: ex.extract(audio))
    steps("covarep (torch): second call", lambda: ex.extract(audio))


def _covarep(parse_config: Any, device: str) -> Any:
    from extractors.base import get_extractor

    return get_extractor("covarep")(parse_config({"extractor": "covarep", "backend": "torch"}), device=device)


def make_weights(workdir: Path, tokenizer: Path | None = None) -> None:
    """DenseNet161's weights file (its published name, random values of its shapes) and a BERT-base-shaped model
    directory (random weights, the tokenizer files of `tokenizer`, else of the bundled model): made once."""
    import shutil

    import torch

    from extractors import densenet
    from extractors.text_model import BUNDLED_MINILM, resolve_model_dir

    path = densenet.weights_file(densenet.DenseNetConfig(weights_dir=workdir))
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(densenet.load_densenet(densenet.DenseNetConfig(weights="random")).state_dict(), path)
    bert = workdir / "bert-base-shaped"
    if not (bert / "config.json").exists():
        from transformers import BertConfig, BertModel

        BertModel(BertConfig()).save_pretrained(bert)  # BertConfig's defaults are bert-base's shape
        src = tokenizer or resolve_model_dir(BUNDLED_MINILM)
        for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            if (src / name).exists():
                shutil.copy(src / name, bert / name)


def run(actor: str, workdir: Path, threads: int, device: str = "cpu") -> list[tuple[str, float, float]]:
    """One fresh process's steps for `actor`."""
    root = Path(__file__).resolve().parents[1]
    code = (f"from bench.actor_start import _child; _child({actor!r}, {str(workdir)!r}, {threads}, "
            f"{{spawned}}, {device!r})")
    path = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])  # a kit's packages too
    env = {**os.environ, "PYTHONPATH": path, "SIQ_CALIBRATE": "0", "TRANSFORMERS_VERBOSITY": "error"}
    spawned = time.time()
    out = subprocess.run([sys.executable, "-c", code.format(spawned=repr(spawned))], cwd=root, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{actor}: the child failed:\n{out.stderr[-3000:]}")
    return [tuple(r) for r in json.loads(out.stdout.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.actor_start", description=__doc__.split("\n\n")[0])
    ap.add_argument("--actor", choices=[*ACTORS, "all"], default="all")
    ap.add_argument("--rounds", type=int, default=2, help="fresh processes per actor (the median is printed)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a GPU actor's host thread: 1)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "siq-actor-start")
    ap.add_argument("--device", default="cpu", help="where the models are built and called: cpu, cuda")
    ap.add_argument("--tokenizer", type=Path, help="the BERT WordPiece files (default: the bundled MiniLM's)")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    make_weights(args.workdir, args.tokenizer)
    print(f"{os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f}; median of {args.rounds} fresh processes"
          f" on {args.device}")
    for actor in ACTORS if args.actor == "all" else (args.actor,):
        rounds = [run(actor, args.workdir, args.threads, args.device) for _ in range(args.rounds)]
        print(f"\n{actor} actor{'':34s}  wall s   CPU s")
        for k, (name, *_rest) in enumerate(rounds[0]):
            wall = sorted(r[k][1] for r in rounds)[len(rounds) // 2]
            cpu = sorted(r[k][2] for r in rounds)[len(rounds) // 2]
            print(f"  {name:<48s} {wall:6.2f}  {cpu:6.2f}")
        print(f"  {'in all (median of the per-process sums)':<48s} "
              f"{sorted(sum(s[1] for s in r) for r in rounds)[len(rounds) // 2]:6.2f}  "
              f"{sorted(sum(s[2] for s in r) for r in rounds)[len(rounds) // 2]:6.2f}")


if __name__ == "__main__":
    main()
