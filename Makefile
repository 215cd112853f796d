# The two quick-start commands are `make train` and `make test`; each sets up .venv first,
# with what it needs: training the `local` extra alone, the tests the `dev` extra (test
# tools, the MuJoCo and Atari envs, the deployment validators, the docs' packages).
# `make test-all` is the whole suite, which CI (.ci/run) runs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TRAIN_STAMP := $(VENV)/.installed-local
DEV_STAMP := $(VENV)/.installed-dev
FAST_TIER := not slow and not netns and not docker
# PyPI's torch for Linux is the CUDA build (several GB with its libraries). Give the CPU
# wheels' index, TORCH_INDEX=https://download.pytorch.org/whl/cpu, to install that build of
# the pinned version first; pip then keeps it.
TORCH_INDEX ?=
TORCH_PIN := $(shell grep -o '"torch==[^"]*"' pyproject.toml | head -1 | tr -d '"')

.PHONY: setup train test test-all lint docs bench-transport bench-weights clean

# pip's own lines and progress bars show what is being fetched: the first install of torch
# and its dependencies takes minutes, which a silent terminal reads as a hang.
$(BIN)/python:
	@echo "make: creating $(VENV)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(TRAIN_STAMP): pyproject.toml | $(BIN)/python
	@echo "make: installing ppomq and what training needs into $(VENV) (the local extra)"
	$(if $(TORCH_INDEX),$(BIN)/pip install --progress-bar on '$(TORCH_PIN)' --index-url $(TORCH_INDEX))
	$(BIN)/pip install --progress-bar on -e '.[local]'
	touch $(TRAIN_STAMP)

# `dev` holds all of `local`: training is set up too.
$(DEV_STAMP): pyproject.toml | $(BIN)/python
	@echo "make: installing ppomq and the dev extra into $(VENV) (tests, envs, validators)"
	$(if $(TORCH_INDEX),$(BIN)/pip install --progress-bar on '$(TORCH_PIN)' --index-url $(TORCH_INDEX))
	$(BIN)/pip install --progress-bar on -e '.[dev]'
	touch $(DEV_STAMP) $(TRAIN_STAMP)

setup: $(DEV_STAMP)

train: $(TRAIN_STAMP)
	$(BIN)/ppomq train $(ARGS)

# The fast tier: no root, Docker or network namespaces.
test: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -m "$(FAST_TIER)" $(PYTEST_ARGS)

# Everything, as CI runs it: end-to-end runs, the real Docker engine (started as root where
# none is reachable), network namespaces (root), Redis 7 where installed. On TEST_WORKERS
# pytest-xdist workers, whole test files to each (--dist loadfile): a file's module fixtures
# (the engine, a trained run) are made once and its tests never overlap; most of the slow
# tier waits on real processes, so two workers share two cores well.
TEST_WORKERS ?= 2
test-all: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The docs site into site/, offline: a broken link, anchor or include, or a page left out
# of the nav, fails the build (mkdocs.yml: strict and validation). Not --quiet: it hides
# the warnings that strict mode counts, and the build would pass. The variable silences
# mkdocs-material's notice about its successor, which is no warning about the site.
# Only the docs extra (read from pyproject.toml), not the project and its torch: the site
# needs mkdocs and its theme, nothing that trains.
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $$($(BIN)/python -c 'import tomllib; \
		print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"])')
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench-transport: $(DEV_STAMP)
	$(BIN)/python -m benchmarks.transport

bench-weights: $(DEV_STAMP)
	$(BIN)/python -m benchmarks.weights_fanout

clean:
	rm -rf $(VENV) build site *.egg-info
