"""Fixed identities, configured rather than claimed: the default coordinator.

URL grammar::

    static://[?generator=G&cluster=C]
    static://?node=N&node_bits=W          (elastic64)

=============  =======  ============================================
option         default  meaning
=============  =======  ============================================
``generator``  ``0``    the uid64 generator ID (0..2047)
``cluster``    ``0``    the cluster ID (0..15)
``node``       none     the elastic64 node ID
``node_bits``  ``8``    the elastic64 node-ID width (8..16)
=============  =======  ============================================

Nothing is coordinated: every process given the same static identity mints
the same IDs. Give each process its own (for instance from its ordinal in a
StatefulSet), or claim identities through ``zk://`` or ``etcd://``.
"""

from __future__ import annotations

from idmint.coordinate.base import ClaimInfo, Coordinator
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import ConfigurationError

__all__ = ["StaticCoordinator"]


class StaticCoordinator(Coordinator):
    """A configured (generator, cluster) pair; claims nothing, never fences."""

    def __init__(self, url: CoordinatorUrl) -> None:
        url.check_known(("generator", "cluster", "node", "node_bits"))
        if url.hosts:
            raise ConfigurationError(
                f"static:// takes no hosts (got {url.hosts_text()}); write static://?generator=5"
            )
        self.url = url.text
        self.generator = url.integer("generator", 0, low=0, high=2047) or 0
        self.cluster = url.integer("cluster", 0, low=0, high=15) or 0
        self.node = url.integer("node", None, low=0, high=65535)
        self.node_bits = url.integer("node_bits", None, low=8, high=16)

    def list_claims(self) -> list[ClaimInfo]:
        return [
            ClaimInfo(
                cluster=self.cluster,
                generator=self.generator,
                holder="static (configured, not claimed)",
                since_ms=None,
                high_water_mark_ms=None,
                state="static",
            )
        ]

    def close(self) -> None:
        pass
