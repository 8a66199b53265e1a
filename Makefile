# hvdkeras: `make train` and `make test` on a fresh machine (each stack's Python, stacks/<STACK>/python: 3.11 for
# keras2, 3.12 for keras3; a C++ compiler, pip).
#
#   STACK=keras2|keras3   which pinned stack (stacks/<STACK>/); each has its own venv
#   LAUNCHER=gloo|mpi|mpirun  how `make train` starts its NP processes
# PYTHON=/path/to/python3.X overrides the interpreter tools/install_stack.sh finds for the stack.
PYTHON   ?=
STACK    ?= keras2
STACKS   := keras2 keras3
# `make test` without STACK= runs the suite on every tested stack, one after the other.
TEST_STACKS ?= $(if $(filter command line environment,$(origin STACK)),$(STACK),$(TESTED_STACKS))
TESTED_STACKS := keras2 keras3
VENV_keras2 := .venv
VENV_keras3 := .venv-keras3
VENV     ?= $(VENV_$(STACK))
NP       ?= 2
LAUNCHER ?= gloo
CONFIG   ?= configs/digits.yaml
# runs/<config name>, with -<stack> on any stack but keras2: `make train` then `make train STACK=keras3` each keep
# their own run (a workdir remembers the stack that trained it and refuses another, hvdkeras/common/workdir_guard.py).
WORKDIR  ?= runs/$(basename $(notdir $(CONFIG)))$(if $(filter keras2,$(STACK)),,-$(STACK))
PY       := $(VENV)/bin/python
# mypy's cache, one per stack (the stacks' NumPy and Matplotlib differ), outside the tree like the Horovod wheels:
# a fresh clone's check reads what an earlier checkout's wrote, and mypy checks again only the files whose hash
# differs from the cached one (a new path or time alone costs a hash).
MYPY_CACHE ?= $(HOME)/.cache/hvdkeras/mypy-$(STACK)
MYPY     := $(VENV)/bin/mypy --cache-dir $(MYPY_CACHE)
# Horovod is built with MPI when OpenMPI is installed: the stamp records which build this venv has.
MPI      := $(if $(shell command -v mpicxx 2>/dev/null),mpi,gloo-only)
STAMP    := $(VENV)/.hvdkeras-installed-$(MPI)
export TF_CPP_MIN_LOG_LEVEL ?= 2
# OpenMPI refuses to start as root without these, and its shared-memory single-copy path
# needs ptrace rights containers rarely grant.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_btl_vader_single_copy_mechanism := none

ifeq ($(VENV),)
$(error unknown STACK=$(STACK); choose one of: $(STACKS))
endif

LAUNCH_gloo   := $(VENV)/bin/horovodrun -np $(NP) -H localhost:$(NP) --gloo
LAUNCH_mpi    := $(VENV)/bin/horovodrun -np $(NP) -H localhost:$(NP) --mpi
# The flags of Horovod's Open MPI recipe come from hvdkeras.launch (one copy), read when the recipe runs.
LAUNCH_mpirun = mpirun -np $(NP) $$($(PY) -m hvdkeras.launch --mpirun-flags)
LAUNCH   := $(LAUNCH_$(LAUNCHER))

.PHONY: install install-mpi system-deps train test test-stack test-unit test-distributed lint clean wheel bench lab lab-scaling check-tf

