"""Command line: `python -m pipeline extract …` (what `make extract` runs), `verify`, `migrate`, `compact`,
`sample`, `weights`.
Exit codes: pipeline/exitcodes.py."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import exitcodes

if TYPE_CHECKING:
    from pipeline.config import RunConfig

log = logging.getLogger("siqfeat")


def _extract(args: argparse.Namespace) -> int:
    from pipeline import raystart, stop
    from pipeline.run import run_extract

    dataset, config = _dataset_and_config(args.dataset, args.config)
    raw = Path(args.raw)
    _generate_sample(dataset, raw)
    only = args.features.split(",") if args.features else None
    raystart.adopt_orphans()  # this process is the run: what its Ray leaves behind is its to end
    with stop.on_signals():  # SIGINT/SIGTERM: the run stops, saves its report and the summary says so
        try:
            report = run_extract(dataset, raw, Path(args.out), config, only=only, force=args.force,
                                 limit=args.limit, verify=args.verify, split=args.split)
        except BaseException:  # an error's way out too: every process the run started ends with it
            with stop.deferred(raise_after=False):
                stop.shutdown_ray()
            raise
        with stop.deferred(raise_after=False):
            stop.shutdown_ray()  # Ray's own log lines end here: the summary is the last thing printed
            sys.stderr.flush()
            print(report.summary(), flush=True)
    return report.exit_code


def _dataset_and_config(dataset: str | None, config_ref: str | None) -> tuple[str, RunConfig]:
    """The dataset named by --dataset or by the config's `dataset`; ValueError (exit 2) when neither names one
    or they disagree. The config is --config, else the dataset's preset."""
    from pipeline.config import load_config

    if dataset is None and config_ref is None:
        raise ValueError("extract needs --dataset (or a --config that names its dataset)")
    config = load_config(config_ref or dataset)
    if dataset and config.dataset and dataset != config.dataset:
        raise ValueError(f"--dataset {dataset} disagrees with the config {config_ref}, which is for dataset "
                         f"{config.dataset!r}: drop one, or make them agree")
    if not (dataset or config.dataset):
        raise ValueError(f"the config {config_ref} names no dataset: pass --dataset or set `dataset = ...` in it")
    return dataset or config.dataset, config


# sample dataset -> what under --raw shows that it is there (None: --raw itself, not empty)
SAMPLE_MARKERS = {"sample": "siq2", "sample-socialiqa": None, "sample-socratis": None, "sample-tinysocial": None}


def _sample_writer(dataset: str) -> Callable[[Path], object]:
    from manifests.sample import make_sample
    from manifests.socialiqa import write_sample_socialiqa
    from manifests.socratis import write_sample_socratis
    from manifests.tinysocial import write_sample_tinysocial

    return {"sample": make_sample, "sample-socialiqa": write_sample_socialiqa,
            "sample-socratis": write_sample_socratis, "sample-tinysocial": write_sample_tinysocial}[dataset]


def _generate_sample(dataset: str, raw: Path) -> None:
    """The one case where extract writes under --raw: a sample dataset that is not there yet, generated into
    a folder that does not exist or is empty. Raw data is read-only to this tool: a folder with anything else
    in it is never written to (ValueError: exit 2, nothing written)."""
    if dataset not in SAMPLE_MARKERS:
        return
    marker = SAMPLE_MARKERS[dataset]
    not_empty = raw.is_dir() and any(raw.iterdir())
    if (raw / marker).exists() if marker else not_empty:
        return
    if not_empty or (raw.exists() and not raw.is_dir()):
        raise ValueError(f"{raw}: holds no {dataset} data and is not empty; extract generates a sample only into "
                         "a new or empty folder, never into a raw data folder: give --raw another folder")
    log.info("generating the %s dataset in %s", dataset, raw)
    _sample_writer(dataset)(raw)


def _verify(args: argparse.Namespace) -> int:
    from store.verify import verify_store

    report = verify_store(Path(args.out), args.features.split(",") if args.features else None)
    print(report.summary())
    return exitcodes.OK if report.ok else exitcodes.DAMAGED


def _migrate(args: argparse.Namespace) -> int:
    from store.migrate import migrate_store

    print(migrate_store(Path(args.out)).summary())
    return exitcodes.OK


