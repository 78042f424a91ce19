"""The one process helper: start, wait until healthy, stop by process group, tail the log."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from governor.common.process import (
    FREE_PORTS_ENV,
    Child,
    ChildError,
    first_exited,
    free_port,
    free_ports,
    http_ok,
    port_range,
    running,
    wait_http_ok,
)

SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
for i in range(30):
    print("line", i, flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""




def server(tmp_path: Path, name: str = "web") -> Child:
    port = free_port()
    return Child(name, [sys.executable, "-c", SERVER, str(port)],
                 f"http://127.0.0.1:{port}/health", tmp_path / f"{name}.log")


def test_a_child_is_healthy_then_stopped_and_its_port_is_free(tmp_path: Path) -> None:
    child = server(tmp_path)
    with running([child]) as (started,):
        assert started is child and child.healthy() and child.poll() is None
    assert child.poll() is not None
    assert not http_ok(child.health_url or "")


def test_tail_gives_the_last_lines(tmp_path: Path) -> None:
    child = server(tmp_path)
    with running([child]):
        pass
    assert child.tail(3).splitlines() == ["line 27", "line 28", "line 29"]


def test_a_child_that_exits_is_an_error_with_its_log(tmp_path: Path) -> None:
    child = Child("broken", [sys.executable, "-c", "print('cannot bind'); raise SystemExit(3)"],
                  "http://127.0.0.1:9/health", tmp_path / "broken.log")
    with pytest.raises(ChildError, match=r"(?s)broken exited with status 3.*cannot bind"), \
            running([child]):
        pass


def test_a_child_that_never_answers_times_out(tmp_path: Path) -> None:
    child = Child("mute", [sys.executable, "-c", "import time; time.sleep(30)"],
                  f"http://127.0.0.1:{free_port()}/health", tmp_path / "mute.log")
    started = time.monotonic()
    with pytest.raises(ChildError, match="did not answer"), running([child], limit_seconds=1):
        pass
    assert child.poll() is not None  # stopped on the way out
    assert time.monotonic() - started < 15


def test_stop_reaches_grandchildren(tmp_path: Path) -> None:
    """vLLM's engine core is a grandchild: stopping the group must end it too."""
    pid_file = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(60)\n")
    child = Child("parent", [sys.executable, "-c", code], None, tmp_path / "parent.log").start()
    deadline = time.monotonic() + 10
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    child.stop(grace_seconds=5)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{grandchild}").exists() and \
            "Z" not in Path(f"/proc/{grandchild}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the grandchild outlived the stop"
        time.sleep(0.05)


def test_a_stop_request_ends_the_wait_early(tmp_path: Path) -> None:
    child = Child("mute", [sys.executable, "-c", "import time; time.sleep(30)"],
                  f"http://127.0.0.1:{free_port()}/health", tmp_path / "mute.log")
    seen: list[str] = []
    with running([child], limit_seconds=30, on_ready=lambda c, s: seen.append(c.name),
                 should_stop=lambda: True):
        pass
    assert seen == []


def test_first_exited_finds_the_dead_one(tmp_path: Path) -> None:
    alive = server(tmp_path, "alive")
    dead = Child("dead", [sys.executable, "-c", "pass"], None, tmp_path / "dead.log")
    with running([alive, dead]):
        deadline = time.monotonic() + 10
        while first_exited([alive, dead]) is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert first_exited([alive, dead]) is dead


def test_accept_judges_the_body_of_a_200(tmp_path: Path) -> None:
    child = server(tmp_path)
    child.accept = lambda body: body == b"ok"
    with running([child]):
        assert http_ok(child.health_url or "", accept=lambda body: body == b"ok")
        assert not http_ok(child.health_url or "", accept=lambda body: b"gpu_up" in body)
    picky = server(tmp_path, "picky")
    picky.accept = lambda body: b"gpu_up" in body
    with pytest.raises(ChildError, match="picky did not answer"), \
            running([picky], limit_seconds=1):
        pass


