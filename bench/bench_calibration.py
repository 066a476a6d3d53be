"""What the batch calibration (extractors/calibrate.py) measures and picks on this machine, per model and input size.

    python -m bench.bench_calibration [--device cuda] [--models densenet,faces,text]

Each model is calibrated afresh (a temporary cache file) on the device given, with torch's threads as set
(default: all cores), and the table of per-unit costs is printed with the choice. DenseNet161 (random weights;
fp32 on CPU, fp16 on CUDA) on frames of 640x360 and 1280x720; MTCNN (facenet-pytorch, vectorised stages on CUDA)
on the same sizes with a face; the text encoder on sequences of 32 and 128 tokens: the bundled MiniLM where it
is installed, else a BERT-base-shaped model with random weights (the GPU machine has no MiniLM: the cost of a
forward does not depend on the weights' values). Timings on a shared machine are noisy (CPU-time based on CPU).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from extractors import calibrate
from extractors.calibrate import Calibrator

SIZES = [(360, 640), (720, 1280)]


def face_frame(height: int, width: int) -> np.ndarray:
    from PIL import Image
    from skimage.data import astronaut

    side = int(height * 0.6)
    face = np.asarray(Image.fromarray(astronaut()).resize((side, side), Image.BILINEAR))
    frame = np.full((height, width, 3), 120, np.uint8)
    frame[(height - side) // 2:(height - side) // 2 + side, (width - side) // 2:(width - side) // 2 + side] = face
    return frame


def frames(frame: np.ndarray, n: int):
    """A call's input: `frame` repeated n times at 1 fps."""
    from extractors.base import Frames

    return Frames(np.repeat(frame[None], n, 0), np.stack([np.arange(n), np.arange(1, n + 1)], 1).astype(float),
                  np.arange(n) + 0.5, 30.0, n)


def show(cal: Calibrator, t0: float) -> None:
    for choice in cal.choices.values():
        costs = ", ".join(f"{b}: {c * 1e3:.2f}" + (f" ({choice.work_mib[b]:.0f} MiB)" if b in choice.work_mib else "")
                          for b, c in choice.costs.items())
        print(f"  {cal.feature:<6} {choice.input:<14} batch {choice.batch:>3} ({choice.source}); ms per {choice.unit}: "
              f"{costs}  [{time.perf_counter() - t0:.1f} s]", flush=True)


def densenet(device: str, path: Path) -> None:
    """As in a run: a call of 140 frames (the trials' 126 and more), calibrated on them; one cache file per size
    (DenseNet's choice is keyed by the network's input, 224x224, whatever the frame size)."""
    from extractors.densenet import DenseNet161, DenseNetConfig

    weights, n = None, 140
    for h, w in SIZES:
        cal = Calibrator("frames", device, path.with_name(f"densenet-{h}x{w}.json"))
        model = DenseNet161(DenseNetConfig(weights="random"), device=device, calibrator=cal)
        model.model = weights = weights or model.model  # the same network for both sizes
        t0 = time.perf_counter()
        model.extract_batch([frames(face_frame(h, w), n)])
        print(f"  {h}x{w} frames: {n} extracted, calibration included:")
        show(cal, t0)


def faces(device: str, path: Path) -> None:
    from extractors.faces import FacesConfig, MTCNNFaces

    cal = Calibrator("faces", device, path)
    model = MTCNNFaces(FacesConfig(), device=device, calibrator=cal)
    for h, w in SIZES:
        t0 = time.perf_counter()
        model.extract_batch([frames(face_frame(h, w), 1)])  # one frame: the trials past it repeat it, thrown away
        show(cal, t0)
        cal.choices.clear()


def text(device: str, path: Path) -> None:
    """The text extractors' calibration on a bare encoder: b copies of one sequence, thrown away."""
    from transformers import AutoModel, BertConfig, BertModel

    try:
        from extractors.text_model import BUNDLED_MINILM, resolve_model_dir

        model, name = AutoModel.from_pretrained(resolve_model_dir(BUNDLED_MINILM)), BUNDLED_MINILM
    except Exception:  # no MiniLM package (the GPU machine): BERT-base's shape, random weights
        torch.manual_seed(0)
        model, name = BertModel(BertConfig()), "bert-base-shaped-random"
    model = model.eval().to(device)
    cal = Calibrator("text", device, path)
    for length in (32, 128):
        t0 = time.perf_counter()
        ids = torch.randint(1000, 2000, (1, length), device=device)

        def probe(b: int, ids=ids) -> None:
            with torch.inference_mode():
                out = model(input_ids=ids.expand(b, -1), attention_mask=torch.ones_like(ids).expand(b, -1))
                out.last_hidden_state.float().cpu()

        cal.batch(name, f"tokens<={length}", "sequence", probe)
        show(cal, t0)
        cal.choices.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default="densenet,faces,text")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {torch.get_num_threads()} threads"
    print(f"calibration on {args.device} ({name}); budget {calibrate.BUDGET_S} s per model and input size, "
          f"choice: the smallest batch within {calibrate.tolerance(args.device):.0%} of the cheapest"
          + ("" if (w := calibrate.work_budget(args.device)) is None else f"; CPU trials' working memory <= {w >> 20} MiB"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calibration.json"
        for model in args.models.split(","):
            {"densenet": densenet, "faces": faces, "text": text}[model](args.device, path)


if __name__ == "__main__":
    main()
