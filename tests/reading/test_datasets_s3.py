"""The SocialIQA datasets over a store in a bucket (the local S3 server of tests/s3server.py): the same samples
as over the same store on disk, the plan cached in the bucket, and a DataLoader worker forked from a process that
used the bucket refused in one line instead of hanging (obstore's runtime does not survive a fork)."""

from __future__ import annotations

import os
import select
import signal
from pathlib import Path

import numpy as np
import torch

from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
from reading.datasets import SocialIQA3, collate_qa
from store import BackendError, open_backend, plancache
from testing.qa_store import write_qa_store
from tests import s3server

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name


def _stores(tmp_path: Path, url: str) -> tuple[Path, str]:
    write_sample_socialiqa(tmp_path / "raw", n=6)
    items, qa = read_socialiqa(tmp_path / "raw")
    return write_qa_store(tmp_path / "local.zarr", items, qa, vectors=True), str(write_qa_store(url, items, qa, vectors=True))


def test_socialiqa3_over_a_bucket_reads_what_it_reads_from_disk(tmp_path: Path, s3_url: str) -> None:
    local, url = _stores(tmp_path, s3_url)
    assert url.startswith("s3://")  # as given: a Path would fold it to s3:/bucket
    on_disk = SocialIQA3(local, split="train", modalities=(), text="tokens")
    in_bucket = SocialIQA3(url, split="train", modalities=(), text="tokens")
    assert in_bucket.path == url and in_bucket.samples == on_disk.samples and len(on_disk) == 6
    for a, b in zip(on_disk, in_bucket, strict=True):  # one at a time, then batched
        assert a.keys() == b.keys() and a["qid"] == b["qid"]
        for k, v in a.items():
            if isinstance(v, torch.Tensor):
                torch.testing.assert_close(v, b[k], rtol=0, atol=0)
    batches = [collate_qa(ds.__getitems__([4, 0, 2])) for ds in (on_disk, in_bucket)]
    for k in ("question", "answers", "context", "label"):
        np.testing.assert_array_equal(batches[0][k].numpy(), batches[1][k].numpy())
    # the plan was cached in the bucket, and a second dataset takes it from there
    cached = [i.key for i in open_backend(url).list("/".join(plancache.FOLDER))]
    assert len(cached) == 1 and cached[0].endswith(".json"), cached
    again = SocialIQA3(url, split="train", modalities=(), text="tokens")
    assert again.samples == on_disk.samples
    assert [i.key for i in open_backend(url).list("/".join(plancache.FOLDER))] == cached


def test_a_forked_process_is_refused_in_one_line_not_left_hanging(s3_url: str) -> None:
    open_backend(s3_url).put("k", b"v")  # this process has used the bucket
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # what a DataLoader worker under the default start method is
        os.close(read_fd)
        try:
            open_backend(s3_url).get("k")
            said = "read"
        except BackendError as e:
            said = str(e)
        except BaseException as e:  # noqa: BLE001 - anything else is the failure to report
            said = f"{type(e).__name__}: {e}"
        os.write(write_fd, said.encode())
        os._exit(0)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], 20)
        said = os.read(read_fd, 4096).decode() if ready else "no answer in 20 s (hung)"
    finally:
        os.kill(pid, signal.SIGKILL) if not ready else None
        os.waitpid(pid, 0)
        os.close(read_fd)
    assert said.startswith(s3_url.rstrip("/")) and "forkserver" in said and "\n" not in said, said
    assert open_backend(s3_url).get("k") == b"v"  # the parent goes on