def _compact(args: argparse.Namespace) -> int:
    from store.compact import compact_store

    done = compact_store(Path(args.out), args.features.split(",") if args.features else None)
    print("\n".join([f"compact {args.out}: {len(done)} feature(s) rewritten", *(c.line() for c in done)]))
    return exitcodes.OK


def _sample(args: argparse.Namespace) -> int:
    from manifests.sample import make_sample

    print(make_sample(Path(args.dest)))
    return 0


def _weights(args: argparse.Namespace) -> int:
    """Fill the weights cache (needs internet): DenseNet161 ImageNet weights and the text models."""
    import torch

    from extractors.densenet import DenseNetConfig, weights_file
    from extractors.text_model import download_text_model
    from extractors.weights import weights_dir

    target = weights_dir(args.dir)
    dense = weights_file(DenseNetConfig(weights="imagenet1k_v1", weights_dir=target))
    from torchvision.models import DenseNet161_Weights

    torch.hub.load_state_dict_from_url(DenseNet161_Weights.IMAGENET1K_V1.url, model_dir=str(dense.parent),
                                       check_hash=True)
    for name in args.text_models.split(","):
        download_text_model(name, target)
    print(f"weights cache ready at {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="siqfeat", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("extract", help="extract features into a Zarr store (cached: only missing/stale work runs)")
    p.add_argument("--dataset", help="dataset name (default: the config's `dataset`); also the config preset "
                                      "unless --config")
    p.add_argument("--raw", required=True, help="raw data root, never written to (a sample-* dataset is generated "
                                                "there only when the folder is new or empty)")
    p.add_argument("--out", required=True, help="the <dataset>.zarr store to create or update")
    p.add_argument("--config", help="a preset name or a TOML file (default: the dataset's preset)")
    p.add_argument("--features", help="comma-separated subset of the config's features")
    p.add_argument("--force", action="store_true", help="recompute even what is up to date")
    p.add_argument("--split", help="only the items of this split (train, val, test; the releases' dev, valid "
                   "and validation mean val)")
    p.add_argument("--limit", type=int, help="only the first N items, in the manifest's order (after --split; "
                   "README: which order)")
    p.add_argument("--verify", action="store_true",
                   help="first check every stored item's content hashes; damaged items are recomputed")
    p.set_defaults(func=_extract)
    p = sub.add_parser("verify", help="check every stored item against what was recorded at its commit")
    p.add_argument("--out", required=True, help="the store to check")
    p.add_argument("--features", help="comma-separated subset of the store's features")
    p.set_defaults(func=_verify)
    p = sub.add_parser("migrate", help="convert a version-1 store (one folder per item) to version 2, in place")
    p.add_argument("--out", required=True, help="the store to convert")
    p.set_defaults(func=_migrate)
    p = sub.add_parser("compact", help="rewrite features into full parts, dropping superseded rows")
    p.add_argument("--out", required=True, help="the store to compact")
    p.add_argument("--features", help="comma-separated subset of the store's features")
    p.set_defaults(func=_compact)
    p = sub.add_parser("sample", help="generate the sample dataset")
    p.add_argument("dest")
    p.set_defaults(func=_sample)
    p = sub.add_parser("weights", help="download model weights into the weights cache (needs internet)")
    p.add_argument("--dir", default=os.environ.get("SIQ_WEIGHTS_DIR"))
    p.add_argument("--text-models", default="bert-base-uncased")
    p.set_defaults(func=_weights)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Expected problems end in one line naming the path and the problem, with their own exit code;
    anything else is a bug and keeps its traceback."""
    from store.writer import StoreError, StoreLocked

    try:
        return args.func(args)
    except StoreLocked as e:
        log.error("%s", e)
        return exitcodes.LOCKED
    except StoreError as e:
        log.error("%s", e)
        return exitcodes.STORE
    except (FileNotFoundError, ValueError) as e:
        log.error("%s", e)
        return exitcodes.BAD_INPUT
    except OSError as e:  # not the store's (that is a StoreError): an input or the machine
        log.error("%s: %s", e.filename or "error", e.strerror or e)
        return exitcodes.STORE if e.errno in _STORAGE_ERRNOS else exitcodes.BAD_INPUT


_STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO}


if __name__ == "__main__":
    sys.exit(main())
