"""Where model weights live. Nothing is downloaded at extraction time: a cluster pre-fills this
directory with `make weights` (on a machine with internet) and every worker reads from it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "SIQ_WEIGHTS_DIR"


class WeightsMissingError(FileNotFoundError):
    """A model's weights are not in the weights cache; the message says how to fill it."""


def weights_dir(explicit: Path | str | None = None) -> Path:
    """The weights cache: the config's value, else $SIQ_WEIGHTS_DIR, else ~/.cache/siqfeat/weights."""
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get(ENV_VAR) or Path.home() / ".cache" / "siqfeat" / "weights").expanduser()


def require(path: Path, what: str, root: Path, fill_hint: str = "make weights") -> Path:
    """`path` (a file under the weights cache `root`), or an error that says how to fill the cache."""
    if not path.exists():
        raise WeightsMissingError(
            f"{what} not found at {path}. On a machine with internet run `{fill_hint} WEIGHTS_DIR={root}` "
            f"(or set ${ENV_VAR} to a directory that holds them); for a smoke run without real weights "
            "set `weights = \"random\"` in the feature's config."
        )
    return path


@dataclass(frozen=True)
class Weights:
    """One thing an extractor's config loads, and where it comes from (`Extractor.weights` declares them; `make
    weights` fetches them and deploy/bundle.py carries the packages). Exactly one source:
    `url`: a file downloaded into the weights cache at `path` (relative to it), its hash checked where its name
    carries one (torch hub's `name-<sha256 prefix>.ext`); `hub`: a Hugging Face model id downloaded into the cache
    (extractors/text_model.py's folder for it); `package`: a Python distribution that holds the weights itself,
    installed with the project (`make install`) and carried by the offline bundle: nothing to download."""

    what: str  # for messages: "DenseNet161 ImageNet weights"
    url: str | None = None
    path: str | None = None
    hub: str | None = None
    package: str | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.url, self.hub, self.package)) != 1 or (self.url is None) != (self.path is None):
            raise ValueError(f"{self.what}: weights come from one of a url (with its path in the cache), a hub "
                             "model or a package")

    def source(self) -> str:
        """Where it is fetched from, for messages."""
        return self.url or (f"https://huggingface.co/{self.hub}" if self.hub else f"the {self.package} package")

    def fetch(self, root: Path) -> Path | None:
        """Download into the weights cache `root` (needs internet; what is there already is kept); None for a
        package, which has nothing to download."""
        if self.url is not None:
            import re

            import torch

            dest = root / str(self.path)
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                found = re.search(r"-([a-f0-9]+)\.", dest.name)  # torch hub's convention: a sha256 prefix in the name
                torch.hub.download_url_to_file(self.url, str(dest), hash_prefix=found.group(1) if found else None,
                                               progress=False)
            return dest
        if self.hub is not None:
            from huggingface_hub import snapshot_download

            dest = hub_model_dir(root, self.hub)
            patterns = ["*.json", "*.txt", "*.safetensors", "*.model"]  # config, tokenizer, vocab, weights
            snapshot_download(repo_id=self.hub, local_dir=dest, allow_patterns=patterns)
            return dest
        return None


def hub_model_dir(root: Path, name: str) -> Path:
    """Where the Hugging Face model `name` lives in the weights cache `root`: one folder ("org/model" becomes
    "org--model")."""
    return root / name.replace("/", "--")
