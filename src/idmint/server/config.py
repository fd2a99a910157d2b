"""The ID server's configuration: one validated, frozen :class:`ServerConfig`.

Every setting of ``idmint serve`` is declared once, as a field of
:class:`ServerConfig` with what the outside needs to set it: its flag, its
``IDMINT_*`` variable, its help, how text becomes a value and what values are
allowed. The CLI's flags and their help (defaults included), the variables,
the checks and the tests' consistency checks all come from that table
(:data:`SETTINGS`; :data:`SERVE_SETTINGS` are those with a flag and a
variable). :func:`~idmint.server.run.serve`,
:func:`~idmint.server.app.create_app`, the app and the workers of
``--workers N`` all take the one object (the supervisor hands it to each
worker whole).

Built from outside with :meth:`ServerConfig.from_sources`: a flag always wins
over its variable; an empty variable counts as unset; a variable whose text
cannot be read is an error naming the variable. Built from Python
(``ServerConfig(generators=4)``, or ``create_app(generators=4)``), a value is
named by its keyword. Either way each value is checked once, when the object
is made, and a bad one is one :class:`~idmint.errors.ConfigurationError` naming
where it came from (``--generators must be 1..64, got 65``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from idmint.coordinate.url import yes_or_no
from idmint.errors import ConfigurationError, quoted
from idmint.factory import MAX_GENERATORS
from idmint.schemes import SCHEMES
from idmint.server.limits import REQUEST_TIMEOUT_S, WORKER_TIMEOUT_S, RequestLimits
from idmint.server.logs import LOG_FORMATS, LOG_LEVELS

__all__ = [
    "MAX_WORKERS",
    "SERVE_SETTINGS",
    "SETTINGS",
    "ServerConfig",
    "Setting",
    "available_cores",
    "given_config",
    "parse_workers",
]

MAX_WORKERS = 1024
MAX_COUNT_LIMIT = 1_000_000
"""The largest ``--max-count``: a response of a million IDs is already 20 MB."""


# -- reading text ------------------------------------------------------------------------------


def _text(value: str) -> str:
    return value


def _whole_number(value: str) -> int:
    cleaned = value.strip().replace("_", "")
    if not (cleaned.isascii() and cleaned.isdigit()):
        raise ValueError(f"{quoted(value)} is not a whole number")
    return int(cleaned)


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{quoted(value)} is not a number of seconds") from None


def _boolean(value: str) -> bool:
    try:
        return yes_or_no(value.strip())
    except ValueError:
        raise ValueError(
            f"{quoted(value)} is not a yes/no value; use 1/0, true/false, yes/no or on/off"
        ) from None


def _word(value: str) -> str:
    return value.strip().lower()


def _stripped(value: str) -> str:
    return value.strip()


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
        raise ValueError(f"{quoted(value)} is not a whole number or auto") from None


# -- checking values -----------------------------------------------------------------------------
# A check raises ValueError (TypeError for a value of the wrong type) with what follows
# the value's name: "must be 1..64, got 65".


class _Range:
    """A whole number from ``low`` to ``high``; ``str()`` is the range, for the help."""

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high

    def __call__(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"must be a whole number {self}, got {value!r}")
        if not self.low <= value <= self.high:
            raise ValueError(f"must be {self}, got {value}")

    def __str__(self) -> str:
        return f"{self.low}..{self.high}"


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {value!r}")

    return check


def _seconds_check(allowed: Callable[[float], bool], rule: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"must be a number of seconds, got {value!r}")
        if not allowed(value):
            raise ValueError(f"must be {rule}, got {value:g}")

    return check


def _is(kind: type, *, optional: bool = False, what: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
            raise TypeError(f"must be {what}, got {value!r}")

    return check


def _token(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"must be a non-empty string, got {value!r}")


def _options(value: Any) -> None:
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise TypeError(f"must be a dict of generator options, got {value!r}")


# -- the table -----------------------------------------------------------------------------------


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class Setting:
    """How one :class:`ServerConfig` field is set from outside ``Python``.

    ``variable`` is ``None`` for fields only Python sets (the token itself, the
    generator options). ``limits`` (if any) is shown in the help. ``switch``:
    a yes/no setting, ``--x`` / ``--no-x``.
    """

    name: str
    default: Any
    help: str
    variable: str | None
    parse: Callable[[str], Any]
    check: Callable[[Any], None]
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False
    default_text: str | None = None
    limits: str | None = None

    @property
    def flag(self) -> str:
        return _flag(self.name)

    @property
    def from_outside(self) -> bool:
        """Whether it has a flag and a variable (else only Python sets it)."""
        return self.variable is not None

    def help_text(self) -> str:
        """The flag's help: what it does, then its limits, default and variable."""
        notes = []
        if self.limits:
            notes.append(self.limits)
        shown = self.default_text
        if shown is None and self.default is not None:
            if isinstance(self.default, bool):
                shown = "on" if self.default else "off"
            elif isinstance(self.default, float):
                shown = f"{self.default:g}"
            else:
                shown = str(self.default)
        if shown is not None:
            notes.append(f"default {shown}")
        notes.append(str(self.variable))
        return f"{self.help} ({'; '.join(notes)})"


