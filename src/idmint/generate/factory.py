"""Build a generator for a scheme by name, from options as a CLI or config gives them."""

from __future__ import annotations

from typing import Any

from idmint.errors import ConfigurationError
from idmint.generate.core import TickGenerator
from idmint.generate.generators import (
    Elastic64Generator,
    MuidGenerator,
    Short60Generator,
    Uid64Generator,
    Uid64V1Generator,
)
from idmint.schemes import SCHEMES

__all__ = ["SCHEME_OPTIONS", "new_generator"]

SCHEME_OPTIONS: dict[str, frozenset[str]] = {
    "uid64": frozenset({"generator", "cluster", "mode"}),
    "uid64-v1": frozenset({"generator", "cluster", "mode"}),
    "elastic64": frozenset({"node", "node_bits", "max_ahead_ms"}),
    "muid": frozenset({"medallion", "max_ahead_us"}),
    "short60": frozenset(),
}
"""The identity options each scheme's generator takes (besides clock options)."""

_COMMON_OPTIONS = frozenset({"clock", "max_clock_wait_ms"})


def new_generator(
    scheme: str, coordinator: str | None = None, **options: Any
) -> TickGenerator[Any]:
    """A generator for ``scheme``; options that are ``None`` are left at their defaults.

    ``coordinator`` is a URL (see :mod:`idmint.coordinate`): ``static://...``
    gives a fixed identity; ``zk://...`` and ``etcd://...`` claim one, and the
    generator's ``close()`` releases it. Options that do not apply to the
    scheme raise ``ConfigurationError`` rather than being ignored:
    ``--generator 5`` on short60 is a mistake to point out.
    """
    if scheme not in SCHEMES:
        raise ConfigurationError(f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    given = {name: value for name, value in options.items() if value is not None}
    if coordinator is not None:
        return _coordinated(scheme, coordinator, given)
    allowed = SCHEME_OPTIONS[scheme] | _COMMON_OPTIONS
    stray = sorted(set(given) - allowed)
    if stray:
        takers = sorted(name for name, names in SCHEME_OPTIONS.items() if set(stray) <= names)
        hint = f"; it applies to {', '.join(takers)}" if takers else ""
        raise ConfigurationError(
            f"{scheme} generators take no {', '.join(stray).replace('_', '-')} option{hint}"
        )
    if scheme == "uid64":
        return Uid64Generator(**given)
    if scheme == "uid64-v1":
        return Uid64V1Generator(**given)
    if scheme == "elastic64":
        if "node" not in given:
            raise ConfigurationError(
                "an elastic64 generator needs its node ID (node, with node_bits for the width)"
            )
        return Elastic64Generator(**given)
    if scheme == "muid":
        return MuidGenerator(**given)
    return Short60Generator(**given)


def _coordinated(scheme: str, url: str, given: dict[str, Any]) -> TickGenerator[Any]:
    from idmint.coordinate import connect
    from idmint.coordinate.static import StaticCoordinator

    reasons = {
        "muid": "a muid's medallion is random per generator",
        "short60": "short60 has no node field",
    }
    if scheme in reasons:
        raise ConfigurationError(f"{scheme} generators take no coordinator: {reasons[scheme]}")
    if scheme == "elastic64" and not url.startswith("static:"):
        return _elastic64_claimed(url, given)
    coordinator = connect(url)
    if scheme == "elastic64":
        fixed = {"node": coordinator.node, "node_bits": coordinator.node_bits}
        return new_generator(
            scheme, **{**{k: v for k, v in fixed.items() if v is not None}, **given}
        )
    if isinstance(coordinator, StaticCoordinator):
        for name in ("generator", "cluster"):
            if name in given and given[name] != getattr(coordinator, name):
                raise ConfigurationError(
                    f"{name} {given[name]} contradicts the coordinator URL's {name}="
                    f"{getattr(coordinator, name)}; give it in one place"
                )
        given = {**given, "generator": coordinator.generator, "cluster": coordinator.cluster}
        return new_generator(scheme, **given)
    for name in ("generator", "cluster"):
        if name in given:
            raise ConfigurationError(
                f"{name} is claimed from {coordinator.url}, not given; use the URL's "
                "generators=LO-HI and cluster=C options to narrow the choice"
            )
    generator_class = Uid64Generator if scheme == "uid64" else Uid64V1Generator
    pool = range(generator_class._max_generator + 1)
    claim = coordinator.claim(clock=given.get("clock"), pool=pool)
    try:
        generator = generator_class(claim=claim, **given)
    except BaseException:
        claim.close()
        coordinator.close()
        raise
    generator._closers.extend([coordinator.close, claim.close])
    return generator


def _elastic64_claimed(url: str, given: dict[str, Any]) -> TickGenerator[Any]:
    """An elastic64 generator on a node ID claimed in ZooKeeper (idmint.discovery)."""
    from idmint.coordinate.url import parse_url
    from idmint.discovery.nodes import NodeIdCoordinator

    parsed = parse_url(url)
    if parsed.scheme not in ("zk", "zookeeper"):
        raise ConfigurationError(
            f"elastic64 node IDs are claimed in ZooKeeper; expected zk://..., got {parsed.scheme}://"
        )
    for name in ("node", "node_bits"):
        if name in given:
            raise ConfigurationError(
                f"{name} comes from the node-ID claim at {parsed.redacted()}, not from options"
            )
    coordinator = NodeIdCoordinator(parsed)
    claim = coordinator.claim(clock=given.get("clock"))
    try:
        generator = Elastic64Generator(claim=claim, **given)
    except BaseException:
        claim.close()
        raise
    generator._closers.append(claim.close)
    return generator
