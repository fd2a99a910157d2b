"""Self-fencing through a cluster's member stopping: minting rides it out, deadlines kept.

See the module docstring of :mod:`idmint.coordinate.base` for the design: a claim
issues nothing past its deadline (last round trip sent + TTL - margin). The rules
every driver keeps (an outage fences and resumes, an expired session makes a new
claim above the high-water mark, a successor on a slow clock starts above it) are
checks of the contract kit, :mod:`idmint.testing`, run on every backend by
``test_claims_kit.py``; what needs a three-member cluster is here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.integration.claims_helpers import (
    Backend,
    Minter,
    RenewalWatch,
    minting,
    wait_for,
)
from tests.servers.etcd import EtcdCluster
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint import (
    Uid64,
    new_generator,
)


def _assert_unique(values: list[int]) -> None:
    duplicates = len(values) - len(set(values))
    assert duplicates == 0, f"{duplicates} IDs issued twice"


# -- one member of three stops ------------------------------------------------------------------


def _connected_member(cluster: ZooKeeperEnsemble, claim: Any) -> int | None:
    """The member the claim's kazoo client talks to (kazoo internals; None if unknown)."""
    try:
        port = claim.client._connection._socket.getpeername()[1]
    except (AttributeError, OSError):
        return None
    return next((i for i in range(cluster.size) if cluster.client_port(i) == port), None)


def _minting_survives_member_stop(
    backend: Backend,
    cluster: ZooKeeperEnsemble | EtcdCluster,
    victim_of: Callable[[Any], int | None],
    exit_stack: contextlib.ExitStack,
) -> None:
    # A session long enough to ride out a leader election on a loaded machine.
    url = backend.url(ttl=5)
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    claimed = generator.generator
    minter: Minter
    watch: RenewalWatch
    with minting(generator) as (minter, watch):
        minter.wait_for_count(3_000, timeout=10)
        victim = victim_of(generator)
        assert victim is not None
        with cluster.member_stopped(victim):
            stopped_at = time.monotonic()
            minted_at_stop = minter.count
            wait_for(
                lambda: (
                    watch.renewals_after(stopped_at) >= 2 and minter.count > minted_at_stop + 5_000
                ),
                timeout=30,
                what="renewals and minting to carry on with a member stopped",
            )
        minter.wait_for_count(minter.count + 2_000, timeout=10)

    assert not minter.errors, [str(e.error) for e in minter.errors[:3]]
    watch.check_deadline(minter)
    _assert_unique(minter.values)
    assert {Uid64(v).generator for v in minter.values} == {claimed}


@pytest.mark.parametrize("role", ["leader", "connected"])
def test_zookeeper_ensemble_member_stopped_mid_run(
    zk3: ZooKeeperEnsemble, role: str, exit_stack: contextlib.ExitStack
) -> None:
    def victim(generator: Any) -> int | None:
        if role == "leader":
            return zk3.leader()
        return _connected_member(zk3, generator.claim)

    _minting_survives_member_stop(Backend("zk", zk3), zk3, victim, exit_stack)


@pytest.mark.parametrize("role", ["leader", "first"])
def test_etcd_cluster_member_stopped_mid_run(
    etcd3: EtcdCluster, role: str, exit_stack: contextlib.ExitStack
) -> None:
    def victim(generator: Any) -> int | None:
        return etcd3.leader() if role == "leader" else 0

    _minting_survives_member_stop(Backend("etcd", etcd3), etcd3, victim, exit_stack)
