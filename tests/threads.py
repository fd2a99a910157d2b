"""Threads started together, for the tests of minting from many threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["in_threads"]


def in_threads(count: int, work: Callable[[list[int], int], None]) -> list[int]:
    """``work(mine, slot)`` in ``count`` threads released together (a barrier, so that
    they contend): every value they added to their ``mine``, thread by thread."""
    results: list[list[int]] = [[] for _ in range(count)]
    start = threading.Barrier(count)

    def run(slot: int) -> None:
        start.wait()
        work(results[slot], slot)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [value for chunk in results for value in chunk]
