# Two entry points: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test native bench bench-workers bench-workers-current torch torch-current data clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP) native
	$(BIN)/delaylab verify --out out/verify

# The suite runs as two processes side by side: the figure and CLI tests (tests/delaylab, but for
# `delaylab run`'s, which mostly wait on subprocesses), and the rest, folder by folder. Why: in one process for the whole suite XLA's CPU compiler crashed
# (a segmentation fault while compiling a small program, about 200 tests in; each folder alone
# passes); and most of the time goes to compiling, one core per compile, so two processes use
# both cores of a CI machine. The figure tests' output is shown when they end.
test: $(STAMP) native
	@$(BIN)/python -m pytest -q -p no:cacheprovider tests/delaylab --ignore=tests/delaylab/test_run_cli.py \
	  > .pytest-delaylab.log 2>&1 & figs=$$!; \
	$(BIN)/python -m pytest -q tests/algos tests/theory; a=$$?; \
	$(BIN)/python -m pytest -q tests/sim tests/notebooks tests/delaylab/test_run_cli.py; b=$$?; \
	wait $$figs; c=$$?; echo "--- tests/delaylab ---"; cat .pytest-delaylab.log; rm -f .pytest-delaylab.log; \
	test $$a -eq 0 -a $$b -eq 0 -a $$c -eq 0

# The CNN's native convolution (sim/native): oneDNN through jax.ffi. Needs a C++ compiler and
# Debian's libdnnl-dev (.ci/run installs it); without them the CNN falls back to im2col.
CXX ?= g++
NATIVE_LIB := sim/native/libdelaylab_conv.so
native: $(NATIVE_LIB)
$(NATIVE_LIB): sim/native/conv_dnnl.cc $(STAMP)
	@if [ -f /usr/include/oneapi/dnnl/dnnl.hpp ] && command -v $(CXX) >/dev/null; then \
	  echo "building $@"; \
	  $(CXX) -O2 -std=c++17 -shared -fPIC -isystem "$$($(BIN)/python -c 'import jax.ffi; print(jax.ffi.include_dir())')" \
	    $< -o $@ -ldnnl; \
	else \
	  echo "note: no oneDNN headers (apt-get install libdnnl-dev) or no $(CXX): the CNN's convolutions use im2col" >&2; \
	fi

# Optional: Debian's Fashion-MNIST (the data loader falls back to scikit-learn's digits without it).
data:
	test -d /usr/share/datasets/fashion-mnist || (apt-get update -q && apt-get install -y -q dataset-fashion-mnist)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.engine

# Optional, for benchmarks/workers.py only: PyTorch's CPU build from Debian (found by the benchmark
# in /usr/lib/python3/dist-packages; PyPI's Linux wheels are CUDA builds).
torch:
	test -d /usr/lib/python3/dist-packages/torch || (apt-get update -q && apt-get install -y -q --no-install-recommends python3-torch)

bench-workers: $(STAMP) torch data
	$(BIN)/python -m benchmarks.workers

# Optional: a current PyTorch from PyPI in its own venv (about 5 GB: PyPI's Linux wheel is the CUDA
# build, whose CPU kernels are the same oneDNN/MKL ones), compared against with --torch-path.
TORCH_VENV := .torchvenv
torch-current:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet torch

bench-workers-current: $(STAMP) torch-current data
	$(BIN)/python -m benchmarks.workers --torch-path $$($(TORCH_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")

clean:
	rm -rf $(VENV) $(TORCH_VENV) out $(NATIVE_LIB)
