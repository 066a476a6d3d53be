"""Fault injection for the pipeline's Ray tests: the worker process handling a named item dies on the spot, as it
would on a segfault or the OOM killer. The `crash_on` fixture (conftest.py) puts these in place of the decode
tasks and the model actor (the runner wraps `pipeline.actors`' functions with `ray.remote` at run time), and the
workers import them from this module (Ray pickles them by reference). Which items: SIQ_CRASH_ON, e.g.
"decode:<item>,extract:<item>,decode:<item>#<segment>", which the run hands its workers like every SIQ_* setting.
Production code carries no such hook."""

from __future__ import annotations

import os
from typing import Any

from pipeline import actors

ENV = "SIQ_CRASH_ON"
# the real ones, taken before any test replaces the module's names (the workers' modules are never replaced)
_decode_item, _decode_segment = actors.decode_item, actors.decode_segment


def crash_point(stage: str, item_id: str) -> None:
    if f"{stage}:{item_id}" in os.environ.get(ENV, "").split(","):
        os._exit(13)


def decode_item(item: Any, *args: Any, **kwargs: Any) -> list[Any]:
    crash_point("decode", item.id)
    return _decode_item(item, *args, **kwargs)


def decode_segment(item: Any, segment: int, *args: Any, **kwargs: Any) -> list[Any]:
    crash_point("decode", f"{item.id}#{segment}")
    return _decode_segment(item, segment, *args, **kwargs)


class CrashingWorker(actors.ExtractorWorker):
    def _batch(self, item_ids: list[str], inputs: tuple[Any, ...], *feature: Any
               ) -> list[tuple[str, Any, dict[str, Any] | None, float]]:
        for item_id in item_ids:
            crash_point("extract", item_id)
        return super()._batch(item_ids, inputs, *feature)
