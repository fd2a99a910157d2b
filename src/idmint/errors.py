"""Every exception idmint raises on purpose.

One root, :class:`IdmintError`, so callers can catch everything idmint means to
raise with one clause, and a few branches that match how a caller reacts:

``IdmintError``
 ├── ``InvalidId`` (also ``ValueError``): text, bytes, int or fields that do not
 │    form an ID of the scheme asked for. The caller's input is wrong.
 ├── ``ConfigurationError`` (also ``ValueError``): a generator, coordinator URL or
 │    option that cannot work. Fix the configuration.
 │    └── ``MissingExtra`` (also ``ModuleNotFoundError``): an optional
 │         dependency is not installed; the message gives the install line.
 ├── ``GeneratorError``: the generator refuses to issue an ID because doing so
 │    could duplicate one.
 │    ├── ``ClockMovedBackwards``: the wall clock stepped back further than the
 │    │    configured tolerance.
 │    ├── ``GeneratorForked``: used in a child of ``os.fork()`` with an identity
 │    │    the parent still holds.
 │    ├── ``TransactionFull``: a muid transaction ran out of offsets.
 │    └── ``CoordinationError``: anything about claimed identities.
 │         ├── ``ClaimLost``: our claim may be held by someone else now.
 │         ├── ``CoordinatorUnavailable``: the coordinator cannot be reached.
 │         │    └── ``CoordinatorRefused``: it answered, but refused us
 │         │         (credentials, permissions, TLS): waiting will not help.
 │         ├── ``PoolExhausted``: every identity in the pool is taken.
 │         └── ``IdentityInUse``: a configured identity is held by another
 │              process on this host.
 ├── ``NoServerAnswered``: an ID client found no ID server that could give
 │    IDs in time (every server tried is named, with why).
 │    └── ``ServerRefused``: the servers answered, but refused the client's
 │         credentials (401, 403), or their TLS certificates cannot be
 │         verified: waiting will not help.
 └── (nothing else: library bugs surface as ordinary Python exceptions)

Warnings (something works, at a cost worth knowing) derive from
:class:`IdmintWarning` (a ``UserWarning``): ``VolatileMarks``, this host's pool
keeps its high-water marks where a reboot loses them.

Messages say what was wrong and what was expected, so the CLI can print
``str(error)`` as its one line on stderr; input they echo is shown by
:func:`quoted` (escaped, and at most ``QUOTED_LENGTH`` characters of it). Each
class carries the CLI's exit status for it (``exit_status``, sysexits where one fits), so every face
reports a kind of trouble the same way.

An error crosses a process boundary (pickle, or the JSON of
:func:`error_to_json` between a server's workers and their supervisor) with
its type, message and attributes: nothing is rebuilt by calling a constructor
whose arguments the other side does not have.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

__all__ = [
    "ClaimLost",
    "ClockMovedBackwards",
    "ConfigurationError",
    "CoordinationError",
    "CoordinatorRefused",
    "CoordinatorUnavailable",
    "GeneratorError",
    "GeneratorForked",
    "IdentityInUse",
    "IdmintError",
    "IdmintWarning",
    "InvalidId",
    "MissingExtra",
    "NoServerAnswered",
    "PoolExhausted",
    "ServerRefused",
    "TransactionFull",
    "VolatileMarks",
    "WrongService",
    "error_from_json",
    "error_to_json",
    "printable",
    "quoted",
    "reason_of",
]

EXIT_RUNTIME = 1
"""IDs could not be issued (a claim lost, a pool exhausted, the clock far behind)."""
EXIT_USAGE = 2
"""Bad input: an option, URL, scheme or ID (argparse's status for usage errors)."""
EXIT_UNAVAILABLE = 69
"""The coordinator or every ID server out of reach (sysexits' EX_UNAVAILABLE)."""
EXIT_REFUSED = 77
"""Credentials, permissions or TLS refused (sysexits' EX_NOPERM)."""


class IdmintError(Exception):
    """Root of every exception idmint raises on purpose."""

    exit_status: ClassVar[int] = EXIT_RUNTIME
    """The CLI's exit status for this kind of trouble."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Exception pickles as ``type(self)(*self.args)``, which fails for classes
        # whose constructor takes other arguments than the message they store.
        return (_rebuilt, (type(self), self.args, dict(vars(self))))


class InvalidId(IdmintError, ValueError):
    """The input is not an ID (or the fields of an ID) of the requested scheme.

    ``scheme`` names the scheme that rejected the input (``None`` when no scheme
    was given and none could be told from the input), ``problem`` a short
    machine-friendly reason:

    ``length``     too many or too few characters or bytes
    ``character``  a character outside the alphabet, or a non-canonical form
    ``range``      a field or value outside what the scheme holds
    ``reserved``   reserved bits set (uid64-v1)
    ``type``       not text, bytes or an int
    ``ambiguous``  the shape fits several schemes; name one
    ``node_bits``  elastic64's width is missing, or given for another scheme
    ``scheme``     no such scheme
    ``format``     the shape of no scheme
    """

    exit_status = EXIT_USAGE

    def __init__(self, scheme: str | None, message: str, *, problem: str = "format") -> None:
        super().__init__(f"invalid {scheme} ID: {message}" if scheme else f"invalid ID: {message}")
        self.scheme = scheme
        self.problem = problem


class ConfigurationError(IdmintError, ValueError):
    """A generator, coordinator URL or option that cannot work as given."""

    exit_status = EXIT_USAGE


class MissingExtra(ConfigurationError, ModuleNotFoundError):
    """A feature needs an optional dependency (an extra of idmint) that is not installed.

    ``extra`` names the extra (``zookeeper``), ``name`` the missing module
    (``kazoo``, as for any ``ModuleNotFoundError``), ``install`` the command
    that installs the extra where this interpreter looks for it.
    """

    def __init__(self, extra: str, module: str, *, needed_by: str) -> None:
        self.extra = extra
        self.install = install_line(extra)
        super().__init__(
            f"{needed_by} needs the {extra} extra ({module} is not installed); "
            f"install it with: {self.install}"
        )
        self.name = module


def install_line(extra: str) -> str:
    """The shell command that installs idmint's ``extra`` for the running interpreter.

    ``pip`` alone may belong to another environment (or be refused by the
    system's), so the command runs this interpreter's pip; an idmint installed
    from a source tree (``pip install -e .``) is installed again from that tree
    rather than from the package index, which would replace it.
    """
    import json
    import os
    import shlex
    import sys
    from importlib import metadata
    from urllib.parse import unquote, urlsplit

    def short(path: str) -> str:  # relative when below the working directory
        relative = os.path.relpath(path)
        if relative.startswith(".."):
            return path
        return relative if relative == "." or os.sep in relative else f".{os.sep}{relative}"

    target, editable = "idmint", False
    try:
        origin = json.loads(metadata.distribution("idmint").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        origin = {}
    location = urlsplit(str(origin.get("url", "")))
    if location.scheme == "file" and isinstance(origin.get("dir_info"), dict):
        target = short(unquote(location.path))
        editable = bool(origin["dir_info"].get("editable"))
    words = [
        short(sys.executable or "python3"),
        "-m",
        "pip",
        "install",
        *(["-e"] if editable else []),
    ]
    return shlex.join([*words, f"{target}[{extra}]"])


QUOTED_LENGTH = 300
"""The most characters of an input a message shows: enough to recognise it, while a
100,000-character argument or a binary file on stdin cannot flood a terminal or a log."""


def quoted(text: str) -> str:
    """``text`` as a message shows input: quoted and escaped as ``repr()`` does (a
    byte that was not UTF-8, decoded with ``surrogateescape``, as the byte:
    ``\\xff``), at most :data:`QUOTED_LENGTH` characters of it, the length said
    when it is cut."""
    shown = text[:QUOTED_LENGTH]
    quote = '"' if "'" in shown and '"' not in shown else "'"
    body = "".join("\\" + char if char in (quote, "\\") else printable(char) for char in shown)
    if len(text) <= QUOTED_LENGTH:
        return f"{quote}{body}{quote}"
    return f"{quote}{body}{quote} (the first {QUOTED_LENGTH} of {len(text):,} characters)"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on or cannot show escaped
    as ``repr()`` escapes it (``\\x1b``, ``\\n``, ``\\u200b``; a ``surrogateescape``
    byte as ``\\xff``)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escaped(char) for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape could not decode
        return f"\\x{code - 0xDC00:02x}"
    return repr(char)[1:-1]


def reason_of(error: BaseException) -> str:
    """What went wrong, for a message: OpenSSL's reason, the OS's ``strerror``, or the text.

    ``No such file or directory`` rather than ``[Errno 2] No such file or
    directory: 'x'`` (the message names the file already).
    """
    reason = getattr(error, "reason", None)
    if isinstance(reason, str) and reason:
        return reason
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


@contextlib.contextmanager
def needs_extra(extra: str, module: str, *, needed_by: str) -> Iterator[None]:
    """Turn a failed import of ``module`` (or a submodule) into :class:`MissingExtra`.

    Other import errors (a broken or too old installation) go through as they are.
    """
    try:
        yield
    except ModuleNotFoundError as error:
        if (error.name or "").partition(".")[0] != module:
            raise
        raise MissingExtra(extra, module, needed_by=needed_by) from error


class GeneratorError(IdmintError):
    """The generator refuses to issue an ID because it could be a duplicate."""


class ClockMovedBackwards(GeneratorError):
    """The wall clock went back by more than the generator tolerates waiting for."""

    def __init__(self, behind_ms: float, tolerance_ms: float, *, detail: str | None = None) -> None:
        super().__init__(
            detail
            or (
                f"the system clock moved backwards by {behind_ms:.3f} ms, more than the "
                f"{tolerance_ms:g} ms this generator waits out; issuing now could repeat "
                "an ID. Check NTP/chrony (it should slew, not step), or raise "
                "max_clock_wait_ms if longer stalls are acceptable."
            )
        )
        self.behind_ms = behind_ms
        self.tolerance_ms = tolerance_ms


class GeneratorForked(GeneratorError):
    """A generator created before ``os.fork()`` was used in the child."""


class TransactionFull(GeneratorError):
    """A muid transaction has handed out every offset it has."""


class CoordinationError(GeneratorError):
    """Something about an identity claimed through a coordinator."""


class ClaimLost(CoordinationError):
    """Our claim may now belong to another process; nothing is issued until we claim again."""


class CoordinatorUnavailable(CoordinationError):
    """The coordination service could not be reached in time."""

    exit_status = EXIT_UNAVAILABLE


class CoordinatorRefused(CoordinatorUnavailable):
    """The coordinator answered but refused us: credentials, permissions or TLS.

    Unlike an outage, waiting does not help; the configuration must change.
    """

    exit_status = EXIT_REFUSED


class WrongService(CoordinatorUnavailable):
    """Something answered at the coordinator's address, but not the service the URL names
    (``etcd://`` at a Redis port). Waiting does not help; the URL must change."""


class PoolExhausted(CoordinationError):
    """Every identity in the pool this client may claim from is held by someone."""


class IdentityInUse(CoordinationError):
    """A configured (static) identity is already held by another process on this host.

    Two processes with one identity would mint the same IDs; the second refuses.
    """


class NoServerAnswered(IdmintError):
    """No ID server could give IDs within the client's timeout; says which were tried and why."""

    exit_status = EXIT_UNAVAILABLE


class ServerRefused(NoServerAnswered):
    """The ID servers answered, but refused the client: a missing or wrong token (401,
    403), or a TLS certificate the client cannot verify (another CA, another name).

    Unlike an outage, waiting does not help; the token or the TLS settings must change.
    """

    exit_status = EXIT_REFUSED


def _rebuilt(kind: type[IdmintError], args: tuple[Any, ...], attributes: dict[str, Any]) -> Any:
    """An error of ``kind`` with these ``args`` and attributes, its constructor not called."""
    error = kind.__new__(kind)
    error.args = tuple(args)
    error.__dict__.update(attributes)
    return error


def error_to_json(error: IdmintError) -> dict[str, Any]:
    """What :func:`error_from_json` rebuilds ``error`` from, as plain JSON values.

    ``types`` lists the class and its idmint ancestors, nearest first: the
    other side takes the first it knows (a subclass defined outside this
    module arrives as its nearest ancestor here, with that one's status).
    """
    return {
        "types": [
            kind.__name__
            for kind in type(error).__mro__
            if isinstance(kind, type) and issubclass(kind, IdmintError)
        ],
        "message": str(error),
        "attributes": {
            name: value
            for name, value in vars(error).items()
            if value is None or isinstance(value, (str, int, float, bool))
        },
    }


def error_from_json(data: dict[str, Any], *, prefix: str = "") -> IdmintError:
    """The error :func:`error_to_json` described, ``prefix`` before its message."""
    known = globals()
    kind: type[IdmintError] = IdmintError
    for name in data.get("types", ()):
        found = known.get(name) if isinstance(name, str) else None
        if isinstance(found, type) and issubclass(found, IdmintError):
            kind = found
            break
    attributes = data.get("attributes")
    if not isinstance(attributes, dict):
        attributes = {}
    error: IdmintError = _rebuilt(kind, (f"{prefix}{data.get('message', '')}",), attributes)
    return error


class IdmintWarning(UserWarning):
    """Root of the warnings idmint gives: it works, at a cost worth knowing."""


class VolatileMarks(IdmintWarning):
    """This host's pool keeps its high-water marks where a reboot loses them."""
