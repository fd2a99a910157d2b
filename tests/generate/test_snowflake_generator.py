"""snowflake generators: layouts, ticks longer than a ms, claims of them, on both cores."""

from __future__ import annotations

import itertools

import pytest
from tests.cores import MS

from idmint import new_generator
from idmint.clock import ManualClock, OffsetClock
from idmint.coordinate import CoordinatorUrl
from idmint.coordinate.spaces import Space
from idmint.errors import ClockMovedBackwards, ConfigurationError
from idmint.generate import SnowflakeGenerator
from idmint.schemes import Snowflake
from idmint.schemes.snowflake import SONYFLAKE, TWITTER
from idmint.testing.adapters import MemoryHooks

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py

LAYOUTS = ["twitter", "sonyflake"]
SONYFLAKE_SPACE = Space.of(SONYFLAKE.space)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ids_carry_the_worker_and_strictly_increase_across_ticks(layout: str) -> None:
    clock = ManualClock()
    generator = SnowflakeGenerator(5, layout=layout, clock=clock)
    shape = generator.layout
    per_tick = 1 << shape.sequence_bits
    ids = [generator.generate() for _ in range(per_tick + 3)] + list(generator.batch(per_tick * 3))
    assert type(ids[0]) is Snowflake.of(layout)
    assert {i.worker for i in ids} == {5}
    assert [int(i) for i in ids] == sorted({int(i) for i in ids}), "not strictly increasing"
    assert [i.sequence for i in ids[: per_tick + 1]] == [*range(per_tick), 0]
    # It waited for the next tick, a whole one: 10 ms for Sonyflake's.
    assert clock.sleeps[0] == shape.tick_ms * MS
    assert ids[per_tick].timestamp_ms == ids[0].timestamp_ms + shape.tick_ms
    assert generator.ids_per_tick == per_tick


@pytest.mark.parametrize("layout", LAYOUTS)
def test_strictly_increasing_across_a_clock_step_back(layout: str) -> None:
    clock = ManualClock()
    generator = SnowflakeGenerator(1, layout=layout, clock=clock, max_clock_wait_ms=50)
    per_tick = generator.ids_per_tick
    before = list(generator.batch(per_tick + 5))  # into a second tick
    clock.step_back_ms(25)
    after = [generator.generate() for _ in range(2 * per_tick)]
    values = [int(i) for i in before + after]
    assert all(a < b for a, b in itertools.pairwise(values)), "went back"
    assert generator.clock_steps_back >= 1
    clock.step_back_ms(500)
    with pytest.raises(ClockMovedBackwards):
        generator.batch(2 * per_tick)  # past what the open tick still holds
    clock.advance_ms(500)
    assert int(generator.generate()) > values[-1]


def test_a_custom_layout_mints_what_it_declares() -> None:
    clock = ManualClock()
    generator = SnowflakeGenerator(
        3,
        layout="discord",
        tick_ms=5,
        epoch_ms=1_600_000_000_000,
        time_bits=40,
        sequence_bits=13,
        order="time-sequence-worker",
        clock=clock,
    )
    value = generator.generate()
    assert value.layout == generator.layout
    assert (value.worker, value.sequence) == (3, 0)
    assert value.timestamp_ms == clock.time_ns() // MS // 5 * 5
    assert int(value) & 1023 == 3  # the worker is the lowest part


def test_a_generator_refuses_a_layout_that_ran_out() -> None:
    with pytest.raises(ConfigurationError, match="ran out"):
        SnowflakeGenerator(0, time_bits=35, sequence_bits=18)
    with pytest.raises(ConfigurationError, match="worker ID"):
        SnowflakeGenerator()
    with pytest.raises(ConfigurationError, match="worker 1024 is out of range"):
        SnowflakeGenerator(1024)


