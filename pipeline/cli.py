"""Command line: `python -m pipeline extract …` (what `make extract` runs), `verify`, `migrate`, `compact`,
`sample`, `weights`.
Exit codes: pipeline/exitcodes.py."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from pathlib import Path

from pipeline import exitcodes

log = logging.getLogger("siqfeat")


def _extract(args: argparse.Namespace) -> int:
    from pipeline.config import load_config
    from pipeline.run import run_extract

    raw = Path(args.raw)
    if args.dataset == "sample" and not (raw / "siq2").exists():
        from manifests.sample import make_sample

        log.info("generating the sample dataset in %s", raw)
        make_sample(raw)
    if args.dataset == "sample-socialiqa" and not raw.exists():
        from manifests.socialiqa import write_sample_socialiqa

        write_sample_socialiqa(raw)
    if args.dataset == "sample-socratis" and not raw.exists():
        from manifests.socratis import write_sample_socratis

        write_sample_socratis(raw)
    if args.dataset == "sample-tinysocial" and not raw.exists():
        from manifests.tinysocial import write_sample_tinysocial

        write_sample_tinysocial(raw)
    config = load_config(args.config or args.dataset)
    only = args.features.split(",") if args.features else None
    report = run_extract(args.dataset, raw, Path(args.out), config, only=only, force=args.force, limit=args.limit,
                         verify=args.verify)
    print(report.summary())
    return report.exit_code


def _verify(args: argparse.Namespace) -> int:
    from store.verify import verify_store

    report = verify_store(Path(args.out), args.features.split(",") if args.features else None)
    print(report.summary())
    return exitcodes.DAMAGED if report.damaged else exitcodes.OK


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
    p.add_argument("--dataset", default="sample", help="dataset name; also the config preset unless --config")
    p.add_argument("--raw", required=True, help="raw data root (for 'sample': generated there if missing)")
    p.add_argument("--out", required=True, help="the <dataset>.zarr store to create or update")
    p.add_argument("--config", help="a preset name or a TOML file (default: the dataset's preset)")
    p.add_argument("--features", help="comma-separated subset of the config's features")
    p.add_argument("--force", action="store_true", help="recompute even what is up to date")
    p.add_argument("--limit", type=int, help="only the first N items (smoke runs)")
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
