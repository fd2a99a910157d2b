"""What a driver's test adapter can do beyond a URL: the contract kit's optional hooks.

With a URL alone the kit claims, mints, releases and lists. Some rules can only
be checked by reaching into the store: ending a session as a timeout would,
stopping the server, reading a high-water mark. A driver's *test adapter*, a
:class:`Hooks` subclass, does what it can of those; a check that needs one it
lacks is skipped, saying which. Adapters are found by URL scheme in the
entry-point group ``idmint.contract_hooks`` (idmint's own:
:mod:`idmint.testing.adapters`)::

    [project.entry-points."idmint.contract_hooks"]
    consul = "idmint_consul.testing:ConsulHooks"
"""

from __future__ import annotations

from typing import ClassVar

from idmint.coordinate.base import Claim, Coordinator, HighWaterMark
from idmint.coordinate.registry import Registry
from idmint.coordinate.spaces import Identity, Space
from idmint.coordinate.url import CoordinatorUrl

__all__ = ["HOOKS", "HOOK_NAMES", "Hooks", "hooks_for"]

HOOK_NAMES = (
    "expire",
    "write_mark",
    "stop_server",
    "start_server",
    "remove_pool",
    "forget",
)
"""The hooks a check may need (``settle`` is a courtesy no check needs)."""


class Hooks:
    """A driver's test adapter; each method it does not override it cannot do.

    Every method takes the URL of the pool the check runs in (or a coordinator
    connected to it), so one adapter serves every pool the kit makes.
    """

    expiry_seen_at_once: ClassVar[bool] = False
    """Whether a claim learns at once that :meth:`expire` ended it (ZooKeeper's
    session event), rather than at its next renewal (a lapsed lease)."""

    hosts_are_servers: ClassVar[bool] = True
    """Whether the hosts of the driver's URLs are servers it reaches over the network
    (``memory://``'s is a pool's name)."""

    def can(self, hook: str) -> bool:
        """Whether this adapter does ``hook`` (one of :data:`HOOK_NAMES`)."""
        return getattr(type(self), hook) is not getattr(Hooks, hook)

    def expire(self, coordinator: Coordinator, claim: Claim) -> None:
        """End ``claim``'s session or lease on the server, as a timeout would."""
        raise NotImplementedError

    def read_mark(
        self, coordinator: Coordinator, space: Space, identity: Identity
    ) -> HighWaterMark | None:
        """The high-water mark the store holds for ``identity`` of ``space``, if any: by
        default the driver's own reading (:meth:`Coordinator.read_mark`)."""
        return coordinator.read_mark(Space.of(space), identity)

    def write_mark(
        self, coordinator: Coordinator, space: Space, identity: Identity, mark: HighWaterMark
    ) -> None:
        """Record ``mark`` for ``identity`` of ``space`` as a holder whose hold this process
        cannot see would (one with another view of the host, say)."""
        raise NotImplementedError

    def stop_server(self, url: CoordinatorUrl) -> None:
        """Stop the server ``url`` names (every member a claim could reach)."""
        raise NotImplementedError

    def start_server(self, url: CoordinatorUrl) -> None:
        """Start it again, same data, and return once it serves."""
        raise NotImplementedError

    def remove_pool(self, url: CoordinatorUrl) -> None:
        """Remove the pool ``url`` names, marks and all (the kit's own, once released)."""
        raise NotImplementedError

    def forget(self, url: CoordinatorUrl) -> None:
        """Make the store forget the pool ``url`` names under its holders, as a store
        that loses its data does (flushed, restarted empty, failed over to a replica
        that missed the latest writes): its leases, marks and record, nothing else.

        Only for a store that may forget; a check that needs it gives its claimants
        the ``ttl`` and ``max_ttl`` options every such store takes
        (:class:`idmint.coordinate.leases.LeaseOptions`).
        """
        raise NotImplementedError

    def settle(self, url: CoordinatorUrl) -> None:
        """Make the new pool ``url`` names as a fleet's is after its first minute.

        For a store that may forget, a new pool makes its first claims wait a
        TTL for holders it might have forgotten; a test adapter may spare the
        kit that wait (the rule itself is the driver's own tests'). Default:
        nothing, and the claims wait.
        """


HOOKS: Registry[Hooks] = Registry("idmint.contract_hooks", Hooks, "contract-test adapter")


def hooks_for(url: CoordinatorUrl) -> Hooks:
    """The adapter registered for ``url``'s scheme, or one that can do nothing."""
    adapter = HOOKS.find(url.scheme)
    return adapter() if adapter is not None else Hooks()
