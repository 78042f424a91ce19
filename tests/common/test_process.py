"""The one process helper: start, wait until healthy, stop by process group, tail the log."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from governor.common.process import Child, ChildError, first_exited, http_ok, running

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
