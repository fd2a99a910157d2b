"""ZooKeeper's two ways to claim, at once on one pool.

``queue=true`` (the default) takes java-uniqueid's queue lock around each look at
the pool; ``queue=false`` claims without it, starting at a random free ID and
creating its claim node only if absent. Both must hold the rule of every pool
(no generator ID held twice) when claimants of both kinds stampede one pool.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from typing import Any

from kazoo.client import KazooClient
from tests.integration.claims_helpers import Backend, held_generators, make_backend, unique_root
from tests.servers.zookeeper import ZooKeeperEnsemble, expire_session

from idmint import new_generator
from idmint.coordinate.zookeeper import _JavaQueueLock

CLAIMANTS = 64
QUEUED = 4
"""Claimants (of the 64) that take the queue lock; the others claim lock-free."""


def test_64_claimants_lock_free_and_queued_fill_a_pool_of_64_once_each(
    zk: ZooKeeperEnsemble, request: Any
) -> None:
    backend: Backend = make_backend("zk", request)
    root = backend.new_root()
    # A pool exactly as large as the stampede: every ID must end up held, once.
    urls = [
        backend.url(root, ttl=10, generators=f"0-{CLAIMANTS - 1}", queue=queue)
        for queue in ["true"] * QUEUED + ["false"] * (CLAIMANTS - QUEUED)
    ]
    barrier = threading.Barrier(CLAIMANTS)
    claimed: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    with contextlib.ExitStack() as stack:

        def claim(url: str) -> None:
            barrier.wait()
            try:
                generator = new_generator("uid64", coordinator=url)
            except BaseException as error:  # reported below, with the others
                with lock:
                    errors.append(error)
                return
            with lock:
                stack.callback(generator.close)
                claimed.append(generator.generator)  # type: ignore[attr-defined]

        threads = [threading.Thread(target=claim, args=(url,)) for url in urls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a claimant hung"
        assert not errors, errors[:3]

        twice = [number for number, count in Counter(claimed).items() if count > 1]
        assert not twice, f"generator IDs held twice: {twice}"
        assert sorted(claimed) == list(range(CLAIMANTS))
        # What ZooKeeper records agrees: 64 claim nodes, one per ID.
        assert sorted(held_generators(backend, urls[0])) == list(range(CLAIMANTS))
    assert held_generators(backend, urls[0]) == {}, "every claim should be released"


def test_a_lock_whose_session_expired_leaves_the_next_holders_lock_alone(
    zk: ZooKeeperEnsemble,
) -> None:
    """The queue lock is an ephemeral node: when its holder's session expires the node
    goes, and the next claimant makes its own at the same path. The old holder's
    release (and its claim's transaction, which deletes the lock with the claim) must
    not delete that one, or two claimants would each believe they hold the lock."""
    root = unique_root()
    queue = f"{root}/queue"
    pool = f"{root}/pool"
    first = KazooClient(hosts=zk.hosts)
    second = KazooClient(hosts=zk.hosts)
    first.start(timeout=15)
    second.start(timeout=15)
    try:
        first.ensure_path(queue)
        first.ensure_path(pool)
        acls = {"tree": None}
        old = _JavaQueueLock(first, queue, acls, pool)
        old.acquire(time.monotonic() + 10)
        expire_session(first)  # the old lock node goes with the session
        new = _JavaQueueLock(second, queue, acls, pool)
        new.acquire(time.monotonic() + 10)
        owner = second.exists(new.lock_path).ephemeralOwner

        assert not old.still_ours
        old.release(within_s=10)
        # A request sent after the release on the same connection is answered after
        # it: once this returns, a delete the release sent has been applied.
        first.sync(queue)
        stat = second.exists(new.lock_path)
        assert stat is not None, "the new holder's lock was deleted"
        assert stat.ephemeralOwner == owner
        new.release(within_s=10)
        assert second.exists(new.lock_path) is None
    finally:
        for client in (first, second):
            client.stop()
            client.close()
