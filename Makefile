# Two commands do all set-up on a fresh Linux machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
N ?= 20
# make soak runs the snippets as make test does (three workers); SOAK_ARGS= runs them one at a time
SOAK_ARGS ?= -n 3

.PHONY: serve test lint build snippets outputs soak durations multinode sync-copies notebooks notebooks-write clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[test]'
	touch $@

serve: $(BIN)/.installed  ## build and serve the site on http://127.0.0.1:8000
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

# Three workers on two cores: faster than two or four there, though the run is CPU-bound (measured in README);
# snippets/conftest.py decides what runs side by side, longest first by tests/durations.json (pytest_xdist_make_scheduler).
test: lint  ## lint, every snippet, then the site (strict build, parity, links, browser)
	$(BIN)/python -m pytest -n 3

lint: $(BIN)/.installed  ## ruff: lint and format check of every Python file
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

build: $(BIN)/.installed
	$(BIN)/mkdocs build --strict

snippets: $(BIN)/.installed  ## only the runnable examples (what a GPU box owner runs)
	$(BIN)/python -m pytest snippets

outputs: $(BIN)/.installed  ## run every snippet and record what it printed (recordings/), for the pages
	$(BIN)/python -m pytest snippets -n 3 --record-output

soak: $(BIN)/.installed  ## the snippet suite N times in a row (default 20): failures per snippet, torch version
	$(BIN)/python tests/soak.py --runs $(N) -- $(SOAK_ARGS)

durations: $(BIN)/.installed  ## run everything as make test does and record each scope's seconds (tests/durations.json)
	$(BIN)/python -m pytest -n 3 --record-durations

# Needs root (network namespaces); skipped without it, a failure under CI=true.
multinode: $(BIN)/.installed  ## torchrun across two hosts made of network namespaces (tests/multinode)
	$(BIN)/python -m pytest tests/multinode

sync-copies: $(BIN)/.installed  ## rewrite every setup() copy from snippets/ddp/train_torchrun.py
	$(BIN)/python -m guidekit.copies --write

notebooks: $(BIN)/.installed  ## run every chapter notebook (notebooks/) as a reader would, on CPU
	$(BIN)/python -m pytest tests/test_notebooks.py -m notebooks

notebooks-write: $(BIN)/.installed  ## regenerate the chapter notebooks from the pages and snippets
	$(BIN)/python -m guidekit.notebooks --write

clean:
	rm -rf site .cache .pytest_cache artifacts
