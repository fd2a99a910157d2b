"""A ZooKeeper claimant that loses one message of the queue lock must not stall the queue.

Between an idmint claimant and ZooKeeper sits a proxy (tests/servers/proxy.py) that
loses one message and cuts that connection, then holds the claimant's reconnection
until the test lets it through. Meanwhile a second claimant queues up behind the
lock, following java-uniqueid's protocol directly (as a Java claimant would). Once the
first claimant's connection is back, whatever it left of the lock (a lock node its
own live session owns) must be gone within a second: the second claimant takes the
lock by then. And the first claimant's claim carries on and succeeds.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from kazoo.client import KazooClient
from tests.integration.claims_helpers import unique_root
from tests.servers import wait_until
from tests.servers.proxy import DELETE, MULTI, Fault, ZooKeeperFaultProxy
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.coordinate import Claim, connect
from idmint.coordinate.zookeeper import LOCK_TICKET, _JavaQueueLock

RECOVERY_S = 1.0
"""How soon after the connection is back the queue must move again."""


@pytest.fixture
def proxy(zk: ZooKeeperEnsemble) -> Iterator[ZooKeeperFaultProxy]:
    with ZooKeeperFaultProxy(("127.0.0.1", zk.client_port(0))) as running:
        yield running


@pytest.fixture
def direct(zk: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk.hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _lock_transaction(root: str) -> Callable[[bytes], bool]:
    """The transaction that takes the queue lock (creates it, drops the ticket)."""
    lock = f"{root}/queue/{LOCK_TICKET}".encode()
    return lambda body: lock in body and b"/pool/" not in body


def _lock_delete(root: str) -> Callable[[bytes], bool]:
    lock = f"{root}/queue/{LOCK_TICKET}".encode()
    return lambda body: lock in body


class _QueuedClaimant:
    """A claimant in the queue behind the lock, by java-uniqueid's protocol."""

    def __init__(self, client: KazooClient, root: str) -> None:
        self.client = client
        self.lock = _JavaQueueLock(client, f"{root}/queue", {"tree": None}, f"{root}/pool")
        self.acquired = threading.Event()
        self.errors: list[BaseException] = []
        self.root = root
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        before = set(self.client.get_children(f"{self.root}/queue"))
        self._thread.start()
        # Queued once its ticket is there (it then waits on the node ahead of it).
        wait_until(
            lambda: bool(set(self.client.get_children(f"{self.root}/queue")) - before),
            timeout=10,
            description="the second claimant's ticket",
        )

    def _run(self) -> None:
        try:
            self.lock.acquire(time.monotonic() + 60)
            self.acquired.set()
            self.lock.release(within_s=10)
        except BaseException as error:  # reported by the test
            self.errors.append(error)

    def join(self) -> None:
        self._thread.join(timeout=60)


def _someone_at_the_back_of_the_queue(client: KazooClient, root: str) -> None:
    """A ticket that sorts after every other: with the queue not empty, a claimant
    queues and takes the lock (with it empty, the claim's own transaction takes and
    lets go of the lock, and no lock message can be lost alone)."""
    client.create(f"{root}/queue/nr-99999999999999-9999", makepath=True)


def _lock_owner(client: KazooClient, root: str) -> int | None:
    stat = client.exists(f"{root}/queue/{LOCK_TICKET}")
    return None if stat is None else int(stat.ephemeralOwner)


def _claim_through(
    executor: ThreadPoolExecutor, proxy: ZooKeeperFaultProxy, root: str, **options: object
) -> Future[Claim]:
    query = "&".join(
        f"{name}={value}" for name, value in {"session_timeout": 10, **options}.items()
    )
    url = f"zk://{proxy.hosts}{root}?{query}"
    return executor.submit(lambda: connect(url).claim())


