# gpudra: two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

BROWSER_DIR := tests/browser
BROWSER_STAMP := $(BROWSER_DIR)/node_modules/.installed-stamp
CHROMIUM ?= /usr/bin/chromium

.PHONY: demo test test-matrix test-pythons lint unit bench venv browser screenshots clean kubernetes oracle helm node images bytecode

venv: $(STAMP)

# The web view's browser tests drive Debian's chromium through playwright-core (npm, pinned by package-lock.json);
# no browser is downloaded. As root with apt, missing pieces are installed; `make test SKIP_BROWSER=1` skips them.
browser: $(BROWSER_STAMP)

$(BROWSER_STAMP): $(BROWSER_DIR)/package.json $(BROWSER_DIR)/package-lock.json
	@if [ ! -x $(CHROMIUM) ] || ! command -v npm >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && apt-get install -y -qq chromium $$(command -v npm >/dev/null || echo nodejs npm); \
	  else \
	    echo "make browser: needs $(CHROMIUM) and npm (apt-get install chromium npm), or make test SKIP_BROWSER=1" >&2; \
	    exit 1; \
	  fi; \
	fi
	cd $(BROWSER_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Quiet (one line, then pip's warnings and errors only), so that `make demo`'s first screen is gpudra up's table.
$(STAMP): pyproject.toml
	@echo "Installing gpudra and its dependencies into $(VENV) (the first time takes a minute or two)"
	@hack/venv/make.sh "$(PYTHON)" "$(VENV)"
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

# gpudra's modules compiled ahead (a second once up to date): where PYTHONDONTWRITEBYTECODE is set, as on these
# machines, every gpudra process (each agent, each CLI call a test makes) otherwise compiles them again at import;
# tests/integration/test_up_process.py took 20 s of CPU without them, 16 with.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 operator >/dev/null

demo: $(STAMP) bytecode
	@$(VENV)/bin/gpudra up $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/ruff format --check operator tests bench
	$(VENV)/bin/mypy
	MYPY=$(VENV)/bin/mypy hack/mypy-tests
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint Dockerfile

# The real control plane (tests/kubernetes) is built from Go modules into ~/.cache/gpudra; a no-op once built.
# K8S_VERSION=1.34.4 make kubernetes builds another version beside it.
kubernetes:
	hack/kubernetes/build.sh

# A real node's runtime (tests/node, gpudra up --real-nodes): containerd, crictl and the CNI plugins built from their
# Go modules into ~/.cache/gpudra, runc, buildah, mmdebstrap and busybox from Debian's packages (as root); a no-op once
# built. It fails, never skips, naming what is missing.
node:
	hack/node/build.sh

# The images a real node runs (gpudra's from the Dockerfile, the GPU workload's, the pods' sandbox), built with buildah
# on a Debian base of their own and written as archives into ~/.cache/gpudra/node/images; seconds once cached.
images: node
	hack/node/images.sh

test: $(STAMP) bytecode lint kubernetes oracle helm node images $(if $(SKIP_BROWSER),,browser)
	GPUDRA_REQUIRE_BROWSER=$(if $(SKIP_BROWSER),0,1) $(PY) -m pytest $(PYTEST_ARGS)

# The real-control-plane tier on every supported Kubernetes version (1.34 to 1.37 and the newest 1.38 pre-release),
# each built first; one summary line per version, and it goes on past a failing version (hack/kubernetes/matrix.sh).
# MATRIX_VERSIONS="1.34.4 1.37.2", MATRIX_TESTS=sensitive (the version-sensitive files) and PYTEST_ARGS narrow it.
# Not part of `make test`: CI runs the tier on 1.37 only.
test-matrix: $(STAMP)
	PY=$(PY) hack/kubernetes/matrix.sh

# The unit tier and `gpudra up`'s own tests on each newer Python this machine has (3.12, 3.13, 3.14: python3.N on
# PATH or pyenv's), each in its own virtualenv (.venv-3.13); one line per version (hack/venv/pythons.sh).
# PYTHON_MINORS="13" narrows it. CI runs it on 3.13 after `make test`.
test-pythons:
	@hack/venv/pythons.sh

# helm, built from its Go module (helm.sh/helm/v3) into ~/.cache/gpudra like the Kubernetes binaries, for the
# chart's test (tests/unit/test_helm_chart.py: charts/gpudra renders what manifests/base holds). HELM_VERSION=...
helm:
	hack/helm/build.sh >/dev/null

# Kubernetes' own allocator behind a JSON-lines interface (hack/oracle), for tests/differential; needs Go and the
# Go module proxy, and fails (never skips) when it cannot build. Cached outside the work tree.
oracle:
	hack/oracle/build.sh >/dev/null

unit: $(STAMP) bytecode
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

bench: $(STAMP) bytecode
	$(PY) -m bench $(BENCH)

screenshots: $(STAMP) browser
	$(PY) tests/browser/screenshots.py docs/images

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
