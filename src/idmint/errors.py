"""Every exception idmint raises on purpose.

One root, :class:`IdmintError`, so callers can catch everything idmint means to
raise with one clause, and a few branches that match how a caller reacts:

``IdmintError``
 ├── ``InvalidId`` (also ``ValueError``): text, bytes, int or fields that do not
 │    form an ID of the scheme asked for. The caller's input is wrong.
 ├── ``ConfigurationError`` (also ``ValueError``): a generator, coordinator URL or
 │    option that cannot work. Fix the configuration.
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
