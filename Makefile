# Two commands do all set-up on a fresh Linux machine: `make serve` and `make test`. `make help` lists the rest.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
N ?= 20
# make soak runs the snippets as make test does (three workers); SOAK_ARGS= runs them one at a time
SOAK_ARGS ?= -n 3

.PHONY: help serve test changed check lint build snippets outputs regen soak durations multinode sync-copies notebooks \
	notebooks-write gpu-check clean

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[test]'
	touch $@

serve: $(BIN)/.installed  ## build and serve the site on http://127.0.0.1:8000
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# Three workers on two cores; guidekit/schedule.py decides what runs side by side, longest first (tests/durations.json).
test: lint  ## lint, every snippet, then the site (strict build, parity, links, browser), multi-host tests
	$(BIN)/python -m pytest -n 3

# BASE: a git ref; what differs from it (commits since, and uncommitted work) decides what runs (guidekit/changed.py).
BASE ?= main
changed: lint  ## the per-change lane: source checks, the programs and pages a change touches, one strict build
	$(BIN)/python -m pytest -n 3 --changed=$(BASE)

check: lint  ## the fast lane before a commit: source-only tests (parity, includes, rules, guidekit), no runs, no build
	$(BIN)/python -m pytest tests -q -m "not site and not runs and not browser and not notebooks"

lint: $(BIN)/.installed  ## ruff: lint and format check of every Python file
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

build: $(BIN)/.installed  ## strict build of both languages into site/
	$(BIN)/mkdocs build --strict

snippets: $(BIN)/.installed  ## only the runnable examples (what a GPU box owner runs)
	$(BIN)/python -m pytest snippets

outputs: $(BIN)/.installed  ## run every snippet and record what it printed (recordings/), for the pages
	$(BIN)/python -m pytest snippets -n 3 --record-output

regen: sync-copies notebooks-write  ## regenerate what is derived from the sources: copies, chapter notebooks (OUTPUTS=1: recordings first)
ifeq ($(OUTPUTS),1)
regen: outputs
notebooks-write: outputs
endif

soak: $(BIN)/.installed  ## the program suite until every program has N runs (default 20) at its content; resumable
	$(BIN)/python -m guidekit.soak --runs $(N) -- $(SOAK_ARGS)

durations: $(BIN)/.installed  ## run everything as make test does and record each scope's seconds (tests/durations.json)
	$(BIN)/python -m pytest -n 3 --record-durations

# Needs root (network namespaces); skipped without it, a failure under CI=true. ARGS=--record-output records anew.
multinode: $(BIN)/.installed  ## torchrun, Slurm and Kubernetes across two hosts made of network namespaces
	$(BIN)/python -m pytest tests/multinode $(ARGS)

sync-copies: $(BIN)/.installed  ## rewrite every declared copy of shared code from its original
	$(BIN)/python -m guidekit.copies --write

notebooks: $(BIN)/.installed  ## run every chapter notebook (notebooks/) as a reader would, on CPU
	$(BIN)/python -m pytest tests/site/test_notebooks.py -m notebooks -n 3

notebooks-write: $(BIN)/.installed  ## regenerate the chapter notebooks from the pages and snippets
	$(BIN)/python -m guidekit.notebooks --write

# On a GPU machine: every program (recorded under recordings/cuda-<n>/, n the box's GPUs), the benchmark's full sweep,
# all in $(OUT).
OUT ?= artifacts/gpu-check
gpu-check: $(BIN)/.installed  ## on a GPU box: every program with NCCL where it can, the benchmark; all in OUT=DIR
	$(BIN)/python -m guidekit.gpu_check --out $(OUT) $(ARGS)

clean:  ## remove the built site and caches
	rm -rf site .cache .pytest_cache artifacts