_DECLARED = "idmint.setting"


def _setting(
    default: Any,
    help: str,
    check: Callable[[Any], None],
    *,
    parse: Callable[[str], Any] = _text,
    outside: bool = True,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    switch: bool = False,
    default_text: str | None = None,
) -> Any:
    """A :class:`ServerConfig` field and what :class:`Setting` needs (its name comes later)."""
    declared = {
        "default": default,
        "help": help,
        "check": check,
        "parse": parse,
        "outside": outside,
        "metavar": metavar,
        "choices": choices,
        "switch": switch,
        "default_text": default_text,
        "limits": str(check) if isinstance(check, _Range) else None,
    }
    if isinstance(default, dict):
        return dataclasses.field(default_factory=dict, metadata={_DECLARED: declared})
    return dataclasses.field(default=default, metadata={_DECLARED: declared})


def _optional(help: str, *, what: str, metavar: str, unset: str) -> Any:
    """A text setting that is not set by default (a file, a URL); ``unset``: what that means."""
    return _setting(
        None, help, _is(str, optional=True, what=what), metavar=metavar, default_text=unset
    )


def _file(help: str, *, unset: str) -> Any:
    """A setting naming a file, not set by default."""
    return _optional(help, what="a file name", metavar="F", unset=unset)


def _url(help: str, *, of: str, unset: str = "none") -> Any:
    """A setting naming a URL (``of`` what), not set by default."""
    return _optional(help, what=f"a {of} URL", metavar="URL", unset=unset)


