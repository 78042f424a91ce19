"""Log lines: text or JSON, secrets masked, and the trace id of a traced request on each line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from governor.common.logs import setup_logging


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def emit(fmt: str, traced: bool) -> str:
    stream = io.StringIO()
    setup_logging("info", fmt=fmt, stream=stream)
    log = logging.getLogger("governor.test")
    if traced:
        tracer = TracerProvider().get_tracer("test")
        with tracer.start_as_current_span("request") as span:
            log.warning("failed with Authorization: Bearer s3cr3t-token")
            ids = span.get_span_context()
        return stream.getvalue() + f"\n{ids.trace_id:032x} {ids.span_id:016x}"
    log.warning("plain line")
    return stream.getvalue()


@pytest.mark.usefixtures("restore_root")
def test_json_lines_carry_the_trace_and_never_the_secret() -> None:
    out, ids = emit("json", traced=True).rsplit("\n", 1)
    line = json.loads(out)
    trace_id, span_id = ids.split()
    assert line["trace_id"] == trace_id and line["span_id"] == span_id
    assert line["level"] == "WARNING" and line["logger"] == "governor.test"
    assert "s3cr3t" not in out and "Bearer ***" in line["message"]
    assert line["time"].endswith("Z")


@pytest.mark.usefixtures("restore_root")
def test_text_lines_end_with_the_trace_id_of_a_traced_request() -> None:
    out, ids = emit("text", traced=True).rsplit("\n", 1)
    assert out.strip().endswith(f"trace_id={ids.split()[0]}")
    assert "s3cr3t" not in out


@pytest.mark.usefixtures("restore_root")
def test_lines_outside_a_request_have_no_trace_id() -> None:
    assert "trace_id" not in emit("text", traced=False)
    assert "trace_id" not in json.loads(emit("json", traced=False))


@pytest.mark.usefixtures("restore_root")
def test_an_exception_is_one_json_line() -> None:
    stream = io.StringIO()
    setup_logging("info", fmt="json", stream=stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("it failed")
    lines = stream.getvalue().strip().splitlines()
    assert len(lines) == 1 and "ValueError: boom" in json.loads(lines[0])["exception"]


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log format"):
        setup_logging("info", fmt="xml")


def test_no_current_span_by_default() -> None:
    assert not trace.get_current_span().get_span_context().is_valid
