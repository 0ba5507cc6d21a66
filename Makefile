# Front door: `make run` and `make test` set everything up on a fresh machine.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: setup run test clean

setup: $(STAMP)

# Two-step install: torchrec without its CUDA-only fbgemm-gpu requirement (see requirements/cpu.txt).
$(STAMP): pyproject.toml requirements/cpu.txt requirements/torchrec.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -r requirements/cpu.txt
	$(BIN)/pip install --no-deps -r requirements/torchrec.txt
	$(BIN)/pip install -e ".[dev,cluster]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m bench +sweep=quant

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .cache outputs multirun
