# gpudra: two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint unit bench venv clean kubernetes oracle

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gpudra up $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/ruff format --check operator tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint Dockerfile

# The real control plane (tests/kubernetes) is built from Go modules into ~/.cache/gpudra; a no-op once built.
# K8S_VERSION=1.34.4 make kubernetes builds another version beside it.
kubernetes:
	hack/kubernetes/build.sh

test: $(STAMP) lint kubernetes oracle
	$(PY) -m pytest $(PYTEST_ARGS)

# Kubernetes' own allocator behind a JSON-lines interface (hack/oracle), for tests/differential; needs Go and the
# Go module proxy, and fails (never skips) when it cannot build. Cached outside the work tree.
oracle:
	hack/oracle/build.sh >/dev/null

unit: $(STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m bench $(BENCH)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
