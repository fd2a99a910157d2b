"""``idmint serve``'s settings: command-line flags, else ``IDMINT_*`` environment variables.

A container or a systemd unit can then run the server without a wrapper
script. A flag always wins over its variable; an empty variable counts as
unset; a variable whose value cannot be used is an error naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from idmint.errors import ConfigurationError
from idmint.schemes import SCHEMES
from idmint.server.limits import REQUEST_TIMEOUT_S, WORKER_TIMEOUT_S
from idmint.server.logs import LOG_FORMATS, LOG_LEVELS

__all__ = [
    "MAX_WORKERS",
    "SERVE_SETTINGS",
    "Setting",
    "available_cores",
    "parse_workers",
    "resolve_serve_settings",
]


def _text(value: str) -> str:
    return value


def _whole_number(value: str) -> int:
    cleaned = value.strip().replace("_", "")
    if not (cleaned.isascii() and cleaned.isdigit()):
        raise ValueError(f"{value!r} is not a whole number")
    return int(cleaned)


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number of seconds") from None


def _within(low: int, high: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be {low}..{high}, got {value}")

    return check


def _positive(value: Any) -> None:
    if not 0 < value < float("inf"):
        raise ValueError(f"must be more than 0 seconds, got {value:g}")


def _never_or_at_least_a_second(value: Any) -> None:
    if not (value == 0 or 1 <= value < float("inf")):
        raise ValueError(f"must be 0 (never) or at least 1 second, got {value:g}")


def _boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{value!r} is not a yes/no value; use 1/0, true/false, yes/no or on/off")


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.strip().lower() not in choices:
            raise ValueError(f"{value!r} is not one of {', '.join(choices)}")
        return value.strip().lower()

    return parse


MAX_WORKERS = 1024


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS has one."""
    counted = getattr(os, "process_cpu_count", None)  # Python 3.13
    if counted is not None:
        return int(counted() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def parse_workers(value: str) -> int:
    """``--workers``: a whole number, or ``auto`` for one worker per available core."""
    if value.strip().lower() == "auto":
        return available_cores()
    try:
        return _whole_number(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a whole number or auto") from None


def _scheme(value: str) -> str:
    if value.strip() not in SCHEMES:
        raise ValueError(f"{value!r} is not a scheme; expected one of {', '.join(SCHEMES)}")
    return value.strip()


@dataclass(frozen=True)
class Setting:
    """One ``idmint serve`` setting: its flag's destination, variable, default, parser.

    ``check`` (if any) applies to the value from either source and raises
    ``ValueError`` saying what is allowed.
    """

    name: str
    variable: str
    default: Any
    parse: Callable[[str], Any]
    check: Callable[[Any], None] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


SERVE_SETTINGS = (
    Setting("coordinator", "IDMINT_COORDINATOR", None, _text),
    Setting("scheme", "IDMINT_SCHEME", "uid64", _scheme),
    Setting("host", "IDMINT_HOST", "127.0.0.1", _text),
    Setting("port", "IDMINT_PORT", 8000, _whole_number, _within(0, 65535)),
    Setting("generators", "IDMINT_GENERATORS", 1, _whole_number, _within(1, 64)),
    Setting("workers", "IDMINT_WORKERS", 1, parse_workers, _within(1, MAX_WORKERS)),
    Setting("token_file", "IDMINT_TOKEN_FILE", None, _text),
    Setting("max_count", "IDMINT_MAX_COUNT", 10_000, _whole_number, _within(1, 1_000_000)),
    Setting("discovery", "IDMINT_DISCOVERY", None, _text),
    Setting("log_level", "IDMINT_LOG_LEVEL", "info", _one_of(LOG_LEVELS)),
    Setting("log_format", "IDMINT_LOG_FORMAT", "text", _one_of(LOG_FORMATS)),
    Setting("access_log", "IDMINT_ACCESS_LOG", False, _boolean),
    Setting("request_timeout", "IDMINT_REQUEST_TIMEOUT", REQUEST_TIMEOUT_S, _seconds, _positive),
    Setting(
        "worker_timeout",
        "IDMINT_WORKER_TIMEOUT",
        WORKER_TIMEOUT_S,
        _seconds,
        _never_or_at_least_a_second,
    ),
)


def resolve_serve_settings(flags: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Each setting from its flag (when given, i.e. not None), else its variable, else default.

    Raises ``ConfigurationError`` naming the flag or the variable whose value
    cannot be used.
    """
    values: dict[str, Any] = {}
    for setting in SERVE_SETTINGS:
        given = flags.get(setting.name)
        raw = environ.get(setting.variable, "")
        if given is not None:
            source = setting.flag
            value = given
        elif raw.strip():
            source = f"environment variable {setting.variable}"
            try:
                value = setting.parse(raw)
            except ValueError as error:
                raise ConfigurationError(f"{source}: {error}") from None
        else:
            values[setting.name] = setting.default
            continue
        if setting.check is not None:
            try:
                setting.check(value)
            except ValueError as error:
                raise ConfigurationError(f"{source} {error}") from None
        values[setting.name] = value
    return values
