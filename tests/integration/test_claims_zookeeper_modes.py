"""ZooKeeper's two ways to claim, at once on one pool.

``queue=true`` (the default) takes java-uniqueid's queue lock around each look at
the pool; ``queue=false`` claims without it, starting at a random free ID and
creating its claim node only if absent. Both must hold the rule of every pool
(no generator ID held twice) when claimants of both kinds stampede one pool.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import Any

from tests.integration.claims_helpers import Backend, held_generators, make_backend
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint import new_generator

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
