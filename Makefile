# The two quick-start commands are `make train` and `make test`; both set up .venv first.
# `make test-all` is the whole suite, which CI (.ci/run) runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FAST_TIER := not slow and not netns and not docker

.PHONY: setup train test test-all lint docs bench-transport bench-weights clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(BIN)/ppomq train $(ARGS)

# The fast tier: no root, Docker or network namespaces; a few minutes on 2 cores.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "$(FAST_TIER)" $(PYTEST_ARGS)

# Everything, as CI runs it: end-to-end runs, the real Docker engine (started as root where
# none is reachable), network namespaces (root), Redis 7 where installed. About 20 minutes.
test-all: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The docs site into site/, offline: a broken link, anchor or include, or a page left out
# of the nav, fails the build (mkdocs.yml: strict and validation). Not --quiet: it hides
# the warnings that strict mode counts, and the build would pass. The variable silences
# mkdocs-material's notice about its successor, which is no warning about the site.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench-transport: $(STAMP)
	$(BIN)/python -m benchmarks.transport

bench-weights: $(STAMP)
	$(BIN)/python -m benchmarks.weights_fanout

clean:
	rm -rf $(VENV) build site *.egg-info
