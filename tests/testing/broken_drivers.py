"""Coordinator drivers broken on purpose, for the contract kit to catch.

Registered by a package of their own made on the fly (:func:`install`), the way
any driver outside idmint is: the kit knows nothing of them but their URL.

* ``sharedid://``: every claimant gets the pool's first ID, whoever holds it:
  two claimants, one ID. It has no test adapter: the kit runs what a URL allows.
* ``nofence://``: ``memory://`` whose claim believes every renewal, so a holder
  whose session the server ended (or could not reach) goes on minting: a
  holder that does not fence. It borrows memory's test adapter.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from idmint.clock import Clock
from idmint.coordinate import DRIVERS, Claim, ClaimInfo, ClaimOptions, Coordinator, CoordinatorUrl
from idmint.coordinate.memory import MemoryClaim, MemoryCoordinator
from idmint.coordinate.options import option, seconds
from idmint.coordinate.spaces import Space
from idmint.errors import CoordinationError

PACKAGE = "broken-idmint-drivers"


class SharedIdClaim(Claim):
    def _acquire(self) -> tuple[Mapping[str, int], int]:
        return {"generator": self.options.pool.start, "cluster": 0}, -1

    def _renew(self, ceiling_ms: int) -> bool:
        return True

    def _release(self, final_ceiling_ms: int | None) -> None:
        pass


@dataclass(frozen=True)
class SharedIdOptions(ClaimOptions):
    ttl_s: float = option("ttl", 2.0, "s; the claims' TTL", seconds())


class SharedIdCoordinator(Coordinator):
    options_type = SharedIdOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        self.ttl_s = self._take_url(url, SharedIdOptions).ttl_s

    def _new_claim(
        self,
        options: ClaimOptions,
        clock: Clock | None,
        space: Space,
        identity: Mapping[str, int] | None,
    ) -> Claim:
        return SharedIdClaim(options=options, ttl_s=self.ttl_s, clock=clock, description=self.url)

    def list_claims(self) -> list[ClaimInfo]:
        return []

    def close(self) -> None:
        pass


class NoFenceClaim(MemoryClaim):
    def _renew(self, ceiling_ms: int) -> bool:
        with contextlib.suppress(CoordinationError):
            super()._renew(ceiling_ms)
        return True  # whatever the server said: still ours, it believes


class NoFenceCoordinator(MemoryCoordinator):
    claim_type = NoFenceClaim


def install(directory: Path, entry_points: str, package: str = PACKAGE) -> Path:
    """A package's metadata in ``directory`` registering ``entry_points`` (the text of
    ``entry_points.txt``); put ``directory`` on the path for it to be found."""
    info = directory / f"{package.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    return directory


@contextlib.contextmanager
def installed(directory: Path, entry_points: str, package: str = PACKAGE) -> Iterator[Path]:
    """:func:`install`'s package on this process's path for the block, the registries
    reading package metadata afresh on its way in and out."""
    site = install(directory, entry_points, package)
    sys.path.insert(0, str(site))
    DRIVERS.forget()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        DRIVERS.forget()


BROKEN = """\
[idmint.coordinators]
sharedid = tests.testing.broken_drivers:SharedIdCoordinator
nofence = tests.testing.broken_drivers:NoFenceCoordinator

[idmint.contract_hooks]
nofence = idmint.testing.adapters:MemoryHooks
"""
"""The broken drivers' registrations."""
