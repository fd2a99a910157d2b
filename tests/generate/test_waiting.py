"""Waiting for the clock on an event loop: in turn, on one wake-up per tick, on any loop.

A generator past its cap waits for its next tick. The async callers of one
generator on one loop take turns (the others would wake with the first, find
its tick taken and go back to sleep, every tick), and the waits of a loop due
at the same moment share one wake-up of its timerfd. These tests count waits
and wake-ups on the real clock; they time nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest

import idmint.clock
from idmint.generate import Short60Generator, Uid64Generator

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py

TICK = 64  # uid64 IDs per millisecond


def _loops() -> list[Any]:
    loops: list[Any] = [asyncio.new_event_loop]
    try:
        import uvloop
    except ImportError:  # pragma: no cover - the server extra brings it
        return loops
    return [*loops, uvloop.new_event_loop]


LOOPS = _loops()
LOOP_IDS = ["asyncio", "uvloop"][: len(LOOPS)]


def _run(new_loop: Any, coroutine: Any) -> Any:
    loop = new_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


@pytest.mark.parametrize("new_loop", LOOPS, ids=LOOP_IDS)
def test_callers_of_one_generator_take_turns_waiting(new_loop: Any) -> None:
    """8 tasks each ask one uid64 generator for 10 ticks' worth at once.

    Every ID comes out once, and the generator waits about once per tick it
    hands out (plus once per task taking its turn): if every waiting task woke
    at each tick, the count would be several times the number of ticks.
    """
    generator = Uid64Generator(1, mode="time-sequential")
    tasks, ticks_each = 8, 10

    async def scenario() -> list[list[int]]:
        batches = await asyncio.gather(*(generator.abatch(TICK * ticks_each) for _ in range(tasks)))
        return [batch.ints() for batch in batches]

    batches = _run(new_loop, scenario())
    every_id = [value for batch in batches for value in batch]
    assert [len(batch) for batch in batches] == [TICK * ticks_each] * tasks
    assert len(set(every_id)) == len(every_id)
    ticks = tasks * ticks_each
    assert generator.clock_waits <= ticks + 2 * tasks, (
        f"{generator.clock_waits} waits for {ticks} ticks: the waiting tasks do not take turns"
    )


@pytest.mark.skipif(len(LOOPS) < 2, reason="uvloop comes with the server extra")
def test_waits_due_together_share_one_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four generators at their cap on one uvloop loop wait for the same ticks: one wake-up each.

    The loop's timerfd fires for the soonest deadline and releases every wait
    due by then, so four generators waiting 20 ticks each wake the loop about
    20 times, not 80.
    """
    new_loop = LOOPS[1]
    fired = 0
    fire = idmint.clock._LoopAlarm._fire

    def counting_fire(self: idmint.clock._LoopAlarm) -> None:
        nonlocal fired
        fired += 1
        fire(self)

    monkeypatch.setattr(idmint.clock._LoopAlarm, "_fire", counting_fire)
    generators = [Uid64Generator(g, mode="time-sequential") for g in range(10, 14)]
    ticks = 20

    async def past_cap(generator: Uid64Generator) -> None:
        await generator.abatch(TICK)  # a whole tick: each call after it waits for the next
        for _ in range(ticks):
            await generator.abatch(TICK)

    async def scenario() -> None:
        await asyncio.gather(*(past_cap(generator) for generator in generators))

    _run(new_loop, scenario())
    waits = sum(g.clock_waits for g in generators)
    assert waits >= len(generators) * (ticks - 1)
    assert 0 < fired <= ticks + 5, f"{fired} wake-ups for {waits} waits on {ticks} ticks"


@pytest.mark.parametrize("new_loop", LOOPS, ids=LOOP_IDS)
def test_a_cancelled_wait_gives_up_its_turn(new_loop: Any) -> None:
    """A task cancelled while it waits for the clock lets the next caller have its turn."""
    generator = Uid64Generator(2)

    async def scenario() -> int:
        await generator.abatch(TICK)
        waiting = asyncio.create_task(generator.abatch(TICK * 1000))  # about a second
        while generator.clock_waits == 0:
            await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        after = await asyncio.wait_for(generator.abatch(TICK * 3), timeout=30)
        return len(after)

    assert _run(new_loop, scenario()) == TICK * 3


