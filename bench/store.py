"""`make bench-store`: the store alone (no models) at growing item counts (docs/design.md, "Store").

Per item count N (default 35,000 and 1,000,000) a fresh store gets N synthetic items of a `pooled`
feature (one 384-d float32 row, a SocialIQA question's vector) and, up to `--tokens-max` items, a `tokens`
feature (20..60 rows of 384-d float16 each). Measured, each as a per-item cost so that N can be compared:
- commit: `StoreWriter.commit_batch` in batches of `--batch` items (what the run's committer does; once,
  while the store is built);
- plan: `make_plan` over every item (all up to date: the cost of a re-run deciding it has nothing to do),
  timed in a process of its own, as a re-run meets it (`_alone` says why);
- open + items: a fresh `Store`, its index loaded and `items()` listed (what dataset construction reads),
  likewise in a process of its own;
- reads: 20,000 random single items (`read(...).features[...]`), one at a time, and batched (`Store.rows`,
  64 items per call), on one `Store` per N opened and warmed (a pass over the same items) beforehand; each
  rate the median of several passes over those items (`_reads`);
- files and bytes on disk;
- resident memory (VmRSS, MB) of a reader in a process of its own: after open + `items()` (its index), and
  after a pass of single and batched reads over the random items (its part cache then holding nearly every
  part), and that less the bytes of the rows it caches (its index and bookkeeping); and, at the end, of the
  benchmark's own process with every size's warmed readers;
- what the chunks' content checksums cost (`--checksums both`, the default): a twin of each store is written
  with the same items but chunks without zstd's checksum (`_chunk_checksums`: the benchmark swaps the codec it
  writes with; the store itself has no such switch), and both are measured where a checksum acts, never on
  warmed readers (their reads decompress nothing): the commit, a cold pass (a fresh reader in a process of
  its own, single reads of the random items, every part it touches decompressed once) and lazy reads (a
  reader with `whole_array_bytes=0`: one zarr call, one chunk decompressed and checked, per read), on and off
  alternating within each repeat. Printed as a table of medians and the cost ratio on/off. Those whole-store
  figures move 10-30 % from run to run on a shared VM, more than the cost itself, so a second table gives
  the figure that holds still: alternating pairs (`decode_pairs`: the same real chunks of the store and its
  twin decompressed by zarr's zstd codec, with and without the checksum; `commit_pairs`: the same batch
  committed with and without), the median of the per-pair ratios.
All stores are built first and kept until the end; then plan, open + items and the reads are measured
`--repeats` times, the sizes interleaved within each repeat (N1, N2, N1, N2, ...) so that a change in the
machine's load (it is shared) hits every size alike, and each figure is the median of its repeats. Prints a
table and the ratio of each per-item cost at the largest N to the smallest (reads: the ratio of rates, so
below 1 when reads slow down; a cost ratio of 1.5 is a rate ratio of 0.67).

    python -m bench.store [--items 35000,1000000] [--batch 512] [--tokens-max 35000] [--repeats 3] [--dir DIR]
                          [--checksums both|on|off] [--pairs K]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from zarr.codecs import ZstdCodec

from rows import FeatureRows
from store import Store, StoreWriter, Wanted, make_plan, parts

DIM = 384
READS = 20_000
SINGLE_PASSES, BATCHED_PASSES = 3, 15  # passes over the same READS random items; medians
LAZY_READS = 2_000  # lazy reads (one zarr call each, ~0.5 ms): the first of the random items


def _spec(name: str) -> dict:
    return {"extractor": "synthetic", "version": "1", "config": {}, "columns": [f"h{i}" for i in range(DIM)],
            "rate_hz": None, "weights": "none", "spec_hash": f"bench-{name}"}


def _rows(rng: np.random.Generator, n_rows: int, dtype: str) -> FeatureRows:
    return FeatureRows(rng.standard_normal((n_rows, DIM)).astype(dtype), np.zeros((n_rows, 2)))


@contextmanager
def _chunk_checksums(on: bool) -> Iterator[None]:
    """Parts written meanwhile have chunks with zstd's content checksum (as the store writes them) or without
    (the store's format before issue 35, which its readers still read): the twin that shows what checking
    costs. Only this benchmark swaps the codec; the store writes checksums always."""
    real = parts.CHUNK_CODEC
    parts.CHUNK_CODEC = real if on else ZstdCodec(level=real.level, checksum=False)
    try:
        yield
    finally:
        parts.CHUNK_CODEC = real


def _has_checksums(path: Path, feature: str) -> bool:
    """Whether the first part of `feature` was written with chunk checksums (its features array's codec)."""
    meta = json.loads(next((path / feature / "parts").glob("*/features/zarr.json")).read_text())
    codecs = meta["codecs"][0]["configuration"]["codecs"] if meta["codecs"][0]["name"] == "sharding_indexed" \
        else meta["codecs"]
    return any(c["name"] == "zstd" and c["configuration"]["checksum"] for c in codecs)


def _commit(path: Path, n: int, batch: int, tokens: bool) -> dict[str, float]:
    rng = np.random.default_rng(0)
    out = {}
    feats = ["pooled", *(["tokens"] if tokens else [])]
    with StoreWriter(path, "bench") as w:
        for f in feats:
            w.set_feature(f, _spec(f))
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                w.commit_batch(f, _items(rng, f, start, min(n, start + batch)))
            out[f"commit {f} us/item"] = (time.perf_counter() - t0) / n * 1e6
    return out


def _items(rng: np.random.Generator, feature: str, start: int, stop: int) -> list[tuple[str, FeatureRows, dict]]:
    """The synthetic items `start`..`stop` of `feature`, as `commit_batch` takes them."""
    items = []
    for k in range(start, stop):
        rows = _rows(rng, 1, "float32") if feature == "pooled" else _rows(rng, int(rng.integers(20, 61)), "float16")
        items.append((f"q{k:07d}", rows, {"fingerprint": f"fp{k}", "spec_hash": f"bench-{feature}",
                                          "source": {"qa": f"{k:064x}"}, "duration_s": None}))
    return items


def _picks(n: int) -> list[str]:
    rng = np.random.default_rng(1)
    return [f"q{k:07d}" for k in rng.integers(0, n, min(READS, n))]


def _warm(s: Store, feature: str, picks: list[str]) -> None:
    """A pass over the items read later: their parts loaded, the batched path's structures built."""
    for item in picks:
        s.read(feature, item).features[...]
    for k in range(0, len(picks), 64):
        s.rows(feature, "features", [(item, 0) for item in picks[k:k + 64]])


def _reads(s: Store, feature: str, picks: list[str]) -> dict[str, float]:
    """Rates of single and batched reads, each the median of several passes over `picks`: one pass of
    batched reads takes ~20 ms, short enough for a moment of the machine's own work (page-cache writeback
    of the store just built, the host) to halve its figure, which once looked like a slow mode of the reads."""
    single, batched = [], []
    for _ in range(SINGLE_PASSES):
        t0 = time.perf_counter()
        for item in picks:
            s.read(feature, item).features[...]
        single.append((time.perf_counter() - t0) / len(picks))
    for _ in range(BATCHED_PASSES):
        t0 = time.perf_counter()
        for k in range(0, len(picks), 64):
            s.rows(feature, "features", [(item, 0) for item in picks[k:k + 64]])
        batched.append((time.perf_counter() - t0) / len(picks))
    return {f"read {feature} single/s": 1 / statistics.median(single),
            f"read {feature} batched 64/s": 1 / statistics.median(batched)}


def _disk(path: Path) -> tuple[int, int]:
    files = size = 0
    for folder, _, names in os.walk(path):
        for name in names:
            files += 1
            size += os.path.getsize(os.path.join(folder, name))
    return files, size


def with_store(base: Path | None, keep: bool, build: Callable[[Path], str], measure: Callable[[Path], None]) -> None:
    """`build` a store in `base/store.zarr` unless it is there (it prints what it built), `measure` it, and
    remove it afterwards unless `keep`."""
    folder = base or Path(tempfile.mkdtemp(prefix="bench-store-"))
    out = folder / "store.zarr"
    try:
        if not (out / "zarr.json").exists():
            t0 = time.perf_counter()
            what = build(out)
            files, size = _disk(out)
            print(f"built {out}: {what} in {time.perf_counter() - t0:.1f} s, {files} files, {size / 1e9:.2f} GB",
                  flush=True)
        measure(out)
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def build(path: Path, n: int, batch: int, tokens: bool, checksums: bool = True) -> dict[str, float]:
    """The store of `n` items, with its commit costs, files and bytes; `checksums`: its chunks' (the store's
    own are on; off: see `_chunk_checksums`)."""
    out: dict[str, float] = {"items": n}
    with _chunk_checksums(checksums):
        out.update(_commit(path, n, batch, tokens))
    assert _has_checksums(path, "pooled") == checksums, path
    files, size = _disk(path)
    out["files"], out["MB"] = files, size / 1e6
    out["files per 1000 pairs"] = files / (n * (2 if tokens else 1)) * 1000
    return out


def measure_once(path: Path, n: int, features: list[str], readers: dict[str, Store],
                 picks: list[str]) -> dict[str, float]:
    """One repeat of the per-item costs that do not change the store: plan and open + items, each in a
    process of its own (`_alone`), then the reads on this process's warmed readers."""
    out = {**_alone("plan", path, n), **_alone("open+items", path, n)}
    for f in features:
        out.update(_reads(readers[f], f, picks))
    return out


def _alone(what: str, path: Path, n: int) -> dict[str, float]:
    """`what`'s figures, measured in a new Python process, as a user meets it: a re-run plans once per
    `make extract`, a training script opens the store once. Timed in the benchmark's own process, the figure
    depended on what ran before: on this machine (a VM) memory the process has never held costs 2-8 µs per
    4 KiB page on first touch, and memory freed more than about a second earlier is handed back to the host
    (docs/design.md, "Why this layout"), so a step that could reuse what the previous step freed looked
    cheaper (at 35,000 items nearly always, at a million rarely) and a change that freed less made the
    next step look slower. A process of its own is also what a reader's resident memory means."""
    got = subprocess.run([sys.executable, "-m", "bench.store", "--one", what, str(path), str(n)],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in got.stdout.strip().splitlines())}


def checksum_once(paths: dict[bool, Path], n: int, first: bool) -> dict[bool, dict[str, float]]:
    """One repeat of what the chunk checksums cost: the store with them (`paths[True]`) and its twin without,
    `first` first, each in a process of its own (`_alone`: its cold pass and lazy reads of every feature)."""
    return {on: _alone("checksums", paths[on], n) for on in (first, not first)}


# What the checksums cost, as alternating pairs (`decode_pairs`, `commit_pairs`): on this VM a single whole-store figure
# moves 10-30 % from run to run, more than the checksum's cost, so the table of whole-store figures once showed
# commits faster with checksums than without. Here each pair times the same work with and without the checksum,
# one right after the other (the order alternating from pair to pair), and the figure is the median of the
# per-pair ratios: a change in the machine's load hits both halves of a pair alike.
DECODE_PAIRS = 101  # pairs of passes over DECODE_CHUNKS real chunks (~5-15 ms a half)
DECODE_CHUNKS = 16
COMMIT_PAIRS = 21  # pairs of commits (pooled: `--batch` items, ~70 ms; tokens: TOKENS_PAIR_BATCH, ~120 ms)
TOKENS_PAIR_BATCH = 128


def _stored_chunks(path: Path, feature: str, limit: int = DECODE_CHUNKS) -> list[bytes]:
    """The first `limit` compressed inner chunks of `feature`'s features arrays, as they are on disk (parts in
    the order they were committed): a chunk file whole, or a shard's inner chunks cut out by its index (zarr's
    sharding codec: at the end, per inner chunk an offset and a length as little-endian uint64, then crc32c)."""
    out: list[bytes] = []
    for part in sorted((path / feature / "parts").iterdir()):  # names start with the part's seq
        meta = json.loads((part / "features/zarr.json").read_text())
        codec = meta["codecs"][0]
        for f in sorted(x for x in (part / "features/c").rglob("*") if x.is_file()):
            data = f.read_bytes()
            if codec["name"] != "sharding_indexed":
                out.append(data)
            else:
                outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
                inner = codec["configuration"]["chunk_shape"]
                n = int(np.prod([-(-o // i) for o, i in zip(outer, inner, strict=True)]))
                index = np.frombuffer(data[-(16 * n + 4):-4], "<u8").reshape(n, 2)
                out += [data[int(o):int(o + k)] for o, k in index if o != np.iinfo(np.uint64).max]
            if len(out) >= limit:
                return out[:limit]
    return out


def _pair_ratios(run: Callable[[bool, Any], float], pairs: int,
                 work: Callable[[int], Any] = lambda k: None) -> tuple[list[float], list[float], list[float]]:
    """`pairs` pairs of `run(True, work(k))` and `run(False, work(k))` (each returns the seconds it took),
    the order alternating from pair to pair: the times on, off, and the per-pair ratios on/off."""
    on_t, off_t, ratios = [], [], []
    for k in range(pairs):
        job = work(k)
        t = {w: run(w, job) for w in ((True, False) if k % 2 == 0 else (False, True))}
        on_t.append(t[True])
        off_t.append(t[False])
        ratios.append(t[True] / t[False])
    return on_t, off_t, ratios


def _pair_figure(on_t: list[float], off_t: list[float], ratios: list[float], per: int) -> dict[str, float]:
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return {"on": statistics.median(on_t) / per * 1e6, "off": statistics.median(off_t) / per * 1e6,
            "cost": statistics.median(ratios), "q1": q1, "q3": q3, "pairs": len(ratios)}


def decode_pairs(paths: dict[bool, Path], feature: str, pairs: int = DECODE_PAIRS) -> dict[str, float]:
    """The decoder's cost of the checksum on real chunks: the same items' chunks of the store (with the
    checksum) and of its twin (without), decompressed by zarr's zstd codec (numcodecs' Zstd: the frame says
    whether it carries a checksum, and the decoder checks it when it does) in alternating pairs. Every read
    that decompresses a chunk pays this; a read also does more (index, zarr's calls), so a read's cost is at
    most this ratio. µs per chunk."""
    import numcodecs

    chunks = {on: _stored_chunks(paths[on], feature) for on in (True, False)}
    zstd = numcodecs.Zstd()
    assert chunks[True] and len(chunks[True]) == len(chunks[False]), (feature, paths)
    for a, b in zip(chunks[True], chunks[False], strict=True):  # the same data, the checksum's 4 bytes apart
        assert len(a) == len(b) + 4 and zstd.decode(a) == zstd.decode(b), feature

    def run(on: bool, _: Any) -> float:
        t0 = time.perf_counter()
        for c in chunks[on]:
            zstd.decode(c)
        return time.perf_counter() - t0

    return _pair_figure(*_pair_ratios(run, pairs), per=len(chunks[True]))


def commit_pairs(base: Path, feature: str, batch: int, pairs: int = COMMIT_PAIRS) -> dict[str, float]:
    """`commit_batch` of the same `batch` items into a store with chunk checksums and into its twin without,
    in alternating pairs (two fresh scratch stores, growing alike). µs per item."""
    paths = {on: base / f"pairs-{feature}-{'on' if on else 'off'}.zarr" for on in (True, False)}
    for p in paths.values():
        shutil.rmtree(p, ignore_errors=True)
    rng = np.random.default_rng(2)
    try:
        with StoreWriter(paths[True], "bench") as w_on, StoreWriter(paths[False], "bench") as w_off:
            writers = {True: w_on, False: w_off}
            for w in writers.values():
                w.set_feature(feature, _spec(feature))

            def run(on: bool, items: list) -> float:
                with _chunk_checksums(on):
                    t0 = time.perf_counter()
                    writers[on].commit_batch(feature, items)
                    return time.perf_counter() - t0

            def items(k: int) -> list:
                return _items(rng, feature, k * batch, (k + 1) * batch)

            figure = _pair_figure(*_pair_ratios(run, pairs, items), per=batch)
        for on, p in paths.items():
            assert _has_checksums(p, feature) == on, p
        return figure
    finally:
        for p in paths.values():
            shutil.rmtree(p, ignore_errors=True)


def _rss_mb() -> float:
    """This process's resident memory now (VmRSS), in MB."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def one(what: str, path: Path, n: int) -> dict[str, float]:
    """`plan`: the per-item cost of `make_plan` over every item (all up to date), in µs. `open+items`: that
    of a fresh `Store`, its index loaded and `items()` listed, and the reader's resident memory then (MB);
    `reader`: the resident memory of such a reader after a pass of single and batched reads over the
    benchmark's random items (its part cache then holds nearly every part: a million `pooled` rows are
    1,536 MB of float32). `checksums`: per feature, the rate of a fresh reader's first pass of single reads
    over the random items (`cold`: each part it touches loaded, so decompressed, once), then that of single
    reads of the first `LAZY_READS` of them by a reader that loads no part whole (`lazy`: a zarr call and a
    chunk decompressed per read)."""
    if what == "checksums":
        out = {}
        for feature in sorted(Store(path).features(), key=["pooled", "tokens"].index):
            for mode, picks in (("cold", _picks(n)), ("lazy", _picks(n)[:LAZY_READS])):
                s = Store(path, whole_array_bytes=0) if mode == "lazy" else Store(path)
                s.items(feature)  # the index loaded: not timed
                t0 = time.perf_counter()
                for item in picks:
                    s.read(feature, item).features[...]
                out[f"read {feature} {mode} single/s"] = len(picks) / (time.perf_counter() - t0)
                s.close()
        return out
    if what == "plan":
        wanted = [Wanted("pooled", f"q{k:07d}", f"fp{k}") for k in range(n)]
        t0 = time.perf_counter()
        plan = make_plan(path, wanted)
        dt = time.perf_counter() - t0
        assert not plan.todo and len(plan.skipped) == n
        return {"plan us/item": dt / n * 1e6}
    t0 = time.perf_counter()
    s = Store(path)
    listed = s.items("pooled")
    dt = time.perf_counter() - t0
    assert len(listed) == n
    if what == "open+items":
        return {"open+items us/item": dt / n * 1e6, "reader MB after open+items": _rss_mb()}
    del listed
    _warm(s, "pooled", _picks(n))
    # what the reader holds beyond the rows it caches (bounded by its part_cache_bytes): index and bookkeeping
    return {"reader MB after reads": _rss_mb(), "reader MB less part cache": _rss_mb() - s.cached_bytes / 2**20}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", default="35000,1000000")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--tokens-max", type=int, default=35_000, help="the tokens feature only up to this many items")
    p.add_argument("--repeats", type=int, default=3, help="repeats of plan, open and reads (medians)")
    p.add_argument("--dir", default=None, help="where the stores go (default: a temporary folder, removed)")
    p.add_argument("--checksums", choices=("both", "on", "off"), default="both",
                   help="chunks with zstd's checksum (on: as the store writes them), without (off), or both: "
                        "the main table on, and a table of what the checksums cost (a twin store off)")
    p.add_argument("--pairs", type=int, default=None,
                   help=f"alternating pairs per paired figure (default: {DECODE_PAIRS} decoding, {COMMIT_PAIRS} "
                        "committing)")
    p.add_argument("--one", nargs=3, metavar=("WHAT", "STORE", "N"), help=argparse.SUPPRESS)  # see _alone
    args = p.parse_args(argv)
    if args.one:
        for k, v in one(args.one[0], Path(args.one[1]), int(args.one[2])).items():
            print(f"{k} {v:.4f}")
        return
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-store-"))
    sizes = [int(x) for x in args.items.split(",")]
    results = []
    twins = args.checksums == "both"
    try:
        built, readers, unsummed, paired = {}, {}, {}, {}
        for n in sizes:
            path = base / f"store-{n}.zarr"
            shutil.rmtree(path, ignore_errors=True)
            built[n] = build(path, n, args.batch, n <= args.tokens_max, args.checksums != "off")
            if twins:
                shutil.rmtree(base / f"store-{n}-off.zarr", ignore_errors=True)
                unsummed[n] = build(base / f"store-{n}-off.zarr", n, args.batch, n <= args.tokens_max, False)
            features = ["pooled", *(["tokens"] if n <= args.tokens_max else [])]
            readers[n] = {f: Store(path) for f in features}
            for f in features:
                _warm(readers[n][f], f, _picks(n))
            print(f"built {n:,} items: " + "  ".join(f"{k} {v:,.1f}" for k, v in built[n].items()), flush=True)
        repeats: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
        sums: dict[int, dict[bool, list[dict[str, float]]]] = {n: {True: [], False: []} for n in sizes}
        for rep in range(args.repeats):
            for n in sizes:
                got = measure_once(base / f"store-{n}.zarr", n, list(readers[n]), readers[n], _picks(n))
                repeats[n].append(got)
                print(f"repeat {rep + 1} {n:,} items: " + "  ".join(f"{k} {v:,.1f}" for k, v in got.items()),
                      flush=True)
                if twins:
                    paths = {True: base / f"store-{n}.zarr", False: base / f"store-{n}-off.zarr"}
                    for on, figures in checksum_once(paths, n, rep % 2 == 0).items():
                        sums[n][on].append(figures)
                        print(f"repeat {rep + 1} {n:,} items, checksums {'on' if on else 'off'}: "
                              + "  ".join(f"{k} {v:,.1f}" for k, v in figures.items()), flush=True)
        if twins:  # the trustworthy figure: alternating pairs (DECODE_PAIRS says why)
            for n in sizes:
                paths = {True: base / f"store-{n}.zarr", False: base / f"store-{n}-off.zarr"}
                for f in readers[n]:
                    paired[f"decode {f} chunk us, {n:,} items"] = decode_pairs(paths, f, args.pairs or DECODE_PAIRS)
            paired["commit pooled us/item"] = commit_pairs(base, "pooled", args.batch, args.pairs or COMMIT_PAIRS)
            if sizes[0] <= args.tokens_max:
                paired["commit tokens us/item"] = commit_pairs(base, "tokens", TOKENS_PAIR_BATCH, args.pairs or COMMIT_PAIRS)
        for n in sizes:
            r = dict(built[n])
            r.update(_alone("reader", base / f"store-{n}.zarr", n))
            r.update({k: statistics.median(x[k] for x in repeats[n]) for k in repeats[n][0]})
            results.append(r)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
        else:
            for n in sizes:
                shutil.rmtree(base / f"store-{n}.zarr", ignore_errors=True)
                shutil.rmtree(base / f"store-{n}-off.zarr", ignore_errors=True)
    print(f"benchmark process (every size's warmed readers): {_rss_mb():,.0f} MB resident")
    keys = [k for k in results[0] if k != "items"]
    print(f"\n{'measure':<30}" + "".join(f"{int(r['items']):>14,}" for r in results) + f"{'ratio last/first':>18}")
    for k in keys:
        vals = [r.get(k) for r in results]
        row = "".join(f"{v:>14,.1f}" if v is not None else f"{'-':>14}" for v in vals)
        ratio = vals[-1] / vals[0] if None not in (vals[0], vals[-1]) and vals[0] else float("nan")
        print(f"{k:<30}{row}{ratio:>18.2f}")
    if twins:
        print_checksums(sizes, built, unsummed, sums)
        print_paired(paired)


def print_checksums(sizes: list[int], built: dict[int, dict[str, float]], unsummed: dict[int, dict[str, float]],
                    sums: dict[int, dict[bool, list[dict[str, float]]]]) -> None:
    """The table of what the chunk checksums cost: per size, each figure with them (on) and without (off),
    and the cost ratio on/off (a time ratio for every figure, rates inverted: above 1 is slower with them)."""
    print(f"\nchunk checksums (zstd content checksum), on vs off (a twin store written without them; reads: "
          f"medians of {len(next(iter(sums.values()))[True])} repeats, commits: one build each)")
    print(f"{'measure':<30}" + "".join(f"{f'{n:,} on':>14}{f'{n:,} off':>14}{'cost on/off':>13}" for n in sizes))
    keys = [k for k in built[sizes[0]] if k.startswith("commit ")] + list(sums[sizes[0]][True][0])
    for k in keys:
        row = ""
        for n in sizes:
            on, off = ((built[n] if w else unsummed[n]).get(k) if k.startswith("commit ")
                       else (statistics.median(x[k] for x in sums[n][w]) if k in sums[n][w][0] else None)
                       for w in (True, False))
            if on is None or off is None:
                row += f"{'-':>14}{'-':>14}{'-':>13}"
                continue
            cost = on / off if k.startswith("commit ") else off / on
            row += f"{on:>14,.1f}{off:>14,.1f}{cost:>13.3f}"
        print(f"{k:<30}{row}")


def print_paired(paired: dict[str, dict[str, float]]) -> None:
    """The table of the paired figures: medians of each half's time, and the median of the per-pair ratios
    on/off with their quartiles (how far single pairs spread)."""
    print("\nchunk checksums, alternating pairs (the figure to trust: each pair times the same work on and off "
          "back to back; cost = median of the per-pair ratios on/off; the whole-store table above is not paired "
          "and moves 10-30 % run to run on a shared VM)")
    print(f"{'measure':<38}{'on':>12}{'off':>12}{'cost on/off':>13}{'pairs q1-q3':>16}{'pairs':>7}")
    for k, v in paired.items():
        spread = f"{v['q1']:.3f}-{v['q3']:.3f}"
        print(f"{k:<38}{v['on']:>12,.1f}{v['off']:>12,.1f}{v['cost']:>13.3f}{spread:>16}{v['pairs']:>7.0f}")


if __name__ == "__main__":
    main()
