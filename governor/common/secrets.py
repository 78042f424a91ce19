"""A secret value that never leaks through ``repr``, ``str``, logs or tracebacks.

>>> token = Secret("s3cr3t")
>>> str(token), repr(token)
('***', "Secret('***')")
>>> token.matches("s3cr3t"), token.matches("guess")
(True, False)
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

# The most a token file may hold. A token is one short line (``secrets.token_urlsafe(32)`` is 43
# bytes); a bound keeps ``/dev/zero`` or a wrong path to a large file from exhausting memory.
MAX_TOKEN_FILE_BYTES: Final = 4096


class EmptySecret(ValueError):
    """A token that is empty or only whitespace: it would match an empty credential."""


class BadTokenFile(ValueError):
    """A token file that cannot hold a token: too large, or not UTF-8 text. The message names
    the file, never its content."""


class Secret:
    """Holds a bearer token; compare with :meth:`matches` (constant time). Never empty."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not value.strip():
            raise EmptySecret("a token cannot be empty or whitespace")
        self._value = _as_bytes(value)

    @classmethod
    def from_file(cls, path: str | Path) -> Secret:
        """Read a token file as Docker and Kubernetes mount them (trailing newline dropped).

        At most :data:`MAX_TOKEN_FILE_BYTES` are read, and they must be UTF-8: anything else is
        :class:`BadTokenFile`, whose message does not quote a byte of the file."""
        with Path(path).open("rb") as file:
            raw = file.read(MAX_TOKEN_FILE_BYTES + 1)
        if len(raw) > MAX_TOKEN_FILE_BYTES:
            raise BadTokenFile(f"token file {path} holds more than {MAX_TOKEN_FILE_BYTES} bytes: "
                               "a token is one short line")
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            # Its message would quote the offending byte, a byte of the token: not kept.
            raise BadTokenFile(f"token file {path} is not UTF-8 text") from None
        if not value:
            raise EmptySecret(f"token file {path} is empty: write a token into it (for example "
                              "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
        return cls(value)

    def reveal(self) -> str:
        """The raw value, for the one place that must send it (an Authorization header)."""
        return self._value.decode("utf-8", "surrogateescape")

    def matches(self, candidate: str | bytes) -> bool:
        """Whether ``candidate`` is this token; any text or bytes at all (a header a client
        filled with bytes that are not UTF-8 is simply no match)."""
        if isinstance(candidate, str):
            candidate = _as_bytes(candidate)
        return hmac.compare_digest(self._value, candidate)

    def matches_bearer(self, authorization: str | None) -> bool:
        """True when an ``Authorization`` header carries this token as a bearer credential.

        An empty credential never matches (a token is never empty, and this does not rely on
        it)."""
        if not authorization:
            return False
        scheme, _, credential = authorization.partition(" ")
        credential = credential.strip()
        # Compare even on a wrong scheme so timing does not tell the two failures apart.
        ok = self.matches(credential)
        return ok and bool(credential) and scheme.lower() == "bearer"

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value, other._value)

    def __hash__(self) -> int:
        return hash(Secret)


def _as_bytes(text: str) -> bytes:
    """Text as the bytes it was read from. aiohttp (headers) and ``os.environ`` keep bytes that
    are not UTF-8 as lone surrogates ("surrogateescape"), which a plain ``encode()`` refuses;
    any other lone surrogate can only have come from code, and is kept as it is."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def read_token(path: str | Path | None, variable: str,
               env: Mapping[str, str]) -> Secret | None:
    """A token from a file (preferred) or an environment variable; ``None`` when neither is
    given. An unreadable, empty, oversized or non-UTF-8 file, or a variable set to whitespace,
    is an error (:class:`TokenError`): a component must never start with a token that matches
    nothing — or everything."""
    if path is not None:
        try:
            return Secret.from_file(path)
        except OSError as exc:
            raise TokenError(f"cannot read token file {path}: {exc.strerror or exc}") from None
        except (EmptySecret, BadTokenFile) as exc:
            raise TokenError(str(exc)) from None
    value = env.get(variable)
    if value is None or value == "":
        return None
    try:
        return Secret(value.strip())
    except EmptySecret:
        raise TokenError(f"{variable} is set but holds only whitespace") from None


class TokenError(ValueError):
    """A token that was asked for but cannot be used; the message says which and why."""


def write_private(path: Path, text: str) -> None:
    """Write a token file readable by its owner alone, from the first byte on.

    The file is created with mode 0600 under a temporary name in the same folder and renamed into
    place, so no other user can ever open it, and a reader never sees it half written.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
