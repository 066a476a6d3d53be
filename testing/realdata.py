"""Where the real public files are (../shared/realdata beside the checkout; SIQ_REALDATA overrides): one rule for
the conformance tests and the benchmarks that compare with them."""

from __future__ import annotations

import os
from pathlib import Path


def realdata_dir() -> Path | None:
    """The real public files of ../shared/realdata (SIQ_REALDATA overrides), or None where absent."""
    env = os.environ.get("SIQ_REALDATA")
    path = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
    return path if path.is_dir() else None
