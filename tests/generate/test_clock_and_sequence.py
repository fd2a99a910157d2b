"""The core's promises, driven by a clock we control: waits, steps back, borrowing."""

from __future__ import annotations

import pytest
from tests.cores import MS

from idmint.errors import ClockMovedBackwards, ConfigurationError, GeneratorError
from idmint.generate import (
    Elastic64Generator,
    ManualClock,
    MuidGenerator,
    Short60Generator,
    Uid64Generator,
)
from idmint.schemes import Mode

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py


def test_sequence_exhausted_waits_exactly_until_the_next_ms() -> None:
    clock = ManualClock()
    clock.advance_ns(400_000)  # 0.4 ms into a millisecond
    generator = Uid64Generator(0, clock=clock, mode="time-sequential")
    first_ms = [generator.generate() for _ in range(64)]
    assert clock.sleeps == []
    following = generator.generate()
    # It slept precisely to the start of the next ms: 0.6 ms, not a whole one.
    assert clock.sleeps == [600_000]
    assert {i.timestamp_ms for i in first_ms} == {first_ms[0].timestamp_ms}
    assert [i.sequence for i in first_ms] == list(range(64))
    assert following.timestamp_ms == first_ms[0].timestamp_ms + 1
    assert following.sequence == 0
    assert generator.clock_waits == 1


def test_batch_spans_ms_and_stays_unique_and_ordered() -> None:
    clock = ManualClock()
    generator = Uid64Generator(7, 2, Mode.TIME_SEQUENTIAL, clock=clock)
    ids = generator.batch(64 * 5 + 3)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert [i.sequence for i in ids[:66]] == [*range(64), 0, 1]
    assert {(i.generator, i.cluster) for i in ids} == {(7, 2)}
    assert generator.issued == len(ids)
    assert clock.sleeps == [MS] * 5


def test_small_step_back_waits_and_never_reuses_a_pair() -> None:
    clock = ManualClock()
    generator = Uid64Generator(0, clock=clock, mode="time-sequential", max_clock_wait_ms=10)
    before = generator.batch(100)  # two ms worth
    newest = max(i.timestamp_ms for i in before)
    clock.step_back_ms(5)
    after = generator.batch(200)
    pairs = [(i.timestamp_ms, i.sequence) for i in before + after]
    assert len(set(pairs)) == len(pairs)
    # Nothing after the step reuses a ms already used up.
    assert min(i.timestamp_ms for i in after) >= newest
    assert generator.clock_steps_back >= 1
    assert sum(clock.sleeps) >= 5 * MS  # it waited the step out


@pytest.mark.parametrize(
    "make",
    [
        lambda c: Uid64Generator(0, clock=c, max_clock_wait_ms=10),
        lambda c: Short60Generator(0, clock=c, max_clock_wait_ms=10),
        lambda c: Elastic64Generator(9, 8, clock=c, max_clock_wait_ms=10, max_ahead_ms=0),
        lambda c: MuidGenerator(clock=c, max_clock_wait_ms=10, max_ahead_us=0),
    ],
    ids=["uid64", "short60", "elastic64", "muid"],
)
def test_large_step_back_raises_and_recovers_when_the_clock_catches_up(make: object) -> None:
    clock = ManualClock()
    generator = make(clock)  # type: ignore[operator]
    issued = generator.batch(600)
    clock.step_back_ms(50)
    with pytest.raises(ClockMovedBackwards, match=r"moved backwards by 5\d\.\d+ ms"):
        generator.batch(600)
    # Still refusing while the clock is behind, however often we ask.
    with pytest.raises(ClockMovedBackwards):
        generator.generate()
    clock.advance_ms(50)
    later = generator.batch(600)
    assert len(set(issued) | set(later)) == len(issued) + len(later)


def test_error_message_says_what_to_check() -> None:
    clock = ManualClock()
    generator = Uid64Generator(0, clock=clock)
    generator.batch(65)
    clock.step_back_ms(1000)
    with pytest.raises(ClockMovedBackwards) as caught:
        generator.batch(1)
    assert "NTP" in str(caught.value)
    assert caught.value.behind_ms > 999


def test_step_back_is_caught_by_the_next_tick_boundary_at_the_latest() -> None:
    clock = ManualClock()
    generator = Uid64Generator(0, clock=clock, mode="time-sequential")
    first = generator.generate()
    clock.step_back_ms(1000)
    # The hot path may finish the current tick: those 63 pairs were never used.
    rest = [generator.generate() for _ in range(63)]
    assert {(i.timestamp_ms, i.sequence) for i in rest} == {
        (first.timestamp_ms, n) for n in range(1, 64)
    }
    with pytest.raises(ClockMovedBackwards):
        generator.generate()


def test_elastic64_borrows_ahead_up_to_the_bound_then_waits() -> None:
    clock = ManualClock()
    generator = Elastic64Generator(5, 12, clock=clock, max_ahead_ms=3)  # 16 per ms
    start_ms = clock.time_ns() // MS
    ids = generator.batch(16 * 4)  # this ms plus 3 borrowed
    assert clock.sleeps == []
    assert max(i.timestamp_ms for i in ids) == start_ms + 3
    more = generator.batch(16)
    assert clock.sleeps == [MS]  # waited until the clock was 3 ms behind again
    assert min(i.timestamp_ms for i in more) == start_ms + 4
    everything = ids + more
    assert len(set(everything)) == len(everything)
    assert {(i.node, i.node_bits) for i in everything} == {(5, 12)}


