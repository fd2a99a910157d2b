"""Where generator identities come from: configured, or claimed from ZooKeeper or etcd.

A coordinator is chosen by URL scheme (like tooz's backends); each driver's
module docstring gives its URL grammar and an options table:

==============  ==============================================  ===========================
scheme          driver                                          needs
==============  ==============================================  ===========================
``static://``   :class:`~idmint.coordinate.static.StaticCoordinator`        nothing
``zk://``       :class:`~idmint.coordinate.zookeeper.ZooKeeperCoordinator`  ``idmint[zookeeper]``
``etcd://``     :class:`~idmint.coordinate.etcd.EtcdCoordinator`            ``idmint[etcd]``
==============  ==============================================  ===========================

>>> coordinator = connect("static://?generator=5")
>>> coordinator.generator
5
"""

from __future__ import annotations

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
    "parse_url",
    "release_all_claims",
]

DEFAULT_COORDINATOR = "static://?generator=0&cluster=0"


def connect(url: str) -> Any:
    """The coordinator for ``url``; raises ``ConfigurationError`` for an unknown scheme."""
    parsed = parse_url(url)
    if parsed.scheme == "static":
        from idmint.coordinate.static import StaticCoordinator

        return StaticCoordinator(parsed)
    if parsed.scheme in ("zk", "zookeeper"):
        from idmint.coordinate.zookeeper import ZooKeeperCoordinator

        return ZooKeeperCoordinator(parsed)
    if parsed.scheme in ("etcd", "etcds"):
        from idmint.coordinate.etcd import EtcdCoordinator

        return EtcdCoordinator(parsed)
    raise ConfigurationError(
        f"unknown coordinator scheme {parsed.scheme!r} in {parsed.redacted()}; "
        "expected static://, zk:// or etcd://"
    )
