"""What the driver receives per clip on a run into a bucket, with every row going through it and with the model
actors writing their own parts (`worker_parts`, pipeline/ownparts.py): the sample (all five features) extracted
twice into a moto S3 server on 127.0.0.1 started here, each time into a new store, with a local Ray.

    python -m bench.driver_bytes [--work /tmp/siq-driver-bytes] [--features frames faces ...]

The figures are the run report's `driver_received` (every `ray.get` the driver makes, counted as Ray serializes
it: pickle protocol 5 with the arrays out of band), per clip. Not a `bench_*` module (the plain `make bench`
does not run it): two sample runs, ~2-5 min on 2 cores. Discussed in docs/scale.md ("Workers write their own
parts").
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
from pathlib import Path

KIB = 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/siq-driver-bytes"), help="emptied, then filled")
    ap.add_argument("--features", nargs="*", default=None, help="only these features (default: all five)")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)

    import logging

    from moto.server import ThreadedMotoServer

    from testing.s3server import create_bucket

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                       "AWS_REGION": "us-east-1", "SIQ_CALIBRATION_FILE": str(args.work / "calibration.json")})
    create_bucket(endpoint, "bench")

    from manifests.sample import make_sample
    from pipeline.config import load_config
    from pipeline.run import run_extract
    from store import open_store

    raw = args.work / "sample"
    make_sample(raw)
    rows = []
    try:
        for label, on in (("every row through the driver", False), ("actors write their parts", True)):
            config = load_config("sample", {"worker_parts": on})
            url = f"s3://bench/{'after' if on else 'before'}.zarr"
            report = run_extract("sample", raw, url, config, only=args.features)
            got, clips = report.driver_received, max(1, report.driver_received.get("clips", 0))
            done = sum(c["done"] for c in report.counts.values())
            store = open_store(url)
            parts = sum(len(store.index(f).parts) for f in store.features())
            store.close()
            rows.append((label, report.exit_code, clips, done, got.get("pairs written by actors", 0), parts,
                         got.get("model results", 0) / clips, got.get("decode records", 0) / clips, report.seconds))
    finally:
        server.stop()
    print(f"{'':32} {'exit':>4} {'clips':>5} {'pairs':>5} {'by actors':>9} {'parts':>5} {'results KiB/clip':>16} "
          f"{'decode KiB/clip':>15} {'wall s':>7}")
    for label, code, clips, done, by_actors, parts, results, decodes, secs in rows:
        print(f"{label:32} {code:4d} {clips:5d} {done:5d} {by_actors:9d} {parts:5d} {results / KIB:16.1f} "
              f"{decodes / KIB:15.2f} {secs:7.1f}")


if __name__ == "__main__":
    main()
