"""The composition root: a generator from a scheme name, options and a coordinator URL.

:func:`new_generator`, the CLI and the server build generators here and
nowhere else; this is the one module that knows both the generators
(:mod:`idmint.generate`) and where identities come from
(:mod:`idmint.coordinate`, :mod:`idmint.discovery`).

Where the identity comes from, in order:

1. ``coordinator="zk://..."``, ``"etcd://..."``, ``"local://..."``: claimed, a
   free one from the pool; the generator's ``close()`` gives it back.
2. An identity in the options (``generator=5``) or ``coordinator="static://..."``:
   configured, and held on this host (a second process given the same one
   refuses with :class:`~idmint.errors.IdentityInUse`).
3. Nothing: claimed from this host's pool (``local://``), so any number of
   processes on one host never share an identity.

muid needs none (its medallion is random per generator), nor short60 with
``random=True`` (9 random bits instead of a node ID).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from idmint.coordinate import DEFAULT_COORDINATOR, driver, parse_url
from idmint.coordinate.base import Claim, Coordinator
from idmint.coordinate.static import StaticCoordinator
from idmint.errors import ConfigurationError
from idmint.generate.core import COMMON_OPTIONS, TickGenerator
from idmint.generate.generators import GENERATORS
from idmint.schemes import SCHEMES
from idmint.schemes._base import a_scheme

__all__ = [
    "IDENTITY_OPTIONS",
    "MAX_GENERATORS",
    "SCHEME_OPTIONS",
    "coordinator_for",
    "new_generator",
    "new_generators",
]

GeneratorClass = type[TickGenerator[Any]]
FactT = TypeVar("FactT")


class _PerScheme(Mapping[str, FactT]):
    """One fact of every scheme's generator class, read from the class when asked."""

    def __init__(self, fact: Callable[[GeneratorClass], FactT]) -> None:
        self._fact = fact

    def __getitem__(self, scheme: str) -> FactT:
        return self._fact(GENERATORS[scheme])

    def __iter__(self) -> Iterator[str]:
        return iter(GENERATORS)

    def __len__(self) -> int:
        return len(GENERATORS)


IDENTITY_OPTIONS: Mapping[str, tuple[str, ...]] = _PerScheme(lambda cls: cls.identity_fields)
"""The options that name a generator's identity, per scheme."""

SCHEME_OPTIONS: Mapping[str, frozenset[str]] = _PerScheme(
    lambda cls: frozenset(cls.scheme_options())
)
"""The options each scheme's generator takes (besides clock options)."""


