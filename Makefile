# Two commands matter: `make run` and `make test`. Both create the environment when needed.
UV ?= $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
VENV := .venv
STAMP := $(VENV)/.synced
# `make run` uses the config lookup every herald command uses (--config, $$HERALD_CONFIG,
# ./herald.json5, ~/.config/herald/, /etc/herald/) and falls back to this example.
EXAMPLE_CONFIG := config/herald.json5
CONFIG ?=
# `make install`: where uv keeps herald's own environment and links the command (uv's
# defaults: ~/.local/share/uv/tools and ~/.local/bin), and the interpreter it runs on.
TOOL_DIR ?=
BIN_DIR ?=
PYTHON ?=

.PHONY: run test lint typecheck pytest bench soak clean env packages docs install

$(UV):
	python3 -m pip install --user --quiet uv

$(STAMP): pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen
	touch $(STAMP)

env: $(STAMP)

run: $(STAMP)
	@config="$(CONFIG)"; \
	[ -n "$$config" ] || config=$$($(VENV)/bin/herald config path 2>/dev/null) || config=$(EXAMPLE_CONFIG); \
	echo "herald run --config $$config"; \
	exec $(VENV)/bin/herald run --config "$$config"

# The `herald` command on PATH, in an environment of its own (never the system's or another
# project's site-packages: the wheel's top-level packages are gateway, channels and lanes,
# and `channels` is also Django Channels' import name). For a server, see README.md.
install: | $(UV)
	$(if $(TOOL_DIR),UV_TOOL_DIR=$(TOOL_DIR)) $(if $(BIN_DIR),UV_TOOL_BIN_DIR=$(BIN_DIR)) \
	$(UV) tool install --reinstall $(if $(PYTHON),--python $(PYTHON)) .

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# Debian packages the tests use for real: postgresql (a server of their own), chromium (the
# browser tests) and bubblewrap (the exec sandbox). Installed here when missing (as root);
# otherwise make stops at once with the one line that says how.
packages:
	@bash .ci/install-packages

# pytest-xdist: one worker per core (at most 4; the slow tests each start servers and
# replicas of their own). PYTEST_WORKERS=0 runs the suite in this one process.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)

pytest: $(STAMP) packages
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist worksteal

test: lint typecheck pytest

# docs/configuration.md is generated from the settings' docstrings; a test fails when the
# committed file is not what this writes.
docs: $(STAMP)
	$(VENV)/bin/python -m gateway.config.reference docs/configuration.md

bench: $(STAMP) packages
	$(VENV)/bin/python -m bench

# Long-running: 10,000 sub-agent runs over 10 minutes; not part of `make test`.
soak: $(STAMP)
	$(VENV)/bin/python -m bench.soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
