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
 └── (nothing else: library bugs surface as ordinary Python exceptions)

Warnings (something works, at a cost worth knowing) derive from
:class:`IdmintWarning` (a ``UserWarning``): ``VolatileMarks``, this host's pool
keeps its high-water marks where a reboot loses them.

Messages say what was wrong and what was expected, so the CLI can print
``str(error)`` as its one line on stderr.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
    "TransactionFull",
    "VolatileMarks",
]


class IdmintError(Exception):
    """Root of every exception idmint raises on purpose."""


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

    def __init__(self, scheme: str | None, message: str, *, problem: str = "format") -> None:
        super().__init__(f"invalid {scheme} ID: {message}" if scheme else f"invalid ID: {message}")
        self.scheme = scheme
        self.problem = problem


class ConfigurationError(IdmintError, ValueError):
    """A generator, coordinator URL or option that cannot work as given."""


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


class CoordinatorRefused(CoordinatorUnavailable):
    """The coordinator answered but refused us: credentials, permissions or TLS.

    Unlike an outage, waiting does not help; the configuration must change.
    """


class PoolExhausted(CoordinationError):
    """Every identity in the pool this client may claim from is held by someone."""


class IdentityInUse(CoordinationError):
    """A configured (static) identity is already held by another process on this host.

    Two processes with one identity would mint the same IDs; the second refuses.
    """


class NoServerAnswered(IdmintError):
    """No ID server could give IDs within the client's timeout; says which were tried and why."""


class IdmintWarning(UserWarning):
    """Root of the warnings idmint gives: it works, at a cost worth knowing."""


class VolatileMarks(IdmintWarning):
    """This host's pool keeps its high-water marks where a reboot loses them."""