def _generator_class(scheme: str) -> GeneratorClass:
    if scheme not in SCHEMES:
        raise ConfigurationError(f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    try:
        return GENERATORS[scheme]
    except KeyError:
        raise ConfigurationError(f"no generator mints {scheme} IDs") from None


def new_generator(
    scheme: str, coordinator: str | None = None, **options: Any
) -> TickGenerator[Any]:
    """A generator for ``scheme``; options that are ``None`` are left at their defaults.

    ``coordinator`` is a URL (see :mod:`idmint.coordinate`); with none, an
    identity given in the options is held on this host, and with neither a free
    identity is claimed on this host (``local://``). Close the generator (or use
    it in a ``with`` block) to give a claimed identity back; interpreter exit
    does it too. Options that do not apply to the scheme raise
    ``ConfigurationError`` rather than being ignored: ``--generator 5`` on muid
    is a mistake to point out.
    """
    generator_class = _generator_class(scheme)
    given = {name: value for name, value in options.items() if value is not None}
    _check_options(generator_class, given)
    refusal = generator_class.identity_free_because(given)
    if refusal is not None:
        if coordinator is not None or given.keys() & set(generator_class.identity_fields):
            raise ConfigurationError(refusal)
        return generator_class(**given)
    identity = {name: given.pop(name) for name in generator_class.identity_fields if name in given}
    if coordinator is None:
        coordinator = _unnamed_coordinator(bool(identity))
    return _claimed(generator_class, coordinator, identity, given)


def coordinator_for(scheme: str, coordinator: str | None = None, **options: Any) -> str | None:
    """The coordinator ``new_generator(scheme, coordinator, **options)`` claims from.

    The URL given, else ``static://`` for an identity in the options, else
    ``local://``; its password hidden. ``None`` where no identity is claimed
    (muid, short60 with random bits).
    """
    generator_class = _generator_class(scheme)
    given = {name: value for name, value in options.items() if value is not None}
    if generator_class.identity_free_because(given) is not None:
        return None
    if coordinator is None:
        coordinator = _unnamed_coordinator(
            bool(given.keys() & set(generator_class.identity_fields))
        )
    return parse_url(coordinator).redacted()


def _unnamed_coordinator(identity_given: bool) -> str:
    """Where an identity comes from when no coordinator is named."""
    return "static://" if identity_given else DEFAULT_COORDINATOR


MAX_GENERATORS = 64
"""The most generators one :func:`new_generators` call (one server process) holds."""


def new_generators(
    scheme: str, count: int, coordinator: str | None = None, *, offset: int = 0, **options: Any
) -> list[TickGenerator[Any]]:
    """``count`` generators for ``scheme``, each with an identity of its own.

    Claimed ones each make their own claim. A configured identity
    (``static://`` or identity options) is the first of ``count`` consecutive
    ones: generators G, G+1, ... (node IDs for elastic64 and short60), each
    held on this host. ``offset`` skips that many of them first (G+offset,
    ...), so that processes sharing one configuration (the workers of
    ``idmint serve --workers``) take distinct blocks; claimed identities ignore
    it. If one cannot be made, those made are closed.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GENERATORS:
        raise ConfigurationError(
            f"the number of generators must be 1..{MAX_GENERATORS}, got {count!r}"
        )
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigurationError(f"the identity offset must be a whole number, got {offset!r}")
    generator_class = _generator_class(scheme)
    first, block = _configured_identity(generator_class, coordinator, options)
    if block is not None and offset + count > block:
        raise ConfigurationError(
            f"this pod's block of IDs (block={block}) is too small for {offset + count} "
            "generators (workers x generators): the next pod's IDs start there. Raise "
            "the coordinator URL's block"
        )
    tuning = {
        name: value
        for name, value in options.items()
        if name not in generator_class.identity_fields
    }
    made: list[TickGenerator[Any]] = []
    try:
        for index in range(count):
            if first is None:
                made.append(new_generator(scheme, coordinator, **options))
            else:
                counted = generator_class.identity_fields[0]
                nth = {**first, counted: first[counted] + offset + index}
                made.append(new_generator(scheme, None, **tuning, **nth))
    except BaseException:
        for generator in made:
            generator.close()
        raise
    return made


def _configured_identity(
    generator_class: GeneratorClass, coordinator: str | None, options: dict[str, Any]
) -> tuple[dict[str, int] | None, int | None]:
    """The configured identity the URL and options give together (None when claimed),
    and how many consecutive identities from it are this process's (None: no limit)."""
    given = {
        name: value
        for name, value in options.items()
        if name in generator_class.identity_fields and value is not None
    }
    if generator_class.space is None or (coordinator is None and not given):
        return None, None
    parsed = parse_url(coordinator if coordinator is not None else "static://")
    if parsed.scheme != "static":
        return None, None
    static = StaticCoordinator(parsed)
    return _static_identity(generator_class, static, parsed.options, given), static.block


def _check_options(generator_class: GeneratorClass, given: dict[str, Any]) -> None:
    stray = sorted(set(given) - set(generator_class.scheme_options()) - COMMON_OPTIONS)
    if stray:
        takers = sorted(name for name, names in SCHEME_OPTIONS.items() if set(stray) <= names)
        hint = f"; it applies to {', '.join(takers)}" if takers else ""
        raise ConfigurationError(
            f"{generator_class.id_type.scheme} generators take no "
            f"{', '.join(stray).replace('_', '-')} option{hint}"
        )


def _claimed(
    generator_class: GeneratorClass, url: str, identity: dict[str, Any], given: dict[str, Any]
) -> TickGenerator[Any]:
    """A generator on an identity claimed (or held) through the coordinator at ``url``."""
    parsed = parse_url(url)
    if generator_class.follows_fleet_width and parsed.scheme in ("zk", "zookeeper"):
        return _in_node_groups(generator_class, url, identity, given)
    coordinator: Coordinator = driver(parsed.scheme)(parsed)
    try:
        claim = _claim(generator_class, coordinator, parsed.options, identity, given.get("clock"))
    except BaseException:
        coordinator.close()
        raise
    return _on_claim(generator_class, claim, given, coordinator.close)


def _claim(
    generator_class: GeneratorClass,
    coordinator: Coordinator,
    url_options: dict[str, str],
    identity: dict[str, Any],
    clock: Any,
) -> Claim:
    space = generator_class.space
    assert space is not None  # identity_free_because() answered for the others
    if isinstance(coordinator, StaticCoordinator):
        fixed = _static_identity(generator_class, coordinator, url_options, identity)
        return coordinator.claim(clock=clock, space=space, identity=fixed)
    for name in identity:
        raise ConfigurationError(
            f"{name} is claimed from {coordinator.url}, not given; use the URL's "
            "generators=LO-HI and cluster=C options to narrow the choice"
        )
    return coordinator.claim(clock=clock, pool=generator_class.identity_pool(), space=space)


def _static_identity(
    generator_class: GeneratorClass,
    coordinator: StaticCoordinator,
    url_options: dict[str, str],
    identity: dict[str, Any],
) -> dict[str, int]:
    """The configured identity: the URL's and the options', which must agree, checked
    against the scheme's ranges."""
    counted = generator_class.identity_fields[0]
    if coordinator.block is not None and counted in identity:
        raise ConfigurationError(
            f"{coordinator.url} takes the identity from the pod's index; give no {counted}"
        )
    for name, value in identity.items():
        if name in url_options and getattr(coordinator, name) != value:
            raise ConfigurationError(
                f"{name} {value} contradicts the coordinator URL's {name}="
                f"{getattr(coordinator, name)}; give it in one place"
            )
    configured = {
        name: identity.get(name, getattr(coordinator, name, None))
        for name in generator_class.identity_fields
    }
    if configured[counted] is None:
        raise ConfigurationError(
            f"{a_scheme(generator_class.id_type.scheme)} generator with a configured identity "
            f"needs its {counted} ID ({counted}=N); leave the identity out to claim a free one "
            "on this host"
        )

    def named(name: str) -> str:
        return name if name in identity or name not in url_options else f"static:// option {name}"

    return generator_class.checked_identity(
        {name: value for name, value in configured.items() if value is not None}, named
    )


def _on_claim(
    generator_class: GeneratorClass, claim: Claim, given: dict[str, Any], *closers: Any
) -> TickGenerator[Any]:
    """``generator_class`` on ``claim``; closing the generator closes the claim."""
    try:
        generator: TickGenerator[Any] = generator_class(claim=claim, **given)
    except BaseException:
        claim.close()
        for close in closers:
            close()
        raise
    generator._closers.extend([*closers, claim.close])
    return generator


def _in_node_groups(
    generator_class: GeneratorClass, url: str, identity: dict[str, Any], given: dict[str, Any]
) -> TickGenerator[Any]:
    """A generator on a node ID claimed in ZooKeeper's groups (idmint.discovery)."""
    from idmint.discovery.nodes import NodeIdCoordinator

    parsed = parse_url(url)
    for name in identity:
        raise ConfigurationError(
            f"{name} comes from the node-ID claim at {parsed.redacted()}, not from options"
        )
    coordinator = NodeIdCoordinator(parsed)
    claim = coordinator.claim(clock=given.get("clock"))
    return _on_claim(generator_class, claim, given)
