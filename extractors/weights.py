"""Where model weights live. Nothing is downloaded at extraction time: a cluster pre-fills this
directory with `make weights` (on a machine with internet) and every worker reads from it."""

from __future__ import annotations

import os
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