def test_layouts_claim_in_the_pool_of_their_worker_width() -> None:
    url = CoordinatorUrl.parse("memory://snowflake-pools?ttl=2")
    with (
        new_generator("snowflake", coordinator=url) as twitter,
        new_generator("snowflake", coordinator=url, layout="discord") as discord,
        new_generator("snowflake", coordinator=url, layout="sonyflake") as sonyflake,
    ):
        # Twitter's and Discord's layouts share a pool: never one worker at once.
        assert twitter.worker != discord.worker
        assert twitter.claim is not None
        assert sonyflake.claim is not None
        assert str(twitter.claim.space) == TWITTER.space == "snowflake-w10"
        assert str(sonyflake.claim.space) == SONYFLAKE.space == "snowflake-w16"
        spaces = {row.space for row in twitter.claim.coordinator.list_claims()}
        assert spaces == {"snowflake-w10", "snowflake-w16"}


def test_a_successor_with_ten_ms_ticks_starts_after_the_predecessors_last_tick() -> None:
    """The claim's high-water mark is in ms, Sonyflake's ticks are 10 ms: the
    predecessor's last tick is spent for the successor even where the mark falls
    inside it, whatever the successor's clock says."""
    url = CoordinatorUrl.parse("memory://sonyflake-handover?ttl=2&generators=0-0")
    with new_generator("snowflake", coordinator=url, layout="sonyflake") as first:
        before = list(first.batch(2000)) + [first.generate() for _ in range(300)]
        claim = first.claim
        assert claim is not None
        coordinator = claim.coordinator
    mark = MemoryHooks().read_mark(coordinator, SONYFLAKE_SPACE, {"worker": 0})
    assert mark is not None
    newest = max(i.timestamp_ms for i in before)
    assert mark.ceiling_ms >= newest + 9, "the mark must cover the last tick to its end"

    clock = OffsetClock(-1_500)  # runs behind the mark: it must wait, not repeat
    with new_generator(
        "snowflake", coordinator=url, layout="sonyflake", clock=clock, max_clock_wait_ms=3000
    ) as second:
        after = list(second.batch(2000)) + [second.generate() for _ in range(300)]
    assert {i.worker for i in before + after} == {0}
    assert min(i.timestamp_ms for i in after) > newest
    assert len({int(i) for i in before + after}) == len(before) + len(after)


def test_a_ten_ms_tick_above_the_claims_ceiling_waits_for_the_store_to_record_it() -> None:
    """The wall clock jumps 10 minutes (the monotonic clock does not): the next
    tick starts above the mark the store holds and is opened only once the claim
    recorded a mark at or above its start."""
    url = CoordinatorUrl.parse("memory://sonyflake-ceiling?ttl=2")
    clock = OffsetClock(0)
    with new_generator("snowflake", coordinator=url, layout="sonyflake", clock=clock) as made:
        claim = made.claim
        assert claim is not None
        made.batch(500)
        identity = {"worker": made.worker}
        before = MemoryHooks().read_mark(claim.coordinator, SONYFLAKE_SPACE, identity)
        assert before is not None
        clock.offset_ns += 600 * 1_000_000_000
        value = made.generate()
        mark = MemoryHooks().read_mark(claim.coordinator, SONYFLAKE_SPACE, identity)
        assert mark is not None
        assert value.timestamp_ms > before.ceiling_ms
        assert value.timestamp_ms <= mark.ceiling_ms, "issued above the recorded mark"


def test_ticks_shorter_than_a_ms_cannot_be_claimed() -> None:
    """A claim's marks are whole ms: muid's us ticks are never claimed."""
    assert SnowflakeGenerator.tick_ns == MS
    assert SnowflakeGenerator.specialised({"layout": "sonyflake"}).tick_ns == 10 * MS


def test_the_mark_a_claim_records_covers_the_newest_tick_to_its_last_ms() -> None:
    """A claim records a generator's newest tick in ms: for 10 ms ticks, the tick's
    last ms, so that a successor floored there starts after the whole tick."""
    clock = ManualClock()
    generator = SnowflakeGenerator(4, layout="sonyflake", clock=clock)
    assert generator._highest_tick() == -1
    newest = generator.generate()
    assert generator._highest_tick() == newest.timestamp_ms + 9
    clock.advance_ms(25)
    newest = generator.generate()
    assert generator._highest_tick() == newest.timestamp_ms + 9
