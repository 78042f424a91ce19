"""How ``make test`` spreads the suite over processes (``pytest -n N --dist loadgroup``).

A test file runs whole in one process, so its module fixtures (a Prometheus, a ``vllm serve``)
start once. The files holding a test of a serial mark run one after another in one process: the
real vLLM engine takes every core it finds, and the engine tests share one engine per process
(``tests/inference/engines/vllm/conftest.py``); the compose tests share one Docker engine and one
project name. A test's own ``xdist_group`` mark still names its group: the live drills join the
vLLM group, so that no engine on the CPU runs beside a healthy drill's SLOs. The groups that start
programs go first, so that the processes finish together.

pytest-xdist names a group by appending ``@group`` to its tests' node ids, which pytest 9.2's node
ids no longer take; so each worker writes its tests' groups to a file, and the controller's
scheduler reads them.

Each process takes the ports its children listen on from a range of its own, below the kernel's
ephemeral range (``GOVERNOR_FREE_PORTS``, :func:`governor.common.process.free_ports`): a port
the OS picks there can be taken by any process's outgoing connection before the child binds it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

import pytest

from governor.common.process import FREE_PORTS_ENV

SERIAL_MARKS: Final = ("compose", "vllm")
HEAVY_MARKS: Final = ("integration", "slow")
# The folder of the workers' group files, as the controller tells each worker.
GROUPS_KEY: Final = "governor_groups"
_FOLDER = pytest.StashKey[Path]()


# The ports the suite's processes share out, below Linux's usual ephemeral range (32768-60999).
PORTS_FROM: Final = 20000
EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")


def share_ports(config: pytest.Config) -> None:
    """Give this process its share of the ports below the ephemeral range, unless the caller set
    ``GOVERNOR_FREE_PORTS`` or the range leaves too few below it."""
    if os.environ.get(FREE_PORTS_ENV):
        return
    try:
        ephemeral = int(EPHEMERAL_RANGE.read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):
        return
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None and getattr(config.option, "dist", "no") != "no":
        return  # pytest-xdist's controller: each worker takes a share of its own
    index, count = 0, 1
    if workerinput is not None:
        index = int(str(workerinput["workerid"]).removeprefix("gw"))
        count = int(workerinput["workercount"])
    share = (min(ephemeral, 32768) - PORTS_FROM) // count
    if share < 256:
        return
    first = PORTS_FROM + index * share
    os.environ[FREE_PORTS_ENV] = f"{first}-{first + share - 1}"


def groups(items: list[pytest.Item]) -> dict[str, str]:
    """Each test's group: its ``xdist_group`` mark's name, else its file's serial mark, else its
    file."""
    serial: dict[Path, str] = {}
    for item in items:
        for mark in SERIAL_MARKS:
            if item.get_closest_marker(mark) is not None:
                serial.setdefault(item.path, mark)
    found: dict[str, str] = {}
    for item in items:
        own = item.get_closest_marker("xdist_group")
        if own is not None:
            found[item.nodeid] = str(own.args[0] if own.args else own.kwargs.get("name", "default"))
        else:
            found[item.nodeid] = serial.get(item.path, item.nodeid.split("::")[0])
    return found


def heaviest_first(items: list[pytest.Item], group: dict[str, str]) -> None:
    """The serial groups, then the groups that start programs, then the rest; each group's tests
    in their order (a stable sort), so a file's tests stay together."""
    rank: dict[str, int] = {}
    for item in items:
        name = group[item.nodeid]
        heavy = any(item.get_closest_marker(mark) is not None for mark in HEAVY_MARKS)
        rank[name] = min(rank.get(name, 2), 0 if name in SERIAL_MARKS else 1 if heavy else 2)
    items.sort(key=lambda item: rank[group[item.nodeid]])


def on_worker(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker of ``--dist loadgroup``: order the tests, and write their groups for the
    controller."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or GROUPS_KEY not in workerinput:
        return
    group = groups(items)
    heaviest_first(items, group)
    folder = Path(workerinput[GROUPS_KEY])
    partial = folder / f".{workerinput['workerid']}.json"
    partial.write_text(json.dumps(group), encoding="utf-8")
    os.replace(partial, folder / f"{workerinput['workerid']}.json")


def configure_node(node: Any) -> None:  # pytest-xdist has no types
    config = node.config
    if config.getvalue("dist") != "loadgroup":
        return
    if _FOLDER not in config.stash:
        config.stash[_FOLDER] = Path(tempfile.mkdtemp(prefix="governor-groups-"))
    node.workerinput[GROUPS_KEY] = str(config.stash[_FOLDER])


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = config.stash[_FOLDER]

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling with this module's groups as the scopes, in the workers'
        order (every worker collected the same tests, in the same order)."""

        group: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.group is None:
                self.group = json.loads(next(folder.glob("gw*.json")).read_text(encoding="utf-8"))
            return self.group.get(nodeid, nodeid.split("::")[0])

    config.option.loadscopereorder = False  # the workers' order is heaviest first
    return GroupScheduling(config, log)


def unconfigure(config: pytest.Config) -> None:
    if _FOLDER in config.stash:
        shutil.rmtree(config.stash[_FOLDER], ignore_errors=True)
