"""The real CMU Multimodal SDK (`mmsdk.mmdatasdk`) as a test and bench client, never a runtime dependency.

Its source sits in ../shared/realdata/cmu-multimodal-sdk beside the checkout (or $SIQ_REALDATA/cmu-multimodal-sdk);
its own imports (h5py, tqdm, requests, validators, colorama) are in the `test` extra. The PyPI package
`cmu-multimodal-sdk` is an old 2019 copy, so the source folder is put on sys.path instead of installing it.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np


def sdk_source(realdata: Path | None = None) -> Path | None:
    """The SDK's source folder (holding `mmsdk/`), or None where ../shared is absent."""
    if realdata is None:
        from testing.realdata import realdata_dir  # one rule for where the real data is ($SIQ_REALDATA or ../shared)

        realdata = realdata_dir()
        if realdata is None:
            return None
    path = realdata / "cmu-multimodal-sdk"
    return path if (path / "mmsdk" / "mmdatasdk").is_dir() else None


def load_mmdatasdk(realdata: Path | None = None, quiet: bool = True) -> ModuleType | None:
    """`mmsdk.mmdatasdk` from the SDK's source folder, or None where it is absent. quiet: its status lines and
    progress bars are switched off (its log functions print to the stdout they saw at import)."""
    src = sdk_source(realdata)
    if src is None:
        return None
    if str(src) not in sys.path:
        sys.path.append(str(src))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # `x is 2` comparisons in its file_ops.py
        warnings.simplefilter("ignore", DeprecationWarning)  # an invalid escape sequence in its log.py
        from mmsdk import mmdatasdk
        from mmsdk.mmdatasdk import log
    if quiet:
        from tqdm import tqdm

        for name in ("status", "success", "advise", "advisory"):
            setattr(log, name, _silent)
        log.progress_bar = lambda total, data=None, unit="", postfix="", leave=False: tqdm(
            data, total=total, disable=True)
    return mmdatasdk


def _silent(*args: object, **kwargs: object) -> None:
    return None


def sdk_average(intervals: np.ndarray, features: np.ndarray) -> np.ndarray:
    """The collapse function of the SDK's tutorials (`myavg`): numpy.average over the rows; NaN propagates."""
    return np.average(features, axis=0)


def sdk_nanaverage(intervals: np.ndarray, features: np.ndarray) -> np.ndarray:
    """An average that skips NaN per column, what siqfeat's "mean" does (all-NaN columns stay NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.where(np.isfinite(features), features, np.nan), axis=0)
