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
# Another mflux release: `make test MFLUX=0.21.0` runs the adapter and no-op tests (or TESTS=...) in its own
# .venv-mflux-<release>, installed from the lock with that mflux and the pins requirements/mflux-<release>.txt
# adds for it (older mflux releases need pillow<13 and opencv-python<5). `make test` runs the whole fast lane
# on the pinned release, then this on the oldest supported one (the first of teacache/_compat.py's range).
OLDEST_MFLUX := $(shell sed -n 's/^VERIFIED_RELEASES = ."\([0-9.]*\)".*/\1/p' teacache/_compat.py)
# The adapter and no-op tests of every family (quality bounds, measured on the pinned release, stay with it).
RELEASE_TESTS := tests/teacache/adapters/test_flux1.py tests/teacache/adapters/test_flux2_klein.py \
	tests/teacache/adapters/test_every_family.py \
	tests/teacache/adapters/test_qwen_image.py tests/teacache/adapters/test_z_image.py \
	tests/teacache/adapters/test_tiny_shapes.py tests/teacache/test_mflux_releases.py::test_the_builders_guard_on_what_the_installed_release_has \
	-k "not measured_bounds"
TESTS ?= $(RELEASE_TESTS)
RELEASE_VENV := .venv-mflux-$(MFLUX)
# The fast lane's processes (pytest-xdist): 2 suits a 2-core machine (6:56 serial, 4:47 on two there).
TEST_WORKERS ?= 2
RELEASE_PINS := $(wildcard requirements/mflux-$(MFLUX).txt)

.PHONY: demo test test-slow test-real test-gpu lint format lock install clean

demo: $(STAMP)
	$(VENV)/bin/teacache-demo

ifdef MFLUX
test: $(RELEASE_VENV)/.installed-$(BACKEND)
	$(RELEASE_VENV)/bin/pytest $(TESTS)

$(RELEASE_VENV)/.installed-$(BACKEND): requirements/$(BACKEND).txt $(RELEASE_PINS) pyproject.toml | $(UV)
	test -x $(RELEASE_VENV)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(RELEASE_VENV)
	pins="$$(cat $(RELEASE_PINS) /dev/null)"; pins="$${pins:-mflux==$(MFLUX)}"; \
	names="$$(printf '%s\n' "$$pins" | cut -d= -f1 | paste -sd'|' -)"; \
	{ grep -v -i -E "^($$names)==" requirements/$(BACKEND).txt; printf '%s\n' "$$pins"; } > $(RELEASE_VENV)/requirements.txt
	$(UV) pip install --quiet --python $(RELEASE_VENV)/bin/python --no-deps -r $(RELEASE_VENV)/requirements.txt
	$(UV) pip install --quiet --python $(RELEASE_VENV)/bin/python --no-deps -e .
	rm -f $(RELEASE_VENV)/.installed-*
	touch $@
else
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest -n $(TEST_WORKERS)
	$(MAKE) --no-print-directory test MFLUX=$(OLDEST_MFLUX)
endif

test-slow: $(STAMP)
	$(VENV)/bin/pytest -m slow

test-real: $(STAMP)
	$(VENV)/bin/pytest -m real_weights

# Full-size models on a GPU (BACKEND=cuda on Linux): skipped, with the reason, where MLX's default device is none.
test-gpu: $(STAMP)
	$(VENV)/bin/pytest -m gpu

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

install: $(STAMP)

$(BOOT)/bin/uv:
	$(PYTHON) -m venv $(BOOT)
	$(BOOT)/bin/python -m pip install --quiet uv

# --compile-bytecode: the fast lane starts a few dozen Python processes (two workers, the commands its tests run),
# and each would compile its imports again where bytecode is not written (PYTHONDONTWRITEBYTECODE).
$(STAMP): requirements/$(BACKEND).txt pyproject.toml | $(UV)
	test -x $(VENV)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(VENV)
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps --compile-bytecode -r requirements/$(BACKEND).txt
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $@

# Re-pin after changing dependencies: the exported files carry no registry address (uv.lock does).
lock: | $(UV)
	$(UV) lock
	$(UV) export --quiet --frozen --no-hashes --no-emit-project --all-groups --extra cpu -o requirements/cpu.txt
	$(UV) export --quiet --frozen --no-hashes --no-emit-project --all-groups --extra cuda -o requirements/cuda.txt

clean:
	rm -rf $(VENV) .venv-mflux-* $(BOOT) .pytest_cache .ruff_cache
