"""Command-line options that also read ``GOVERNOR_…`` environment variables.

Every option of every ``governor`` subcommand can be set on the command line or in the
environment; the command line wins. ``--help`` names the variable next to each option::

    parser = EnvArgumentParser(prog="governor serve")
    parser.add_argument("--port", type=int, default=8000, help="listen port")
    args = parser.parse_args([])          # GOVERNOR_PORT=9000 in the environment → 9000
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_name(option: str, prefix: str = "GOVERNOR_") -> str:
    """``--max-body-bytes`` → ``GOVERNOR_MAX_BODY_BYTES``."""
    return prefix + option.lstrip("-").replace("-", "_").upper()


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}, got {text!r}")


def parse_duration_seconds(text: str) -> float:
    """``"1s"``, ``"250ms"``, ``"2m"``, ``"1.5"`` (seconds) → seconds as a float."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    stripped = text.strip().lower()
    for suffix in ("ms", "s", "m", "h"):
        if stripped.endswith(suffix):
            number, scale = stripped[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = stripped, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 1s, 250ms, 2m)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"duration must be positive: {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def quantile(text: str) -> float:
    """A quantile: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:  # also NaN
        raise argparse.ArgumentTypeError(f"must be a quantile in (0, 1]: {text[:40]!r}")
    return value


def quantile_or_off(text: str) -> float | None:
    """A quantile in (0, 1], or ``off`` (``None``)."""
    if text.strip().lower() == "off":
        return None
    try:
        return quantile(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be a quantile in (0, 1] or 'off': {text[:40]!r}") from None


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text[:40]!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535: {text[:40]!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def field_default(config: type[Any], name: str) -> Any:
    """The default of one field of a configuration dataclass, so that an option's default is
    read from the configuration it fills rather than typed a second time::

        >>> @dataclasses.dataclass
        ... class Config:
        ...     port: int = 8000
        >>> field_default(Config, "port")
        8000
    """
    for item in dataclasses.fields(config):
        if item.name != name:
            continue
        if item.default is not dataclasses.MISSING:
            return item.default
        if item.default_factory is not dataclasses.MISSING:
            return item.default_factory()
        raise ValueError(f"{config.__name__}.{name} has no default")
    raise ValueError(f"{config.__name__} has no field {name!r}")


def _from_env(convert: Callable[[str], Any], variable: str) -> Callable[[str], Any]:
    """Wrap a converter so that a bad environment value names its variable."""

    def converter(text: str) -> Any:
        try:
            return convert(text)
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(f"{exc} (from {variable})") from exc

    return converter


class EnvArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose optional arguments default to ``GOVERNOR_*`` variables.

    Each component reads its own prefix (``GOVERNOR_SERVE_``, ``GOVERNOR_CONTROLLER_``, …), so
    one environment can configure them all; ``env=`` gives an option a variable of its own
    instead (a token file every component shares). ``legacy_prefix`` names the prefix an option
    used to read, and ``old_env=`` older names of one option: such a variable still works, with a
    warning, when the current one is not set.
    """

    def __init__(
        self, *args: Any, env: Mapping[str, str] | None = None, env_prefix: str = "GOVERNOR_",
        legacy_prefix: str | None = None, **kwargs: Any,
    ) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)
        self._env = os.environ if env is None else env
        self.env_prefix = env_prefix
        self._legacy_prefix = legacy_prefix

    def _raw(self, option: str, variable: str,
             old: tuple[str, ...] = ()) -> tuple[str | None, str]:
        """The variable's value (or an old name's, warned about) and the name it came from."""
        raw = self._env.get(variable)
        if raw is not None:
            return raw, variable
        prefixed = () if self._legacy_prefix is None else (env_name(option, self._legacy_prefix),)
        for legacy in (name for name in (*old, *prefixed) if name != variable):
            raw = self._env.get(legacy)
            if raw is not None:
                print(f"{self.prog}: {legacy} is deprecated, use {variable} (the old name works "
                      "until the next release)", file=sys.stderr)
                return raw, legacy
        return None, variable

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        long_names = [n for n in names if isinstance(n, str) and n.startswith("--")]
        if not long_names or kwargs.get("action") in {"help", "version"}:
            return super().add_argument(*names, **kwargs)
        variable = kwargs.pop("env", None) or env_name(long_names[0], self.env_prefix)
        old = tuple(kwargs.pop("old_env", ()))
        help_text = kwargs.get("help")
        if help_text is not argparse.SUPPRESS:
            kwargs["help"] = f"{help_text or ''} [env {variable}]".strip()
        raw, variable = self._raw(long_names[0], variable, old)
        if raw is not None:
            if kwargs.get("action") in {"store_true", "store_false"}:
                try:
                    kwargs["default"] = parse_bool(raw)
                except ValueError as exc:
                    self.error(f"{variable}: {exc}")
            else:
                convert = kwargs.get("type") or str
                try:
                    kwargs["default"] = _from_env(convert, variable)(raw)
                except argparse.ArgumentTypeError as exc:
                    self.error(str(exc))
                choices = kwargs.get("choices")
                if choices is not None and kwargs["default"] not in choices:
                    self.error(f"{variable}: {raw!r} is not one of {list(choices)}")
                kwargs["required"] = False
        return super().add_argument(*names, **kwargs)
