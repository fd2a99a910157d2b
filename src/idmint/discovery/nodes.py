"""Where elastic node IDs in ZooKeeper groups used to live; see
:mod:`idmint.coordinate.zookeeper_groups`, the ZooKeeper driver's ``node`` space."""

from __future__ import annotations

from idmint.coordinate.zookeeper import NodeIdCoordinator
from idmint.coordinate.zookeeper_groups import (
    GROUP_COUNT,
    GROUP_SIZE,
    GROW_AT,
    RESERVED,
    SHRINK_BELOW,
    NodeIdClaim,
    node_name,
    width_for_groups,
)

__all__ = [
    "GROUP_COUNT",
    "GROUP_SIZE",
    "GROW_AT",
    "RESERVED",
    "SHRINK_BELOW",
    "NodeIdClaim",
    "NodeIdCoordinator",
    "node_name",
    "width_for_groups",
]
