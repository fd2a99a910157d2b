"""ZooKeeper pools shared with java-uniqueid's claimants, in the states Java leaves them.

java-uniqueid writes ``cluster-id`` when its generator is built and makes ``queue``
and ``pool`` only at its first claim (and never ``hwm``): a pool whose Java service
has started but not yet claimed holds ``cluster-id`` alone. An idmint claimant must
lay out the rest and claim, in both of its ways to claim.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from tests.integration.claims_helpers import unique_root
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.coordinate import connect


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
