"""Command line: `python -m pipeline extract …` (what `make extract` runs), `info`, `export`, `report`, `verify`,
`migrate`, `compact`, `sample`, `weights`.
Exit codes: pipeline/exitcodes.py."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import exitcodes

if TYPE_CHECKING:
    from pipeline.config import RunConfig

log = logging.getLogger("siqfeat")


def _extract(args: argparse.Namespace) -> int:
    from pipeline import raystart, stop, supervise
    from pipeline.run import run_extract

    dataset, config = _dataset_and_config(args.dataset, args.config)
    if _is_url(args.raw):  # listed now, before any work: no bucket, no credentials, nothing there: exit 2
        from objectio import raw_root

        try:
            raw = raw_root(args.raw)
        except FileNotFoundError as e:
            from manifests.layouts import samples

            if dataset not in samples():
                raise
            raise FileNotFoundError(f"{e}; a sample is generated into a local folder only: `python -m pipeline "
                                    "sample DIR`, then upload DIR there") from None
    else:
        raw = Path(args.raw)
        _generate_sample(dataset, raw)  # a bucket's sample is uploaded, never generated into it
    only = args.features.split(",") if args.features else None
    raystart.adopt_orphans()  # this process is the run: what its Ray leaves behind is its to end
    # SIGINT/SIGTERM: the run stops, saves its report and the summary says so
    with stop.on_signals(at_force_exit=raystart.kill_now, echo=supervise.parent_death_echo):
        try:
            report = run_extract(dataset, raw, _store_arg(args.out), config, only=only, force=args.force,
                                 limit=args.limit, verify=args.verify, split=args.split)
        except BaseException as e:  # an error's way out too: every process the run started ends with it
            if not isinstance(e, (stop.Stopped, raystart.RayFailed, SystemExit)):
                supervise.note_error(e, raystart.lost())  # the parent must not take Ray's end below for the cause
            with stop.deferred(raise_after=False):
                raystart.shutdown()
            raise
        with stop.deferred(raise_after=False):
            raystart.shutdown()  # Ray's own log lines end here: the summary is the last thing printed
            if (report.stopped or {}).get("cause") and not _is_url(args.out):  # the parent was killed: no terminal
                # is left (run.stopped_run); a store in a bucket runs unsupervised, its terminal still there
                supervise.orphaned_summary(Path(args.out), report.run_id, report.summary())
            with contextlib.suppress(OSError):
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


def _generate_sample(dataset: str, raw: Path) -> None:
    """The one case where extract writes under --raw: a sample dataset (manifests/layouts.py `Sample`, registered by
    the manifest module that writes it) that is not there yet, generated into a folder that does not exist or is
    empty. Raw data is read-only to this tool: a folder with anything else in it is never written to (ValueError:
    exit 2, nothing written)."""
    from manifests.layouts import samples

    sample = samples().get(dataset)
    if sample is None:
        return
    not_empty = raw.is_dir() and any(raw.iterdir())
    if (raw / sample.marker).exists() if sample.marker else not_empty:
        return
    if not_empty or (raw.exists() and not raw.is_dir()):
        raise ValueError(f"{raw}: holds no {dataset} data and is not empty; extract generates a sample only into "
                         "a new or empty folder, never into a raw data folder: give --raw another folder")
    log.info("generating the %s dataset in %s", dataset, raw)
    sample.write(raw)


def _info(args: argparse.Namespace) -> int:
    """Exit codes: pipeline/info.py (0 fine, 3 failed pairs, 4 damaged items)."""
    import json

    from pipeline.info import item_info, item_summary, store_info

    if args.item:
        try:
            found = item_info(args.store, args.item)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        print(json.dumps(found, indent=1, default=str) if args.json else item_summary(found))
        bad = {f["status"] for f in found["features"].values()}
        return exitcodes.FAILURES if "failed" in bad else exitcodes.DAMAGED if "damaged" in bad else exitcodes.OK
    info = store_info(args.store, args.config)
    print(json.dumps(info.as_dict(), indent=1, default=str) if args.json else info.summary())
    return info.exit_code


def _split_list(value: str | None) -> list[str] | None:
    return [v for v in value.split(",") if v] if value else None


def _export(args: argparse.Namespace) -> int:
    from reading.export import export_sdk_folder, export_xarray
    from store import open_store

    store = open_store(args.store)
    features, items = _split_list(args.features), _split_list(args.items)
    for feature in features or []:
        if feature not in store.features():
            raise ValueError(f"{args.store}: no feature {feature!r}; present: {', '.join(store.features())}")
    if not args.sdk and (not features or len(features) != 1):
        raise ValueError(f"--xarray writes one feature: name it with --features (one of {', '.join(store.features())})")
    try:
        if args.sdk:
            for root, path in export_sdk_folder(store, args.sdk, features, items=items).items():
                print(f"{root}: {path}")
        else:
            print(export_xarray(store, features[0], args.xarray, items))
    except KeyError as e:  # an unknown item, or nothing to export
        raise ValueError(e.args[0]) from None
    return exitcodes.OK


def _report(args: argparse.Namespace) -> int:
    from pipeline.report_page import write_report

    print(write_report(args.store, args.out, inspect_items=_split_list(args.inspect), config=args.config))
    return exitcodes.OK


def _verify(args: argparse.Namespace) -> int:
    from store import verify_store

    report = verify_store(_store_arg(args.store), args.features.split(",") if args.features else None)
    print(report.summary())
    return exitcodes.OK if report.ok else exitcodes.DAMAGED


def _migrate(args: argparse.Namespace) -> int:
    from store import migrate_store

    print(migrate_store(_store_arg(args.store)).summary())
    return exitcodes.OK


def _compact(args: argparse.Namespace) -> int:
    from store import compact_store, open_store

    store = open_store(args.store)
    asked = _split_list(args.features) or store.features()
    for feature in asked:
        if feature not in store.features():
            raise ValueError(f"{args.store}: no feature {feature!r}; present: {', '.join(store.features())}")
    n_parts = {f: len(store.index(f).parts) for f in asked}
    store.close()  # its lease would keep the old parts until it is gone
    done = compact_store(_store_arg(args.store), asked)  # a feature compacting would not change is left out (to_rewrite)
    kept = [f"  {f}: already compact ({n} part{'s' if n != 1 else ''}, no superseded row), left as it is"
            for f, n in n_parts.items() if f not in {c.feature for c in done}]
    lines = [f"compact {args.store}: {len(done)} feature(s) rewritten", *(c.line() for c in done), *kept]
    print("\n".join(lines))
    return exitcodes.OK


def _sample(args: argparse.Namespace) -> int:
    from manifests.sample import make_sample

    print(make_sample(Path(args.dest)))
    return 0


def _weights(args: argparse.Namespace) -> int:
    """Fill the weights cache (needs internet) with what the extractors load, as each declares it (extractors/base.py
    `Extractor.weights`): the features of the presets (--presets, default every one) and each registered extractor's
    default config; --text-models adds hub models. Where a download fails, one line says so and how to fill the cache
    elsewhere, and every folder this command made is removed again (an empty `torchvision/` would look like a cache)."""
    from extractors.weights import Weights, weights_dir
    from pipeline.config import preset_names, weights_for

    target = weights_dir(args.dir)
    presets = _split_list(args.presets) or preset_names()
    wanted = weights_for(presets, defaults=True) + [Weights(f"text model {name}", hub=name)
                                                    for name in _split_list(args.text_models) or []]
    made = [p for p in (target, *target.parents) if not p.exists()]
    before = set(target.rglob("*")) if target.exists() else set()
    for w in dict.fromkeys(wanted):
        if w.package is not None:
            log.info("%s: in the installed %s package (make install), nothing to download", w.what, w.package)
            continue
        log.info("fetching %s from %s", w.what, w.source())
        try:
            w.fetch(target)
        except (OSError, ConnectionError) as e:  # urllib's URLError and requests' ConnectionError are OSErrors
            made += [p for p in target.rglob("*") if p.is_dir() and p not in before] if target.exists() else []
            _remove_empty(made)
            why = getattr(e, "reason", None) or e
            raise ValueError(f"cannot download {w.source()} from this machine ({type(e).__name__}: {str(why)[:200]}); "
                             f"nothing was written to {target}. On a machine with internet run `make weights "
                             f"WEIGHTS_DIR=DIR`, copy DIR here and set SIQ_WEIGHTS_DIR=DIR (README: Real data)") from None
    print(f"weights cache ready at {target}")
    return 0


def _remove_empty(folders: list[Path]) -> None:
    """The folders a failed command created, deepest first, each only if nothing else put a file there."""
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:  # not empty (another process' files), or gone already
            continue


def main(argv: list[str] | None = None, supervised: bool = False) -> int:
    """`supervised`: this process is the command line (`python -m pipeline`): `extract` runs its driver as a
    child process of this one (pipeline/supervise.py), which reports whatever way the driver ends. A caller
    that runs `main` inside its own process (a test) leaves it False: `extract` runs right here."""
    parser = argparse.ArgumentParser(prog="siqfeat", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug lines, and Ray's token-authentication note (quiet by default)")
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
    p = sub.add_parser("info", help="what a store holds: per feature items, rows, bytes, partial, failed, filtered, "
                                    "stale and damaged items (exit 3: failed pairs, 4: damaged items)")
    p.add_argument("store", help="the store to describe")
    p.add_argument("--json", action="store_true", help="the same as JSON, for scripts")
    p.add_argument("--item", help="one item across every feature")
    p.add_argument("--config", help="also list items whose fingerprint differs from what this config (a preset "
                                    "name or TOML file) would give: `make extract` with it recomputes them")
    p.set_defaults(func=_info)
    p = sub.add_parser("export", help="write a store's features for other tools: CMU Multimodal SDK .csd files "
                                      "(--sdk) or one feature as xarray NetCDF/Zarr (--xarray)")
    p.add_argument("store", help="the store to export from")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--sdk", metavar="DIR", help="a folder of <root name>.csd files, the QA feature under DIR/qa "
                                                 "(docs/reading.md)")
    to.add_argument("--xarray", metavar="OUT", help="one feature (--features) as OUT.nc (NetCDF) or OUT.zarr")
    p.add_argument("--features", help="comma-separated subset of the store's features")
    p.add_argument("--items", help="comma-separated item ids (default: every complete item)")
    p.set_defaults(func=_export)
    p = sub.add_parser("report", help="one self-contained HTML page about a store: coverage, failures, partial "
                                      "items, run history, distributions, inspect pictures")
    p.add_argument("store", help="the store to report on")
    p.add_argument("--out", required=True, help="the HTML file to write")
    p.add_argument("--inspect", help="comma-separated items to draw (default: the items with problems first, "
                                     "then the others, at most 8)")
    p.add_argument("--config", help="as for info: check fingerprints against this config")
    p.set_defaults(func=_report)
    p = sub.add_parser("verify", help="check every stored item against what was recorded at its commit")
    _store_argument(p, "the store to check")
    p.add_argument("--features", help="comma-separated subset of the store's features")
    p.set_defaults(func=_verify)
    p = sub.add_parser("migrate", help="convert a version-1 store (one folder per item) to version 2, in place")
    _store_argument(p, "the store to convert")
    p.set_defaults(func=_migrate)
    p = sub.add_parser("compact", help="rewrite features into full parts, dropping superseded rows")
    _store_argument(p, "the store to compact")
    p.add_argument("--features", help="comma-separated subset of the store's features")
    p.set_defaults(func=_compact)
    p = sub.add_parser("sample", help="generate the sample dataset")
    p.add_argument("dest")
    p.set_defaults(func=_sample)
    p = sub.add_parser("weights", help="download model weights into the weights cache (needs internet)")
    p.add_argument("--dir", default=os.environ.get("SIQ_WEIGHTS_DIR"))
    p.add_argument("--presets", help="comma-separated presets whose features' weights to fetch (default: every "
                                      "preset; each extractor's default config's weights come too)")
    p.add_argument("--text-models", help="comma-separated Hugging Face model ids to fetch as well")
    p.set_defaults(func=_weights)
    args = parser.parse_args(argv)
    if hasattr(args, "store_out"):  # verify, migrate, compact: the store as info/export/report take it
        if args.store and args.store_out and Path(args.store) != Path(args.store_out):
            parser.error(f"{args.command}: two stores given ({args.store} and --out {args.store_out}): give one")
        args.store = args.store or args.store_out
        if not args.store:
            parser.error(f"{args.command}: the store is required (python -m pipeline {args.command} STORE)")
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S")
    try:  # before the supervisor starts: a refused --out gets nothing written, not even a crash record
        for target, what in _targets(args):
            if not _is_url(target):  # a bucket's keys have no enclosing folders to take over
                _outside_stores(Path(target), what)
    except ValueError as e:
        log.error("%s", e)
        return exitcodes.BAD_INPUT
    if args.func is _extract and supervised:
        from pipeline import supervise

        # a store in a bucket: the driver runs in this process (the supervisor's crash report writes a local store)
        if supervise.wanted() and not _is_url(args.out) and \
                (code := supervise.supervise(Path(args.out), args.verbose)) is not None:
            return code  # the parent's; the driver (a fork) goes on below
    if args.func is not _weights:  # the one command that downloads (text models from the Hugging Face hub)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.func is _extract and not args.verbose:
        quiet_ray()
    return _run(args)


def _targets(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(path, what) of everything the command will write."""
    if args.func is _extract:
        return [(args.out, "--out (the store to write)")]
    if args.func is _export:
        return [(args.sdk or args.xarray, "--sdk DIR" if args.sdk else "--xarray OUT")]
    if args.func is _report:
        return [(args.out, "--out (the HTML page)")]
    return []