def test_with_a_child_it_runs_and_stops_and_an_async_wait_measures(tmp_path: Path) -> None:
    first, second = server(tmp_path, "first"), server(tmp_path, "second")

    async def both() -> list[float]:
        return list(await asyncio.gather(first.wait_healthy_async(10),
                                         second.wait_healthy_async(10)))

    with first, second:  # both start before either is waited for
        seconds = asyncio.run(both())
        assert all(0 <= s < 10 for s in seconds)
        assert first.poll() is None and second.poll() is None
    assert first.poll() is not None and second.poll() is not None


def test_an_error_keeps_its_reason_apart_from_the_log(tmp_path: Path) -> None:
    child = Child("broken", [sys.executable, "-c", "print('cannot bind'); raise SystemExit(3)"],
                  "http://127.0.0.1:9/health", tmp_path / "broken.log")
    with pytest.raises(ChildError) as caught, child:
        child.wait_healthy(10)
    assert caught.value.what == "exited with status 3"
    assert "cannot bind" in str(caught.value)


def test_stderr_can_stay_the_parents(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code = "import sys; print('to-stdout'); print('to-stderr', file=sys.stderr)"
    child = Child("quiet", [sys.executable, "-c", code], None, tmp_path / "quiet.log",
                  log_stderr=False).start()
    assert child.popen is not None and child.popen.wait(10) == 0
    assert child.tail() == "to-stdout"
    assert "to-stderr" in capfd.readouterr().err


def test_a_fresh_log_starts_empty_and_by_default_a_log_grows(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("an earlier run\n")
    for fresh, expected in ((False, ["an earlier run", "now"]), (True, ["now"])):
        child = Child("run", [sys.executable, "-c", "print('now')"], None, log,
                      fresh_log=fresh).start()
        assert child.popen is not None and child.popen.wait(10) == 0
        assert log.read_text().splitlines() == expected


def test_the_grace_period_is_the_childs_own(tmp_path: Path) -> None:
    code = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ignoring', flush=True)\n"
            "time.sleep(60)\n")
    child = Child("stubborn", [sys.executable, "-c", code], None, tmp_path / "stubborn.log",
                  grace_seconds=0.5).start()
    deadline = time.monotonic() + 10
    while child.tail() != "ignoring":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    assert child.stop() == -9  # SIGKILL after half a second, not the default ten
    assert time.monotonic() - started < 5


async def test_wait_http_ok_waits_for_a_server_on_this_loop(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    ready = asyncio.Event()

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200 if ready.is_set() else 503)

    app = web.Application()
    app.router.add_get("/health", health)
    url = str((await aiohttp_server(app)).make_url("/health"))
    asyncio.get_running_loop().call_later(0.3, ready.set)
    assert await wait_http_ok(url, limit_seconds=10, poll_seconds=0.05) >= 0.25
    with pytest.raises(TimeoutError, match="did not answer 200"):
        await wait_http_ok(f"http://127.0.0.1:{free_port()}/health", limit_seconds=0.3)


@pytest.mark.parametrize("text", ["20000", "20000-", "-20000", "a-b", "30000-20000", "80-90",
                                  "20000-70000", "20000-30000-40000", "x" * 10_000])
def test_a_malformed_port_range_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"GOVERNOR_FREE_PORTS=.*expected FIRST-LAST") as caught:
        port_range(text)
    assert len(str(caught.value)) < 200  # an oversized value is not echoed whole


def test_ports_come_from_the_range_in_turn_and_skip_a_port_in_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = free_ports(6, consecutive=True)[0]
    busy = first + 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", busy))
        taken.listen()
        monkeypatch.setenv(FREE_PORTS_ENV, f"{first}-{first + 5}")
        seen = [free_port() for _ in range(5)]
        assert len(set(seen)) == 5  # in turn: none handed out twice before the range wraps
        assert busy not in seen
        assert all(first <= port <= first + 5 for port in seen)
        run = free_ports(2, consecutive=True)
        assert run[1] == run[0] + 1 and busy not in run
        with pytest.raises(OSError, match="no 6 consecutive free ports"):
            free_ports(6, consecutive=True)  # the range holds the busy port


def test_without_a_range_the_os_picks_and_consecutive_ports_are_consecutive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FREE_PORTS_ENV, raising=False)
    assert len(set(free_ports(4))) == 4
    first, second, third = free_ports(3, consecutive=True)
    assert (second, third) == (first + 1, first + 2)