def test_loops_in_two_threads_share_a_generator() -> None:
    """Two threads, each with its own event loop, mint past the cap from one generator.

    Each loop takes turns on a lock of its own (an asyncio lock belongs to one
    loop) and waits on its own timerfd; every ID comes out once.
    """
    generator = Uid64Generator(3)
    results: list[list[int]] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(slot: int) -> None:
        async def mint() -> None:
            for _ in range(30):
                results[slot] += (await generator.abatch(TICK)).ints()

        start.wait()
        try:
            _run(LOOPS[slot % len(LOOPS)], mint())
        except BaseException as error:  # reported below, with the thread's result
            errors.append(error)

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    every_id = results[0] + results[1]
    assert len(every_id) == 2 * 30 * TICK
    assert len(set(every_id)) == len(every_id)


@pytest.mark.parametrize("timerfd", [True, False], ids=["timerfd", "no-timerfd"])
@pytest.mark.parametrize("new_loop", LOOPS, ids=LOOP_IDS)
def test_on_the_loop_timers_every_tick_still_comes(
    new_loop: Any, timerfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio's loops (and any loop where there is no timerfd: not Linux) wait on
    their own timers, and no alarm is made for them; uvloop on Linux gets one.

    Either way the generator waits for its ticks, and every ID comes out once.
    """
    if not timerfd:
        monkeypatch.setattr(idmint.clock, "_timerfd", None)
        monkeypatch.setattr(idmint.clock, "_timerfd_missing", True)
    generator = Short60Generator(4)
    alarms: list[object] = []

    async def scenario() -> list[int]:
        ids: list[int] = []
        for _ in range(20):
            ids += (await generator.abatch(512)).ints()
        alarms.append(idmint.clock._ALARMS.get(asyncio.get_running_loop()))
        return ids

    ids = _run(new_loop, scenario())
    assert len(set(ids)) == len(ids) == 20 * 512
    assert generator.clock_waits > 0
    uses_alarm = timerfd and new_loop is not asyncio.new_event_loop
    assert (alarms[0] is not None) == uses_alarm


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX-only")
def test_a_forked_child_waits_on_a_timer_of_its_own() -> None:
    """A child of fork() minting past the cap on its own loop leaves the parent's
    waits alone, while the parent's loop (with its timerfd, on uvloop) keeps minting."""
    new_loop = LOOPS[-1]
    loop = new_loop()
    parent = Uid64Generator(6)

    async def mint(generator: Any, size: int, rounds: int) -> int:
        made = 0
        for _ in range(rounds):
            made += len(await generator.abatch(size))
        return made

    try:
        loop.run_until_complete(mint(parent, TICK, 3))  # the loop has its timerfd now
        pid = os.fork()
        if pid == 0:  # the child: a loop of its own, and a generator that survives fork
            status = 1
            try:
                child = Short60Generator(random=True)
                made = _run(new_loop, mint(child, 512, 50))
                status = 0 if made == 50 * 512 and child.clock_waits > 0 else 1
            finally:
                os._exit(status)
        made = loop.run_until_complete(asyncio.wait_for(mint(parent, TICK, 100), timeout=60))
        _, status = os.waitpid(pid, 0)
    finally:
        loop.close()
    assert made == 100 * TICK
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.skipif(len(LOOPS) < 2, reason="uvloop comes with the server extra")
def test_a_timer_that_cannot_be_armed_fails_the_waits_instead_of_hanging_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """If the timerfd cannot be armed again after it fired, the waits still pending
    raise the error rather than wait forever for a wake-up that never comes."""
    arm = idmint.clock._LoopAlarm._arm
    armed = 0

    def arm_once(self: idmint.clock._LoopAlarm, deadline_ns: int) -> None:
        nonlocal armed
        armed += 1
        if armed > 1:
            raise OSError(22, "timerfd_settime failed")
        arm(self, deadline_ns)

    monkeypatch.setattr(idmint.clock._LoopAlarm, "_arm", arm_once)

    async def scenario() -> list[BaseException | None]:
        clock = idmint.clock.SYSTEM_CLOCK
        now = clock.time_ns()
        waits = [clock.asleep_until_ns(now + ms * 1_000_000) for ms in (2, 40)]
        outcomes = await asyncio.wait_for(
            asyncio.gather(*waits, return_exceptions=True), timeout=30
        )
        return list(outcomes)

    first, second = _run(LOOPS[1], scenario())
    assert first is None
    assert isinstance(second, OSError)
