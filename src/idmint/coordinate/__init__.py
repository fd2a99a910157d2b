"""Where generator identities come from: configured, or claimed from a shared store.

A coordinator is chosen by URL scheme (like tooz's backends); each driver's
module docstring gives its URL grammar and an options table:

==============  ==============================================  ===========================
scheme          driver                                          needs
==============  ==============================================  ===========================
``local://``    :class:`~idmint.coordinate.local.LocalCoordinator`          nothing (the default)
``static://``   :class:`~idmint.coordinate.static.StaticCoordinator`        nothing
``memory://``   :class:`~idmint.coordinate.memory.MemoryCoordinator`        nothing (tests, drills)
``zk://``       :class:`~idmint.coordinate.zookeeper.ZooKeeperCoordinator`  ``idmint[zookeeper]``
``etcd://``     :class:`~idmint.coordinate.etcd.EtcdCoordinator`            ``idmint[etcd]``
``postgresql``  :class:`~idmint.coordinate.postgres.PostgresCoordinator`    ``idmint[postgres]``
``redis://``    :class:`~idmint.coordinate.redis.RedisCoordinator`          ``idmint[redis]``
==============  ==============================================  ===========================

>>> coordinator = connect("static://?generator=5")
>>> coordinator.generator
5
"""

from __future__ import annotations

import functools
from typing import Any

from idmint.coordinate.base import (
    Claim,
    ClaimInfo,
    ClaimOptions,
    ClaimState,
    Coordinator,
    Grant,
    release_all_claims,
)
from idmint.coordinate.url import CoordinatorUrl, parse_url
from idmint.errors import ConfigurationError

__all__ = [
    "DEFAULT_COORDINATOR",
    "Claim",
    "ClaimInfo",
    "ClaimOptions",
    "ClaimState",
    "Coordinator",
    "CoordinatorUrl",
    "Grant",
    "connect",
    "driver",
    "drivers",
    "parse_url",
    "release_all_claims",
]

DEFAULT_COORDINATOR = "local://"
"""Where identities come from when nothing is said: a free one on this host."""

ENTRY_POINT_GROUP = "idmint.coordinators"
"""Drivers register under this entry-point group, by URL scheme (``zk = pkg.mod:Class``)."""

_BUILT_IN = {
    "static": "idmint.coordinate.static:StaticCoordinator",
    "local": "idmint.coordinate.local:LocalCoordinator",
    "memory": "idmint.coordinate.memory:MemoryCoordinator",
    "zk": "idmint.coordinate.zookeeper:ZooKeeperCoordinator",
    "zookeeper": "idmint.coordinate.zookeeper:ZooKeeperCoordinator",
    "etcd": "idmint.coordinate.etcd:EtcdCoordinator",
    "etcds": "idmint.coordinate.etcd:EtcdCoordinator",
    "postgresql": "idmint.coordinate.postgres:PostgresCoordinator",
    "postgres": "idmint.coordinate.postgres:PostgresCoordinator",
    "redis": "idmint.coordinate.redis:RedisCoordinator",
    "rediss": "idmint.coordinate.redis:RedisCoordinator",
}
"""The drivers idmint ships, also registered in its package metadata; this table
serves a source tree that was never installed."""


def drivers() -> dict[str, str]:
    """URL scheme -> ``module:Class`` of every driver known, built-in or installed."""
    return {**_BUILT_IN, **_installed()}


@functools.cache
def _installed() -> dict[str, str]:
    # Reading every installed package's metadata costs milliseconds: once per process.
    from importlib.metadata import entry_points

    return {entry.name: entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}


def driver(scheme: str) -> type[Coordinator]:
    """The driver class for URL scheme ``scheme`` (imported on first use)."""
    from importlib import import_module

    target = _BUILT_IN.get(scheme) or _installed().get(scheme)
    if target is None:
        known = drivers()
        raise ConfigurationError(
            f"unknown coordinator scheme {scheme!r}; expected one of "
            + ", ".join(f"{name}://" for name in sorted(known))
        )
    module_name, _, attribute = target.partition(":")
    loaded = getattr(import_module(module_name), attribute)
    if not (isinstance(loaded, type) and issubclass(loaded, Coordinator)):
        raise ConfigurationError(
            f"the {scheme}:// driver {target} is not an idmint.coordinate.Coordinator"
        )
    return loaded


def connect(url: str) -> Any:
    """The coordinator for ``url``; raises ``ConfigurationError`` for an unknown scheme."""
    parsed = parse_url(url)
    return driver(parsed.scheme)(parsed)