def _whole(
    default: int,
    help: str,
    allowed: _Range,
    *,
    metavar: str | None = None,
    parse: Callable[[str], int] = _whole_number,
) -> Any:
    """A whole-number setting within ``allowed``."""
    return _setting(default, help, allowed, parse=parse, metavar=metavar)


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Everything ``idmint serve`` is configured with; see the module.

    Only Python sets ``token`` (the bearer token itself, where ``token_file``
    names a file holding it) and ``options`` (generator options such as
    ``{"mode": "time-sequential"}``; plain JSON values with ``workers`` above
    1, since each worker is a new process that is sent them). ``sources``
    says where a value came from (a flag, a variable) for messages; a value
    not named there came from a keyword or is the default.
    """

    host: str = _setting("127.0.0.1", "address to bind", _is(str, what="an address or host name"))
    port: int = _whole(8000, "0 picks a free port", _Range(0, 65535))
    scheme: str = _setting(
        "uid64", "ID scheme", _one_of(tuple(SCHEMES)), parse=_stripped, choices=tuple(SCHEMES)
    )
    coordinator: str | None = _url(
        "where generator IDs come from, as for generate",
        of="coordinator",
        unset="this host's pool, local://",
    )
    generators: int = _whole(
        1,
        "hold K generator IDs and spread requests over them",
        _Range(1, MAX_GENERATORS),
        metavar="K",
    )
    workers: int = _whole(
        1,
        "serve from N worker processes on the port, each with its own --generators K "
        "claims; auto: one per available core",
        _Range(1, MAX_WORKERS),
        metavar="N",
        parse=parse_workers,
    )
    token_file: str | None = _file(
        "require one of the bearer tokens in this file (one a line) on /v1/*; re-read on SIGHUP",
        unset="none",
    )
    tls_cert: str | None = _file(
        "serve HTTPS with the certificate (then its chain) in this PEM file; re-read on SIGHUP",
        unset="none: plain HTTP",
    )
    tls_key: str | None = _file(
        "the certificate's private key, a PEM file without a passphrase",
        unset="in the --tls-cert file",
    )
    tls_client_ca: str | None = _file(
        "mutual TLS: every client must present a certificate signed by a CA in this PEM file",
        unset="none: no client certificate asked for",
    )
    max_count: int = _whole(
        10_000,
        "the largest /v1/ids?count=",
        _Range(1, MAX_COUNT_LIMIT),
        metavar="N",
    )
    discovery: str | None = _url("register the server in this zk:// discovery tree", of="discovery")
    log_level: str = _setting(
        "info", "stderr log level", _one_of(LOG_LEVELS), parse=_word, choices=LOG_LEVELS
    )
    log_format: str = _setting(
        "text",
        "text lines or one JSON object per line",
        _one_of(LOG_FORMATS),
        parse=_word,
        choices=LOG_FORMATS,
    )
    access_log: bool = _setting(
        False,
        "log one line per request",
        _is(bool, what="True or False"),
        parse=_boolean,
        switch=True,
    )
    request_timeout: float = _setting(
        REQUEST_TIMEOUT_S,
        "close a connection whose request has not fully arrived after S seconds",
        _seconds_check(lambda s: 0 < s < float("inf"), "more than 0 seconds"),
        parse=_seconds,
        metavar="S",
    )
    worker_timeout: float = _setting(
        WORKER_TIMEOUT_S,
        "with --workers: kill and replace a worker whose event loop has not turned "
        "for S seconds; 0: never",
        _seconds_check(lambda s: s == 0 or 1 <= s < float("inf"), "0 (never) or at least 1 second"),
        parse=_seconds,
        metavar="S",
    )
    token: str | None = _setting(None, "the bearer token itself", _token, outside=False)
    options: dict[str, Any] = _setting(  # noqa: RUF009 - a field made per instance
        {}, "generator options", _options, outside=False
    )
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for setting in SETTINGS:
            try:
                setting.check(getattr(self, setting.name))
            except (ValueError, TypeError) as error:
                raise ConfigurationError(f"{self.source(setting.name)} {error}") from None
        if self.token is not None and self.token_file is not None:
            raise ConfigurationError(f"give the token or {self.source('token_file')}, not both")
        for needing in ("tls_key", "tls_client_ca"):
            if getattr(self, needing) is not None and self.tls_cert is None:
                raise ConfigurationError(
                    f"{self.source(needing)} needs a certificate ({_flag('tls_cert')})"
                )
        if self.workers > 1:
            try:
                json.dumps(self.options)
            except (TypeError, ValueError):
                raise ConfigurationError(
                    "with workers, generator options must be plain values (each worker is a "
                    f"new process that is sent them): {self.options!r}"
                ) from None

    def source(self, name: str) -> str:
        """How a message names the setting ``name``: its flag, its variable, or its keyword."""
        return self.sources.get(name, name)

    @property
    def requires_token(self) -> bool:
        """Whether ``/v1/*`` want a bearer token: one is given, or a file of them."""
        return self.token is not None or self.token_file is not None

    @property
    def limits(self) -> RequestLimits:
        return RequestLimits(request_timeout_s=self.request_timeout)

    @classmethod
    def from_sources(
        cls, flags: Mapping[str, Any], environ: Mapping[str, str], **given: Any
    ) -> ServerConfig:
        """Each setting from its flag (given, i.e. not None), else its variable, else default.

        ``flags`` are values already read (the CLI reads each with its
        setting's ``parse``); ``given`` sets the fields only Python sets.
        Raises :class:`~idmint.errors.ConfigurationError` naming the flag or
        the variable whose value cannot be used.
        """
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for setting in SERVE_SETTINGS:
            assert setting.variable is not None
            flagged = flags.get(setting.name)
            raw = environ.get(setting.variable, "")
            if flagged is not None:
                values[setting.name] = flagged
                sources[setting.name] = setting.flag
            elif raw.strip():
                source = f"environment variable {setting.variable}"
                try:
                    values[setting.name] = setting.parse(raw)
                except ValueError as error:
                    raise ConfigurationError(f"{source}: {error}") from None
                sources[setting.name] = source
        return cls(**values, **given, sources=sources)

    def to_json(self) -> dict[str, Any]:
        """Plain values, for a worker process: :meth:`from_json` makes the same config."""
        return {name: getattr(self, name) for name in _FIELD_NAMES} | {
            "sources": dict(self.sources)
        }

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> ServerConfig:
        return cls(**values)


def given_config(config: ServerConfig | None, settings: Mapping[str, Any]) -> ServerConfig:
    """``config``, or one made of ``settings`` (keywords of a function taking either)."""
    if config is not None:
        if settings:
            raise ConfigurationError(
                f"give a ServerConfig or settings, not both (got {', '.join(sorted(settings))})"
            )
        return config
    unknown = sorted(set(settings) - {field.name for field in dataclasses.fields(ServerConfig)})
    if unknown:
        raise ConfigurationError(
            f"unknown server setting {', '.join(unknown)}; known: {', '.join(_FIELD_NAMES)}"
        )
    return ServerConfig(**settings)


def _settings() -> tuple[Setting, ...]:
    made = []
    for field in dataclasses.fields(ServerConfig):
        if _DECLARED not in field.metadata:
            continue
        declared = dict(field.metadata[_DECLARED])
        outside = declared.pop("outside")
        made.append(
            Setting(
                name=field.name,
                variable="IDMINT_" + field.name.upper() if outside else None,
                **declared,
            )
        )
    return tuple(made)


SETTINGS = _settings()
"""Every setting of :class:`ServerConfig`, in the order of its fields."""

SERVE_SETTINGS = tuple(setting for setting in SETTINGS if setting.from_outside)
"""The settings ``idmint serve`` takes as flags and ``IDMINT_*`` variables."""

_FIELD_NAMES = tuple(setting.name for setting in SETTINGS)
