# Two commands do all set-up: `make demo` and `make test`. uv is installed with pip when missing;
# no Python is ever downloaded (UV_PYTHON_DOWNLOADS=never). BACKEND=cuda installs MLX's CUDA build.
PYTHON ?= python3
BACKEND ?= cpu
VENV := .venv
BOOT := .uv-bootstrap
export UV_PYTHON_DOWNLOADS := never
UV := $(shell command -v uv 2>/dev/null)
ifeq ($(UV),)
UV := $(BOOT)/bin/uv
endif
STAMP := $(VENV)/.installed-$(BACKEND)

.PHONY: demo test test-slow test-real lint format lock install clean

demo: $(STAMP)
	$(VENV)/bin/teacache-demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest

test-slow: $(STAMP)
	$(VENV)/bin/pytest -m slow

test-real: $(STAMP)
	$(VENV)/bin/pytest -m real_weights

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

install: $(STAMP)

$(BOOT)/bin/uv:
	$(PYTHON) -m venv $(BOOT)
	$(BOOT)/bin/python -m pip install --quiet uv

$(STAMP): requirements/$(BACKEND).txt pyproject.toml | $(UV)
	test -x $(VENV)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -r requirements/$(BACKEND).txt
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

# Re-pin after changing dependencies: the exported files carry no registry address (uv.lock does).
lock: | $(UV)
	$(UV) lock
	$(UV) export --quiet --frozen --no-hashes --no-emit-project --all-groups --extra cpu -o requirements/cpu.txt
	$(UV) export --quiet --frozen --no-hashes --no-emit-project --all-groups --extra cuda -o requirements/cuda.txt

clean:
	rm -rf $(VENV) $(BOOT) .pytest_cache .ruff_cache
