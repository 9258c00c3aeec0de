# Two commands do all set-up on a fresh Linux machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test build snippets site-tests clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e '.[test]'
	touch $@

serve: $(BIN)/.installed  ## build and serve the site on http://127.0.0.1:8000
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

test: $(BIN)/.installed  ## every snippet, then the site (strict build, parity, links, browser)
	$(BIN)/python -m pytest

build: $(BIN)/.installed
	$(BIN)/mkdocs build --strict

snippets: $(BIN)/.installed  ## only the runnable examples (what a GPU box owner runs)
	$(BIN)/python -m pytest snippets

clean:
	rm -rf site .cache .pytest_cache artifacts
