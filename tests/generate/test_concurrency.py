"""Threads, asyncio and os.fork() against the real clock."""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
from collections.abc import Callable
from typing import Any

import pytest
from tests.threads import in_threads

from idmint.errors import GeneratorForked
from idmint.generate import (
    Elastic64Generator,
    MuidGenerator,
    Short60Generator,
    SnowflakeGenerator,
    TickGenerator,
    Uid64Generator,
    Uuid7Generator,
)

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py

THREADS = 8
PER_THREAD = 100_000


def _mint_in_threads(generator: TickGenerator[Any], use_batch: bool) -> list[int]:
    def work(mine: list[int], slot: int) -> None:
        if use_batch:
            while len(mine) < PER_THREAD:
                take = min(1000, PER_THREAD - len(mine))
                mine.extend(i.int for i in generator.batch(take))
        else:
            mine.extend([generator.generate().int for _ in range(PER_THREAD)])

    return in_threads(THREADS, work)


@pytest.mark.parametrize(
    ("make", "use_batch"),
    [
        (lambda: Uid64Generator(3, 1), False),
        (lambda: Short60Generator(5), False),
        (lambda: Elastic64Generator(77, 8, max_ahead_ms=2), True),
    ],
    ids=["uid64-generate", "short60-generate", "elastic64-batch"],
)
def test_eight_threads_mint_100k_each_without_a_duplicate(
    make: Callable[[], TickGenerator[Any]], use_batch: bool
) -> None:
    generator = make()
    values = _mint_in_threads(generator, use_batch)
    assert len(values) == THREADS * PER_THREAD
    assert len(set(values)) == len(values)
    assert generator.issued == len(values)


@pytest.mark.parametrize(
    "make",
    [lambda: Uid64Generator(4, 2), lambda: Short60Generator(6), lambda: Elastic64Generator(9, 8)],
    ids=["uid64", "short60", "elastic64"],
)
def test_generate_and_small_batches_in_threads_never_share_an_id(
    make: Callable[[], TickGenerator[Any]],
) -> None:
    """generate() takes IDs without the lock; a batch cut off a tick it opens must not
    overlap them, nor another thread's batch."""
    generator = make()
    per_thread = 10_000
    values = [value for mine in _generate_and_batch(generator, per_thread) for value in mine]
    assert len(values) == THREADS * per_thread
    assert len(set(values)) == len(values)
    assert generator.issued == len(values)


def _generate_and_batch(generator: TickGenerator[Any], per_thread: int) -> list[list[int]]:
    """``per_thread`` IDs in each of THREADS threads, odd ones by ``generate()``, even ones
    by batches of 1 + their number: each thread's IDs as ints, in the order it got them."""
    chunks: list[list[int]] = []

    def work(mine: list[int], slot: int) -> None:
        while len(mine) < per_thread:
            if slot % 2:
                mine.append(generator.generate().int)
            else:
                mine.extend(generator.batch(min(1 + slot, per_thread - len(mine))).ints())
        chunks.append(mine)

    in_threads(THREADS, work)
    return chunks


def test_uuid7_in_threads_never_shares_a_uuid_and_each_threads_increase() -> None:
    """As above for uuid7, whose ticks end by the clock, not by use: there a thread
    that took a run's value as another retired the run makes ``issued`` one short
    (as its docstring says), so only uniqueness and order are asserted."""
    per_thread = 50_000
    chunks = _generate_and_batch(Uuid7Generator(9), per_thread)
    values = [value for mine in chunks for value in mine]
    assert len(values) == THREADS * per_thread
    assert len(set(values)) == len(values)
    assert len(chunks) == THREADS
    for mine in chunks:
        assert all(earlier < later for earlier, later in itertools.pairwise(mine))


def test_threads_share_a_muid_transaction_without_a_duplicate() -> None:
    """new() (compiled: no lock) and batch() (under the lock) from 8 threads on one
    transaction: every offset once, and ``used`` exact."""
    transaction = MuidGenerator().transaction()

    def work(mine: list[int], slot: int) -> None:
        for _ in range(2_000):
            if slot % 2:
                mine.append(transaction.new().offset)
            else:
                mine.extend(m.offset for m in transaction.batch(3))

    offsets = in_threads(THREADS, work)
    assert len(set(offsets)) == len(offsets) == transaction.used == 4 * 2_000 + 4 * 2_000 * 3
    assert set(offsets) == set(range(1, len(offsets) + 1))


