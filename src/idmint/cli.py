"""The ``idmint`` command: argument parsing and output only; the work is the library's.

Every error prints one line on stderr, ``idmint: error: ...``, never a
traceback, and exits with a status that says what kind of trouble it was (for
idmint's errors the status is the error class's ``exit_status``):

====  =================================================================
0     done (also when the reader of stdout went away: ``| head``)
1     no ID could be issued: a claim lost, the pool exhausted, the
      identity in use by another process, the clock far behind;
      (whois) no holder of the ID's identity is recorded for its time
2     usage: a bad option, URL, scheme or ID
69    the coordinator cannot be reached, or (fetch) no ID server gave IDs
      in time (EX_UNAVAILABLE)
74    stdout cannot be written: closed, or a full disk (EX_IOERR)
77    refused credentials: the coordinator's (credentials, permissions,
      TLS) or, for fetch, the ID servers' token (EX_NOPERM)
128+N stopped by signal N (SIGTERM: 143, SIGINT: 130)
====  =================================================================

A wait for a coordinator that lasts over a second says once on stderr what
it is waiting for (``idmint: waiting up to 10 s for ZooKeeper at ...``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import inspect
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TextIO

from idmint.errors import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    QUOTED_LENGTH,
    IdmintError,
    IdmintWarning,
    InvalidId,
    printable,
    quoted,
)
from idmint.schemes import SCHEMES, Field, IdValue, iso_ms, parse_id, scheme_type

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from idmint.generate.core import IdBatch

__all__ = ["EXIT_OUTPUT", "EXIT_RUNTIME", "EXIT_USAGE", "exit_status", "main"]

EXIT_OUTPUT = 74
"""stdout cannot be written (sysexits' EX_IOERR): the CLI's own; the others are
the error classes' (:attr:`idmint.errors.IdmintError.exit_status`)."""
ERROR_PREFIX = "idmint: error: "
"""How every error line starts."""
FLUSH_INTERVAL_S = 0.1
"""Generated IDs reach stdout at least this often, so a killed process has
printed (nearly) everything it issued and a reader sees IDs as they come."""


class UsageError(Exception):
    """Bad command-line input; the message is printed after the error prefix."""


class OutputError(Exception):
    """stdout refused what a command wrote (closed, a full disk)."""


class _Output:
    """stdout as the commands write to it.

    A write or flush that fails becomes :class:`OutputError`, so the command
    unwinds (releasing its claims) and exits 74 with one line, whatever it was
    doing. A reader that went away (``EPIPE``) stays a ``BrokenPipeError``.
    """

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream

    def write(self, text: str) -> None:
        self._on_stream(lambda stream: stream.write(text))

    def flush(self) -> None:
        self._on_stream(lambda stream: stream.flush())

    def _on_stream(self, action: Callable[[TextIO], object]) -> None:
        if self._stream is None:
            # Python sets sys.stdout to None when file descriptor 1 was closed.
            raise OutputError("cannot write to stdout: it is closed")
        try:
            action(self._stream)
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as error:  # ValueError: a stream closed in-process
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise OutputError(f"cannot write to stdout: {reason}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the usage block as well; we promise one line.
        raise UsageError(f"{message} (see {self.prog} --help)")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's own message repeats the value whole.
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(str, action.choices))
            raise argparse.ArgumentError(
                action, f"invalid choice: {quoted(str(value))} (choose from {choices})"
            )

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse ignores a failed write; help and --version that cannot reach
        # stdout are the CLI's status 74, as any output is.
        if file is None or file is sys.stdout:
            out = _Output(sys.stdout)
            out.write(message)
            out.flush()
        else:
            super()._print_message(message, file)


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` ran (``idmint claims list``'s), whose help
    describes the options it takes."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            child = action.choices.get(str(getattr(args, action.dest, None)))
            if child is not None:
                return _chosen(child, args)
    return parser


def _integer(text: str) -> int:
    """Decimal (leading zeros allowed), or hex with 0x: medallions are often written in hex."""
    cleaned = text.strip().replace("_", "")
    try:
        if cleaned.lower().startswith(("0x", "-0x")):
            return int(cleaned, 16)
        return int(cleaned, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not an integer") from None


def _positive_count(text: str) -> int:
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)} must be >= 0 (0 means until interrupted)")
    return value


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. ``command``: the command about to run, when known; the
    others' options that cost imports to describe (serve's settings, read from
    the server's configuration; the generators' options, read from the generator
    classes) are then left out."""
    parser = _Parser(
        prog="idmint",
        description="Mint, decode and encode compact unique IDs.",
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    described = {name for name in ("generate", "serve") if command in (None, name)}
    _add_id_commands(commands, generator_options="generate" in described)
    _add_fleet_commands(commands, serve_options="serve" in described)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The command ``argv`` runs: its first word that is not an option (the CLI's
    own options take no value), or None."""
    return next((word for word in argv if not word.startswith("-")), None)


def _add_id_commands(commands: Any, *, generator_options: bool = True) -> None:
    """generate, decode, encode, schemes: the IDs themselves."""
    generate = _command(
        commands,
        "generate",
        _cmd_generate,
        help="mint IDs, one per line",
        description="Mint IDs, one per line. With no identity option and no coordinator, "
        "each process claims a free identity on this host, so processes never share one.",
        graceful=True,
    )
    generate.add_argument(
        "--scheme", choices=list(SCHEMES), default="uid64", help="the ID scheme (see `schemes`)"
    )
    generate.add_argument(
        "--count", type=_positive_count, default=1, help="how many IDs; 0: until interrupted"
    )
    _add_format(generate, "one text form or JSON per line")
    _add_coordinator(
        generate,
        "where the identity comes from: a free one on this host (default, local://), "
        "static://?generator=G (configured, held on this host), or a pool it is claimed "
        "from, released on exit",
    )
    generate.add_argument(
        "--generators",
        type=_integer,
        default=1,
        metavar="K",
        help="mint with K generators (1..64), each with an identity of its own: K times the "
        "rate of one; the IDs then come a tick's worth from each in turn",
    )
    names = (
        _add_scheme_flags(generate.add_argument_group("scheme options"), _generator_options())
        if generator_options
        else ()
    )
    generate.set_defaults(generator_options=names)
    _add_decode_encode(commands)


class _DriverSchemes:
    """The URL schemes of the installed coordinator drivers, read from package metadata
    when a help text shows them (not at every start of the CLI)."""

    def __str__(self) -> str:
        from idmint.coordinate import DRIVERS

        return ", ".join(f"{scheme}://" for scheme in DRIVERS.listed())


def _add_coordinator(parser: argparse.ArgumentParser, what: str) -> None:
    """``--coordinator URL``: ``what`` it is, then every registered driver's scheme."""
    action = parser.add_argument(
        "--coordinator",
        metavar="URL",
        help=f"{what}; a URL of any installed driver: %(schemes)s (their options: "
        "docs/coordination.md); IDMINT_COORDINATOR",
    )
    setattr(action, "schemes", _DriverSchemes())  # noqa: B010 - argparse reads vars(action)


# -- flags derived from the schemes ------------------------------------------------------


class _SchemeOption(NamedTuple):
    """An option one scheme takes (its generator's, or its ``build()``'s): a flag's part."""

    scheme: str
    name: str
    about: str
    field: Field | None
    """The value type's field it sets, for its range or choices (None: a setting)."""
    default: Any
    """Shown when every scheme taking it agrees; None or ``inspect.Parameter.empty``: none."""


def _generator_options(*, identities: bool = True) -> list[_SchemeOption]:
    """Every option every scheme's generator class takes (read from its signature),
    described by its value type's field of that name or by the class's ``options_about``.
    ``identities=False`` leaves out the options that name an identity."""
    from idmint.generate.generators import GENERATORS

    options = []
    for scheme, generator_class in GENERATORS.items():
        parameters = inspect.signature(generator_class.__init__).parameters
        fields = {field.name: field for field in generator_class.id_type.fields}
        for name in generator_class.scheme_options():
            if not identities and name in generator_class.identity_fields:
                continue
            default = parameters[name].default
            # A switch (random=True) is no field's value, whatever its name.
            field = None if isinstance(default, bool) else fields.get(name)
            about = generator_class.options_about.get(name) or (
                field.about if field else name.replace("_", " ")
            )
            choices = generator_class.options_choices.get(name)
            if choices:  # text taking one of some values (snowflake's layout)
                field = Field(name, about, choices=choices)
            options.append(_SchemeOption(scheme, name, about, field, default))
    return options


def _build_options() -> list[_SchemeOption]:
    """Every field some scheme's ``build()`` takes (read from its signature)."""
    options = []
    for scheme, id_type in SCHEMES.items():
        parameters = inspect.signature(id_type.build).parameters  # type: ignore[attr-defined]
        for name in parameters:
            field = id_type.field(name)
            options.append(
                _SchemeOption(scheme, name, field.about, field, parameters[name].default)
            )
    return options


def _variant_options() -> list[_SchemeOption]:
    """Every option that picks a layout of some scheme (snowflake's ``layout``...)."""
    return [
        _SchemeOption(
            scheme,
            name,
            about,
            Field(name, about, choices=id_type.variant_choices[name])
            if name in id_type.variant_choices
            else None,
            None,
        )
        for scheme, id_type in SCHEMES.items()
        for name, about in id_type.variant_options.items()
    ]


def _variant(args: argparse.Namespace) -> type[IdValue] | None:
    """The value type the layout options given pick (None: none given)."""
    given = {name: getattr(args, name) for name in args.variants}
    given = {name: value for name, value in given.items() if value is not None}
    if not given:
        return None
    if args.scheme is None:
        raise UsageError(f"{_flags(sorted(given))}: name the scheme too (--scheme)")
    return scheme_type(args.scheme).variant(**given)


def _add_scheme_flags(parser: Any, options: Iterable[_SchemeOption]) -> tuple[str, ...]:
    """One flag per option name, for every scheme that takes it: its choices, or a
    whole number; a switch where the option is True or False. Returns the names."""
    by_name: dict[str, list[_SchemeOption]] = {}
    for option in options:
        by_name.setdefault(option.name, []).append(option)
    for name, takers in by_name.items():
        help_text = _scheme_help(takers)
        if all(isinstance(taker.default, bool) for taker in takers):
            parser.add_argument(_flag(name), action="store_true", default=None, help=help_text)
            continue
        choices = next((list(t.field.choices) for t in takers if t.field and t.field.choices), [])
        if choices:
            parser.add_argument(_flag(name), choices=choices, help=help_text)
        else:
            parser.add_argument(_flag(name), type=_integer, help=help_text)
    return tuple(by_name)


def _scheme_help(takers: Sequence[_SchemeOption]) -> str:
    """``cluster ID (uid64, uid64-v1: 0..15; default 0)``: what the option is, for which
    schemes, in which range; the default where all agree."""
    abouts: dict[str, dict[str, list[str]]] = {}  # about: {range: [scheme]}
    for taker in takers:
        field = taker.field
        span = f"{field.low}..{field.high}" if field and not field.choices else ""
        abouts.setdefault(taker.about, {}).setdefault(span, []).append(taker.scheme)
    defaults = {str(taker.default) for taker in takers}
    shown = takers[0].default
    parts = []
    for about, spans in abouts.items():
        where = [
            f"{', '.join(schemes)}: {span}" if span else ", ".join(schemes)
            for span, schemes in spans.items()
        ]
        parts.append(f"{about} ({'; '.join(where)}")
    if (
        len(defaults) == 1
        and shown not in (None, inspect.Parameter.empty)
        and not isinstance(shown, bool)
    ):
        parts[-1] += f"; default {shown}"
    return "; ".join(part + ")" for part in parts)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _flags(names: Iterable[str]) -> str:
    return ", ".join(map(_flag, names))


class _HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default, when it has one worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or action.option_strings == []
            or isinstance(default, list)
        ):
            return text
        return f"{text} (default: %(default)s)"


def _add_serve_settings(serve: argparse.ArgumentParser) -> None:
    """A flag per setting of the server's configuration, from its table.

    Defaults are applied by ``ServerConfig.from_sources`` (flag, else
    environment, else default), so every flag's own default is None: "not given".
    """
    from idmint.server.config import SERVE_SETTINGS

    for setting in SERVE_SETTINGS:
        if setting.switch:
            serve.add_argument(
                setting.flag, action=argparse.BooleanOptionalAction, help=setting.help_text()
            )
            continue
        serve.add_argument(
            setting.flag,
            type=_read_with(setting.parse),
            choices=setting.choices,
            metavar=setting.metavar,
            help=setting.help_text(),
        )


def _read_with(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a setting's parser: its ValueError is argparse's usage error."""

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    read.__name__ = parse.__name__.strip("_")
    return read


def _add_fleet_commands(commands: Any, *, serve_options: bool = True) -> None:
    """serve, claims, discovery: the server and what is held in ZooKeeper or etcd."""
    serve = _command(
        commands,
        "serve",
        _cmd_serve,
        help="run the ID server (HTTP API and web page)",
        description="Serve IDs over HTTP until SIGTERM/SIGINT, then finish in-flight "
        "requests and release claims. Each option can also be set by the environment "
        "variable named in its help; the option wins.",
        # The server logs on stderr (waits for a coordinator included) and needs no stdout.
        keeps_a_log=True,
    )
    names: tuple[str, ...] = ()
    if serve_options:
        _add_serve_settings(serve)
        # The identity comes from --coordinator (static://?generator=G configures one).
        names = _add_scheme_flags(
            serve.add_argument_group("scheme options"), _generator_options(identities=False)
        )
    serve.set_defaults(generator_options=names)

    claims_commands = _command_group(commands, "claims", "inspect claimed generator IDs")
    claims_list = _command(
        claims_commands,
        "list",
        _cmd_claims_list,
        help="who holds which generator ID",
        description="List the held identities of a pool: who holds each, since when, and "
        "its high-water mark.",
    )
    _add_coordinator(claims_list, "the pool to list: this host's (default, local://), or another")
    _add_format(claims_list, "a table or JSON lines")

    whois = _command(
        commands,
        "whois",
        _cmd_whois,
        help="who minted an ID: the process that held its identity then",
        description="Show the process (host, pid, its start, the claim's first and last "
        "timestamp, the Kubernetes pod) whose claim of the ID's identity covers the ID's "
        "time, as the coordinator recorded it. Exits 1 when none is recorded.",
    )
    _add_coordinator(whois, "where the identity was claimed: this host's pool (default)")
    whois.add_argument(
        "--scheme", choices=list(SCHEMES), help="the ID's scheme (default: guessed from the shape)"
    )
    whois.add_argument("--node-bits", type=_integer, help=_node_bits_help())
    _add_format(whois, "one line of text or JSON")
    whois.add_argument("id", metavar="ID", help="the ID")

    discovery_commands = _command_group(commands, "discovery", "service discovery in ZooKeeper")
    register = _command(
        discovery_commands,
        "register",
        _cmd_discovery_register,
        help="register an instance and hold it until interrupted",
        description="Claim a node ID, register an instance under it, print the node ID, "
        "and hold the registration until SIGTERM/SIGINT.",
        graceful=True,
    )
    register.add_argument(
        "--coordinator", metavar="URL", required=True, help="the zk:// discovery tree"
    )
    register.add_argument("--service", required=True, help="the service type to register as")
    register.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="E[:KEY]",
        help="an endpoint the instance serves, optionally with a key (repeatable)",
    )
    register.add_argument("--host", help="the address clients reach the instance at")
    register.add_argument("--port", type=_integer, help="the port clients reach it at")
    register.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="K=V",
        help="a key and value published with the instance (repeatable)",
    )
    listing = _command(
        discovery_commands,
        "list",
        _cmd_discovery_list,
        help="the registered services and endpoints",
        description="Print the registered instances by service, and the endpoints' nodes.",
    )
    listing.add_argument(
        "--coordinator", metavar="URL", required=True, help="the zk:// discovery tree"
    )
    listing.add_argument("--service", help="only this service type (default: every one)")
    _add_format(listing, "text lines or one JSON object")
    _add_fetch(commands)


def _add_format(parser: argparse.ArgumentParser, help_text: str, default: str = "text") -> None:
    """``--format``: the text forms or JSON, ``default`` first."""
    choices = sorted(("text", "json"), key=lambda choice: choice != default)
    parser.add_argument("--format", choices=choices, default=default, help=help_text)


def _command(
    commands: Any, name: str, handler: Callable[..., int], help: str, **settings: Any
) -> argparse.ArgumentParser:
    """The command ``name``, run by ``handler(args, out)``: ``help`` in the list of
    commands; ``settings``, its description and its defaults (``graceful``,
    ``keeps_a_log``: see :func:`main`)."""
    description = settings.pop("description", None)
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help, description=description, formatter_class=_HelpFormatter
    )
    parser.set_defaults(handler=handler, **settings)
    return parser


def _command_group(commands: Any, name: str, help_text: str) -> Any:
    """A command of commands (``claims list``): the subparsers to add them to."""
    group = commands.add_parser(name, help=help_text).add_subparsers(
        dest=f"{name}_command", metavar="COMMAND", parser_class=_Parser
    )
    group.required = True
    return group


def _add_fetch(commands: Any) -> None:
    fetch = _command(
        commands,
        "fetch",
        _cmd_fetch,
        help="take IDs from ID servers (idmint serve), one per line",
        description="Take IDs from running ID servers through idmint.client: in batches, "
        "from the next server when one fails. Exits 69 when no server gives IDs in time, "
        "77 at once when the servers refuse the token.",
        graceful=True,
    )
    where = fetch.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--server",
        action="append",
        metavar="URL",
        help="an ID server, http://host:port (repeatable)",
    )
    where.add_argument(
        "--discovery", metavar="URL", help="find the servers in this zk:// discovery tree"
    )
    fetch.add_argument(
        "--count", type=_positive_count, default=1, help="how many IDs; 0: until interrupted"
    )
    fetch.add_argument(
        "--scheme",
        choices=list(SCHEMES),
        help="the scheme expected (default: whatever the servers serve)",
    )
    fetch.add_argument("--node-bits", type=_integer, help=_node_bits_help())
    fetch.add_argument(
        "--token-file",
        metavar="F",
        help="the servers' bearer token, read again when a server refuses it (IDMINT_TOKEN_FILE)",
    )
    fetch.add_argument(
        "--tls-ca",
        metavar="F",
        help="check https servers' certificates against the CA certificates in this PEM file "
        "(default: the system's; IDMINT_FETCH_TLS_CA)",
    )
    fetch.add_argument(
        "--tls-cert",
        metavar="F",
        help="a client certificate (PEM) for servers that ask for one (mutual TLS; "
        "IDMINT_FETCH_TLS_CERT)",
    )
    fetch.add_argument(
        "--tls-key",
        metavar="F",
        help="its private key (default: in the --tls-cert file; IDMINT_FETCH_TLS_KEY)",
    )
    fetch.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="give up when no server has given IDs for S seconds",
    )
    _add_format(fetch, "one text form or JSON per line")


def _add_decode_encode(commands: Any) -> None:
    decode = _command(
        commands,
        "decode",
        _cmd_decode,
        help="show what IDs are made of (JSON lines)",
        description="Decode IDs given as arguments, or one per line on stdin with '-'. The "
        "scheme is guessed only from a full-length form that allows one answer.",
    )
    decode.add_argument(
        "--scheme", choices=list(SCHEMES), help="the IDs' scheme (default: guessed from the shape)"
    )
    decode.add_argument("--node-bits", type=_integer, help=_node_bits_help())
    variants = _add_scheme_flags(decode.add_argument_group("layout options"), _variant_options())
    decode.set_defaults(variants=variants)
    _add_format(decode, "JSON lines or one line of text", default="json")
    decode.add_argument("ids", nargs="*", metavar="ID", help="IDs, or - to read stdin")

    encode = _command(
        commands,
        "encode",
        _cmd_encode,
        help="make an ID from its fields",
        description="Make an ID from its fields; `idmint schemes` lists each scheme's.",
    )
    encode.add_argument("--scheme", choices=list(SCHEMES), required=True, help="the ID scheme")
    names = _add_scheme_flags(encode, _build_options())
    variants = _add_scheme_flags(encode.add_argument_group("layout options"), _variant_options())
    _add_format(encode, "the text form or JSON")
    encode.set_defaults(fields=names, variants=variants)

    _add_bounds(commands)

    _command(
        commands,
        "schemes",
        _cmd_schemes,
        help="list the ID schemes",
        description="The ID schemes, with their options.",
    )

    completion = _command(
        commands,
        "completion",
        _cmd_completion,
        help="print a shell completion script",
        description="Print a completion script for bash, zsh or fish, e.g. "
        "`idmint completion bash > ~/.local/share/bash-completion/completions/idmint`, "
        "`source <(idmint completion zsh)` in ~/.zshrc, or "
        "`idmint completion fish > ~/.config/fish/completions/idmint.fish`.",
    )
    completion.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell")


def _add_bounds(commands: Any) -> None:
    bounds = _command(
        commands,
        "bounds",
        _cmd_bounds,
        help="the smallest and largest ID of a time, for range queries",
        description="Print the smallest and the largest ID a scheme's IDs of TIME can be "
        "(the ms holding it; the us for muid), or, with END, of the times from TIME up to "
        "END (not included), for `WHERE id BETWEEN first AND last`. A span needs IDs that "
        "sort by time: uid64 and uid64-v1 in spread mode do not. TIME and END: ISO 8601 "
        "with a time zone (2024-05-01T00:00:00Z), or ms since 1970.",
    )
    bounds.add_argument("--scheme", choices=list(SCHEMES), required=True, help="the ID scheme")
    options = [
        _SchemeOption(scheme, name, field.about, field, None)
        for scheme, id_type in SCHEMES.items()
        for name in id_type.bound_options
        for field in [id_type.field(name)]
    ]
    names = _add_scheme_flags(bounds, options)
    _add_format(bounds, "the two IDs on one line each, or JSON")
    bounds.add_argument("time", metavar="TIME", help="the time, or the span's start")
    bounds.add_argument("end", metavar="END", nargs="?", help="the end of a span (excluded)")
    bounds.set_defaults(bound_options=names)


def _instant(text: str) -> datetime.datetime | int:
    """A time the CLI was given: ms since 1970, or ISO 8601 with its time zone."""
    stripped = text.strip()
    if stripped.isascii() and stripped.isdigit():
        return int(stripped)
    try:
        when = datetime.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{quoted(text)} is not a time: give ISO 8601 (2024-05-01T00:00:00Z) or ms since 1970"
        ) from None
    if when.utcoffset() is None:
        raise UsageError(f"{quoted(text)} has no time zone: add one (Z for UTC)")
    return when


def _cmd_bounds(args: argparse.Namespace, out: _Output) -> int:
    id_type = scheme_type(args.scheme)
    given = {name: getattr(args, name) for name in args.bound_options}
    stray = sorted(
        name
        for name, value in given.items()
        if value is not None and name not in id_type.bound_options
    )
    if stray:
        raise UsageError(f"{args.scheme} bounds take no {_flags(stray)}")
    options = {name: value for name, value in given.items() if value is not None}
    start = _instant(args.time)
    if args.end is None:
        first, last = id_type.first_at(start, **options), id_type.last_at(start, **options)
    else:
        first, last = id_type.between(start, _instant(args.end), **options)
    if args.format == "json":
        shown = {"scheme": args.scheme, "first": str(first), "last": str(last)}
        shown |= {"first_int": first.int, "last_int": last.int}
        out.write(json.dumps(shown) + "\n")
    else:
        out.write(f"{first}\n{last}\n")
    return 0


def _node_bits_help() -> str:
    """``--node-bits`` of the readers: the width the schemes that need one read with."""
    return _scheme_help(
        [
            _SchemeOption(scheme, "node_bits", field.about, field, None)
            for scheme, id_type in SCHEMES.items()
            if id_type.needs_node_bits
            for field in [id_type.field("node_bits")]
        ]
    )


class _VersionAction(argparse.Action):
    """``--version``: read from the package's metadata only when asked (reading
    metadata costs more to import than a command like ``decode`` does in all)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show the version and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        parser._print_message(_version() + "\n", sys.stdout)
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from idmint.generate.core import CORE

    core = "compiled core" if CORE == "c" else "pure-Python core"
    try:
        return f"idmint {version('idmint')} ({core})"
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return f"idmint (not installed; {core})"


# -- commands --------------------------------------------------------------------


def _cmd_generate(args: argparse.Namespace, out: _Output) -> int:
    from idmint.factory import new_generator

    # Whether each applies to the scheme is the factory's to say, as for every caller.
    options = {name: getattr(args, name) for name in args.generator_options}
    render = _renderer(args.format)
    coordinator = _coordinator(args)
    with new_generator(
        args.scheme, coordinator, generators=args.generators, **options
    ) as generator:
        return _write_ids(out, args.count, _CHUNK_IDS, lambda take: render(generator.batch(take)))


_CHUNK_IDS = 4096
"""IDs asked of the generator at a time by ``generate``: at a scheme's cap, several
ticks' worth (uid64's 64 ms, short60's 8), which the generator waits out without
coming back to Python for each, where one tick's worth made every tick's wake-up
run the whole loop again (a third of the CLI's CPU per ID past uid64's cap)."""


def _write_ids(out: _Output, count: int, chunk: int, lines: Callable[[int], str]) -> int:
    """Write ``count`` IDs (0: until a signal), ``chunk`` at a time from ``lines(n)``.

    Output is flushed at least every ``FLUSH_INTERVAL_S`` so a reader of a pipe sees
    IDs as they come; a signal ends the loop between chunks. Returns the exit status.
    """
    remaining = count if count > 0 else None
    last_flush = time.monotonic()
    while (remaining is None or remaining > 0) and _STOP.signum is None:
        take = chunk if remaining is None else min(chunk, remaining)
        out.write(lines(take))
        if remaining is not None:
            remaining -= take
        now = time.monotonic()
        if now - last_flush >= FLUSH_INTERVAL_S:
            out.flush()
            last_flush = now
    out.flush()
    return 0 if _STOP.signum is None else 128 + _STOP.signum


def _renderer(output_format: str) -> Callable[[IdBatch[Any]], str]:
    """Lines for a batch of IDs: the text forms in bulk (no value objects), or JSON."""
    if output_format == "json":
        return _json_lines
    return lambda batch: "\n".join(batch.texts()) + "\n"


def _json_lines(values: Iterable[IdValue]) -> str:
    """One JSON object per ID, each on its line."""
    return "".join(json.dumps(value.to_dict()) + "\n" for value in values)


def _cmd_decode(args: argparse.Namespace, out: _Output) -> int:
    if not args.ids:
        raise UsageError("give the IDs to decode as arguments, or - to read them from stdin")
    status = 0
    variant = _variant(args)
    for where, text in _decode_inputs(args.ids):
        try:
            if variant is None:
                value = parse_id(text, args.scheme, node_bits=args.node_bits)
            else:
                value = variant._read_text(text, args.node_bits)
        except InvalidId as error:
            hint = _DECODE_HINTS.get(error.problem, "")
            _print_error(f"{where}{error}{hint}")
            status = error.exit_status
            continue
        if args.format == "json":
            out.write(json.dumps(value.to_dict()) + "\n")
        else:
            fields = value.to_dict()
            head = f"{fields.pop('id')} {fields.pop('scheme')} {fields.pop('time')}"
            out.write(head + "".join(f" {k}={v}" for k, v in fields.items()) + "\n")
    return status


_DECODE_HINTS = {
    "ambiguous": " (use --scheme S)",
    "node_bits": " (use --node-bits W)",
}


def _decode_inputs(arguments: Sequence[str]) -> Iterator[tuple[str, str]]:
    """``(where, text)`` of each ID to decode: ``where`` names a line of stdin."""
    for argument in arguments:
        if argument == "-":
            # Bytes that are not UTF-8 are kept (surrogateescape) for the error to
            # show, whatever the locale would make of them.
            for number, raw in enumerate(sys.stdin.buffer, start=1):
                line = raw.decode("utf-8", "surrogateescape").strip()
                if line:
                    yield f"stdin line {number}: ", line
        else:
            yield "", argument


def _cmd_encode(args: argparse.Namespace, out: _Output) -> int:
    id_type = _variant(args) or scheme_type(args.scheme)
    required, optional = id_type.build_fields()
    known = set(required) | set(optional)
    given = {name: getattr(args, name) for name in args.fields if getattr(args, name) is not None}
    stray = sorted(set(given) - known)
    if stray:
        raise UsageError(
            f"{args.scheme} IDs have no {_flags(stray)}; "
            f"their fields are {_flags(required + optional)}"
        )
    missing = [name for name in required if name not in given]
    if missing:
        raise UsageError(f"{args.scheme} needs {_flags(missing)}")
    value = id_type.build(**given)  # type: ignore[attr-defined]
    out.write(json.dumps(value.to_dict()) + "\n" if args.format == "json" else f"{value}\n")
    return 0


def _cmd_serve(args: argparse.Namespace, out: _Output) -> int:
    from idmint.errors import ConfigurationError
    from idmint.server.config import ServerConfig
    from idmint.server.run import serve, startup_line

    try:
        options = {name: getattr(args, name) for name in args.generator_options}
        config = ServerConfig.from_sources(
            vars(args),
            os.environ,
            options={name: value for name, value in options.items() if value is not None},
        )
    except ConfigurationError as error:
        raise UsageError(str(error)) from None

    def announce(port: int) -> None:
        line = startup_line(
            config.scheme, config.host, port, config.workers, tls=config.tls_cert is not None
        )
        # The server's work is serving: a closed or full stdout costs only this line.
        with contextlib.suppress(OutputError, BrokenPipeError):
            out.write(line + "\n")
            out.flush()

    return serve(config, announce=announce)


def _cmd_fetch(args: argparse.Namespace, out: _Output) -> int:
    from idmint.client import IdClient
    from idmint.errors import ConfigurationError

    # Each file from its flag, else its variable. The TLS files have variables of
    # their own: IDMINT_TLS_CERT and IDMINT_TLS_KEY are the server's, and a health
    # check run beside a server must not present the server's certificate as its own.
    files: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    for keyword, flag, variable in (
        ("token_file", "--token-file", "IDMINT_TOKEN_FILE"),
        ("tls_ca", "--tls-ca", "IDMINT_FETCH_TLS_CA"),
        ("tls_cert", "--tls-cert", "IDMINT_FETCH_TLS_CERT"),
        ("tls_key", "--tls-key", "IDMINT_FETCH_TLS_KEY"),
    ):
        given = getattr(args, keyword)
        files[keyword] = given or os.environ.get(variable) or None
        sources[keyword] = flag if given else variable
    try:
        client = IdClient(
            args.server,
            discovery=args.discovery,
            scheme=args.scheme,
            node_bits=args.node_bits,
            token_file=files["token_file"],
            tls_ca=files["tls_ca"],
            tls_cert=files["tls_cert"],
            tls_key=files["tls_key"],
            timeout=args.timeout,
        )
    except ConfigurationError as error:
        # The client names its keywords; here they were given as flags.
        message = str(error)
        for keyword, source in sources.items():
            if message.startswith((keyword + ":", keyword + " ")):
                message = source + message[len(keyword) :]
        raise UsageError(message) from None
    render: Callable[[list[IdValue]], str] = (
        _json_lines if args.format == "json" else lambda values: "".join(f"{v}\n" for v in values)
    )
    with client:
        return _write_ids(out, args.count, 1000, lambda take: render(client.get_many(take)))


def _coordinator(args: argparse.Namespace) -> str | None:
    """``--coordinator``, else the environment's, as ``serve`` reads it (empty: unset)."""
    from idmint.coordinate import COORDINATOR_VARIABLE

    given: str | None = args.coordinator
    return given or os.environ.get(COORDINATOR_VARIABLE, "").strip() or None


def _cmd_whois(args: argparse.Namespace, out: _Output) -> int:
    from idmint.coordinate import DEFAULT_COORDINATOR
    from idmint.coordinate.base import HISTORY_KEPT, HISTORY_KEPT_MS
    from idmint.factory import who_minted

    value = parse_id(args.id, args.scheme, node_bits=args.node_bits)
    where = _coordinator(args) or DEFAULT_COORDINATOR
    holder = who_minted(value, where)
    if holder is None:
        _print_error(
            f"no holder of the identity of {value} is recorded at {where} for "
            f"{value.to_dict()['time']} (nothing claimed it there, or its record was "
            f"pruned: it keeps {HISTORY_KEPT} earlier holders for "
            f"{HISTORY_KEPT_MS // 86_400_000} days)"
        )
        return 1
    if args.format == "json":
        out.write(json.dumps(holder.to_json()) + "\n")
        return 0
    out.write(
        f"host={holder.host} pid={holder.pid} "
        f"started={iso_ms(holder.started) if holder.started else '-'} "
        f"first={iso_ms(holder.first_ms)} last={iso_ms(holder.last_ms)} pod={holder.pod or '-'}\n"
    )
    return 0


def _cmd_claims_list(args: argparse.Namespace, out: _Output) -> int:
    from idmint.coordinate import DEFAULT_COORDINATOR, connect
    from idmint.coordinate.base import pool_view
    from idmint.coordinate.spaces import Space

    with connect(_coordinator(args) or DEFAULT_COORDINATOR) as coordinator:
        rows = coordinator.list_claims()
    if args.format == "json":
        for row in rows:
            out.write(json.dumps(row.to_json()) + "\n")
    else:
        # One pool holds several spaces (uid64 generator IDs, node IDs): each row names its own.
        out.write(
            f"{'SPACE':9} {'CLUSTER':>7} {'ID':>5}  {'HOLDER':30} {'SINCE':24} HIGH-WATER MARK\n"
        )
        for row in rows:
            since = iso_ms(row.since_ms) if row.since_ms is not None else "-"
            mark = iso_ms(row.high_water_mark_ms) if row.high_water_mark_ms is not None else "-"
            out.write(
                f"{row.space:9} {row.cluster:>7} {row.generator:>5}  {row.holder:30} {since:24} "
                f"{mark}\n"
            )
        # How full each pool listed is: what the idmint_pool_* gauges say of a claim's.
        for space_name, cluster in dict.fromkeys((row.space, row.cluster) for row in rows):
            space = Space.of(space_name)
            wanted = coordinator.options.pool
            pool = range(wanted.start, min(wanted.stop, space.size))
            held = ((row.cluster, row.generator) for row in rows if row.space == space_name)
            seen = pool_view(held, space, cluster, pool, 0)
            out.write(
                f"# {space_name} cluster {cluster}: {seen.size - seen.free} of {seen.size} "
                f"held, {seen.free} free ({seen.free * 100 // max(seen.size, 1)} %)\n"
            )
    if not rows:
        # An empty pool and a misspelt one look alike: say which pool was read, once the
        # (empty) answer is out; an answer that could not be written is the one error.
        out.flush()
        _print_line(
            f"idmint: nothing holds an identity in {coordinator.url}: no process claims "
            "there now, or the URL names another pool than your generators' (its root, "
            "table or prefix)"
        )
    return 0


def _cmd_discovery_register(args: argparse.Namespace, out: _Output) -> int:
    from idmint.discovery import Discovery

    metadata = {}
    for item in args.metadata:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise UsageError(f"--metadata wants K=V, got {quoted(item)}")
        metadata[key] = value
    with (
        Discovery(args.coordinator) as discovery,
        discovery.register(
            args.service,
            host=args.host,
            port=args.port,
            endpoints=args.endpoint,
            metadata=metadata,
        ) as registration,
    ):
        out.write(f"{registration.node}\n")
        out.flush()
        # Hold until SIGTERM/SIGINT; the claim renews itself in the background.
        while _STOP.signum is None:
            _STOP.wait(0.5)
    return 128 + (_STOP.signum or 0)


def _cmd_discovery_list(args: argparse.Namespace, out: _Output) -> int:
    from idmint.discovery import Discovery

    with Discovery(args.coordinator) as discovery:
        tree = discovery.snapshot(args.service)
    if args.format == "json":
        out.write(json.dumps(tree) + "\n")
        return 0
    for service, instances in tree["services"].items():
        out.write(f"{service}\n")
        for instance in instances:
            where = f"{instance['host'] or '-'}:{instance['port'] or '-'}"
            endpoints = ", ".join(instance["endpoints"]) or "-"
            out.write(f"  node {instance['node']:<6} {where:24} endpoints: {endpoints}\n")
    for endpoint, keys in tree["endpoints"].items():
        for key, nodes in keys.items():
            out.write(f"endpoint {endpoint} [{key}]: nodes {', '.join(map(str, nodes))}\n")
    return 0


def _cmd_schemes(args: argparse.Namespace, out: _Output) -> int:
    options = _generator_options()
    now_s = time.time()
    for name, id_type in SCHEMES.items():
        flags = " ".join(_flag(option.name) for option in options if option.scheme == name)
        years = id_type.time_left_s(now_s) / (365.25 * 86_400)
        out.write(
            f"{name:10} {id_type.summary}; time runs out in {years:.0f} years "
            f"(generate: {flags or '-'})\n"
        )
    return 0


def _cmd_completion(args: argparse.Namespace, out: _Output) -> int:
    out.write(completion_script(_build_parser(), args.shell))
    return 0


class _Place(NamedTuple):
    """What can follow a command (``""``, ``"generate"``, ``"claims list"``)."""

    commands: dict[str, str]
    """Its commands, with their help."""
    options: list[argparse.Action]
    values: list[str]
    """The values its positional arguments take (``completion``'s shells)."""


def _places(parser: argparse.ArgumentParser) -> dict[str, _Place]:
    """Every command of ``parser``, by its path, with what can follow it."""
    places: dict[str, _Place] = {}

    def walk(current: argparse.ArgumentParser, path: str) -> None:
        place = places[path] = _Place({}, [], [])
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
                for name, child in action.choices.items():
                    place.commands[name] = helps.get(name, "")
                    walk(child, f"{path} {name}".strip())
            elif action.option_strings:
                place.options.append(action)
            elif action.choices:
                place.values.extend(str(choice) for choice in action.choices)

    walk(parser, "")
    return places


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """A completion script for ``parser``'s commands, options and choices.

    Written from the parser itself, so it cannot drift from the commands: a
    bash completion function (zsh runs it through bashcompinit), or fish's
    ``complete`` lines.
    """
    places = _places(parser)
    if shell == "fish":
        return _fish_script(places)
    cases: list[str] = []
    for path, place in places.items():
        words = [*place.commands, *place.values]
        for action in place.options:
            words += action.option_strings
            if action.choices:
                choices = " ".join(str(choice) for choice in action.choices)
                cases += [
                    f'    "{path}|{option}") words="{choices}" ;;'
                    for option in action.option_strings
                ]
        cases.append(f'    "{path}|") words="{" ".join(words)}" ;;')
    body = "\n".join(cases)
    script = f"""# idmint completion for {shell} (made by `idmint completion {shell}`)
_idmint() {{
  local cur prev path="" word words
  cur="${{COMP_WORDS[COMP_CWORD]}}"
  prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
    case "$word" in -*) ;; *) [[ " $(_idmint_words "$path|") " == *" $word "* ]] \\
      && path="${{path:+$path }}$word" ;; esac
  done
  words="$(_idmint_words "$path|$prev")"
  [[ -z "$words" ]] && words="$(_idmint_words "$path|")"
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
_idmint_words() {{
  local words=""
  case "$1" in
{body}
  esac
  echo "$words"
}}
"""
    if shell == "zsh":
        script += "autoload -U +X bashcompinit && bashcompinit\n"
    return script + "complete -F _idmint idmint\n"


_FILE_METAVARS = frozenset({"F", "FILE", "DIR", "PATH"})
"""Option values that name files, which fish then offers."""


def _fish_script(places: dict[str, _Place]) -> str:
    """fish's ``complete`` lines: each under a condition on the command being completed
    (``__idmint_at 'claims list'``), which reads the command line's words as bash's does."""
    commands = "\n".join(
        f"        case {_fish_quoted(path)}\n            printf '%s\\n' {' '.join(place.commands)}"
        for path, place in places.items()
        if place.commands
    )
    lines = [
        "# idmint completion for fish (made by `idmint completion fish`): save it as",
        "# ~/.config/fish/completions/idmint.fish",
        "function __idmint_commands --description 'the commands that follow idmint $argv'",
        '    switch "$argv[1]"',
        commands,
        "    end",
        "end",
        "function __idmint_at --description 'whether idmint $argv is the command being completed'",
        "    set -l words (commandline -opc)",
        "    set -e words[1]",
        "    set -l path ''",
        "    for word in $words",
        '        if contains -- $word (__idmint_commands "$path")',
        '            set path (string trim -- "$path $word")',
        "        end",
        "    end",
        '    test "$path" = "$argv[1]"',
        "end",
        "complete -c idmint -f",
    ]
    for path, place in places.items():
        at = f'-n "__idmint_at {_fish_quoted(path)}"'
        for name, about in place.commands.items():
            lines.append(f"complete -c idmint {at} -a {name} -d {_fish_quoted(about)}")
        if place.values:
            lines.append(f"complete -c idmint {at} -a {_fish_quoted(' '.join(place.values))}")
        for action in place.options:
            flags = " ".join(
                f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
                for option in action.option_strings
            )
            if action.choices:
                takes = f" -x -a {_fish_quoted(' '.join(map(str, action.choices)))}"
            elif action.nargs == 0:
                takes = ""
            else:
                takes = " -r -F" if action.metavar in _FILE_METAVARS else " -x"
            about = action.help if action.help and action.help != argparse.SUPPRESS else ""
            lines.append(f"complete -c idmint {at} {flags}{takes} -d {_fish_quoted(about)}")
    return "\n".join(lines) + "\n"


def _fish_quoted(text: str) -> str:
    """``text`` in single quotes as fish reads them."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- entry point --------------------------------------------------------------------


def _print_error(message: str) -> None:
    _print_line(ERROR_PREFIX + message)


def _print_line(message: str) -> None:
    """One line on stderr: a message's line breaks become spaces, and input it echoes
    is shown as :func:`idmint.errors.quoted` shows it (see :func:`_shown`)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr closed too
        words = (_shown(found) for found in _WORD.finditer(message))
        sys.stderr.write(" ".join(words) + "\n")
        sys.stderr.flush()


_WORD = re.compile(
    r"""([(\[]*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")([)\],.:;]*)(?=\s|$)|\S+""", re.DOTALL
)
"""A word of a message: a string literal (with what may enclose or follow it in a
sentence), spaces and all, or anything up to a space."""


def _shown(word: re.Match[str]) -> str:
    """A word of a message as the CLI prints it, for input a layer echoed without
    :func:`idmint.errors.quoted` (a URL's parts, a path, argparse's words): a
    string literal (``repr()``'s) of more than ``QUOTED_LENGTH`` characters quoted
    again, so at most that many of it; any other word with what a terminal would
    act on escaped and cut after ``QUOTED_LENGTH`` characters."""
    before, literal, after = word.groups()
    if literal is not None:
        with contextlib.suppress(ValueError, SyntaxError, MemoryError, RecursionError):
            value = ast.literal_eval(literal)
            if isinstance(value, str):
                # One short enough stays as written: quoted() shows a byte as \xff,
                # which would read back as the character U+00FF.
                if len(value) <= QUOTED_LENGTH:
                    return printable(word.group())
                return f"{before}{quoted(value)}{after}"
    text = printable(word.group())
    if len(text) <= QUOTED_LENGTH:
        return text
    return f"{text[:QUOTED_LENGTH]} (the first {QUOTED_LENGTH} of {len(text):,} characters)"


class _WaitingNotice(logging.Handler):
    """Shows the coordinators' "waiting up to N s for ..." line as ``idmint: waiting ...``."""

    def emit(self, record: logging.LogRecord) -> None:
        _print_line(f"idmint: {record.getMessage()}")


@contextlib.contextmanager
def _waiting_notices() -> Iterator[None]:
    from idmint.waiting import waiting_log

    handler = _WaitingNotice(logging.WARNING)
    waiting_log.addHandler(handler)
    try:
        yield
    finally:
        waiting_log.removeHandler(handler)


def _show_warning(  # noqa: PLR0917 - warnings.showwarning's signature
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """idmint's own warnings as one line, as errors are; others as Python shows them."""
    if issubclass(category, IdmintWarning):
        _print_line(f"idmint: warning: {message}")
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


class _GracefulStop:
    """SIGTERM/SIGINT handling.

    A long-running command (``graceful``) is asked to stop: it finishes the
    line it is writing, flushes, releases its claims and exits with
    128 + signal. Raising from the handler instead could cut an ID in half
    mid-write. A second signal, or any signal to a short command, exits at once
    (still unwinding, so claims are released).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.graceful = False
        self._event = threading.Event()

    def __call__(self, signum: int, frame: object) -> None:
        if self.graceful and self.signum is None:
            self.signum = signum
            self._event.set()
            return
        raise SystemExit(128 + signum)

    def reset(self, graceful: bool) -> None:
        self.signum = None
        self.graceful = graceful
        self._event.clear()

    def wait(self, timeout: float) -> bool:
        """Sleep until asked to stop (or ``timeout``); True if asked."""
        return self._event.wait(timeout)


_STOP = _GracefulStop()


def exit_status(error: Exception) -> int:
    """The documented exit status for an error (see the module docstring)."""
    if isinstance(error, IdmintError):
        return error.exit_status
    if isinstance(error, OutputError):
        return EXIT_OUTPUT
    if isinstance(error, UsageError):
        return EXIT_USAGE
    return EXIT_RUNTIME


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    # Libraries (kazoo) log their retries; with no handler configured
    # Python would print each WARNING on stderr, and the CLI promises one line.
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())
    warnings.showwarning = _show_warning
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser(_command_in(arguments))
    out = _Output(sys.stdout)
    previous: dict[int, Any] = {}
    try:
        if not arguments:  # bare `idmint`: the commands, as --help lists them
            parser.print_help()
            return 0
        args, unknown = parser.parse_known_args(arguments)
        if unknown:
            # argparse names the top command; the one run says what it takes.
            _chosen(parser, args).error(f"unrecognized arguments: {quoted(' '.join(unknown))}")
        keeps_a_log = getattr(args, "keeps_a_log", False)
        if sys.stdout is None and not keeps_a_log:
            out.write("")  # fails now: nothing is claimed or fetched only to be thrown away
        _STOP.reset(getattr(args, "graceful", False))
        signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)
        for signum in signals if _STOP.graceful else signals[:1]:
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                previous[signum] = signal.signal(signum, _STOP)
        with contextlib.nullcontext() if keeps_a_log else _waiting_notices():
            status: int = args.handler(args, out)
        out.flush()  # buffered output fails here, not in the interpreter's exit
    except (UsageError, IdmintError, OutputError) as error:
        _print_error(str(error))
        if isinstance(error, OutputError):
            _discard_stdout()
        return exit_status(error)
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            out.flush()
        return 130
    except BrokenPipeError:
        # The reader went away (e.g. `idmint generate --count 0 | head`).
        _discard_stdout()
        return 0
    else:
        return status
    finally:
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError):
                signal.signal(signum, handler)


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered must not fail again at exit."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
