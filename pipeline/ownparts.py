"""A model actor writes the parts of the rows it computed (docs/design.md, "On object storage"): where the
driver asks it to (`StoreTarget`: a store on object storage, and the items whose pairs are whole in one call),
the actor joins each item's rows as the driver would, uploads them as parts (store/workerparts.py) and returns
each item's `WrittenRows` in place of its rows, so the driver receives records, not arrays. What the actor
cannot upload (the storage refuses it here) goes to the driver as rows, as before, said once per actor."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable
from typing import Any, NamedTuple

from store import BackendError, write_worker_parts

log = logging.getLogger(__name__)

# the attributes the actor adds to a frames item's rows (`actors._with_decoder`): the driver takes them off
# before the rows are joined and stored (`Runner.decoder_of`); kept out of the join here, put back after
NOTES = ("decoder", "cpu_reason")


class StoreTarget(NamedTuple):
    """Where an actor writes a call's parts: the store's URL and the items it may write (those whose pair is
    one call's rows: a long video's segments come from several calls and are joined by the driver)."""

    url: str
    items: frozenset[str]


_refused: set[str] = set()  # stores this process could not write to (said once)


def store_results(target: StoreTarget, feature: str, extractor: Any,
                  results: list[tuple[str, Any, dict[str, Any] | None, float]],
                  failure: Callable[..., dict[str, Any]]) -> list[tuple[str, Any, dict[str, Any] | None, float]]:
    """The call's results with the rows of `target.items` written to the store and replaced by their
    `WrittenRows`; an item whose join fails gets the failure the driver would have recorded (`failure`:
    `actors.failure`)."""
    if target.url in _refused:
        return results
    out = list(results)
    members, at = [], {}
    for k, (item, rows, fail, secs) in enumerate(results):
        if rows is None or fail is not None or item not in target.items:
            continue
        notes = {n: rows.attrs[n] for n in NOTES if n in rows.attrs}
        try:
            joined = type(extractor).join([type(rows)(rows.features, rows.intervals, rows.extras,
                                                      {a: v for a, v in rows.attrs.items() if a not in notes})],
                                          extractor.config)
        except Exception as e:  # as `Runner.finish` records a join that fails
            out[k] = (item, None, failure(item, f"extract:{feature}", None, e), secs)
            continue
        members.append((item, joined))
        at[item] = (k, notes)
    if not members:
        return out
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
        return results
    for item, stand_in in written.items():
        k, notes = at[item]
        _, _, fail, secs = out[k]
        out[k] = (item, stand_in.with_attrs({**stand_in.attrs, **notes}), fail, secs)
    return out


def wire_bytes(value: Any) -> int:
    """The bytes `value` takes serialized as Ray serializes what `ray.get` returns (pickle protocol 5, arrays as
    out-of-band buffers, counted without copying them): what the driver received for it."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return len(head) + sum(b.raw().nbytes for b in buffers)
