# Two entry points: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test native bench accelerator-check bench-workers bench-workers-current torch torch-current data clean

# Byte-compiled on every core after the install (compileall -j 0) rather than by pip, which
# compiles one file at a time (faster; timings in benchmarks/RESULTS.md, "The test suite's time").
# Compiled it must be: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) no
# import writes a .pyc, so every process the suite starts (Ray's daemons and actors, the CLI and
# 8-device subprocesses, notebook kernels) compiles its imports again, which roughly doubles
# tests/sim/test_real.py. Left out: the installed packages' own tests, Ray's libraries
# that nothing here imports (RLlib, Data, Train, Tune, Serve, LLM), pip and setuptools, a third of
# the files, which saves a third of the time; a module left out still compiles on import.
NOT_IMPORTED := '/(tests?|ray/(rllib|data|train|tune|llm|serve)|pip|setuptools|_distutils_hack)/'
#
# Installed by uv (from PyPI, into .venv, by the venv's own pip) where it installs: it resolves the
# same versions as pip from PyPI and installs them in a third of the time (benchmarks/RESULTS.md,
# "The test suite's time"); where uv cannot be had, pip does the same install.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	{ $(BIN)/python -m pip install --quiet uv && $(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[test]"; } \
	  || $(BIN)/python -m pip install --quiet --no-compile -e ".[test]"
	$(BIN)/python -m compileall -q -j 0 -x $(NOT_IMPORTED) $$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") > /dev/null \
	  || echo "warning: some installed files did not byte-compile (they compile on import, if at all)" >&2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/delaylab verify --out out/verify

# The whole suite on every core (pytest-xdist; at most 4 processes: each holds its own JAX runtime
# and compiles on one core). A fresh machine needs nothing beyond Python: the tests that need
# Debian's Fashion-MNIST or the native convolution skip, saying why (.ci/run installs both).
# The suite once crashed in one process (a segfault in XLA's compiler, about 200 tests in): the
# process had used up Linux's 65,530 memory mappings, three per compiled object, all held by JAX's
# caches (reproduced: see tests/conftest.py, which clears the caches after a module once a process
# holds more than 30,000), so one process would pass as well.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses=4 --dist worksteal tests

# The CNN's native convolution (sim/native): oneDNN through jax.ffi. Without it the CNN runs by
# im2col, about half as fast (benchmarks/RESULTS.md). Two routes, the first that is available:
# Debian's oneDNN 2.6 (libdnnl-dev) and g++ (.ci/run installs both), or PyPI's pieces alone, the
# `native` extra of pyproject.toml installed into .venv: oneDNN 3.2's CPU library and headers and
# Zig's C/C++ compiler (its first build takes a minute or two; later ones seconds). PyPI's oneDNN
# needs GCC's OpenMP runtime, libgomp.so.1, at run time: where it is missing this says so and the
# CNN stays on im2col.
CXX ?= g++
NATIVE_LIB := sim/native/libdelaylab_conv.so
JAX_FFI_INCLUDE = "$$($(BIN)/python -c 'import jax.ffi; print(jax.ffi.include_dir())')"
native: $(NATIVE_LIB)
$(NATIVE_LIB): sim/native/conv_dnnl.cc $(STAMP)
	@if [ -f /usr/include/oneapi/dnnl/dnnl.hpp ] && command -v $(CXX) >/dev/null; then \
	  echo "make native: Debian's oneDNN and $(CXX)"; \
	  $(CXX) -O2 -std=c++17 -shared -fPIC -isystem $(JAX_FFI_INCLUDE) $< -o $@ -ldnnl; \
	else \
	  $(BIN)/python -c "import ctypes; ctypes.CDLL('libgomp.so.1')" 2>/dev/null || { \
	    echo "make native: PyPI's oneDNN needs GCC's OpenMP runtime (libgomp.so.1; Debian: libgomp1), not found; the CNN stays on im2col" >&2; \
	    exit 1; }; \
	  echo "make native: oneDNN and Zig's compiler from PyPI (the native extra)"; \
	  $(BIN)/python -m pip install --quiet -e ".[test,native]" && \
	  $(BIN)/python -m ziglang c++ -O2 -std=c++17 -shared -fPIC -I $(VENV)/include -isystem $(JAX_FFI_INCLUDE) \
	    $< -o $@ -L $(VENV)/lib -ldnnl '-Wl,-rpath,$$ORIGIN/../../$(VENV)/lib'; \
	fi

# Optional: Debian's Fashion-MNIST (the data loader falls back to scikit-learn's digits without it).
data:
	test -d /usr/share/datasets/fashion-mnist || (apt-get update -q && apt-get install -y -q dataset-fashion-mnist)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.engine

# Where an accelerator is lent: the engine's ratios, the block engine's, and one deciding preset at
# full size (its --estimate, and the run where it fits), in at most ten minutes (benchmarks/accelerator.py).
accelerator-check: $(STAMP)
	$(BIN)/python -m benchmarks.accelerator --budget 600

# Optional, for benchmarks/workers.py only: PyTorch's CPU build from Debian (found by the benchmark
# in /usr/lib/python3/dist-packages; PyPI's Linux wheels are CUDA builds).
torch:
	test -d /usr/lib/python3/dist-packages/torch || (apt-get update -q && apt-get install -y -q --no-install-recommends python3-torch)

bench-workers: $(STAMP) torch data
	$(MAKE) native || echo "(the native convolution could not be built: the benchmark runs im2col)" >&2
	$(BIN)/python -m benchmarks.workers

# Optional: a current PyTorch from PyPI in its own venv (about 5 GB: PyPI's Linux wheel is the CUDA
# build, whose CPU kernels are the same oneDNN/MKL ones), compared against with --torch-path.
TORCH_VENV := .torchvenv
torch-current:
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet torch

bench-workers-current: $(STAMP) torch-current data
	$(MAKE) native || echo "(the native convolution could not be built: the benchmark runs im2col)" >&2
	$(BIN)/python -m benchmarks.workers --torch-path $$($(TORCH_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")

clean:
	rm -rf $(VENV) $(TORCH_VENV) out $(NATIVE_LIB)
