# The two quick-start commands are `make train` and `make test`; both set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup train test lint bench-transport bench-weights clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(BIN)/ppomq train $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench-transport: $(STAMP)
	$(BIN)/python -m benchmarks.transport

bench-weights: $(STAMP)
	$(BIN)/python -m benchmarks.weights_fanout

clean:
	rm -rf $(VENV) build *.egg-info