def test_elastic64_width_change_moves_to_a_later_ms() -> None:
    clock = ManualClock()
    generator = Elastic64Generator(3, 8, clock=clock, max_ahead_ms=0)
    narrow = generator.batch(10)
    generator.set_node(3, 9)
    wide = generator.batch(10)
    assert min(i.timestamp_ms for i in wide) > max(i.timestamp_ms for i in narrow)
    assert {i.node_bits for i in wide} == {9}
    assert generator.ids_per_tick == 128
    ints = [i.int for i in narrow + wide]
    assert len(set(ints)) == len(ints)


def test_elastic64_node_must_fit_the_width() -> None:
    with pytest.raises(ConfigurationError, match=r"node 256 is out of range; expected 0\.\.255"):
        Elastic64Generator(256, 8)
    with pytest.raises(ConfigurationError, match="node_bits"):
        Elastic64Generator(1, 17)


def test_muid_time_strictly_increases_per_medallion() -> None:
    clock = ManualClock()
    generator = MuidGenerator(medallion=2**48 + 5, clock=clock, max_ahead_us=100)
    ids = [generator.generate() for _ in range(150)]
    stamps = [i.timestamp_us for i in ids]
    assert stamps == sorted(set(stamps))  # strictly increasing
    assert {i.medallion for i in ids} == {2**48 + 5}
    assert {i.offset for i in ids} == {0}
    # 150 in one frozen microsecond: 100 borrowed, then it had to wait.
    assert clock.sleeps


def test_muid_default_medallion_is_random_in_the_v1_range() -> None:
    medallions = {MuidGenerator().medallion for _ in range(20)}
    assert len(medallions) == 20
    assert all(2**48 <= m < 2**49 for m in medallions)


def test_muid_transaction_offsets() -> None:
    generator = MuidGenerator(medallion=2**48)
    transaction = generator.transaction()
    assert transaction.id.offset == 0
    objects = [transaction.new() for _ in range(3)] + transaction.batch(4)
    assert [o.offset for o in objects] == list(range(1, 8))
    assert {(o.timestamp_us, o.medallion) for o in objects} == {
        (transaction.id.timestamp_us, transaction.id.medallion)
    }
    assert transaction.used == 7
    other = generator.transaction()
    assert other.id > transaction.id
    assert all(o < other.id for o in objects)  # a later transaction sorts after


def test_muid_transaction_full_is_a_clear_error() -> None:
    from idmint.errors import TransactionFull

    transaction = MuidGenerator().transaction()
    everything = transaction.batch(2**20 - 2)
    last = transaction.new()
    assert last.offset == 2**20 - 1
    assert len(everything) == 2**20 - 2
    with pytest.raises(TransactionFull, match="Start a new transaction"):
        transaction.new()
    with pytest.raises(TransactionFull):
        transaction.batch(1)


@pytest.mark.parametrize("random", [False, True], ids=["node", "random"])
def test_short60_sequence_unique_within_a_ms_and_capped_at_512(random: bool) -> None:
    clock = ManualClock()
    generator = Short60Generator(None if random else 5, random=random, clock=clock)
    first = generator.batch(512)
    assert clock.sleeps == []
    assert len({i.sequence for i in first}) == 512
    assert len({i.timestamp_ms for i in first}) == 1
    generator.generate()
    assert clock.sleeps == [MS]


def test_short60_random_bits_start_each_ms_at_a_random_sequence() -> None:
    clock = ManualClock()
    generator = Short60Generator(random=True, clock=clock)
    starts = set()
    for _ in range(30):
        starts.add(generator.generate().sequence)
        clock.advance_ms(1)
    assert len(starts) > 10  # 30 draws from 512 values


def test_clock_outside_the_scheme_range_is_refused() -> None:
    before_2018 = ManualClock(start_ns=1_500_000_000_000 * MS)
    with pytest.raises(GeneratorError, match="outside what short60 IDs can hold"):
        Short60Generator(0, clock=before_2018).generate()


def test_invalid_generator_options() -> None:
    with pytest.raises(ConfigurationError, match=r"generator 2048 is out of range"):
        Uid64Generator(2048)
    with pytest.raises(ConfigurationError, match="cluster"):
        Uid64Generator(0, 16)
    with pytest.raises(ConfigurationError, match="max_clock_wait_ms"):
        Uid64Generator(0, max_clock_wait_ms=-1)
    with pytest.raises(ConfigurationError, match="count"):
        Uid64Generator(0).batch(-1)
    from idmint.generate import Uid64V1Generator

    with pytest.raises(ConfigurationError, match="always in spread mode"):
        Uid64V1Generator(1, mode="time-sequential")
    with pytest.raises(ConfigurationError, match="generator 64 is out of range"):
        Uid64V1Generator(64)


def test_exhausted_ticks_count_each_tick_that_made_callers_wait_once() -> None:
    clock = ManualClock()
    generator = Uid64Generator(0, clock=clock, mode="time-sequential")
    generator.batch(64)
    assert generator.exhausted_ticks == 0  # used up, but nobody has waited yet
    # However many callers find the tick used up, it is one tick at the cap.
    assert [generator.generate_nowait() for _ in range(3)] == [None] * 3
    assert generator.exhausted_ticks == 1
    generator.generate()  # waits into the next ms
    assert generator.exhausted_ticks == 1
    generator.batch(64 * 5)  # the rest of this tick, four whole ones, one ID of a sixth
    assert generator.exhausted_ticks == 6
    assert generator.clock_waits == 6


def test_a_tick_not_used_up_is_not_counted_as_exhausted() -> None:
    clock = ManualClock()
    generator = Uid64Generator(0, clock=clock, mode="time-sequential")
    for _ in range(10):
        generator.batch(63)
        clock.advance_ns(MS)
    assert generator.exhausted_ticks == 0
