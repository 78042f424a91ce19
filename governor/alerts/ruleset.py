"""A rule set: one kind of Prometheus rule file, and the promtool tests of its alerts.

Each rule set is declared once, as ``RULESET`` in its own module under
:mod:`governor.alerts.rulesets`, which is where the renderer finds it::

    RULESET = RuleSet(
        name="health",                      # prometheus/rules/health.yml, tests/health.test.yml
        rules=lambda scope: health_rule_file(scope.spec.targets, scope.params).groups,
        tests=lambda scope: health_tests(scope.spec.targets, scope.params),
    )

A spec-wide rule set writes one file; a per-SLO rule set (``per_slo=True``) writes
``<name>-<slo>.yml`` for each SLO it applies to, and its functions read ``scope.the_slo``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from governor.alerts.rules import RuleFile, RuleGroup
from governor.alerts.ruletests import RuleTest
from governor.generation.params import RenderParams
from governor.slo.spec import SLO, SloSpec


@dataclass(frozen=True)
class Scope:
    """What one file of a rule set is rendered from."""

    spec: SloSpec
    params: RenderParams
    histograms: Mapping[str, Sequence[float]]  # bucket edges of the histograms Governor knows
    slo: SLO | None = None  # the SLO of a per-SLO rule set's file; None for a spec-wide one

    @property
    def the_slo(self) -> SLO:
        """The SLO a per-SLO rule set's file is about."""
        if self.slo is None:
            raise TypeError("a spec-wide rule set's scope has no SLO of its own")
        return self.slo


def _always(scope: Scope) -> bool:
    return True


@dataclass(frozen=True)
class RuleSetFile:
    """A rule file and the promtool tests of its alerts."""

    rules: RuleFile
    tests: tuple[RuleTest, ...]


@dataclass(frozen=True)
class RuleSet:
    """How one kind of rule file is made: its groups, their tests, and where it applies."""

    name: str  # the file stem, or its prefix for a per-SLO rule set
    rules: Callable[[Scope], tuple[RuleGroup, ...]]
    tests: Callable[[Scope], Sequence[RuleTest]]
    applies: Callable[[Scope], bool] = _always  # False: no file for this spec (or this SLO)
    per_slo: bool = False

    def scopes(self, base: Scope) -> tuple[Scope, ...]:
        """The scopes this rule set writes a file for: ``base`` itself, or one per SLO."""
        slos = base.spec.slos if self.per_slo else (None,)
        candidates = (replace(base, slo=slo) for slo in slos)
        return tuple(scope for scope in candidates if self.applies(scope))

    def file_name(self, scope: Scope) -> str:
        return self.name if scope.slo is None else f"{self.name}-{scope.slo.name}"

    def files(self, base: Scope) -> tuple[RuleSetFile, ...]:
        return tuple(self._file(scope) for scope in self.scopes(base))

    def _file(self, scope: Scope) -> RuleSetFile:
        return RuleSetFile(RuleFile(self.file_name(scope), self.rules(scope)),
                          tuple(self.tests(scope)))