def _outside_stores(path: Path, what: str) -> None:
    """A path inside an existing store (or any Zarr hierarchy) is refused: writing there takes over the
    enclosing store's metadata (a store written into another rewrote its `frames/zarr.json`)."""
    full = Path(os.path.abspath(path))
    for parent in reversed(full.parents):  # the outermost: the store, not one of its groups
        if (parent / "zarr.json").is_file() or (parent / ".zgroup").is_file():
            raise ValueError(f"{path}: inside the store {parent}: {what} must be a path outside any store")


def _store_argument(p: argparse.ArgumentParser, help: str) -> None:
    """The store as a positional argument, as info, export and report take it; `--out STORE`, the older form,
    still works."""
    p.add_argument("store", nargs="?", help=help)
    p.add_argument("--out", dest="store_out", metavar="STORE", help="the same (the older form)")


# Ray's own lines that say nothing about this run: the note that token authentication is on (every local run
# turns it on: README, "Token authentication"). `-v` shows it. Not RAY_BACKEND_LOG_LEVEL for its C++ lines:
# setting it makes every Ray process print one more line to say it was set.
RAY_QUIET_LOGGERS = ("ray._private.authentication.authentication_token_setup",)


def quiet_ray() -> None:
    """Before Ray starts: its token note is not shown."""
    for name in RAY_QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def _is_url(location: str) -> bool:
    from store import is_url

    return is_url(location)


