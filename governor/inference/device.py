"""The simulated GPU over HTTP: ``GET /sim/device`` and ``GET``/``PUT /admin/sim/faults``.

Only an engine on a simulated GPU (:class:`~governor.inference.engines.capabilities.SimulatedGpu`,
``--engine sim``) has them; any other answers 404. The report is read-only and needs no token,
like ``/metrics`` (``governor exporter --follow`` polls it); the faults are the admin API's,
behind the same bearer token as ``/admin/batching``. A ``PUT`` replaces the whole fault set and
answers the report as it is then (``{}`` heals everything)::

    PUT /admin/sim/faults  {"clock_ratio": 0.55, "clock_reasons": ["hw_thermal"]}
    200 {"gpu_uuid": "GPU-fa4e0000-…", "busy_seconds": 12.5, …, "faults": {…}}
"""

from __future__ import annotations

import logging

from aiohttp import web

from governor.contracts.simdevice import Faults, FaultsError
from governor.inference import keys
from governor.inference.admin import authorize
from governor.inference.engines.capabilities import SimulatedGpu
from governor.inference.http.body import read_json
from governor.inference.http.errors import NOT_FOUND, APIError

log = logging.getLogger(__name__)


def _simulated(request: web.Request) -> SimulatedGpu:
    engine = request.app[keys.ENGINE]
    if not isinstance(engine, SimulatedGpu):
        kind = request.app[keys.CONFIG].engine.kind
        raise APIError(404, f"the {kind} engine has no simulated GPU: only --engine sim has",
                       type_=NOT_FOUND, code="no_simulated_gpu")
    return engine


async def get_device(request: web.Request) -> web.Response:
    return web.json_response(_simulated(request).device_report().as_dict())


async def get_faults(request: web.Request) -> web.Response:
    authorize(request)
    return web.json_response(_simulated(request).faults.as_dict())


async def put_faults(request: web.Request) -> web.Response:
    authorize(request)
    engine = _simulated(request)
    body = await read_json(request)
    try:
        faults = Faults.from_dict(body)
    except FaultsError as exc:
        raise APIError(400, str(exc), param=exc.param, code="invalid_faults") from exc
    before = engine.set_faults(faults)
    log.info("simulated GPU faults %s -> %s", _changed(before), _changed(faults))
    return web.json_response(engine.device_report().as_dict())


def _changed(faults: Faults) -> dict[str, object]:
    """Only what differs from a healthy GPU: the log line says what is wrong, not all that
    is not."""
    healthy = Faults().as_dict()
    return {name: value for name, value in faults.as_dict().items() if value != healthy[name]}
