"""Requests a reader makes to S3, counted at the server: `python -m bench.s3_requests [--questions 2000]`.

A SocialIQA-shaped store (bench/store_backends.py: `--questions` train questions and half as many dev ones,
one item each, parts of 512 items) in a bucket of a local S3 server (testing/s3server.py, in this process);
then `SocialIQA3` built over it (its plan made, then taken from the plan cache), a first pass over its samples
in batches of 64 (the dataset's reader opens the store and loads each part it touches: what one DataLoader
worker does in its first epoch) and a second pass (parts cached: no request). Prints each step's requests by
HTTP method and its seconds (docs/scale.md, "The store on S3")."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

from bench.store_backends import qa_store
from testing.s3server import S3Server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=2000)
    args = p.parse_args(argv)
    from reading.datasets import SocialIQA3

    with S3Server() as server:
        os.environ.update(server.env())
        server.create_bucket("bench-requests")
        url = "s3://bench-requests/socialiqa.zarr"
        qa_store(url, args.questions)

        def step(name: str, fn: Callable[[], object]) -> object:
            server.requests.clear()
            t0 = time.perf_counter()
            got = fn()
            dt = time.perf_counter() - t0
            print(f"{name}: {sum(server.requests.values())} requests ({', '.join(f'{k} {v}' for k, v in sorted(server.requests.items()))}), "
                  f"{dt:.2f} s", flush=True)
            return got

        def dataset() -> SocialIQA3:
            return SocialIQA3(url, split="train", modalities=(), text="pooled")

        step("SocialIQA3 construction, plan made", dataset)
        ds = step("SocialIQA3 construction, plan cached", dataset)

        def epoch() -> None:
            for k in range(0, len(ds), 64):
                ds.__getitems__(list(range(k, min(k + 64, len(ds)))))

        step(f"first pass over {len(ds):,} samples, batches of 64", epoch)
        step("second pass (parts cached)", epoch)


if __name__ == "__main__":
    main()