def _store_arg(location: str) -> Path | str:
    """A store argument: a local path as a Path, an object-storage URL as it is (a Path would fold its //)."""
    return location if _is_url(location) else Path(location)


def _check_storage(args: argparse.Namespace) -> None:
    """An object-storage store (s3://, gs://, az://) that cannot be used fails here, in one line naming its URL
    and what to set, before any work: not after a run has computed what it cannot write."""
    from store import is_url, open_backend

    store = getattr(args, "out", None) if args.func is _extract else \
        getattr(args, "store", None) if args.func in (_info, _export, _report, _verify, _compact, _migrate) else None
    if store is not None and is_url(store):
        open_backend(store).check()


def _run(args: argparse.Namespace) -> int:
    """Expected problems end in one line naming the path and the problem, with their own exit code;
    anything else is a bug and keeps its traceback."""
    from store import STORAGE_ERRNOS, BackendError, DamagedMetadata, StoreError, StoreLocked

    try:
        _check_storage(args)
        code = args.func(args)
        sys.stdout.flush()  # a pipe's buffer: a reader gone shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:  # `info --json | head`: the reader has what it wanted; nothing to say, on no stream
        with contextlib.suppress(OSError):  # the interpreter's last flush must not meet the closed pipe either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exitcodes.CLOSED_PIPE  # 128 + SIGPIPE: what a command the signal ended exits with
    except BackendError as e:  # no bucket, no credentials, access denied, unreachable: before any work
        log.error("%s", e)
        return exitcodes.BAD_INPUT
    except StoreLocked as e:
        log.error("%s", e)
        return exitcodes.LOCKED
    except StoreError as e:
        log.error("%s", e)
        return exitcodes.STORE
    except DamagedMetadata as e:  # a store's own file damaged: not a bad argument (README, "Exit codes")
        log.error("%s", e)
        return exitcodes.DAMAGED
    except (FileNotFoundError, ValueError) as e:
        log.error("%s", e)
        return exitcodes.BAD_INPUT
    except OSError as e:  # not the store's (that is a StoreError): an input or the machine
        log.error("%s: %s", e.filename or "error", e.strerror or e)
        return exitcodes.STORE if e.errno in STORAGE_ERRNOS else exitcodes.BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
