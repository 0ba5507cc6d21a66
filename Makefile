# Front door: `make run` and `make test` set everything up on a fresh machine.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
# Which tested stack to install (README, "Tested versions"): requirements/<STACK>.txt and
# requirements/<STACK>-torchrec.txt. `current` is the default; `previous` is kept working.
STACK  ?= current
STACKS  = current previous
STAMP   = $(VENV)/.installed-$(STACK)
ifeq ($(filter $(STACK),$(STACKS)),)
$(error STACK=$(STACK) is not a tested stack: choose one of $(STACKS) (requirements/<STACK>.txt))
endif
# Where the CPU build of torch comes from: PyTorch's CPU wheel index by default, as the +cpu build
# of the stack's torch version (a torch wheel named only by its version is the CUDA build, with its
# NVIDIA packages, on most Linux machines). Empty (`make setup TORCH_INDEX=`) takes that version
# from the indexes pip is configured with, whichever build they hold: a CUDA build then runs on the
# CPU, but it does not import without its CUDA libraries, so pip installs them too (about 3 GB).
# Only the torch wheel itself is looked up at TORCH_INDEX; everything else, torch's own
# requirements included, comes from pip's configured index.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIP_OPTS = $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
TORCH_BUILD = $(if $(TORCH_INDEX),+cpu)
REQS = requirements/$(STACK).txt requirements/$(STACK)-torchrec.txt

.PHONY: setup setup-quark setup-movielens run test test-fast lint docs clean gpu-check

setup: $(STAMP)

# torch first, alone and with --no-deps, from TORCH_INDEX; then the rest of the stack (torch's own
# requirements with it) and the harness; torchrec last and without its CUDA-only fbgemm-gpu
# requirement (see requirements/current.txt). Installed with --no-deps, pip does not check the
# missing fbgemm-gpu, so no resolver error is printed.
$(STAMP): pyproject.toml $(REQS)
	$(PYTHON) -m venv $(VENV)
	rm -f $(VENV)/.installed-*
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install $(TORCH_PIP_OPTS) --no-deps "$$(grep -m1 '^torch==' requirements/$(STACK).txt)$(TORCH_BUILD)"
	$(BIN)/pip install -r requirements/$(STACK).txt
	$(BIN)/pip install -e ".[dev,cluster,toolkits]"
	$(BIN)/pip install --no-deps -r requirements/$(STACK)-torchrec.txt
	$(BIN)/python -c "import torch, fbgemm_gpu, torchrec, torchao; print('stack $(STACK): torch', torch.__version__, '| fbgemm_gpu', fbgemm_gpu.__version__, '| torchrec', torchrec.__version__, '| torchao', torchao.__version__)"
	touch $(STAMP)

# AMD Quark (backend=quark_w8a8) in an environment of its own, layered over $(VENV): a venv whose own
# site-packages come first and $(VENV)'s after them (a .pth line calling site.addsitedir, so $(VENV)'s own .pth
# files, the editable harness among them, count too). It reuses the stack (torch, fbgemm, torchrec, the harness)
# and holds only Quark and what Quark changes: about 30 packages, 360 MB, transformers included (quark.torch
# imports it without declaring it), and onnx pinned to 1.22.0, under the onnx of the onnxruntime extra; that
# older onnx shadows the newer one here only (pip does not touch packages outside the environment it installs
# into). Quark's records join the others' through the same reports_dir and cache_dir (docs/toolkits.md).
QUARK_VENV ?= .venv-quark
SITE = lib/$(notdir $(PYTHON))/site-packages
setup-quark: $(STAMP)
	$(PYTHON) -m venv $(QUARK_VENV)
	echo "import site; site.addsitedir('$(abspath $(VENV))/$(SITE)')" > $(QUARK_VENV)/$(SITE)/_bench_stack.pth
	$(QUARK_VENV)/bin/pip install --upgrade pip
	$(QUARK_VENV)/bin/pip install "$$(grep -o 'amd-quark==[0-9.]*' pyproject.toml)" "$$(grep -o 'transformers==[0-9.]*' pyproject.toml)"
	$(QUARK_VENV)/bin/python -c "import torch, torchrec, bench, quark, quark.torch; print('quark', quark.__version__, '| torch', torch.__version__)"

# workload=movielens reads MovieLens-100K from recbole's package data (docs/sequential.md). recbole's own
# requirements are not needed to read its files (the harness never imports it): --no-deps.
# `make test` installs it too, so the MovieLens tests run wherever the tests do.
MOVIELENS = $(VENV)/.installed-movielens
setup-movielens: $(MOVIELENS)
$(MOVIELENS): $(STAMP)
	$(BIN)/pip install --no-deps recbole==1.2.1
	touch $(MOVIELENS)

run: $(STAMP)
	$(BIN)/python -m bench +sweep=quant

# Two pytest-xdist workers: most tests wait on a subprocess or run one thread, so one process leaves a
# 2-core machine half idle. TEST_WORKERS=0 runs every test in the one pytest process.
TEST_WORKERS ?= 2
test: $(STAMP) $(MOVIELENS)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope

# A check on a GPU machine without network (docs/gpu.md): builds .gpu/ (../shared/gpu/make_carry.sh, about
# 36 MB, git-ignored) unless it is there, and prints the one command to run there with the project and .gpu/.
gpu-check:
	bash benchmarks/scripts/gpu_check.sh

# The fast subset for day-to-day work: the tests not marked slow (end-to-end runs that train models,
# subprocess sweeps, real LoadGen and browser runs stay in `make test`).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope -m "not slow"

# The import layers and circles (import-linter's contracts in pyproject.toml), and the docs site.
lint: $(STAMP) docs
	$(BIN)/lint-imports

# The documentation site (mkdocs.yml): built strictly, so a broken link or a page missing from the nav fails.
# NO_MKDOCS_2_WARNING: mkdocs-material's banner that it reaches end of life in May 2027 (Zensical succeeds it).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) $(QUARK_VENV) .cache outputs multirun site
