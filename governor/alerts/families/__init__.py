"""Every rule family, one module each: a module here that defines ``FAMILY`` is rendered.

Adding an alert family is adding one module to this package (see :mod:`governor.alerts.family`
for what ``FAMILY`` holds); nothing else lists it. :func:`families` returns them in one order
whatever the file system lists first: per-SLO families, then the others, each by name, so the
PrometheusRule's groups never move::

    [family.name for family in families()]   # ['classes', 'slo', 'control', 'health', 'scale']
"""

from __future__ import annotations

import importlib
import pkgutil

from governor.alerts.family import RuleFamily


def families() -> tuple[RuleFamily, ...]:
    found: dict[str, RuleFamily] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        qualified = f"{__name__}.{module.name}"
        family = getattr(importlib.import_module(qualified), "FAMILY", None)
        if not isinstance(family, RuleFamily):
            raise TypeError(f"{qualified} must define FAMILY, a RuleFamily")
        if family.name in found:
            raise ValueError(f"{qualified}: a rule family named {family.name!r} already exists")
        found[family.name] = family
    return tuple(sorted(found.values(), key=lambda f: (not f.per_slo, f.name)))
