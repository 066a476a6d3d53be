"""The scheduling policy (pipeline/schedule.py) without Ray: who gets which work, when, and how far decoding runs
ahead. Each test states a rule the H100 run (../shared/gpu-run) showed was needed."""

from __future__ import annotations

from pipeline.schedule import CPU, CUDA, FixedScheduler, Pool, Scheduler, Unit, Worker


def pool(feature: str, kind: str, device: str, n: int, per_call: int, depth: int, holds_cores: bool = True) -> Pool:
    p = Pool(feature, kind, device, per_call, depth, holds_cores)
    p.workers = [Worker(handle=f"{feature}{k}", node="n", ready=True) for k in range(n)]
    return p


def sched(pools: list[Pool], slots: float = 16, policy: type[Scheduler] = Scheduler, **kw) -> Scheduler:
    kw.setdefault("max_bytes", 10**12)
    kw.setdefault("batch_bytes", 10**9)
    return policy({p.feature: p for p in pools}, {"n": slots}, **kw)


def decoded(s: Scheduler, item: str, feats: dict[str, tuple[str, int, int]]) -> None:
    """Decode `item` now: feats -> (kind, n, nbytes)."""
    s.decoding.pop((item, 0), None)
    units = {f: Unit(item, f"ref-{item}-{kind}", n, b, kind=kind) for f, (kind, n, b) in feats.items()}
    s.decoded(item, 0, units, {kind: b for kind, _, b in feats.values()})


def test_cpu_work_is_spread_over_idle_actors_one_item_a_call() -> None:
    """8 decoded clips for 8 acoustic actors: 8 calls of one clip each (the fixed policy sent all 8 to one actor
    as one call while seven sat idle: 8 x 1.7 s in a row)."""
    ac = pool("acoustic", "audio", CPU, n=8, per_call=1, depth=1)
    s = sched([ac])
    for k in range(8):
        decoded(s, f"c{k}", {"acoustic": ("audio", 1, 100)})
    calls = s.next_calls()
    assert sorted(c.worker.handle for c in calls) == [f"acoustic{k}" for k in range(8)]
    assert all(len(c.take) == 1 for c in calls)

    old = pool("acoustic", "audio", CPU, n=8, per_call=8, depth=2)
    f = sched([old], policy=FixedScheduler)
    for k in range(8):
        decoded(f, f"c{k}", {"acoustic": ("audio", 1, 100)})
    (call,) = f.next_calls()
    assert len(call.take) == 8  # the old rule, kept for the simulator: one actor, eight clips


def test_cpu_calls_hold_cores_and_a_busy_actor_gets_no_second_item() -> None:
    ac = pool("acoustic", "audio", CPU, n=4, per_call=1, depth=1)
    s = sched([ac], slots=2)
    for k in range(4):
        decoded(s, f"c{k}", {"acoustic": ("audio", 1, 100)})
    first = s.next_calls()
    assert len(first) == 2 and s.next_calls() == []  # 2 cores: 2 calls at once, the rest wait for a core
    assert s.next_decodes() == []  # and no decode has a core either
    s.call_done(first[0])
    (nxt,) = s.next_calls()
    assert nxt.worker is not first[1].worker  # the one still busy gets nothing more
    assert s.used["n"] == 2


def test_gpu_actor_cores_are_held_only_while_it_has_calls() -> None:
    faces = pool("faces", "frames", CUDA, n=1, per_call=256, depth=2)
    s = sched([faces], slots=4)
    decoded(s, "a", {"faces": ("frames", 60, 600)})
    (call,) = s.next_calls()
    assert s.used["n"] == 1  # its host thread drives the GPU
    s.call_done(call)
    assert s.used["n"] == 0


def test_an_idle_gpu_actor_gets_a_partial_batch_a_busy_one_only_full_batches() -> None:
    frames = pool("frames", "frames", CUDA, n=1, per_call=256, depth=2)
    s = sched([frames])
    s.add("later", ["frames"])  # more is coming
    decoded(s, "a", {"frames": ("frames", 60, 600)})
    (first,) = s.next_calls()
    assert [u.item for u in first.take] == ["a"]  # idle: the GPU does not wait for 256 frames
    for k in range(3):
        decoded(s, f"b{k}", {"frames": ("frames", 60, 600)})
    assert s.next_calls() == []  # busy, and 180 frames are not a full batch while more is coming
    decoded(s, "b3", {"frames": ("frames", 60, 600)})
    decoded(s, "b4", {"frames": ("frames", 60, 600)})
    (second,) = s.next_calls()
    assert [u.item for u in second.take] == ["b0", "b1", "b2", "b3"]  # 240 frames: b4 would pass 256
    assert s.next_calls() == []  # two calls deep


