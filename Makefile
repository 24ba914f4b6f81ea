# Two commands matter: `make run` and `make test`. Both create the environment when needed.
UV ?= $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
VENV := .venv
STAMP := $(VENV)/.synced
CONFIG ?= config/herald.json5

.PHONY: run test lint typecheck pytest bench soak clean env postgresql docs

$(UV):
	python3 -m pip install --user --quiet uv

$(STAMP): pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen
	touch $(STAMP)

env: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/herald run --config $(CONFIG)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The PostgreSQL backend's tests start a server of their own from Debian's postgresql
# package: installed here when missing (as root); without it those tests fail and say how.
postgresql:
	@bash .ci/install-postgresql || echo "make: the PostgreSQL tests will fail until it is installed" >&2

pytest: $(STAMP) postgresql
	$(VENV)/bin/pytest -q

test: lint typecheck pytest

# docs/configuration.md is generated from the settings' docstrings; a test fails when the
# committed file is not what this writes.
docs: $(STAMP)
	$(VENV)/bin/python -m gateway.config.reference docs/configuration.md

bench: $(STAMP)
	$(VENV)/bin/python -m bench

# Long-running: 10,000 sub-agent runs over 10 minutes; not part of `make test`.
soak: $(STAMP)
	$(VENV)/bin/python -m bench.soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
