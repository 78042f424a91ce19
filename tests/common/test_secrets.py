"""Tokens never leak through repr, str or logs, and compare in constant time."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.common.logs import RedactingFormatter
from governor.common.secrets import EmptySecret, Secret, TokenError, read_token, write_private


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


# Any text, with lone surrogates often (among all characters they are rare): aiohttp hands over
# a header's bytes that are not UTF-8 as surrogates ("surrogateescape"), and code may make any.
ANY_TEXT = st.lists(st.characters(categories=["Cs"]) | st.characters(exclude_categories=()),
                    min_size=1).map("".join)


@given(header=ANY_TEXT)
def test_the_check_never_raises_whatever_text_the_header_holds(header: str) -> None:
    token = Secret("abc")
    assert not token.matches_bearer(header)
    assert not token.matches_bearer("Bearer " + header + "x")
    assert not token.matches(header + "x")


@given(raw=st.binary())
def test_the_check_never_raises_whatever_bytes_the_header_holds(raw: bytes) -> None:
    token = Secret("abc")
    as_aiohttp_reads_it = raw.decode("utf-8", "surrogateescape")
    assert token.matches_bearer("Bearer " + as_aiohttp_reads_it) == (raw == b"abc")
    assert token.matches(raw) == (raw == b"abc")


def test_bytes_that_are_not_utf8_never_match_and_a_non_ascii_token_still_does() -> None:
    assert not Secret("abc").matches_bearer("Bearer \udcff")
    assert not Secret("abc").matches_bearer("Bearer abc\udcff")
    assert not Secret("abc").matches_bearer("Bearer \ud800")
    assert Secret("clé").matches_bearer("Bearer clé")
    assert Secret("clé").matches_bearer("Bearer " + "clé".encode().decode("latin-1")) is False


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


def test_a_token_is_never_empty() -> None:
    for value in ("", " ", "\n\t"):
        with pytest.raises(EmptySecret):
            Secret(value)


def test_an_empty_credential_never_matches() -> None:
    token = Secret("abc")
    for header in ("Bearer ", "Bearer    ", "Bearer\t", "bearer"):
        assert not token.matches_bearer(header)


def test_read_token_prefers_the_file_and_refuses_empty_ones(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    found = read_token(token_file, "V", {"V": "from-env"})
    assert found is not None and found.matches("from-file")
    found = read_token(None, "V", {"V": " from-env\n"})
    assert found is not None and found.matches("from-env")
    assert read_token(None, "V", {}) is None
    token_file.write_text(" \n")
    with pytest.raises(TokenError, match="is empty"):
        read_token(token_file, "V", {})
    with pytest.raises(TokenError, match="cannot read"):
        read_token(tmp_path / "absent", "V", {})
    with pytest.raises(TokenError, match="only whitespace"):
        read_token(None, "V", {"V": "  "})


def test_token_files_are_private_from_the_first_byte(tmp_path: Path) -> None:
    path = tmp_path / "token"
    write_private(path, "secret\n")
    assert path.read_text() == "secret\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".token.*"))  # the temporary name is gone


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(b"x" * 4097, "holds more than 4096 bytes", id="one byte over the bound"),
        pytest.param(b"s3cr\xffet\n", "is not UTF-8 text", id="a byte that is not UTF-8"),
        pytest.param("clé".encode("latin-1"), "is not UTF-8 text", id="latin-1 text"),
    ],
)
def test_a_token_file_too_large_or_not_utf8_is_one_line_that_quotes_none_of_it(
    tmp_path: Path, content: bytes, message: str,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(content)
    with pytest.raises(TokenError) as error:
        read_token(token_file, "V", {})
    assert str(error.value) == f"token file {token_file} {message}" + (
        ": a token is one short line" if "bytes" in message else "")
    assert "\\x" not in str(error.value) and "0xff" not in str(error.value)
    token_file.write_bytes(b"x" * 4096)  # the bound itself is a token
    found = read_token(token_file, "V", {})
    assert found is not None and found.matches("x" * 4096)


def test_dev_zero_as_a_token_file_is_refused_without_reading_it_whole() -> None:
    with pytest.raises(TokenError, match="token file /dev/zero holds more than 4096 bytes"):
        read_token("/dev/zero", "V", {})
