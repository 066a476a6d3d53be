"""How a video in a bucket is best decoded (docs/scale.md, "Raw data in a bucket"): a copy on the node's disk
(objectio/cache.py `local_copy`: one GET, then local reads) against ranged reads through a file object
(`ranged`: a GET per buffer and per seek), for clips of 5 to 100 MB on the local S3 server (moto, as the tests
run it). Printed per clip: the copy's fetch, one decode of every frame from the copy, the same decode by ranged
reads; a pair's three decodes (frames, faces and the audio track each decode the video: one copy, or three ranged
passes); and opening the header alone (the stream choice at planning).

    python -m bench.raw_fetch [--sizes-mb 5,25,100]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

SECONDS_PER_MB = 0.4  # ~20 Mbit/s of 640x360 noise: a 100 MB clip is ~40 s, as a long Social-IQ clip at a high rate


def _make_clip(path: Path, mb: int) -> None:
    seconds = max(2.0, mb * SECONDS_PER_MB)
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=640x360:rate=30,noise=alls=60:allf=t,format=yuv420p", "-f", "lavfi", "-i",
                    "sine=frequency=440:sample_rate=44100", "-t", f"{seconds:.1f}", "-c:v", "libx264",
                    "-preset", "ultrafast", "-b:v", f"{mb * 8 / seconds:.1f}M", "-maxrate", f"{mb * 8 / seconds:.1f}M",
                    "-bufsize", "2M", "-c:a", "aac", "-movflags", "+faststart", str(path)], check=True)


def _decode_all(source: object) -> int:
    """Every video frame and the audio track, as the decoders read a file (PyAV from a path or a file object)."""
    import av

    n = 0
    with av.open(source) as container:  # type: ignore[arg-type]
        for frame in container.decode(video=0):
            n += frame.pts is not None
    return n


def _header(source: object) -> int:
    import av

    with av.open(source) as container:  # type: ignore[arg-type]
        return len(container.streams)


class _Requests(logging.Handler):
    """Counts the server's GET lines (werkzeug logs one per request) instead of printing them."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.gets += "GET /" in record.getMessage()  # a 206 line is coloured: \x1b[35m before GET


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes-mb", default="5,25,100")
    args = p.parse_args(argv)
    import socket

    from moto.server import ThreadedMotoServer

    from objectio import cache, raw_root
    from objectio.client import obstore
    from objectio.paths import client
    from testing.s3server import create_bucket

    requests = _Requests()
    server_log = logging.getLogger("werkzeug")
    server_log.setLevel(logging.INFO)
    server_log.propagate = False
    server_log.addHandler(requests)
    work = Path(tempfile.mkdtemp(prefix="siq-raw-fetch-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=True)  # verbose: a line per request
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL": endpoint, "SIQ_RAW_CACHE": str(work / "cache")})
    try:
        create_bucket(endpoint, "raw")
        sizes = [int(s) for s in args.sizes_mb.split(",")]
        for mb in sizes:
            clip = work / f"clip-{mb}mb.mp4"
            _make_clip(clip, mb)
            obstore.put(client("s3://raw"), f"video/{clip.name}", clip.read_bytes())
        root = raw_root("s3://raw/video")
        print(f"S3 server {endpoint} (moto, this machine); best of 2; seconds (GET requests)")
        print(f"{'clip':>10} {'fetch copy':>13} {'decode copy':>12} {'decode ranged':>16} "
              f"{'pair: copy':>11} {'pair: ranged':>13} {'header: copy':>13} {'header: ranged':>17}")
        for mb in sizes:
            obj = root / f"clip-{mb}mb.mp4"
            size = obj.stat().st_size

            def best(fn, repeats: int = 2) -> float:
                t = float("inf")
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    fn()
                    t = min(t, time.perf_counter() - t0)
                return t

            def fetch(obj: object = obj) -> Path:
                shutil.rmtree(work / "cache", ignore_errors=True)
                return cache.local_copy(obj)

            gets = requests.gets
            t_fetch = best(fetch)
            gets_fetch = (requests.gets - gets) // 2
            copy = cache.local_copy(obj)
            t_copy = best(lambda c=copy: _decode_all(str(c)))

            def by_ranges(o=obj) -> int:
                with cache.ranged(o) as f:
                    return _decode_all(f)

            gets = requests.gets
            t_ranged = best(by_ranges)
            gets_ranged = (requests.gets - gets) // 2

            def header_ranged(o=obj) -> int:
                with cache.ranged(o) as f:
                    return _header(f)

            gets = requests.gets
            t_head_ranged = best(header_ranged, 3)
            gets_head = (requests.gets - gets) // 3
            print(f"{size / 1e6:>8.1f}MB {t_fetch:>8.2f} ({gets_fetch}) {t_copy:>12.2f} {t_ranged:>10.2f} ({gets_ranged:>3}) "
                  f"{t_fetch + 3 * t_copy:>11.2f} {3 * t_ranged:>13.2f} {t_fetch:>13.2f} {t_head_ranged:>11.3f} ({gets_head})")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
