"""Governor inside the vLLM you already run: stock ``vllm serve`` retuned live.

Install Governor into vLLM's image (the wheel from ``make wheel`` with vLLM's versions as
constraints, or ``Dockerfile.vllm``: docs/stock-vllm.md); then either

* ``vllm serve MODEL --middleware governor.vllm.AdminMiddleware`` (any vLLM since 0.3), or
* ``VLLM_PLUGINS=governor_batching,governor_admin vllm serve MODEL`` (vLLM ≥ 0.26's endpoint
  plugins),

and ``GET``/``PUT /admin/batching`` answers as on ``governor serve``, with
``GOVERNOR_ADMIN_TOKEN_FILE`` (or ``GOVERNOR_ADMIN_TOKEN``) as its bearer token. The engine side,
:mod:`governor.vllm.plugin`, is vLLM's general plugin ``governor_batching``; it loads by itself
unless ``VLLM_PLUGINS`` is set. Both import paths here are public and stay stable.

With ``GOVERNOR_ADMISSION_SLO_FILE`` naming a spec, either way in also puts ``governor serve``'s
deadline gate in front of vLLM's generation routes (:mod:`governor.vllm.admission`).
"""

from __future__ import annotations

from typing import Final

from governor.vllm.middleware import AdminMiddleware

# What `vllm serve --middleware` takes: this module's class (split on the last dot).
MIDDLEWARE: Final = f"{__name__}.{AdminMiddleware.__name__}"

__all__ = ["MIDDLEWARE", "AdminMiddleware"]
