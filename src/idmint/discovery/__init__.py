"""Service discovery in ZooKeeper, on elastic node IDs.

- :mod:`idmint.discovery.registry`: service instances registered under their
  node IDs, endpoints, lookups and watches.
- The node IDs are the ZooKeeper driver's for elastic64
  (:mod:`idmint.coordinate.zookeeper_groups`): claimed in groups of 256, whose
  width follows the groups, with no duplicate while it changes.
"""

from __future__ import annotations

from idmint.coordinate.zookeeper import NodeIdCoordinator
from idmint.coordinate.zookeeper_groups import NodeIdClaim, width_for_groups
from idmint.discovery.registry import Discovery, Endpoint, Instance, Registration, Watch

__all__ = [
    "Discovery",
    "Endpoint",
    "Instance",
    "NodeIdClaim",
    "NodeIdCoordinator",
    "Registration",
    "Watch",
    "width_for_groups",
]
