"""``governor serve --request-log``: what a record holds (and never), rotation by bytes, a writer
that never blocks the service, and the round trip through ``governor bench controller``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from governor.bench.controller.request_logs import ReplayOptions, load_request_log, read_rows
from governor.contracts import request_log as contract
from governor.contracts.stages import Stage
from governor.inference import keys
from governor.inference.cli import build_parser, config_from_args
from governor.inference.telemetry.request_log import (
    RequestFacts,
    RequestLogPathError,
    RequestLogSettings,
    RequestLogWriter,
)
from tests.inference.conftest import ServiceFactory

SECRET_WORDS = "zebra quantum marmalade"


def facts(at: float = 1_700_000_000.0, gaps: int = 100) -> RequestFacts:
    f = RequestFacts(arrived_unix=at, prompt_tokens=812)
    f.first_token(0.25, 1)
    for k in range(gaps):
        f.next_token(0.5 if k == 0 else 0.02, 1)  # one slow gap in a hundred
    return f


def test_a_record_carries_counts_times_and_its_own_p99_and_reads_back() -> None:
    record = facts().record("/v1/chat/completions", "chat", "200")
    assert (record.prompt_tokens, record.output_tokens, record.ttft_seconds) == (812, 101, 0.25)
    # The P99 of 100 gaps, one of 500 ms: between the 20 ms and the 500 ms gap.
    assert record.itl_p99_seconds is not None and 0.02 < record.itl_p99_seconds < 0.5
    line = json.loads(record.to_json())
    assert line["v"] == contract.VERSION
    assert contract.RequestRecord.from_mapping(line) == contract.RequestRecord.from_mapping(
        json.loads(contract.RequestRecord.from_mapping(line).to_json()))
    # A request that never reached a token has no TTFT and no P99.
    empty = RequestFacts(arrived_unix=1.0).record("/v1/completions", "default", "429")
    assert (empty.ttft_seconds, empty.itl_p99_seconds, empty.output_tokens) == (None, None, 0)


@pytest.mark.parametrize(("line", "problem"), [
    ({"at": -1.0}, "at: -1.0"),
    ({"prompt_tokens": "812"}, "prompt_tokens: '812'"),
    ({"status": ""}, "status: ''"),
    ({"ttft_seconds": float("nan")}, "ttft_seconds: nan"),
    ({"route": None}, "route: None"),
    ({"stages": {"tokenize": -0.1}}, "stages: {'tokenize': -0.1}"),
    ({"stages": ["read", 0.1]}, r"stages: \['read', 0.1\]"),
    ({"stages": {str(k): 0.0 for k in range(40)}}, "stages: {'0': 0.0"),
], ids=["a negative time", "a count as text", "an empty status", "a NaN", "no route",
        "a negative stage", "stages not a mapping", "too many stages"])
def test_a_malformed_record_says_which_field(line: dict[str, object], problem: str) -> None:
    good = json.loads(facts().record("/v1/chat/completions", "chat", "200").to_json())
    with pytest.raises(contract.RecordError, match=problem.replace("(", r"\(")):
        contract.RequestRecord.from_mapping({**good, **line})


def test_the_log_rotates_by_bytes_and_keeps_only_its_backups(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    writer = RequestLogWriter(RequestLogSettings(path, max_bytes=4096, backups=2))
    for k in range(200):
        writer.submit(facts(at=1_700_000_000.0 + k, gaps=3), "/v1/chat/completions", "chat",
                      "200")
    writer.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["requests.jsonl", "requests.jsonl.1", "requests.jsonl.2"]
    assert all((tmp_path / f).stat().st_size <= 4096 for f in files)
    assert (path.stat().st_mode & 0o777) == 0o600
    # The newest records are the ones kept, in order, each line whole.
    times = [json.loads(line)["at"] for f in reversed(files)
             for line in (tmp_path / f).read_text().splitlines()]
    assert times == sorted(times) and times[-1] == 1_700_000_199.0
    assert writer.written == 200 and writer.dropped == 0


class StalledDisk(RequestLogWriter):
    """A writer whose disk hangs until ``release`` is set."""

    def __init__(self, settings: RequestLogSettings) -> None:
        self.release = threading.Event()
        self.writing = threading.Event()
        super().__init__(settings)

    def _write(self, line: str) -> None:
        self.writing.set()
        self.release.wait(30)
        super()._write(line)


def test_a_full_queue_drops_and_counts_instead_of_waiting(tmp_path: Path) -> None:
    writer = StalledDisk(RequestLogSettings(tmp_path / "r.jsonl", queue_size=5))
    writer.submit(facts(), "/v1/chat/completions", "chat", "200")
    assert writer.writing.wait(10)  # the thread holds the first record, stuck on the disk
    for _ in range(100):  # returns at once each time, though nothing is written
        writer.submit(facts(), "/v1/chat/completions", "chat", "200")
    assert writer.dropped == 95  # five fit the queue
    writer.release.set()
    writer.close()
    assert writer.written == 6
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 6


def test_the_settings_are_checked_where_they_enter() -> None:
    args = build_parser({}).parse_args(["--request-log", "/tmp/x.jsonl",
                                        "--request-log-max-bytes", "100"])
    with pytest.raises(SystemExit, match="max_bytes must be at least 4096"):
        config_from_args(args, {})


async def test_served_requests_are_logged_without_their_text_and_replay_as_a_workload(
    make_service: ServiceFactory, tmp_path: Path,
) -> None:
    path = tmp_path / "requests.jsonl"
    service = await make_service(request_log=RequestLogSettings(path))
    client = service.openai()
    stream = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": SECRET_WORDS}], max_tokens=12,
        stream=True)
    async for _ in stream:
        pass
    await client.completions.create(model="tiny", prompt=SECRET_WORDS, max_tokens=5)
    bad = await asyncio.to_thread(_post_bad, service.url)
    assert bad == 400
    await client.close()
    await asyncio.to_thread(service.app[keys.REQUEST_LOG].close)
    text = path.read_text()
    assert "zebra" not in text and "quantum" not in text
    records = [contract.RequestRecord.from_mapping(json.loads(line))
               for line in text.splitlines()]
    chat, completion, invalid = sorted(records, key=lambda r: r.at)
    assert (chat.route, chat.status) == ("/v1/chat/completions", "200")
    assert 1 <= chat.output_tokens <= 12  # the sim may end an answer before max_tokens
    assert chat.ttft_seconds is not None and chat.itl_p99_seconds is not None
    assert chat.prompt_tokens > 0 and chat.request_class == "default"
    assert completion.route == "/v1/completions" and 1 <= completion.output_tokens <= 5
    assert (invalid.status, invalid.output_tokens) == ("400", 0)
    # Each served request's stages, by the stage label's values; the first token comes after
    # every stage before the engine's decode.
    for served in (chat, completion):
        assert served.stages is not None and set(served.stages) == {s.value for s in Stage}
        order = list(Stage)
        before_decode = sum(served.stages[s.value]
                            for s in order[:order.index(Stage.PREFILL) + 1])
        assert served.ttft_seconds is not None
        assert before_decode <= served.ttft_seconds + 1e-3
    # The round trip: the log is a workload; the request that was refused is not replayed.
    schema, _, tally = read_rows(path)
    assert schema == "governor" and tally.rows == 3
    log = load_request_log(path, ReplayOptions(speed=2.0))
    replayed = log.arrivals(seed=0)
    assert [a.output_tokens for a in replayed] == [chat.output_tokens, completion.output_tokens]
    assert replayed[1].at == pytest.approx((completion.at - chat.at) / 2, abs=1e-5)
    assert log.report["skipped"] == {"not served (no output token)": 1}


def _post_bad(url: str) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{url}/v1/chat/completions", data=b'{"model": "tiny"}',
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


# ---- the path, checked at start (docs/reliability.md, N10) --------------------------------------

def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "file").touch()
    return tmp_path / "file" / "logs" / "requests.jsonl"


@pytest.mark.parametrize(("where", "problem"), [
    (lambda tmp: tmp, "{path}: a directory, not a regular file"),
    (fifo, "{path}: a FIFO, not a regular file"),
    (lambda tmp: Path("/dev/null"), "{path}: a character device, not a regular file"),
    (under_a_file, "{path}: {tmp}/file is a file, not a folder"),
    (lambda tmp: Path("/proc/governor-request-log"),
     "{path}: cannot create or append to it here: "),
], ids=["a directory", "a FIFO", "a device", "a file as its folder", "under /proc"])
def test_a_path_that_cannot_be_a_log_is_one_line_at_start(
    tmp_path: Path, where: Callable[[Path], Path], problem: str,
) -> None:
    path = where(tmp_path)
    args = build_parser({}).parse_args(["--request-log", str(path)])
    with pytest.raises(SystemExit) as caught:
        config_from_args(args, {})
    expected = "governor serve: --request-log " + problem.format(path=path, tmp=tmp_path)
    assert str(caught.value.code).startswith(expected)
    assert "\n" not in str(caught.value.code)


def test_a_fifo_never_holds_the_writer(tmp_path: Path) -> None:
    path = fifo(tmp_path)
    failed: list[BaseException] = []

    def start() -> None:
        try:
            RequestLogWriter(RequestLogSettings(path))
        except RequestLogPathError as exc:
            failed.append(exc)

    opener = threading.Thread(target=start, daemon=True)
    opener.start()
    opener.join(10)
    waiting = opener.is_alive()
    if waiting:  # let the thread go: a reader comes
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
    assert not waiting, "the writer waited for a reader of the FIFO"
    assert [str(e) for e in failed] == [f"{path}: a FIFO, not a regular file"]


def test_governor_serve_exits_at_once_on_a_fifo_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "governor", "serve", "--request-log",
                           str(fifo(tmp_path)), "--port", "1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr == f"governor serve: --request-log {tmp_path}/pipe: a FIFO, not a " \
                          "regular file\n"


def test_a_good_path_gets_its_folders_and_an_owner_only_file(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "today" / "requests.jsonl"
    config = config_from_args(build_parser({}).parse_args(["--request-log", str(path)]), {})
    assert config.request_log.path == path
    assert path.is_file() and path.stat().st_mode & 0o777 == 0o600
