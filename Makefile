# Two entry points (see README): `make run` and `make test`. Each sets up its own
# virtual environment first.
# TensorFlow 2.15 has wheels for CPython 3.9-3.11 only: python3 if it is one of those, else the first of
# python3.11, python3.10, python3.9 on the PATH, else one that uv manages (`uv python find`).
SUPPORTED_PYTHON = import sys; sys.exit(not (3, 9) <= sys.version_info[:2] <= (3, 11))
PYTHON ?= $(shell for p in python3 python3.11 python3.10 python3.9; do \
	  command -v $$p >/dev/null 2>&1 && $$p -c '$(SUPPORTED_PYTHON)' 2>/dev/null && { echo $$p; exit 0; }; done; \
	  command -v uv >/dev/null 2>&1 && uv python find '>=3.9,<3.12' 2>/dev/null)
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED_DATA ?= ../shared/data

# The archive the main job converts. Here: the shared real-pixel stand-in
# (no internet). `make run CIFAR10_SOURCE=` downloads the official archive.
CIFAR10_SOURCE ?= $(SHARED_DATA)/cifar-10-mini-python.tar.gz
CIFAR10_SHA256 ?= 725b7c7a07002b7a8100aa0f84e2b2a528c9ab7e03d55ab240a67e44aff60726
SOURCE_FLAGS = $(if $(CIFAR10_SOURCE),--source $(CIFAR10_SOURCE) --sha256 $(CIFAR10_SHA256),)
DATA_DIR ?= work/cifar-10-data
JOB_DIR ?= work/job
# The main job: ResNet-20 on the CPU for 400 steps (a few minutes here). Batch-norm
# decay 0.9 lets the moving averages keep up in so short a run.
RUN_FLAGS ?= --num-gpus 0 --num-layers 20 --train-steps 400 --batch-norm-decay 0.9 --seed 1

.PHONY: print-python venv run test lint docs bench bench-speed bench-recipes bench-jpeg-cost bench-contention bench-cloud-storage bench-health clean

