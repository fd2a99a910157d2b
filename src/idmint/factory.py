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

from typing import Any

from idmint.coordinate import DEFAULT_COORDINATOR, driver, parse_url
from idmint.coordinate.base import Claim, Coordinator
from idmint.coordinate.static import StaticCoordinator
from idmint.errors import ConfigurationError
from idmint.generate.core import TickGenerator, check_identity_field
from idmint.generate.generators import (
    Elastic64Generator,
    MuidGenerator,
    Short60Generator,
    Uid64Generator,
    Uid64V1Generator,
)
from idmint.schemes import SCHEMES
from idmint.schemes import elastic64 as e64
from idmint.schemes import short60 as s60
from idmint.schemes import uid64 as u64

__all__ = [
    "IDENTITY_OPTIONS",
    "MAX_GENERATORS",
    "SCHEME_OPTIONS",
    "coordinator_for",
    "new_generator",
    "new_generators",
]

IDENTITY_OPTIONS: dict[str, tuple[str, ...]] = {
    "uid64": ("generator", "cluster"),
    "uid64-v1": ("generator", "cluster"),
    "elastic64": ("node", "node_bits"),
    "muid": (),
    "short60": ("node",),
}
"""The options that name a generator's identity, per scheme."""

SCHEME_OPTIONS: dict[str, frozenset[str]] = {
    "uid64": frozenset({"generator", "cluster", "mode"}),
    "uid64-v1": frozenset({"generator", "cluster", "mode"}),
    "elastic64": frozenset({"node", "node_bits", "max_ahead_ms"}),
    "muid": frozenset({"medallion", "max_ahead_us"}),
    "short60": frozenset({"node", "random"}),
}
"""The options each scheme's generator takes (besides clock options)."""

_COMMON_OPTIONS = frozenset({"clock", "max_clock_wait_ms"})

_SPACES = {"uid64": "generator", "uid64-v1": "generator", "elastic64": "node", "short60": "short60"}
"""Which pool of identities each claimable scheme draws from (see Coordinator.claim)."""

_POOLS = {
    "uid64": range(u64.MAX_GENERATOR + 1),
    "uid64-v1": range(u64.MAX_GENERATOR_V1 + 1),
    "elastic64": range(1 << e64.MIN_NODE_BITS),
    "short60": range(s60.MAX_NODE + 1),
}