# What the Horovod build depends on besides the stack: its patches and the command that applies them.
BUILD_HOROVOD := $(wildcard hvdkeras/build_horovod/*.py hvdkeras/build_horovod/patches/*.patch)

# The stamp is newer than everything the install depends on: a second `make install` does nothing.
$(STAMP): stacks/$(STACK)/constraints.txt stacks/$(STACK)/requirements.txt stacks/$(STACK)/python pyproject.toml tools/install_stack.sh $(BUILD_HOROVOD)
	PYTHON=$(PYTHON) bash tools/install_stack.sh $(VENV) $(STACK)
	rm -f $(VENV)/.hvdkeras-installed-*
	touch $(STAMP)

install: $(STAMP)

# Debian's OpenMPI; `make install` then builds Horovod with MPI as well as Gloo.
install-mpi:
	bash tools/system_deps.sh openmpi-bin libopenmpi-dev

# What the whole suite needs from the system: OpenMPI (MPI tests), an sshd (the two-host test),
# Slurm and munge (the two-node Slurm test cluster)
# and LLVM's headers (TensorFlow 2.19+'s headers include them; skipped where llvm-config exists).
# Installed when running as root with apt; otherwise those tests skip and say why.
system-deps:
	bash tools/system_deps.sh --if-root openmpi-bin libopenmpi-dev openssh-server openssh-client iproute2 patch \
	  slurm-wlm munge openjdk-17-jre-headless \
	  $(if $(shell command -v llvm-config 2>/dev/null),,llvm-dev)

train: $(STAMP)
	@test -n "$(LAUNCH)" || { echo "unknown LAUNCHER=$(LAUNCHER); choose gloo, mpi or mpirun" >&2; exit 2; }
	$(LAUNCH) $(PY) -m hvdkeras.train --config $(CONFIG) --workdir $(WORKDIR)

# System packages first (they change how Horovod is built), then every stack's install side by side,
# then every stack's suite side by side (tools/test_stacks.sh says why).
test:
	$(MAKE) --no-print-directory system-deps
	bash tools/test_stacks.sh $(MAKE) $(TEST_STACKS)

# Without the tools' caches in the tree (ruff's, pytest's): the stacks' suites run side by side on one checkout.
# The unit tests that import neither TensorFlow nor Keras run on keras3 only (tests/unit/conftest.py, STACK_FREE).
# ORDER=distributed-first runs the distributed tests before the unit tests: tools/test_stacks.sh asks it of the
# suite in the background, so that each stack's unit tests, which keep both cores busy, run beside the other
# stack's distributed tests, which leave a fifth of them idle, rather than beside each other. The lab's modules,
# which one suite at a time may run (tests/harness/lab_lock.py), go first in a suite that starts with its unit
# tests and last in one that starts with its distributed tests, so that neither waits for the other's.
TEST_UNIT = HVDKERAS_STACK_FREE_ON=keras3 $(PY) -m pytest -q -rsfE -p no:cacheprovider --durations=5 -n 2 tests/unit
TEST_DISTRIBUTED = $(PY) -m pytest -q -rsfE -p no:cacheprovider --durations=0 --durations-min=1 tests/distributed \
  --lab-modules $(if $(filter distributed-first,$(ORDER)),last,first)
ORDER ?= unit-first
ifeq ($(filter unit-first distributed-first,$(ORDER)),)
$(error unknown ORDER=$(ORDER); choose unit-first or distributed-first)
endif
# The tree's own modules compiled once: this environment may set PYTHONDONTWRITEBYTECODE, and then each of the
# suite's few hundred processes compiled every hvdkeras module it imported again (0.1-0.3 CPU-s each).
test-stack: $(STAMP)
	@echo "== test suite on stack $(STACK) ($(VENV)) =="
	$(PY) -m compileall -q -j 0 hvdkeras tests benchmarks lab tools examples > /dev/null
	$(VENV)/bin/ruff check --no-cache .
	$(MYPY)
	$(if $(filter distributed-first,$(ORDER)),$(TEST_DISTRIBUTED),$(TEST_UNIT))
	$(if $(filter distributed-first,$(ORDER)),$(TEST_UNIT),$(TEST_DISTRIBUTED))

# ruff (pyproject.toml's [tool.ruff]): the whole tree, library, tests, tools and benchmarks; then mypy
# (its [tool.mypy]): the package, strict on the layer without TensorFlow, clean on every stack.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(MYPY)

test-unit: $(STAMP)
	$(PY) -m pytest -q -rsfE -n 2 tests/unit

test-distributed: $(STAMP)
	$(PY) -m pytest -q -rsfE tests/distributed

clean:
	rm -rf runs .pytest_cache

# hvdkeras's wheel, to install anywhere with pip (docs/stacks.md#installing): dist/hvdkeras-<version>-py3-none-any.whl.
wheel:
	rm -rf dist build
	$(or $(PYTHON),python3) -m pip wheel --no-deps -q -w dist .

# The version matrix (docs/stacks.md): each Python x TensorFlow in a throwaway venv, Horovod built, the default job
# on two ranks, and a Spark fit under each pyspark. Not part of `make test`: about 6 minutes a cell.
TF ?= 2.16.2 2.17.1 2.18.1 2.19.1 2.20.0 2.21.0
PYTHONS ?= 3.10 3.11 3.12 3.13
PYSPARKS ?= 4 3.5
check-tf:
	python3 tools/check_tf.py --python $(PYTHONS) --tf $(TF) --pyspark $(PYSPARKS)

# Side by side: hvdkeras vs Horovod's recipe vs MultiWorkerMirroredStrategy (see benchmarks/).
bench: $(STAMP)
	$(PY) -m benchmarks --np $(NP) --rounds 3 --out runs/bench

# The lab (as root): two emulated hosts, their links shaped to each rate in turn. The default rows are
# hvdkeras and Horovod's recipe each in fp32 and fp16, MWMS and the communication-free ceiling (6 jobs a
# round at one rate, 35-70 s each here): 5 rounds at the GPU-equivalent rate are 30 jobs, within the
# lab's 25 minutes; LINK=unlimited,gpu adds 5 jobs a round (docs/performance.md). ResNet-50's rows, with
# their own calibration: make lab MODEL=applications.ResNet50 IMAGE_SIZE=128 ROUNDS=3.
LINK ?= gpu
ROUNDS ?= 5
MODEL ?= applications.MobileNetV2
IMAGE_SIZE ?= 224
lab: $(STAMP)
	$(PY) -m benchmarks --hosts 2 --link $(LINK) --rounds $(ROUNDS) --steps 8 --model $(MODEL) \
	  --image_size $(IMAGE_SIZE) --out runs/lab

# The lab's scaling run of record (as root): one gradient exchange alone (no compute) on 2 to 8
# emulated hosts, against the ring model 2(N-1)/N x bytes / rate (benchmarks/exchange_scaling.py), for
# MobileNetV2 (14 MB) at 200 Mbit/s and ResNet-50 (102 MB) at 500 Mbit/s, each link rate one where the link,
# not the CPU, bounds the exchange; then both curves drawn and the projection to 8-256 workers
# recomputed on ResNet-50's. Each sweep takes its lab down at its end
# (docs/performance.md has the run's time, docs/records/performance-details.md its tables).
HOSTS ?= 2,3,4,6,8
SCALING_ROUNDS ?= 2
lab-scaling: $(STAMP)
	$(PY) -m benchmarks.exchange_scaling --hosts $(HOSTS) --link 200mbit --rounds $(SCALING_ROUNDS) \
	  --model applications.MobileNetV2 --out runs/exchange_scaling/mobilenetv2
	$(PY) -m benchmarks.exchange_scaling --hosts $(HOSTS) --link 500mbit --rounds $(SCALING_ROUNDS) --steps 5 \
	  --model applications.ResNet50 --out runs/exchange_scaling/resnet50
	$(PY) -m benchmarks.exchange_plot runs/exchange_scaling/mobilenetv2/exchange_scaling.json \
	  runs/exchange_scaling/resnet50/exchange_scaling.json --out runs/exchange_scaling/exchange_scaling.png
	$(PY) -m benchmarks.efficiency runs/exchange_scaling/resnet50/exchange_scaling.json \
	  > runs/exchange_scaling/projection.txt && cat runs/exchange_scaling/projection.txt
