# Two entry points: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench data clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/delaylab verify --out out/verify

test: $(STAMP)
	$(BIN)/python -m pytest -q

# Optional: Debian's Fashion-MNIST (the data loader falls back to scikit-learn's digits without it).
data:
	test -d /usr/share/datasets/fashion-mnist || (apt-get update -q && apt-get install -y -q dataset-fashion-mnist)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.engine

clean:
	rm -rf $(VENV) out
