"""ZooKeeper pools shared with java-uniqueid's claimants, in the states Java leaves them.

java-uniqueid writes ``cluster-id`` when its generator is built and makes ``queue``
and ``pool`` only at its first claim (and never ``hwm``): a pool whose Java service
has started but not yet claimed holds ``cluster-id`` alone. An idmint claimant must
lay out the rest and claim, in both of its ways to claim. And a Java claimant that
holds the queue lock, or waits in the queue, has its turn before idmint's.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from kazoo.client import KazooClient
from tests.integration.claims_helpers import unique_root
from tests.servers import wait_until
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.coordinate import connect
from idmint.coordinate.zookeeper import LOCK_TICKET


@pytest.mark.parametrize("queue", ["true", "false"])
def test_a_pool_holding_only_cluster_id_is_laid_out_and_claimed_from(
    zk: ZooKeeperEnsemble, queue: str
) -> None:
    root = unique_root()
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=15)
    try:
        client.create(f"{root}/cluster-id", b"0", makepath=True)
        assert client.get_children(root) == ["cluster-id"]

        claims = [
            connect(f"zk://{zk.hosts}{root}?generators=0-3&queue={queue}").claim() for _ in range(2)
        ]
        try:
            held = sorted(claim.identity["generator"] for claim in claims if claim.identity)
            assert len(set(held)) == 2
            assert sorted(client.get_children(f"{root}/pool")) == [str(n) for n in held]
            assert sorted(client.get_children(f"{root}/hwm")) == [str(n) for n in held]
            assert set(client.get_children(root)) >= {"cluster-id", "pool", "hwm", "queue"}
        finally:
            for claim in claims:
                claim.close()
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("java", ["holds the lock", "waits in the queue"])
def test_a_java_claimant_in_the_queue_holds_idmint_claimants_back(
    zk: ZooKeeperEnsemble, java: str
) -> None:
    """idmint's claim takes and lets go of the queue lock in its own transaction when
    nobody queues; a Java claimant holding the lock, or waiting in the queue ahead,
    must still have its turn first."""
    root = unique_root()
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=15)
    try:
        client.create(f"{root}/cluster-id", b"0", makepath=True)
        for part in ("queue", "pool"):
            client.create(f"{root}/{part}")
        # As java-uniqueid makes them: ephemeral, empty, open.
        name = LOCK_TICKET if java == "holds the lock" else "nr-00000000000001-0000"
        client.create(f"{root}/queue/{name}", b"", ephemeral=True)

        url = f"zk://{zk.hosts}{root}?generators=0-3&claim_timeout=30"
        with ThreadPoolExecutor(1) as executor:
            claiming = executor.submit(lambda: connect(url).claim())
            wait_until(
                lambda: len(client.get_children(f"{root}/queue")) == 2,
                timeout=15,
                description="the idmint claimant's ticket behind Java's",
            )
            assert client.get_children(f"{root}/pool") == [], "claimed out of turn"
            assert not claiming.done()
            client.delete(f"{root}/queue/{name}")  # Java's turn is over
            claim = claiming.result(timeout=30)
            try:
                assert claim.identity is not None
                assert client.get_children(f"{root}/queue") == []
            finally:
                claim.close()
    finally:
        client.stop()
        client.close()
