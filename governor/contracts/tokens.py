"""The environment variables that carry the stack's bearer tokens, shared by every component.

A token file (``--…-token-file``, or its variable ``GOVERNOR_…_TOKEN_FILE``) is preferred: it
keeps the token out of ``/proc/*/environ``. The token variables are the fallback. Each has one
name for every component: the service and stock vLLM's admin route check the admin token,
the controller sends it, so all of them read ``GOVERNOR_ADMIN_TOKEN_FILE``; the probe sends the
probe token and the service checks it, so both read ``GOVERNOR_PROBE_TOKEN_FILE``.
"""

from __future__ import annotations

from typing import Final

ADMIN_TOKEN_ENV: Final = "GOVERNOR_ADMIN_TOKEN"  # the service's admin API
WEBHOOK_TOKEN_ENV: Final = "GOVERNOR_WEBHOOK_TOKEN"  # Alertmanager → the controller's webhook
GRAFANA_TOKEN_ENV: Final = "GOVERNOR_GRAFANA_TOKEN"  # the controller's annotations
PROBE_TOKEN_ENV: Final = "GOVERNOR_PROBE_TOKEN"  # the synthetic probe's mark on its requests

# The files that hold them (a mounted secret), by the same rule.
ADMIN_TOKEN_FILE_ENV: Final = "GOVERNOR_ADMIN_TOKEN_FILE"
WEBHOOK_TOKEN_FILE_ENV: Final = "GOVERNOR_WEBHOOK_TOKEN_FILE"
GRAFANA_TOKEN_FILE_ENV: Final = "GOVERNOR_GRAFANA_TOKEN_FILE"
PROBE_TOKEN_FILE_ENV: Final = "GOVERNOR_PROBE_TOKEN_FILE"
