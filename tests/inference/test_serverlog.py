"""Log lines a client can cause by the thousand: the first at once, then one per interval."""

from __future__ import annotations

import asyncio
import logging

import pytest

from governor.inference.serverlog import RateLimitedLog

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