def _assert_queue_moves_after_reconnect(fault: Fault, queued: _QueuedClaimant) -> None:
    # The claimant's reconnection attempt waits at the proxy: letting it through
    # is the connection coming back.
    assert fault.holding.wait(15), "the claimant did not try to reconnect"
    back_at = time.monotonic()
    fault.restore()
    remaining = back_at + RECOVERY_S - time.monotonic()
    assert queued.acquired.wait(max(0.0, remaining)), (
        f"the queue did not move within {RECOVERY_S:g} s of the connection coming back"
    )
    queued.join()
    assert not queued.errors, queued.errors


@pytest.mark.parametrize("lost", ["reply", "request"])
def test_a_lost_lock_transaction_stalls_nobody(
    proxy: ZooKeeperFaultProxy, direct: KazooClient, lost: str
) -> None:
    """The transaction taking the lock loses its reply (it landed: the lock node is the
    claimant's) or is itself lost (the claimant's ticket stays ahead in the queue)."""
    root = unique_root()
    lose = proxy.lose_reply if lost == "reply" else proxy.swallow_request
    _someone_at_the_back_of_the_queue(direct, root)
    fault = lose(MULTI, _lock_transaction(root), hold=True)
    with ThreadPoolExecutor(1) as executor, contextlib.ExitStack() as stack:
        first = _claim_through(executor, proxy, root, generators="0-7")
        assert fault.fired.wait(15), "the lock transaction was never sent"
        # What the claimant's session made stays while its connection is held up.
        lock_owner = _lock_owner(direct, root)
        assert lock_owner is not None if lost == "reply" else lock_owner is None
        queued = _QueuedClaimant(direct, root)
        queued.start()

        _assert_queue_moves_after_reconnect(fault, queued)
        claim = first.result(timeout=30)
        stack.callback(claim.close)
        assert claim.identity is not None
        assert claim.identity["generator"] in range(8)
    assert _lock_owner(direct, root) is None


def test_a_swallowed_lock_delete_stalls_nobody(
    zk: ZooKeeperEnsemble, proxy: ZooKeeperFaultProxy, direct: KazooClient
) -> None:
    """The lock is deleted on its own when a look finds no free ID: that delete is lost."""
    root = unique_root()
    holder = connect(f"zk://{zk.hosts}{root}?session_timeout=3&generators=0-0").claim()
    with ThreadPoolExecutor(1) as executor, contextlib.ExitStack() as stack:
        stack.callback(holder.close)
        _someone_at_the_back_of_the_queue(direct, root)
        fault = proxy.swallow_request(DELETE, _lock_delete(root), hold=True)
        # A short session: the freed ID's hold-off (the holder's ceiling + TTL) is short.
        first = _claim_through(
            executor, proxy, root, generators="0-0", claim_timeout=60, session_timeout=3
        )
        assert fault.fired.wait(15), "the lock's delete was never sent"
        queued = _QueuedClaimant(direct, root)
        queued.start()

        _assert_queue_moves_after_reconnect(fault, queued)
        # The ID frees up: the first claimant, still waiting, gets it.
        holder.close()
        claim = first.result(timeout=60)
        stack.callback(claim.close)
        assert claim.identity == {"generator": 0, "cluster": 0}
    assert _lock_owner(direct, root) is None


def test_a_lost_reply_to_a_claim_made_with_the_queue_empty_leaves_nothing_held(
    proxy: ZooKeeperFaultProxy, direct: KazooClient
) -> None:
    """With nobody queued the claim's own transaction takes and lets go of the lock.
    Its reply lost, the claimant finds its claim by what only it wrote and keeps it:
    no lock, no ticket, and no second claim."""
    root = unique_root()
    lock = f"{root}/queue/{LOCK_TICKET}".encode()
    fault = proxy.lose_reply(MULTI, lambda body: lock in body and b"/pool/" in body)
    with ThreadPoolExecutor(1) as executor, contextlib.ExitStack() as stack:
        first = _claim_through(executor, proxy, root, generators="0-7")
        assert fault.fired.wait(15), "the claim's transaction was never sent"
        claim = first.result(timeout=30)
        stack.callback(claim.close)
        assert claim.identity is not None
        assert direct.get_children(f"{root}/queue") == []
        assert direct.get_children(f"{root}/pool") == [str(claim.identity["generator"])]
