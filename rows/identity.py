"""The one canonical form of a declared value and its hash.

Fingerprints and spec hashes (store/layout.py), plan-cache keys and view keys, and the input kinds' identities of
inputs that live in a manifest (media/kinds: questions, reactions) are all this hash of this JSON form. It sits at
the bottom so that store/ and media/, which may not import each other, make them the same way: a change here
changes every fingerprint, and tests/media/test_kinds.py pins them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def sha256_of(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
