"""A cluster with no shared filesystem (docs/design.md, "Raw data in a bucket"): a two-node Ray cluster (as
tests/pipeline/test_cluster.py starts it: head 2 CPUs + worker node 1 CPU, token authentication) whose nodes and driver each
run in a working folder and temporary folder of their own, with the raw data only in a bucket and the store only in
a bucket (the moto server on 127.0.0.1); the store equals a local run's on the same files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import load_config
from pipeline.run import run_extract
from store.reader import open_store
from tests import s3server
from tests.media.test_raw_s3 import upload
from tests.pipeline.test_cluster import CONFIG, ROOT, two_nodes

pytestmark = pytest.mark.slow

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name


@pytest.fixture(scope="module")
def bucket_cluster(s3_server: str) -> Iterator[dict[str, str]]:
    """Head + worker node, each started in a folder of its own with a TMPDIR of its own, the S3 server's
    endpoint and credentials in their environment (as a cloud cluster's nodes get them); yields the driver's."""
    aws = {**s3server.CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}
    with two_nodes("siq-ray3-", node_env=aws, own_folders=True) as (tmp, token, gcs, _):
        driver = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        driver.update(aws, RAY_AUTH_TOKEN_PATH=str(token), RAY_ADDRESS=f"127.0.0.1:{gcs}", SIQ_TEST_HOME=str(tmp))
        yield driver


def test_raw_data_and_store_only_in_a_bucket_on_a_two_node_cluster(bucket_cluster: dict[str, str], s3_url: str,
                                                                   tiny_root_template: Path, tmp_path: Path) -> None:
    home = Path(bucket_cluster["SIQ_TEST_HOME"])
    raw = upload(tiny_root_template, s3_url.removesuffix("/store") + "/raw")
    out = s3_url.removesuffix("/store") + "/features/tiny.zarr"
    driver_home = tmp_path / "driver"  # the driver's folder: neither node's
    (driver_home / "tmp").mkdir(parents=True)
    (driver_home / "loudness.toml").write_text(CONFIG)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "pipeline", "extract", "--dataset", "sample", "--raw", raw, "--out", out,
           "--config", "loudness.toml"]
    result = subprocess.run(cmd, env={**bucket_cluster, "TMPDIR": str(driver_home / "tmp"), "PYTHONPATH": pythonpath},
                            cwd=driver_home, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    report = open_store(out).last_run()
    assert report["counts"]["loudness"] == {"done": 3, "skipped": 0, "failed": 0, "n/a": 0}
    cluster = report["cluster"]
    assert len(cluster["nodes"]) == 2 and set(cluster["work"]) == set(cluster["nodes"]), cluster
    # the audio files were read from copies in the run's folders under the nodes' own temporary folders, each
    # removed by its node as the run ended: nothing of the run is left on a node, nor under the driver's
    removed = re.search(r"removed this run's copies of raw objects from (\d+) node\(s\): ([\d.]+) MB", result.stderr)
    assert removed and removed[1] == "2" and float(removed[2]) > 0, result.stderr[-3000:]
    left = [p for d in (home / "node0/tmp", home / "node1/tmp", driver_home / "tmp") for p in d.glob("siq-raw-*")]
    assert not left, left

    local_config = tmp_path / "local.toml"
    local_config.write_text(CONFIG.replace("cpu_actors = 2", "cpu_actors = 1"))
    run_extract("sample", tiny_root_template, tmp_path / "local.zarr", load_config(local_config))
    a, b = open_store(tmp_path / "local.zarr"), open_store(out)
    assert a.items("loudness") == b.items("loudness") == ["tiny-a", "tiny-b", "tiny-c"]
    for item in a.items("loudness"):
        ra, rb = a.read("loudness", item), b.read("loudness", item)
        np.testing.assert_array_equal(rb.intervals[:], ra.intervals[:])
        np.testing.assert_allclose(rb.features[:], ra.features[:], rtol=1e-5, atol=1e-6)
        assert rb.attrs["source"]["path"].startswith(raw) and rb.attrs["source"]["etag"]
