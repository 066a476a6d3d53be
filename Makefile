# Two commands on a fresh machine:  `make install extract`  then  `make test`.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
DATASET ?= sample
# a sample dataset (named sample or sample-*: manifests/layouts.py `Sample`) is generated under build/ by extract itself
RAW ?= $(if $(filter sample sample-%,$(DATASET)),build/$(DATASET),$(error RAW=/path/to/raw is required for DATASET=$(DATASET)))
OUT ?= build/$(DATASET).zarr
ITEM ?= sample-a
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
EXTRACT_ARGS ?=
CLIPS ?= 20
SECONDS ?= 60
SCALE_ARGS ?=

.PHONY: install extract verify info report test test-prediction bench bench-scale bench-store lint clean weights inspect sample bundle node-kit s3-server

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	@# chromium: the report page's test loads the page in a real headless browser (tests/pipeline/test_report_page.py)
	@command -v ffmpeg >/dev/null && command -v espeak-ng >/dev/null && command -v chromium >/dev/null || \
	  { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq ffmpeg espeak-ng chromium; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.lock
	# facenet-pytorch pins torch<2.3; its real needs are in requirements.lock and pyproject.toml
	$(VENV)/bin/pip install -q --no-deps facenet-pytorch==2.6.0
	$(VENV)/bin/pip install -q --no-deps -e .
	touch $@

extract: install
	$(PY) -m pipeline extract --dataset $(DATASET) --raw $(RAW) --out $(OUT) $(EXTRACT_ARGS)

verify: install
	$(PY) -m pipeline verify $(OUT)

# what OUT holds: per feature items, rows, bytes, partial, failed, filtered, stale, damaged (exit 3/4: README)
info: install
	$(PY) -m pipeline info $(OUT)

report: install
	$(PY) -m pipeline report $(OUT) --out $(basename $(OUT)).html

sample: install
	$(PY) -m pipeline sample build/sample

# lint-imports first: the layer contracts of pyproject.toml ([tool.importlinter]; docs/design.md draws them).
# Then two test processes on a 2-core machine (at most 4 elsewhere: each Ray test starts a Ray of its own); a file's
# tests stay together in one process, so its module fixtures are made once. Last, alone on the machine the suite
# has left quiet, the simulator's prediction of a real run (tests/bench/test_simulate_real.py, ~37 s): beside
# other work its runs slow down unevenly, which the model only sees as an average (docs/scale.md).
# PYTHONDONTWRITEBYTECODE (set in some images) is cleared for the suite: without cached bytecode each of its
# several hundred processes (pytest's workers, every run's driver and Ray workers) compiles the project's modules
# again, and each pytest worker rewrites the assertions of every test module (about 6 CPU-s a worker here).
test: install
	$(VENV)/bin/lint-imports
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile -m "not prediction"
	PYTHONDONTWRITEBYTECODE= $(MAKE) --no-print-directory test-prediction

test-prediction: install
	$(PY) -m pytest -q -s -p no:xdist -m prediction tests/bench/test_simulate_real.py

bench: install
	$(PY) -m bench

# the real extraction on a generated Social-IQ-shaped set, measured (docs/scale.md); cached under build/scale
bench-scale: install
	$(PY) -m bench.scale --clips $(CLIPS) --seconds $(SECONDS) $(SCALE_ARGS)

# the store alone (no models): commit, plan, open, reads, files and bytes at 35,000 and 1,000,000 items, and what
# the chunk checksums cost (a twin store written without them; docs/design.md); the same on a local S3 server up
# to STORE_S3_ITEMS items beside the local disk, and a DataLoader over SocialIQA-shaped items on each (docs/scale.md)
STORE_ITEMS ?= 35000,1000000
STORE_S3_ITEMS ?= 35000
bench-store: install
	$(PY) -m bench.store --items $(STORE_ITEMS) --s3-items $(STORE_S3_ITEMS)

# a local S3 server (moto, in memory) on 127.0.0.1:S3_PORT with bucket S3_BUCKET, until Ctrl-C; it prints the
# environment to set in another shell (README, "On object storage")
S3_PORT ?= 5555
S3_BUCKET ?= bucket
s3-server: install
	$(PY) -m testing.s3server --port $(S3_PORT) --bucket $(S3_BUCKET) $(if $(S3_UPLOAD),--upload $(S3_UPLOAD))

# an offline bundle for a GPU node with its own Python, torch, torchvision and transformers (deploy/bundle.py):
# `make bundle PYTHON=3.12 OUT=DIR` writes 60 MB pieces, SHA256SUMS and INSTALL.txt (the one command to run there).
# PYTHON names the node's Python here (pyenv's 3.12.*, or a path), not the one for .venv; the tool itself needs
# only a Python >= 3.11 and the network. BUNDLE_ARGS: --with-torch, --glibc 2.28, --no-slim-ray
BUNDLE_ARGS ?=
BUNDLE_OUT := $(if $(filter command line environment,$(origin OUT)),$(OUT),build/bundle)
bundle:
	$(if $(wildcard $(PY)),$(PY),python3) -m deploy.bundle --python $(PYTHON) --out $(BUNDLE_OUT) $(BUNDLE_ARGS)

# what the GPU node check carries in its one device call (bench/node_check.py; docs/scale.md, "The node check"):
# build/node with the kit for the device image's Python 3.12, two 60 s clips, tests/media/test_nvdec.py's videos
node-kit: install
	$(PY) -m bench.node_check --prepare build/node

lint: install
	$(VENV)/bin/ruff check .

weights: install
	$(PY) -m pipeline weights $(if $(WEIGHTS_DIR),--dir $(WEIGHTS_DIR))

inspect: install
	$(PY) -m pipeline.inspect $(OUT) $(ITEM) build/inspect-$(ITEM).png

clean:
	rm -rf build .pytest_cache