def test_batches_are_bounded_in_bytes_and_in_frames() -> None:
    frames = pool("frames", "frames", CUDA, n=1, per_call=100, depth=10**6)
    s = sched([frames], batch_bytes=1000)
    for k in range(4):  # 6 frames of 100 bytes: the byte limit binds before the count
        decoded(s, f"v{k}", {"frames": ("frames", 6, 600)})
    assert [[u.item for u in c.take] for c in s.next_calls()] == [["v0"], ["v1"], ["v2"], ["v3"]]
    frames = pool("frames", "frames", CUDA, n=1, per_call=10, depth=10**6)
    s = sched([frames])
    for k in range(5):
        decoded(s, f"v{k}", {"frames": ("frames", 4, 40)})
    assert [[u.item for u in c.take] for c in s.next_calls()] == [["v0", "v1"], ["v2", "v3"], ["v4"]]
    frames = pool("frames", "frames", CUDA, n=1, per_call=100, depth=10**6)
    s = sched([frames], batch_bytes=1000)
    decoded(s, "huge", {"frames": ("frames", 1, 5000)})
    assert [[u.item for u in c.take] for c in s.next_calls()] == [["huge"]]  # alone, over the limit


def test_decoding_runs_ahead_only_as_far_as_the_actors_can_take() -> None:
    """2 acoustic actors take one clip each: 3 clips decoded or decoding ahead is enough (one each and the
    next); more would only hold memory and cores."""
    ac = pool("acoustic", "audio", CPU, n=2, per_call=1, depth=1)
    s = sched([ac])
    for k in range(10):
        s.add(f"c{k}", ["acoustic"])
    assert [d.item for d in s.next_decodes()] == ["c0", "c1", "c2"]
    assert s.next_decodes() == []
    decoded(s, "c0", {"acoustic": ("audio", 1, 100)})
    s.next_calls()  # c0 goes to an actor: one more may decode
    assert [d.item for d in s.next_decodes()] == ["c3"]


def test_decoded_data_alive_stays_under_the_byte_bound_and_frees_per_kind() -> None:
    frames = pool("frames", "frames", CUDA, n=4, per_call=256, depth=2)
    ac = pool("acoustic", "audio", CPU, n=16, per_call=1, depth=1)
    s = sched([frames, ac], slots=64, max_bytes=1000, batch_bytes=400)
    for k in range(20):
        s.add(f"c{k}", ["frames", "acoustic"])
    # nothing measured yet: each decode may hold up to batch_bytes (longer videos come in segments)
    d, _ = s.next_decodes()
    decoded(s, d.item, {"frames": ("frames", 60, 300), "acoustic": ("audio", 1, 10)})
    assert len(s.next_decodes()) == 1  # 310 held, ~310 decoding, ~310 more: 930
    assert s.next_decodes() == []  # a fourth would pass 1000 once decoded
    # frames done: their 300 bytes go although the audio is still waiting for its acoustic call
    (call,) = [c for c in s.next_calls() if c.pool is frames]
    s.call_done(call)
    s.release(d.item, 0, "frames")
    assert s.alive_bytes() == 10


def test_an_actor_not_ready_gets_nothing_and_a_suspect_runs_alone() -> None:
    ac = pool("acoustic", "audio", CPU, n=2, per_call=1, depth=1)
    ac.workers[0].ready = False
    s = sched([ac])
    decoded(s, "a", {"acoustic": ("audio", 1, 1)})
    decoded(s, "b", {"acoustic": ("audio", 1, 1)})
    (call,) = s.next_calls()
    assert call.worker is ac.workers[1]
    frames = pool("frames", "frames", CUDA, n=1, per_call=256, depth=2)
    s = sched([frames])
    s.requeue("frames", [Unit("x", None, 5, 5, kind="frames"), Unit("y", None, 5, 5, kind="frames")])
    (call,) = s.next_calls()
    assert [u.item for u in call.take] == ["x"] and s.next_calls() == []  # y waits for an idle actor


def test_a_worker_on_a_node_without_slots_of_its_own_still_gets_work() -> None:
    """An actor whose node Ray listed with no CPU (or an unknown one) counts on the first node's slots."""
    ac = pool("acoustic", "audio", CPU, n=1, per_call=1, depth=1)
    ac.workers[0].node = "elsewhere"
    s = sched([ac], slots=1)
    decoded(s, "a", {"acoustic": ("audio", 1, 1)})
    (call,) = s.next_calls()
    assert s.used["n"] == 1
    s.call_done(call)
    assert s.used["n"] == 0
