# Front door: `make run` and `make test` set everything up on a fresh machine.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed
# Where the CPU build of torch comes from: PyTorch's CPU wheel index by default (a torch wheel named
# only by its version is the CUDA build, with its NVIDIA packages, on most Linux machines). Empty
# (`make setup TORCH_INDEX=`) uses only the indexes pip is configured with, which then must hold
# torch==2.13.0+cpu. Only the torch wheel itself is looked up there; everything else comes from
# pip's configured index.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIP_OPTS = $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))

.PHONY: setup run test clean

setup: $(STAMP)

# torch first, from TORCH_INDEX; then the rest of the CPU stack and the harness; torchrec last and
# without its CUDA-only fbgemm-gpu requirement (see requirements/cpu.txt). Installed with
# --no-deps, pip does not check the missing fbgemm-gpu, so no resolver error is printed.
$(STAMP): pyproject.toml requirements/cpu.txt requirements/torchrec.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install $(TORCH_PIP_OPTS) --no-deps $$(grep -m1 '^torch==' requirements/cpu.txt)
	$(BIN)/pip install -r requirements/cpu.txt
	$(BIN)/pip install -e ".[dev,cluster]"
	$(BIN)/pip install --no-deps -r requirements/torchrec.txt
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m bench +sweep=quant

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .cache outputs multirun