_CLASSES: dict[str, Any] = {
    "uid64": Uid64Generator,
    "uid64-v1": Uid64V1Generator,
    "elastic64": Elastic64Generator,
    "short60": Short60Generator,
}


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
    if scheme not in SCHEMES:
        raise ConfigurationError(f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    given = {name: value for name, value in options.items() if value is not None}
    _check_options(scheme, given)
    if scheme == "muid":
        if coordinator is not None:
            raise ConfigurationError(
                "muid generators take no coordinator: a muid's medallion is random per generator"
            )
        return MuidGenerator(**given)
    if given.pop("random", False):
        if coordinator is not None or "node" in given:
            raise ConfigurationError(
                "a short60 generator with random bits takes no node and no coordinator: "
                "the bits that would hold the node are random"
            )
        return Short60Generator(random=True, **given)
    identity = {name: given.pop(name) for name in IDENTITY_OPTIONS[scheme] if name in given}
    if coordinator is None:
        coordinator = _unnamed_coordinator(bool(identity))
    return _claimed(scheme, coordinator, identity, given)


def coordinator_for(scheme: str, coordinator: str | None = None, **options: Any) -> str | None:
    """The coordinator ``new_generator(scheme, coordinator, **options)`` claims from.

    The URL given, else ``static://`` for an identity in the options, else
    ``local://``; its password hidden. ``None`` where no identity is claimed
    (muid, short60 with random bits).
    """
    if scheme == "muid" or options.get("random"):
        return None
    if coordinator is None:
        named = any(options.get(name) is not None for name in IDENTITY_OPTIONS.get(scheme, ()))
        coordinator = _unnamed_coordinator(named)
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
    first, block = _configured_identity(scheme, coordinator, options)
    if block is not None and offset + count > block:
        raise ConfigurationError(
            f"this pod's block of IDs (block={block}) is too small for {offset + count} "
            "generators (workers x generators): the next pod's IDs start there. Raise "
            "the coordinator URL's block"
        )
    tuning = {
        name: value for name, value in options.items() if name not in IDENTITY_OPTIONS[scheme]
    }
    made: list[TickGenerator[Any]] = []
    try:
        for index in range(count):
            if first is None:
                made.append(new_generator(scheme, coordinator, **options))
            else:
                counted = "generator" if "generator" in first else "node"
                nth = {**first, counted: first[counted] + offset + index}
                made.append(new_generator(scheme, None, **tuning, **nth))
    except BaseException:
        for generator in made:
            generator.close()
        raise
    return made


def _configured_identity(
    scheme: str, coordinator: str | None, options: dict[str, Any]
) -> tuple[dict[str, int] | None, int | None]:
    """The configured identity the URL and options give together (None when claimed),
    and how many consecutive identities from it are this process's (None: no limit)."""
    given = {
        name: value
        for name, value in options.items()
        if name in IDENTITY_OPTIONS[scheme] and value is not None
    }
    if scheme == "muid" or (coordinator is None and not given):
        return None, None
    parsed = parse_url(coordinator if coordinator is not None else "static://")
    if parsed.scheme != "static":
        return None, None
    static = StaticCoordinator(parsed)
    return _static_identity(scheme, static, parsed.options, given), static.block


def _check_options(scheme: str, given: dict[str, Any]) -> None:
    stray = sorted(set(given) - SCHEME_OPTIONS[scheme] - _COMMON_OPTIONS)
    if stray:
        takers = sorted(name for name, names in SCHEME_OPTIONS.items() if set(stray) <= names)
        hint = f"; it applies to {', '.join(takers)}" if takers else ""
        raise ConfigurationError(
            f"{scheme} generators take no {', '.join(stray).replace('_', '-')} option{hint}"
        )


def _claimed(
    scheme: str, url: str, identity: dict[str, Any], given: dict[str, Any]
) -> TickGenerator[Any]:
    """A generator on an identity claimed (or held) through the coordinator at ``url``."""
    parsed = parse_url(url)
    if scheme == "elastic64" and parsed.scheme in ("zk", "zookeeper"):
        return _elastic64_in_groups(url, identity, given)
    coordinator: Coordinator = driver(parsed.scheme)(parsed)
    try:
        claim = _claim(scheme, coordinator, parsed.options, identity, given.get("clock"))
    except BaseException:
        coordinator.close()
        raise
    return _on_claim(_CLASSES[scheme], claim, given, coordinator.close)


def _claim(
    scheme: str,
    coordinator: Coordinator,
    url_options: dict[str, str],
    identity: dict[str, Any],
    clock: Any,
) -> Claim:
    space = _SPACES[scheme]
    if isinstance(coordinator, StaticCoordinator):
        fixed = _static_identity(scheme, coordinator, url_options, identity)
        return coordinator.claim(clock=clock, space=space, identity=fixed)
    for name in identity:
        raise ConfigurationError(
            f"{name} is claimed from {coordinator.url}, not given; use the URL's "
            "generators=LO-HI and cluster=C options to narrow the choice"
        )
    return coordinator.claim(clock=clock, pool=_POOLS[scheme], space=space)


def _static_identity(
    scheme: str,
    coordinator: StaticCoordinator,
    url_options: dict[str, str],
    identity: dict[str, Any],
) -> dict[str, int]:
    """The configured identity: the URL's and the options', which must agree."""
    if coordinator.block is not None and identity.keys() & {"generator", "node"}:
        raise ConfigurationError(
            f"{coordinator.url} takes the identity from the pod's index; give no "
            f"{' or '.join(sorted(identity.keys() & {'generator', 'node'}))}"
        )
    for name, value in identity.items():
        if name in url_options and getattr(coordinator, name) != value:
            raise ConfigurationError(
                f"{name} {value} contradicts the coordinator URL's {name}="
                f"{getattr(coordinator, name)}; give it in one place"
            )
    space = _SPACES[scheme]
    if space == "generator":
        generator = identity.get("generator", coordinator.generator)
        cluster = identity.get("cluster", coordinator.cluster)
        check_identity_field("generator", generator, 0, _POOLS[scheme].stop - 1)
        check_identity_field("cluster", cluster, 0, u64.MAX_CLUSTER)
        return {"generator": generator, "cluster": cluster}
    node = identity.get("node", coordinator.node)
    if node is None:
        what = "an elastic64" if scheme == "elastic64" else "a short60"
        raise ConfigurationError(
            f"{what} generator with a configured identity needs its node ID (node=N); "
            "leave the identity out to claim a free one on this host"
        )
    if space == "short60":
        return {"node": check_identity_field("node", node, 0, s60.MAX_NODE)}
    width = identity.get("node_bits", coordinator.node_bits or e64.MIN_NODE_BITS)
    check_identity_field("node_bits", width, e64.MIN_NODE_BITS, e64.MAX_NODE_BITS)
    check_identity_field("node", node, 0, (1 << width) - 1)
    return {"node": node, "node_bits": width}


def _on_claim(
    generator_class: Any, claim: Claim, given: dict[str, Any], *closers: Any
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


def _elastic64_in_groups(
    url: str, identity: dict[str, Any], given: dict[str, Any]
) -> TickGenerator[Any]:
    """An elastic64 generator on a node ID claimed in ZooKeeper's groups (idmint.discovery)."""
    from idmint.discovery.nodes import NodeIdCoordinator

    parsed = parse_url(url)
    for name in identity:
        raise ConfigurationError(
            f"{name} comes from the node-ID claim at {parsed.redacted()}, not from options"
        )
    coordinator = NodeIdCoordinator(parsed)
    claim = coordinator.claim(clock=given.get("clock"))
    return _on_claim(Elastic64Generator, claim, given)
