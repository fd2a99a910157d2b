"""Where generator identities come from: configured, or claimed from a shared store.

A coordinator is chosen by URL scheme, from the drivers registered in package
metadata (:mod:`idmint.coordinate.registry`); each driver's module docstring
gives its URL grammar and an options table. idmint's own:

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
``mysql://``    :class:`~idmint.coordinate.mysql.MysqlCoordinator`          ``idmint[mysql]``
==============  ==============================================  ===========================

>>> coordinator = connect("static://?generator=5")
>>> coordinator.configured_identity()
{'generator': 5, 'cluster': 0}
"""

from __future__ import annotations

from idmint.coordinate.base import (
    Claim,
    ClaimInfo,
    ClaimOptions,
    ClaimState,
    Coordinator,
    DriverClaim,
    Grant,
    HighWaterMark,
    release_all_claims,
)
from idmint.coordinate.registry import Registry
from idmint.coordinate.url import CoordinatorUrl, parse_url
from idmint.errors import ConfigurationError

__all__ = [
    "COORDINATOR_VARIABLE",
    "DEFAULT_COORDINATOR",
    "DRIVERS",
    "Claim",
    "ClaimInfo",
    "ClaimOptions",
    "ClaimState",
    "Coordinator",
    "CoordinatorUrl",
    "DriverClaim",
    "Grant",
    "HighWaterMark",
    "connect",
    "driver",
    "drivers",
    "parse_url",
    "release_all_claims",
]

DEFAULT_COORDINATOR = "local://"
"""Where identities come from when nothing is said: a free one on this host."""

COORDINATOR_VARIABLE = "IDMINT_COORDINATOR"
"""The environment variable the CLI's commands read a coordinator URL from when no
``--coordinator`` is given (``idmint serve``'s setting of that name is this one)."""

ENTRY_POINT_GROUP = "idmint.coordinators"
"""Drivers register under this entry-point group, by URL scheme (``zk = pkg.mod:Class``);
idmint's own are registered there too (pyproject.toml), and nowhere else."""

DRIVERS: Registry[Coordinator] = Registry(ENTRY_POINT_GROUP, Coordinator, "coordinator driver")


def drivers() -> dict[str, str]:
    """URL scheme -> ``module:Class`` of every installed driver (two: both, joined)."""
    return {scheme: " and ".join(found) for scheme, found in DRIVERS.registered().items()}


def driver(scheme: str) -> type[Coordinator]:
    """The driver class for URL scheme ``scheme`` (imported on first use)."""
    found = DRIVERS.find(scheme)
    if found is None:
        raise ConfigurationError(
            f"unknown coordinator scheme {scheme!r}; expected one of "
            + ", ".join(f"{name}://" for name in DRIVERS.listed())
        )
    return found


def connect(url: str | CoordinatorUrl) -> Coordinator:
    """The coordinator for ``url``; raises ``ConfigurationError`` for an unknown scheme."""
    parsed = CoordinatorUrl.parse(url)
    return driver(parsed.scheme)(parsed)
