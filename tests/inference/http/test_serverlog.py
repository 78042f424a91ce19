"""Log lines a client can cause by the thousand: the first at once, then one per interval."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp.http_exceptions import BadHttpMessage

from governor.inference.http.serverlog import RateLimitedLog, ServerLog

LOGGER = "test.serverlog"


async def test_a_burst_is_one_line_then_one_line_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    limited = RateLimitedLog(logging.getLogger(LOGGER), "refused",
                             loop=asyncio.get_running_loop(), interval_seconds=0.2)
    for n in range(1000):
        limited.note(f"#{n}", kind="cap" if n % 2 else "share")
    assert [r.getMessage() for r in caplog.records] == ["refused #0"]
    await asyncio.sleep(0.3)  # the interval ends: what was counted is told
    assert [r.getMessage() for r in caplog.records][1:] == [
        "refused: 999 more in the last 0.2 s (cap 500, share 499); the latest #999"]
    await asyncio.sleep(0.3)
    limited.note("#1000")  # a quiet interval later: at once again
    assert caplog.records[-1].getMessage() == "refused #1000"


async def test_aiohttps_malformed_request_errors_are_counted_and_its_other_lines_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, LOGGER)
    logger = logging.getLogger(LOGGER)
    malformed = RateLimitedLog(logger, "malformed HTTP request",
                               loop=asyncio.get_running_loop())
    server_log = ServerLog(logger, malformed)
    bad = BadHttpMessage("Invalid header:\n\n  b'\\xff X-Api-Key: s3cret'\n  ^")
    for _ in range(3):
        server_log.exception("Error handling request from %s", "10.0.0.7", exc_info=bad)
    server_log.exception("Unhandled exception", exc_info=RuntimeError("a bug"))
    server_log.debug("Ignored premature client disconnection")
    messages = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    # What the client sent is left out: a header line may hold a credential of any kind.
    assert messages[0] == ("WARNING", "malformed HTTP request from 10.0.0.7: 400, message: "
                           "Invalid header", False)
    assert messages[1:] == [("ERROR", "Unhandled exception", True),
                            ("DEBUG", "Ignored premature client disconnection", False)]
    malformed.flush()
    assert caplog.records[-1].getMessage().startswith(
        "malformed HTTP request: 2 more in the last 10 s; the latest from 10.0.0.7")
