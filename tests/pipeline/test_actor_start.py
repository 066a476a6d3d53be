"""What a model actor's start loads (pipeline/actors.py `ExtractorWorker`; the costs: bench/actor_start.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import sys
from extractors.acoustic import CovarepConfig
from pipeline.actors import ExtractorWorker
worker = ExtractorWorker("acoustic", CovarepConfig(), "cpu", threads=1)
print(int("torch" in sys.modules))
import torch
torch.set_num_threads(3)
worker([])  # torch came in after the actor was built (here by hand): its first call sets the actor's threads
print(torch.get_num_threads())
"""


def test_an_actor_without_torch_does_not_import_it_and_one_that_gets_it_sets_its_threads() -> None:
    """covarep's numpy reference needs no torch: its actors (as many as the cores on a CPU node) no longer import it
    only to set its threads (2-3 CPU-s each); where torch does come in, the actor's `threads` still hold."""
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1"]
