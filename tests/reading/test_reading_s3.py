"""Reading a store in a bucket as a local one (s3://, against the moto server, a bucket per test): every PyTorch
dataset of reading/datasets.py built from the same commits gives the same samples, item for item, with its plan
cached in the bucket; `pipeline report` renders the same page (`pipeline migrate` in a bucket:
tests/store/test_store_s3.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from manifests.records import MediaItem
from pipeline.cli import main
from reading.datasets import SocialIQA3, SocialIQA4, SocratisReactions
from rows import FeatureRows
from store.backends import open_backend
from testing.synthetic_store import build_synthetic_store
from tests import s3server

s3_server, s3_url = s3server.s3_server, s3server.s3_url  # the S3 server's fixtures, used by name


def same(a: object, b: object) -> None:
    """Samples equal value for value (tensors bit for bit)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same(x, y)
    else:
        assert a == b


def every_sample(ds: object) -> list:
    return [ds[i] for i in range(len(ds))]  # type: ignore[index, arg-type]


@pytest.fixture(scope="module")
def stores(s3_server: str, tiny_root_template: Path, tmp_path_factory: pytest.TempPathFactory):
    """(local, s3 URL): the tiny synthetic store written the same way to a folder and to a bucket, once for the
    module (read-only for its tests: ~9 s of commits to the server)."""
    import boto3

    with pytest.MonkeyPatch.context() as mp:
        for name, value in {**s3server.CREDENTIALS, "AWS_ENDPOINT_URL": s3_server}.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket="synthetic")
        local = build_synthetic_store(tiny_root_template, tmp_path_factory.mktemp("ds") / "tiny.zarr", 8, 16)
        build_synthetic_store(tiny_root_template, "s3://synthetic/tiny.zarr", 8, 16)  # type: ignore[arg-type]
        yield local, "s3://synthetic/tiny.zarr"


@pytest.mark.parametrize("task", [SocialIQA4])  # SocialIQA2 is the same reading (_SocialIQ) with other labels
def test_a_dataset_over_a_bucket_equals_one_over_a_local_store(task: type, stores: tuple[Path, str],
                                                                s3_url: str) -> None:
    local, s3_url = stores
    open_backend(s3_url).delete_prefix("_views")  # no plan cached by another test
    kwargs = {"split": None, "modalities": ("frames",), "to": 1.0, "exclude_filtered": False}
    want, got = task(local, **kwargs), task(s3_url, **kwargs)
    assert got.samples == want.samples and len(want) > 0 and got.dropped == want.dropped
    same(every_sample(got), every_sample(want))
    plans = [i.key for i in open_backend(s3_url).list("_views/plans")]
    assert len(plans) == 1  # the plan, cached in the bucket, is what a second build reads
    again = task(s3_url, **kwargs)
    assert again.samples == want.samples
    with pytest.raises(ValueError, match=f"^{s3_url}: materialized=True writes an aligned view beside a local"):
        task(s3_url, **kwargs, materialized=True)


def test_socialiqa3_and_socratis_over_a_bucket(tmp_path: Path, s3_url: str) -> None:
    from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
    from store.writer import StoreWriter
    from testing.qa_store import write_qa_store

    write_sample_socialiqa(tmp_path / "raw", n=6)
    media, qa = read_socialiqa(tmp_path / "raw")
    siqa = s3_url + "-siqa"
    write_qa_store(tmp_path / "siqa.zarr", media, qa, vectors=True)
    write_qa_store(siqa, media, qa, vectors=True)  # type: ignore[arg-type]
    want, got = SocialIQA3(tmp_path / "siqa.zarr", split="dev", modalities=()), SocialIQA3(siqa, split="dev", modalities=())
    assert got.samples == want.samples and len(want) > 0
    same(every_sample(got), every_sample(want))

    def socratis(out: Path | str) -> None:
        items = [MediaItem(id=f"p{k}", dataset="socratis", image=tmp_path / f"p{k}.jpg", caption="c") for k in range(3)]
        with StoreWriter(out, "socratis") as w:
            w.write_manifests(items, [])
            for n, feature in enumerate(("frames", "faces", "caption", "reactions")):
                w.set_feature(feature, {"extractor": feature, "version": "0", "config": {}, "columns": ["a", "b"],
                                        "rate_hz": None, "weights": "none", "spec_hash": "s"})
                for k, item in enumerate(items):
                    rows = np.arange(2 * (k + 1), dtype=np.float32).reshape(k + 1, 2) + n
                    extras = {"emotion": np.array([f"e{j}" for j in range(k + 1)]), "reason": np.array(
                        [f"r{k}{j}" for j in range(k + 1)]), "worker": np.arange(k + 1)} if feature == "reactions" else {}
                    w.commit(feature, item.id, FeatureRows(rows, np.zeros((k + 1, 2)), extras),
                             {"spec_hash": "s", "fingerprint": "-", "duration_s": None})

    socratis(tmp_path / "s.zarr")
    socratis(s3_url)
    want, got = SocratisReactions(tmp_path / "s.zarr", text="pooled"), SocratisReactions(s3_url, text="pooled")
    assert len(got) == len(want) > 0
    same(every_sample(got), every_sample(want))


@pytest.mark.slow  # ~17 s on 2 shared cores: the page's reads of the S3 store take ~10 s, the local one's ~4 s
def test_report_takes_a_bucket(stores: tuple[Path, str], tmp_path: Path) -> None:
    store, s3_url = stores
    assert main(["report", str(store), "--out", str(tmp_path / "local.html")]) == 0
    assert main(["report", s3_url, "--out", str(tmp_path / "s3.html")]) == 0
    local, remote = (tmp_path / "local.html").read_text(), (tmp_path / "s3.html").read_text()
    # the page says when it was made, to the minute: the two pages may be made either side of one
    made = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
    assert len(made.findall(local)) == 1, made.findall(local)
    assert made.sub("WHEN", remote.replace(s3_url, "STORE")) == made.sub("WHEN", local.replace(str(store), "STORE"))
