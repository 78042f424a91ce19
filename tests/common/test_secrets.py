"""Tokens never leak through repr, str or logs, and compare in constant time."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from governor.common.logs import RedactingFormatter
from governor.common.secrets import Secret


def test_a_secret_never_prints_itself() -> None:
    token = Secret("hunter2")
    assert "hunter2" not in repr(token)
    assert "hunter2" not in str(token)
    assert "hunter2" not in f"{token} {token!r} {[token]}"
    assert token.reveal() == "hunter2"


def test_bearer_matching() -> None:
    token = Secret("abc")
    assert token.matches_bearer("Bearer abc")
    assert token.matches_bearer("bearer abc")
    assert not token.matches_bearer("Bearer abd")
    assert not token.matches_bearer("Basic abc")
    assert not token.matches_bearer("")
    assert not token.matches_bearer(None)
    assert not token.matches_bearer("Bearer")


def test_a_token_file_is_read_without_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    assert Secret.from_file(path).matches("s3cret")


def test_bearer_credentials_are_masked_in_log_lines() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(message)s"))
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("header was %s", "Authorization: Bearer topsecret-value")
    assert "topsecret-value" not in stream.getvalue()
    assert "Bearer ***" in stream.getvalue()
