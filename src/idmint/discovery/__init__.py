"""Elastic node IDs and service discovery in ZooKeeper.

- :mod:`idmint.discovery.nodes`: node IDs claimed in groups of 256, whose
  elastic64 width follows the groups, with no duplicate while it changes.
- :mod:`idmint.discovery.registry`: service instances registered under their
  node IDs, endpoints, lookups and watches.
"""

from __future__ import annotations

from idmint.discovery.nodes import NodeIdClaim, NodeIdCoordinator, width_for_groups
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
