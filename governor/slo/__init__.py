"""The SLO spec: ``slo.yaml`` (or OpenSLO documents) → a validated, frozen model.

The rule and board generators render from it and the controller reads its targets from it, so it
sits below them all and imports none of them (an import-linter contract). Start at
:mod:`governor.slo.spec`::

    spec = load_spec("slo.yaml")     # every problem at once, as SpecError.errors
"""