def test_agenerate_yields_to_the_event_loop_while_waiting() -> None:
    generator = Uid64Generator(0, mode="time-sequential")
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def scenario() -> tuple[list[Any], int]:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        # 20 ms worth of IDs: only reachable by waiting for the clock.
        ids = await generator.abatch(64 * 20)
        seen_while_minting = ticks
        single = await generator.agenerate()
        stop.set()
        await task
        return [*ids, single], seen_while_minting

    ids, ticks_during = asyncio.run(scenario())
    assert len({i.int for i in ids}) == len(ids) == 64 * 20 + 1
    # A blocking wait would have starved the ticker until abatch returned.
    assert ticks_during > 0


def _in_child(body: Callable[[], object]) -> object:
    """Run ``body`` in a forked child; return what it returned or raised."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_fd)
        try:
            outcome: object = ("ok", body())
        except BaseException as error:  # report anything to the parent
            outcome = ("raised", type(error).__name__, str(error))
        with os.fdopen(write_fd, "wb") as pipe:
            pickle.dump(outcome, pipe)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        outcome = pickle.load(pipe)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0
    return outcome


@pytest.mark.parametrize(
    "make",
    [
        lambda: Uid64Generator(12),
        lambda: Elastic64Generator(300, 10),
        lambda: Uuid7Generator(9),
        lambda: SnowflakeGenerator(12),
        lambda: SnowflakeGenerator(12, layout="sonyflake"),
    ],
    ids=["uid64", "elastic64", "uuid7", "snowflake", "snowflake-sonyflake"],
)
def test_static_identity_refuses_in_a_forked_child(make: Callable[[], TickGenerator[Any]]) -> None:
    generator = make()
    generator.generate()
    outcome = _in_child(generator.generate)
    assert outcome[0] == "raised"
    assert outcome[1] == GeneratorForked.__name__
    assert "before os.fork()" in outcome[2]
    assert f"parent process {os.getpid()}" in outcome[2]
    # The parent carries on.
    generator.generate()


def test_fork_while_another_thread_holds_the_lock_does_not_deadlock_the_child() -> None:
    generator = MuidGenerator()
    generator._lock.acquire()  # as if a thread were mid-generate at fork time
    try:
        outcome = _in_child(lambda: generator.generate().medallion)
    finally:
        generator._lock.release()
    assert outcome[0] == "ok"


def test_muid_child_takes_a_new_medallion_and_never_mints_the_parents_ids() -> None:
    generator = MuidGenerator()
    parent_medallion = generator.medallion
    generator.batch(10)
    outcome = _in_child(lambda: [m.int for m in generator.batch(2000)])
    assert outcome[0] == "ok"
    child_values = outcome[1]
    child_medallions = {(v >> 20) & (2**52 - 1) for v in child_values}
    assert len(child_medallions) == 1
    assert child_medallions != {parent_medallion}
    assert 2**48 <= child_medallions.pop() < 2**49
    parent_values = {m.int for m in generator.batch(2000)}
    assert parent_values.isdisjoint(child_values)
    assert generator.medallion == parent_medallion


def test_muid_transaction_opened_before_fork_refuses_in_the_child() -> None:
    transaction = MuidGenerator().transaction()
    transaction.new()
    outcome = _in_child(transaction.new)
    assert outcome[:2] == ("raised", GeneratorForked.__name__)
    assert transaction.new().offset == 2  # the parent's transaction goes on


def test_short60_with_random_bits_keeps_minting_in_a_child_on_a_fresh_ms() -> None:
    generator = Short60Generator(random=True)
    parent_ids = [i.int for i in generator.batch(100)]
    outcome = _in_child(lambda: [i.int for i in generator.batch(100)])
    assert outcome[0] == "ok"
    assert set(outcome[1]).isdisjoint(parent_ids)
    assert min(v >> 18 for v in outcome[1]) > max(v >> 18 for v in parent_ids)


def test_a_forked_child_draws_uuid7_random_bits_of_its_own() -> None:
    """The buffer of random bits is the parent's: a child of fork() reads its own from
    the OS, so it never hands out the random bits its parent goes on to use."""
    parent = Uuid7Generator(21)
    parent.generate()  # the buffer is filled

    def child_randoms() -> list[int]:
        return [value.random for value in Uuid7Generator(22).batch(100)]

    outcome = _in_child(child_randoms)
    assert outcome[0] == "ok"
    mine = [value.random for value in parent.batch(100)]
    assert not set(mine) & set(outcome[1])
