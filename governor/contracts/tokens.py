"""The environment variables that carry the stack's bearer tokens, shared by every component.

A token file (``--…-token-file``) is preferred: it keeps the token out of ``/proc/*/environ``. The
variables are the fallback, with the same names for every component (the service checks
``GOVERNOR_ADMIN_TOKEN`` on its admin API; the controller sends it).
"""

from __future__ import annotations

from typing import Final

ADMIN_TOKEN_ENV: Final = "GOVERNOR_ADMIN_TOKEN"  # the service's admin API
WEBHOOK_TOKEN_ENV: Final = "GOVERNOR_WEBHOOK_TOKEN"  # Alertmanager → the controller's webhook
GRAFANA_TOKEN_ENV: Final = "GOVERNOR_GRAFANA_TOKEN"  # the controller's annotations