# The pins' modules compiled on every core: pip compiles them one by one, half its install (README, "make test").
# As with pip, a file that does not compile costs only its speed.
$(VENV)/.installed: setup.py requirements.txt requirements-test.txt
	@test -n "$(PYTHON)" || { echo "make: no Python 3.9-3.11 found (python3 is $$(python3 --version 2>&1 | cut -d' ' -f2), and TensorFlow 2.15 has no wheels for it): install python3.11 with venv (e.g. apt install python3.11-venv, or uv python install 3.11), or give PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements-test.txt
	$(PY) -m compileall -q -j 0 $(VENV)/lib >/dev/null || true
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.installed

run: venv
	@test -z "$(CIFAR10_SOURCE)" -o -e "$(CIFAR10_SOURCE)" -o -n "$(findstring ://,$(CIFAR10_SOURCE))" || { echo "make run: $(CIFAR10_SOURCE) does not exist: download the official archive with make run CIFAR10_SOURCE= (about 170 MB), or name yours: make run CIFAR10_SOURCE=PATH CIFAR10_SHA256=HEX" >&2; exit 2; }
	$(PY) generate_cifar10_tfrecords.py --data-dir $(DATA_DIR) $(SOURCE_FLAGS)
	$(PY) -m estimator.cifar10_main --data-dir $(DATA_DIR) --job-dir $(JOB_DIR) $(RUN_FLAGS)
	@echo "TensorBoard: $(VENV)/bin/tensorboard --logdir $(JOB_DIR)"

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports

# Three workers on the 2 cores: each test runs one thread per op, and a worker waiting on a subprocess's start,
# a server or PyPI leaves its core idle (the Zen 3's times with three and two: README). loadgroup: a module
# marked xdist_group runs on one worker, its module fixtures once.
PYTEST_WORKERS ?= 3

test: lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

# docs/training.md's flag table, made anew from the settings' declarations (a test holds it to them).
docs: venv
	$(PY) -c 'from estimator.training import flags; flags.write_table("docs/training.md")'

FULL_DATA_DIR ?= work/cifar-10-full
FULL_SOURCE_FLAGS = --source $(SHARED_DATA)/cifar-10-jpeg-python.tar.gz \
  --sha256 818d7f7e2356d667cc55e182d01757a60db5247f56f99ff29a9eade8536256f4

bench: venv
	$(PY) -m benchmarks.input_pipeline $(FULL_SOURCE_FLAGS)
	$(PY) generate_cifar10_tfrecords.py --data-dir $(FULL_DATA_DIR) $(FULL_SOURCE_FLAGS)
	$(PY) -m benchmarks.keras_vs_estimator --data-dir $(FULL_DATA_DIR)

# PyTorch only for the speed comparison (pinned to the build this machine has on disk).
$(VENV)/.bench: $(VENV)/.installed requirements-bench.txt
	$(PY) -m pip install --quiet -r requirements-bench.txt
	touch $@

$(FULL_DATA_DIR)/cifar10_manifest.json: | $(VENV)/.installed
	$(PY) generate_cifar10_tfrecords.py --data-dir $(FULL_DATA_DIR) $(FULL_SOURCE_FLAGS)

# Ours against Keras and PyTorch, fp32 and bf16 (about 15 minutes on an AVX2-only CPU, where
# bf16 is emulated: hence so few bf16 steps; on a CPU with AMX give them as many as fp32).
bench-speed: $(VENV)/.bench $(FULL_DATA_DIR)/cifar10_manifest.json
	$(PY) -m benchmarks.training_speed --data-dir $(FULL_DATA_DIR) --depths 20 --batch-sizes 128 256 \
	  --steps 40 --bf16-steps 6 --warmup 4 --rounds 2 --out benchmarks/results/training_speed_resnet20.json
	$(PY) -m benchmarks.training_speed --data-dir $(FULL_DATA_DIR) --depths 56 \
	  --steps 16 --bf16-steps 2 --warmup 3 --rounds 1 --out benchmarks/results/training_speed_resnet56.json

# Time to accuracy of the recipes (5 + 30 minutes and the final evaluations).
bench-recipes: venv $(FULL_DATA_DIR)/cifar10_manifest.json
	$(PY) -m benchmarks.recipes --data-dir $(FULL_DATA_DIR) recipes/cpu_5min.args recipes/cpu_30min.args

# What the JPEG stand-in costs: the 5-minute recipe, 40 epochs on the same 5,085 images with their
# original pixels and their JPEG-decoded ones, two seeds each (about 18 minutes on 2 cores).
bench-jpeg-cost: venv
	$(PY) -m benchmarks.jpeg_cost --work-dir work/jpeg_cost --recipe recipes/cpu_5min.args --epochs 40 --seeds 1 2

# Whether --time-budget holds when a busy loop takes one of the cores mid-run (90 s and 5 min).
bench-contention: venv $(FULL_DATA_DIR)/cifar10_manifest.json
	$(PY) -m benchmarks.contention --data-dir $(FULL_DATA_DIR) --budgets 90s 5m

# The 5-minute recipe with its records and job dir on Cloud Storage (the emulator of tests/cloud_storage.py) and on
# local disk, first runs, two rounds (about 22 minutes).
bench-cloud-storage: venv
	$(PY) -m benchmarks.cloud_storage $(FULL_SOURCE_FLAGS) recipes/cpu_5min.args --rounds 2

# What the health rules, pictures and histograms cost (three off/default pairs).
bench-health: venv $(FULL_DATA_DIR)/cifar10_manifest.json
	$(PY) -m benchmarks.health_overhead --data-dir $(FULL_DATA_DIR)

clean:
	rm -rf work

# The interpreter make would build .venv with (see PYTHON above).
print-python:
	@echo $(PYTHON)
