"""Every rule set, one module each: a module here that defines ``RULESET`` is rendered.

Adding a rule set is adding one module to this package (see :mod:`governor.alerts.ruleset`
for what ``RULESET`` holds); nothing else lists it. :func:`rulesets` returns them in one order
whatever the file system lists first: per-SLO rule sets, then the others, each by name, so the
PrometheusRule's groups never move::

    [ruleset.name for ruleset in rulesets()]
    # ['classes', 'slo', 'control', 'health', 'scale', 'stages']
"""

from __future__ import annotations

import importlib
import pkgutil

from governor.alerts.ruleset import RuleSet


def rulesets() -> tuple[RuleSet, ...]:
    found: dict[str, RuleSet] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        qualified = f"{__name__}.{module.name}"
        ruleset = getattr(importlib.import_module(qualified), "RULESET", None)
        if not isinstance(ruleset, RuleSet):
            raise TypeError(f"{qualified} must define RULESET, a RuleSet")
        if ruleset.name in found:
            raise ValueError(f"{qualified}: a rule set named {ruleset.name!r} already exists")
        found[ruleset.name] = ruleset
    return tuple(sorted(found.values(), key=lambda f: (not f.per_slo, f.name)))
