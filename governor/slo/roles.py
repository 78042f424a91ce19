"""Which SLO plays a role: the spec's own ``role:`` (or its default), or a name given on a
command line, read the same way by the controller and by deadline admission.

``None`` asks the spec; ``""`` asks for none; a name picks that SLO, which must exist and be a
latency SLO:

>>> from governor.slo.spec import parse_spec
>>> spec = parse_spec({"version": "governor/v1", "service": "s", "period": "30d", "slos": [
...     {"name": "ttft", "objective": 99, "role": "ttft",
...      "sli": {"latency": {"metric": "m_ttft", "threshold": "1s"}}}]})
>>> pick(spec, ROLE_TTFT, None).name, pick(spec, ROLE_TTFT, ""), pick(spec, ROLE_TTFT, "ttft").name
('ttft', None, 'ttft')
"""

from __future__ import annotations

from governor.slo.model import ROLE_ITL, ROLE_TTFT, SLO, LatencySLI, SloSpec

__all__ = ["ROLE_ITL", "ROLE_TTFT", "RoleError", "pick"]


class RoleError(ValueError):
    """A name given for a role that names no latency SLO of the spec."""


def pick(spec: SloSpec, role: str, name: str | None) -> SLO | None:
    """The SLO playing ``role``: the spec's (``name`` None), none (``""``), or the one named."""
    if name is None:
        return spec.with_role(role)
    if not name:
        return None
    try:
        slo = spec.slo(name)
    except KeyError as exc:
        raise RoleError(str(exc.args[0])) from None
    if not isinstance(slo.sli, LatencySLI):
        raise RoleError(f"SLO {name!r} is not a latency SLO: it cannot play role {role!r}")
    return slo
