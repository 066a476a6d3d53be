"""A model actor writes the parts of the rows it computed (docs/design.md, "On object storage"): where the
driver asks it to (`StoreTarget`: a store on object storage, and the items whose pairs are whole in one call),
the actor joins each item's rows as the driver would, uploads them as parts (store/workerparts.py) and returns
each item's `WrittenRows` in place of its rows, so the driver receives records, not arrays. What the actor
cannot upload (the storage refuses it here) goes to the driver as rows, as before, said once per actor. The
requests the uploads retried are counted in the actor's process: their number goes back with the call's record
(`storage_retries`), for the driver to add to the run report's."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from store import BackendError, is_url, retries, retries_since, write_worker_parts

log = logging.getLogger(__name__)

def actors_write(worker_parts: bool, store_path: object) -> bool:
    """Whether a run's model actors write their own parts: asked for (`RunConfig.worker_parts`) and the store in a
    bucket (on one node's disk the rows reach the driver through Ray's shared memory anyway)."""
    return worker_parts and is_url(str(store_path))


class StoreTarget(NamedTuple):
    """Where an actor writes a call's parts: the store's URL and the items it may write (those whose pair is
    one call's rows: a long video's segments come from several calls and are joined by the driver)."""

    url: str
    items: frozenset[str]


_refused: set[str] = set()  # stores this process could not write to (said once)


def store_results(target: StoreTarget, feature: str, extractor: Any, results: list[Any],
                  failure: Callable[..., Any]) -> tuple[list[Any], dict[str, int]]:
    """(The call's `Extracted` results with the rows of `target.items` written to the store and replaced by their
    `WrittenRows`; the requests the uploads retried, by kind, as `store.retries_since`.) An item whose join fails
    gets the failure the driver would have recorded (`failure`: `actors.Failure.of`)."""
    if target.url in _refused:
        return results, {}
    out = list(results)
    members, at = [], {}
    for k, r in enumerate(results):
        if r.rows is None or r.failure is not None or r.item not in target.items:
            continue
        try:
            joined = type(extractor).join([r.rows], extractor.config)
        except Exception as e:  # as `Runner.finish` records a join that fails
            out[k] = replace(r, rows=None, failure=failure(r.item, f"extract:{feature}", None, e))
            continue
        members.append((r.item, joined))
        at[r.item] = k
    if not members:
        return out, {}
    before = retries()  # this process's count: an actor runs one call at a time
    try:
        written = write_worker_parts(target.url, feature, members)
    except Exception as e:  # the rows go to the driver as before: the run loses nothing but the saving
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        if isinstance(e, BackendError):  # no credentials or no access from here: not worth trying again
            _refused.add(target.url)
            log.warning("%s: this worker cannot write parts to the store (%s); its rows go through the driver",
                        target.url, first)
        else:
            log.warning("%s: a part's upload failed (%s); its rows go through the driver", target.url, first)
        return results, retries_since(before)  # (they were tried all the same)
    for item, stand_in in written.items():
        out[at[item]] = replace(out[at[item]], rows=stand_in)
    return out, retries_since(before)


def wire_bytes(value: Any) -> int:
    """The bytes `value` takes serialized as Ray serializes what `ray.get` returns (pickle protocol 5, arrays as
    out-of-band buffers, counted without copying them): what the driver received for it."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return len(head) + sum(b.raw().nbytes for b in buffers)
