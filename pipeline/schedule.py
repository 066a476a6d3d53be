"""The scheduling policy of an extraction: which item is decoded next and where, which decoded inputs go to which
model actor, and when. Plain Python with no Ray and no clock: pipeline/runner.py carries its decisions out on a
Ray cluster, and bench/simulate.py replays a run report's costs through the very same objects.

Two policies share one set of books (what is queued, decoding, waiting for an actor, held in the object store):

- `Scheduler` ("balanced", the default): every CPU core is a slot. A decode task, a call on a CPU actor and a GPU
  actor that has calls in flight (its host thread drives the device) each hold one slot of their node while they
  run. Whole slots, not the cores each was measured to use (a 720p decode uses ~1.13 with PyAV's threads): on 2
  cores fractions left a decode and an acoustic call each waiting for the other's remainder. Calls come before decodes: an idle actor with inputs
  waiting gets them first, and decoding runs ahead of the models only until each feature has enough decoded
  input to keep all its actors fed (`feed`), never past `max_bytes` of decoded data. A CPU actor gets one item a
  call and only when idle: an item is seconds of its work, and eight queued on one actor while seven sat idle
  serialised the H100 run (docs/scale.md). A GPU actor takes batches of up to `per_call` units, two calls deep, and
  an idle one gets a partial batch at once rather than waiting for a full one.
- `FixedScheduler` ("fixed"): the policy of runs up to 2026-11 (`max_inflight_items` items alive, `items_per_batch`
  items a call for every non-frame feature, the least busy actor two calls deep, CPU actors holding a Ray CPU each
  for the whole run). Kept so that the simulator can show what it did (0.42 clips/s on the H100 node) and a run
  can still ask for it (`scheduler = "fixed"`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from media.kinds import KINDS

CPU, CUDA = "cpu", "cuda"


@dataclass(frozen=True)
class Unit:
    """One decoded input (an item's, or a segment of a long video's) waiting for a model call."""

    item: str
    ref: Any  # its object ref: the data stays in the object store until an actor reads it
    n: int  # batching count: frames, or 1 for other inputs
    nbytes: int
    part: int = 0  # segment
    solo: bool = False  # run alone: its batch crashed a worker
    kind: str = ""  # input kind: what it holds in the object store until its features are done with it
    device: bool = False  # a frames plan: the model actor decodes it on its device (media/nvdec.py)


@dataclass(eq=False)
class Worker:
    """One model actor as the policy sees it."""

    handle: Any  # the Ray actor handle (the simulator's own object)
    node: str | None = None
    gpu: str | None = None  # "<node>:<gpu id>" of a GPU actor: what the run report's utilisation counts per GPU
    ready: bool = False  # its model is loaded (nothing is sent before: decoding starts while models load)
    busy: int = 0  # calls sent and not yet back
    holds: float = 0.0  # CPU slots it holds on its node now


@dataclass
class Pool:
    """The actors of one feature."""

    feature: str
    kind: str  # the input kind it reads
    device: str  # CPU or CUDA
    per_call: int  # batching count (frames, or items) a call takes at most
    depth: int  # calls in flight per actor
    holds_cores: bool = True  # its calls hold CPU slots (not GPU-kind models on a CPU-only machine: `model_threads`)
    workers: list[Worker] = field(default_factory=list)
    decodes_frames: bool = False  # its actors decode frames plans on their device (`Scheduler.device_queue`)

    @property
    def ready(self) -> list[Worker]:
        return [w for w in self.workers if w.ready]


@dataclass(frozen=True)
class Decode:
    item: str
    segment: int
    node: str | None  # where its slot is held (None: any node, Ray places it)
    kinds: tuple[str, ...]
    on_device: bool = False  # its frames only planned: the model actors decode them on their device


@dataclass(frozen=True)
class Call:
    pool: Pool
    worker: Worker
    take: tuple[Unit, ...]


class Scheduler:
    """The balanced policy (module docstring). `slots`: node -> CPU cores Ray reports there (None: one node);
    `cpu_bound`: whether GPU-kind actors running on CPUs hold slots (no: on a CPU-only machine they run
    `model_threads` threads each beside everything else, as before); `max_bytes`: decoded data alive at once;
    `max_items`: decoded items alive at once (None: no count, only bytes and the feed)."""

    name = "balanced"

    def __init__(self, pools: dict[str, Pool], slots: dict[str | None, float], *, max_bytes: int,
                 batch_bytes: int, max_items: int | None = None, device_queue: float = 0) -> None:
        self.pools, self.slots = pools, dict(slots)
        self.max_bytes, self.batch_bytes, self.max_items = max_bytes, batch_bytes, max_items
        # frames routing (`_on_device`): (item, segment)s sent to the model actors' decoder whose first call is not
        # back yet (not yet decoded there), and the most of them before the next video is decoded on a CPU instead
        self.device_queue: set[tuple[str, int]] = set()
        self.device_bound = device_queue
        self.routes: dict[str, bool] = {}  # item -> its first segment went to the actors' decoder (the rest follow)
        # (item, segment) -> (the actor handle that decoded the plan, readers still to take it): `_decoded_in`
        self.decoded_at: dict[tuple[str, int], tuple[Any, int]] = {}
        self.used: dict[str | None, float] = defaultdict(float)
        self.queue: deque[str] = deque()  # items not yet decoding
        self.features: dict[str, list[str]] = {}  # item -> its features to compute
        self.later: deque[tuple[str, int]] = deque()  # (item, segment) of long videos still to decode
        self.decoding: dict[tuple[str, int], Decode] = {}
        self.waiting: dict[str, list[Unit]] = {f: [] for f in pools}
        self.holds: dict[tuple[str, int, str], int] = {}  # (item, segment, kind) -> feature results outstanding
        self.held_bytes: dict[tuple[str, int, str], int] = {}
        # what a decode about to start will hold: a running mean of decoded items, and before the first one the most
        # a decoded input can hold (a video over `batch_bytes` is decoded in segments)
        self.bytes_per_item = 0.0

    # -- what the runner tells the policy ----------------------------------------------------------------------
    def add(self, item: str, features: list[str]) -> None:
        self.queue.append(item)
        self.features[item] = features

    def add_segments(self, item: str, segments: Iterable[int]) -> None:
        self.later.extend((item, k) for k in segments)

    def decoded(self, item: str, segment: int, units: dict[str, Unit], nbytes: dict[str, int]) -> None:
        """A decode finished: `units` (feature -> its input) wait for their actors; each kind's objects stay
        held until every feature reading them is done (`release`)."""
        job = self.decoding.pop((item, segment), None)
        if job is not None:
            self.used[job.node] -= 1
        if segment == 0:
            self.routes[item] = any(u.device for u in units.values())
        if not any(u.device for u in units.values()):  # the CPU path decoded it (the file needs it), or it failed
            self.device_queue.discard((item, segment))
        total = sum(nbytes.values())
        self.bytes_per_item = total if not self.bytes_per_item else 0.9 * self.bytes_per_item + 0.1 * total
        for kind, b in nbytes.items():
            self.holds[item, segment, kind], self.held_bytes[item, segment, kind] = 0, b
        for feat, unit in units.items():
            self.waiting[feat].append(dataclasses.replace(unit, kind=unit.kind or self.pools[feat].kind))
            self.holds[item, segment, unit.kind or self.pools[feat].kind] += 1
        for kind in nbytes:
            self.release(item, segment, kind, 0)

    def release(self, item: str, segment: int, kind: str, n: int = 1) -> None:
        """`n` feature results of a decoded (item, segment, kind) are in: when none is outstanding, its objects go."""
        key = (item, segment, kind)
        if key not in self.holds:
            return
        self.holds[key] -= n
        if self.holds[key] <= 0:
            del self.holds[key], self.held_bytes[key]

    def call_done(self, call: Call) -> None:
        worker = call.worker
        worker.busy -= 2 if call.take[0].solo and self.name == "fixed" else 1
        self._hold(call.pool, worker)
        self.device_queue.difference_update((u.item, u.part) for u in call.take if u.device)

    def requeue(self, feature: str, units: list[Unit]) -> None:
        """A call whose worker died: its inputs go back to the front, each to run alone."""
        self.waiting[feature][:0] = [dataclasses.replace(u, solo=True) for u in units]

    # -- what the policy decides --------------------------------------------------------------------------------
    def next_calls(self) -> list[Call]:
        """Calls to send now. The feature furthest behind (most decoded input waiting for what its actors can
        take) goes first: when cores are short, the bottleneck gets them."""
        calls = []
        for pool in sorted(self.pools.values(), key=lambda p: -len(self.waiting[p.feature]) / self._feed(p)):
            calls += self._dispatch(pool)
        return calls

    def next_decodes(self) -> list[Decode]:
        out = []
        while self.later or self.queue:
            if self.later:
                item, segment = self.later[0]
                kinds: tuple[str, ...] = ("frames",)
            else:
                item, segment = self.queue[0], 0
                kinds = tuple(sorted({self.pools[f].kind for f in self.features[item]}))
            node = self._admit(item, kinds)
            if node is False:
                break
            (self.later if segment else self.queue).popleft()
            job = Decode(item, segment, node, kinds, self._on_device(item, segment, kinds))
            if job.on_device:
                self.device_queue.add((item, segment))
            self.decoding[item, segment] = job
            self.used[node] += 1
            out.append(job)
        return out

    @property
    def idle(self) -> bool:
        """Nothing decoding, waiting or queued: the run is over (calls still running aside)."""
        return not (self.decoding or self.queue or self.later or any(self.waiting.values()))

    def alive_bytes(self) -> int:
        return sum(self.held_bytes.values())

    def alive_items(self) -> int:
        return len({(i, s) for i, s, _ in self.holds}) + len(self.decoding)

    # -- the balanced rules -------------------------------------------------------------------------------------
    def _free(self, node: str | None) -> float:
        node = self._place(node)
        return self.slots[node] - self.used[node]

    def _place(self, node: str | None) -> str | None:
        """The slots' node a worker counts on: its own, or (a node Ray listed no CPUs for, or an unknown one) the
        first, so that no worker waits forever for cores of a node the books do not have."""
        return node if node in self.slots else next(iter(self.slots))

    def _admit(self, item: str, kinds: tuple[str, ...]) -> str | None | bool:
        """The node to decode the next item on, or False: not now."""
        if self.max_items is not None and self.alive_items() >= self.max_items:
            return False
        each = self.bytes_per_item or self.batch_bytes
        if self.alive_bytes() + each * (1 + len(self.decoding)) > self.max_bytes and (
                self.decoding or self.holds):
            return False  # at least one item is always let through, whatever its size
        if not self._hungry(item):
            return False
        node = max(self.slots, key=self._free)
        if self._free(node) < 1:
            return False
        return node

    def _on_device(self, item: str, segment: int, kinds: tuple[str, ...]) -> bool:
        """Whether this video's frames go to the model actors' decoder (NVDEC) rather than a CPU decode task: when
        every frames feature of the item has actors that decode (`Pool.decodes_frames`) and fewer than
        `device_bound` videos sent there are not decoded yet (`device_queue`: their first call not back). A
        backlog there means the actors (their decoder or their models) are behind, so the next video is decoded
        by a CPU core, which has time to spare then; with no backlog every video goes to the actors. A long
        video's later segments follow its first (one decoder per file)."""
        if "frames" not in kinds:
            return False
        feats = [f for f in self.features.get(item, ()) if self.pools[f].kind == "frames"]
        if not feats or not all(self.pools[f].decodes_frames for f in feats):
            return False
        if segment:
            return self.routes.get(item, False)
        return len(self.device_queue) < self.device_bound

    def _hungry(self, item: str) -> bool:
        """Whether one of the item's features has less decoded input coming than its actors can take: decoding
        further ahead only holds memory (and cores the actors could use)."""
        coming: dict[str, int] = defaultdict(int)
        for job in self.decoding.values():
            for feat in self.features.get(job.item, ()):
                if self.pools[feat].kind in job.kinds:
                    coming[feat] += 1
        for feat in self.features[item]:
            pool = self.pools[feat]
            items_ahead = len(self.waiting[feat]) + coming[feat]
            if items_ahead < self._feed(pool):
                return True
        return False

    def _feed(self, pool: Pool) -> int:
        """Decoded items a feature needs ahead of its actors: one call's worth for each call it can have in flight
        on each of its actors, plus one (the call after). Frames count in items of the typical size."""
        per_call = max(1, pool.per_call // KINDS[pool.kind].item_units)
        return len(pool.workers) * pool.depth * per_call + 1

    def _dispatch(self, pool: Pool) -> list[Call]:
        batch = self.waiting[pool.feature]
        calls = self._dispatch_decoded(pool, batch)
        while batch and any(not self._decoded_in(u) for u in batch):
            worker = self._worker_for(pool, solo=batch[0].solo)
            if worker is None:
                break
            free = [u for u in batch if not self._decoded_in(u)]  # (the others wait for the actor that has them)
            take = self._take(pool, free, partial=worker.busy == 0 or not self._more_coming(pool))
            if not take:
                break
            batch[:] = [u for u in batch if self._decoded_in(u)] + free
            calls.append(self._call(pool, worker, take))
        return calls

    def _call(self, pool: Pool, worker: Worker, take: list[Unit]) -> Call:
        worker.busy += 1
        self._hold(pool, worker)
        for u in take:  # the first call to take a plan decodes it in its actor: the other readers go there too
            if u.device and (u.item, u.part) not in self.decoded_at:
                readers = sum(self.pools[f].kind == "frames" for f in self.features.get(u.item, ()))
                self.decoded_at[u.item, u.part] = (worker.handle, readers)
            if u.device:
                handle, left = self.decoded_at[u.item, u.part]
                if left <= 1:
                    del self.decoded_at[u.item, u.part]
                else:
                    self.decoded_at[u.item, u.part] = (handle, left - 1)
        return Call(pool, worker, tuple(take))

    def _decoded_in(self, unit: Unit) -> Any:
        """The actor (handle) holding a plan's frames decoded on its device, for the plan's other readers: the
        frames stay in that actor's cache (pipeline/actors.py), so a call elsewhere would decode the file again."""
        return self.decoded_at.get((unit.item, unit.part), (None,))[0] if unit.device else None

    def _dispatch_decoded(self, pool: Pool, batch: list[Unit]) -> list[Call]:
        """Calls for the units whose frames an actor already decoded: each to that actor's worker in this pool,
        when it may take a call now (else they wait; an actor gone from the pool lets them go anywhere)."""
        calls = []
        for handle in {h for u in batch if (h := self._decoded_in(u)) is not None}:
            worker = next((w for w in pool.workers if w.handle is handle), None)
            mine = [u for u in batch if self._decoded_in(u) is handle]
            if worker is None:  # the actor died: its cache with it
                for u in mine:
                    self.decoded_at.pop((u.item, u.part), None)
                continue
            if not worker.ready or worker.busy >= pool.depth or (
                    pool.holds_cores and not self._holding(worker) and self._free(worker.node) < 1):
                continue
            take = self._take(pool, mine, partial=True)
            batch[:] = [u for u in batch if u not in take]
            calls.append(self._call(pool, worker, take))
        return calls

    def _worker_for(self, pool: Pool, solo: bool) -> Worker | None:
        """An actor that may take a call now: the least busy ready one under its depth (a suspect of a crash only
        an idle one), on a node with the cores for it where the pool's calls hold cores."""
        depth = 1 if solo else pool.depth
        candidates = [w for w in pool.ready if w.busy < depth]
        if pool.holds_cores:
            candidates = [w for w in candidates if self._holding(w) or self._free(w.node) >= 1]
        return min(candidates, key=lambda w: w.busy, default=None)

    def _take(self, pool: Pool, batch: list[Unit], partial: bool) -> list[Unit]:
        """The next call's inputs: up to `per_call` units and `batch_bytes` (one bigger input alone); a partial
        batch only when `partial` (an idle actor, or nothing more is coming)."""
        if batch[0].solo:
            return [batch.pop(0)]
        n = size = 0
        k = 0
        while k < len(batch) and not batch[k].solo and (k == 0 or (n + batch[k].n <= pool.per_call
                                                                  and size + batch[k].nbytes <= self.batch_bytes)):
            n, size, k = n + batch[k].n, size + batch[k].nbytes, k + 1
        full = n >= pool.per_call or size >= self.batch_bytes or k < len(batch)
        if not (full or partial):
            return []
        take = batch[:k]
        del batch[:k]
        return take

    def _more_coming(self, pool: Pool) -> bool:
        return bool(self.decoding or self.queue or self.later)

    def _hold(self, pool: Pool, worker: Worker) -> None:
        """A worker with calls in flight holds its cores; an idle one none. An actor that serves several pools
        (the frames features sharing actors that decode on the device) holds one slot, not one per pool: it is one
        process and runs their calls one at a time."""
        mates = self._mates(worker)
        want = 1.0 if pool.holds_cores and any(w.busy > 0 for w in mates) else 0.0
        self.used[self._place(worker.node)] += want - sum(w.holds for w in mates)
        for w in mates:
            w.holds = 0.0
        mates[0].holds = want

    def _holding(self, worker: Worker) -> bool:
        return any(w.holds for w in self._mates(worker))

    def _mates(self, worker: Worker) -> list[Worker]:
        """The workers of `worker`'s actor in every pool (itself alone where its actor serves one pool)."""
        if worker.handle is None:
            return [worker]
        return [w for p in self.pools.values() for w in p.workers if w.handle is worker.handle] or [worker]


# Kept because bench/simulate.py needs it: the simulator is checked against the one measured run (the H100 run, under
# this policy: tests/bench/test_simulate.py `test_the_fixed_policy_reproduces_the_h100_run`); without it that check goes.
class FixedScheduler(Scheduler):
    """The policy of runs up to 2026-11 (module docstring), for the simulator and for `scheduler = "fixed"`.
    CPU actors hold a Ray CPU each for the whole run and decode tasks wait for Ray's free CPUs: Ray, not this
    policy, queues them (the simulator models that queue)."""

    name = "fixed"

    def __init__(self, pools: dict[str, Pool], slots: dict[str | None, float], *, max_bytes: int,
                 batch_bytes: int, max_items: int | None = None, device_queue: float = 0) -> None:
        # the same keywords as `Scheduler`, so the runner builds either alike; it routes nothing to the actors'
        # decoder (actor_plan gives no frames decoder under this policy), so `device_queue` stays 0
        super().__init__(pools, slots, max_bytes=max_bytes, batch_bytes=batch_bytes, max_items=max_items or 8)

    def next_decodes(self) -> list[Decode]:
        out = []
        while (self.later or self.queue) and self.alive_items() < self.max_items and (
                self.alive_bytes() < self.max_bytes):
            if self.later:
                item, segment = self.later.popleft()
                kinds: tuple[str, ...] = ("frames",)
            else:
                item, segment = self.queue.popleft(), 0
                kinds = tuple(sorted({self.pools[f].kind for f in self.features[item]}))
            job = Decode(item, segment, None, kinds)
            self.decoding[item, segment] = job
            out.append(job)
        return out

    def decoded(self, item: str, segment: int, units: dict[str, Unit], nbytes: dict[str, int]) -> None:
        self.decoding.pop((item, segment), None)
        # one hold for the whole (item, segment), as then: its objects went when every feature was done
        for kind, b in nbytes.items():
            self.holds[item, segment, kind], self.held_bytes[item, segment, kind] = 0, b
        for feat, unit in units.items():
            self.waiting[feat].append(dataclasses.replace(unit, kind=unit.kind or self.pools[feat].kind))
        for _ in units:
            for kind in nbytes:
                self.holds[item, segment, kind] += 1
        for kind in nbytes:
            self.release(item, segment, kind, 0)

    def release(self, item: str, segment: int, kind: str, n: int = 1) -> None:
        for key in [k for k in self.holds if k[:2] == (item, segment)]:
            self.holds[key] -= n
            if self.holds[key] <= 0:
                del self.holds[key], self.held_bytes[key]

    def _dispatch(self, pool: Pool) -> list[Call]:
        batch = self.waiting[pool.feature]
        flush = not self.decoding
        calls = []
        while batch and (flush or batch[0].solo or sum(u.n for u in batch) >= pool.per_call
                         or sum(u.nbytes for u in batch) >= self.batch_bytes):
            ready = pool.ready
            if not ready:
                break
            worker = min(ready, key=lambda w: w.busy)
            solo = batch[0].solo
            if worker.busy >= 2 or (solo and worker.busy):
                break
            take = [batch.pop(0)]
            n, size = take[0].n, take[0].nbytes
            while (batch and not solo and not batch[0].solo and n + batch[0].n <= pool.per_call
                   and size + batch[0].nbytes <= self.batch_bytes):
                take.append(batch.pop(0))
                n, size = n + take[-1].n, size + take[-1].nbytes
            worker.busy += 2 if solo else 1
            calls.append(Call(pool, worker, tuple(take)))
        return calls

    def _hold(self, pool: Pool, worker: Worker) -> None:
        return  # Ray's own CPU reservations stand for it
