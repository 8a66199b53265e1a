# hvdkeras: `make train` and `make test` on a fresh machine (Python 3.11, a C++ compiler, pip).
PYTHON   ?= python3.11
VENV     ?= .venv
NP       ?= 2
CONFIG   ?= configs/digits.yaml
WORKDIR  ?= runs/digits
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.hvdkeras-installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install train test test-unit test-distributed clean bench

# The stamp is newer than everything the install depends on: a second `make install` does nothing.
$(STAMP): constraints.txt requirements.txt setup.py tools/install_stack.sh
	PYTHON=$(PYTHON) bash tools/install_stack.sh $(VENV)
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(VENV)/bin/horovodrun -np $(NP) -H localhost:$(NP) --gloo $(PY) -m hvdkeras.train --config $(CONFIG) --workdir $(WORKDIR)

test: $(STAMP)
	$(PY) -m pytest -q tests

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

test-distributed: $(STAMP)
	$(PY) -m pytest -q tests/distributed

clean:
	rm -rf runs .pytest_cache

# Side by side: hvdkeras vs Horovod's recipe vs MultiWorkerMirroredStrategy (see hvdkeras/bench.py).
bench: $(STAMP)
	$(PY) -m hvdkeras.bench --np $(NP) --rounds 3 --out runs/bench
