"""uuid7's generator: RFC 9562 Method 1's counter on the tick core, a node, fresh random bits."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest
from tests.cores import MS

from idmint.errors import ClockMovedBackwards, ConfigurationError, GeneratorError
from idmint.generate import ManualClock, Uuid7Generator
from idmint.generate.group import GeneratorGroup
from idmint.schemes import Uuid7
from idmint.schemes import uuid7 as uu

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py

START_NS = 1_700_000_000_000 * MS


def fields(ids: list[Uuid7]) -> list[tuple[int, int, int]]:
    return [(value.timestamp_ms, value.counter, value.node) for value in ids]


def test_uuids_are_version_7_strictly_increasing_with_the_node_and_a_counter_per_ms() -> None:
    clock = ManualClock(start_ns=START_NS)
    generator = Uuid7Generator(node=0xBEEF, clock=clock)
    first = [generator.generate() for _ in range(1000)]
    clock.advance_ms(1)
    second = list(generator.batch(700))
    ids = first + second
    assert all(type(value) is Uuid7 for value in ids)
    assert all(earlier < later for earlier, later in itertools.pairwise(ids))  # strictly
    assert all(str(earlier) < str(later) for earlier, later in itertools.pairwise(ids))
    assert fields(ids) == [(1_700_000_000_000, n, 0xBEEF) for n in range(1000)] + [
        (1_700_000_000_001, n, 0xBEEF) for n in range(700)
    ]
    for value in ids[:5] + ids[-5:]:
        as_uuid = uuid.UUID(str(value))
        assert (as_uuid.version, as_uuid.variant) == (7, uuid.RFC_4122)
        assert Uuid7(as_uuid) == value
    # The counter crosses from rand_b's top bits into rand_a at 64 and stays in order.
    assert (ids[63].int >> 64) & 0xFFF == 0
    assert (ids[64].int >> 64) & 0xFFF == 1
    assert generator.issued == 1700


def test_the_random_bits_are_fresh_for_every_uuid() -> None:
    generator = Uuid7Generator(node=1, clock=ManualClock(start_ns=START_NS))
    ids = [generator.generate() for _ in range(3000)] + list(generator.batch(3000))
    randoms = [value.random for value in ids]
    # 6,000 draws of 40 bits: a repeat is a 1-in-60,000 chance, all of one value none.
    assert len(set(randoms)) >= len(randoms) - 1
    assert max(randoms).bit_length() > 30


def test_batches_give_the_same_ints_texts_and_values() -> None:
    generator = Uuid7Generator(node=3, clock=ManualClock(start_ns=START_NS))
    batch = generator.batch(50)
    values = list(batch)
    assert batch.ints() == [value.int for value in values]
    assert batch.texts() == [str(value) for value in values]
    assert batch[7] == values[7]
    assert batch[2:4] == values[2:4]
    assert len(set(values)) == 50
    later = asyncio.run(generator.abatch(20))
    assert values[-1] < later[0]
    assert all(type(value) is Uuid7 for value in later)


def test_a_generator_group_joins_uuid7_batches() -> None:
    clock = ManualClock(start_ns=START_NS)
    group = GeneratorGroup([Uuid7Generator(node=n, clock=clock) for n in (1, 2)])
    ids = list(group.batch(2 * (uu.MAX_COUNTER + 1) + 5))
    assert len(set(ids)) == len(ids)
    assert {value.node for value in ids} == {1, 2}


def test_a_full_ms_waits_for_the_next_one() -> None:
    clock = ManualClock(start_ns=START_NS + 300_000)  # 0.3 ms into a ms
    generator = Uuid7Generator(node=5, clock=clock)
    full = generator.batch(uu.MAX_COUNTER + 1)
    assert clock.sleeps == []
    assert full[-1].counter == uu.MAX_COUNTER
    following = generator.generate()
    assert clock.sleeps == [700_000]  # to the start of the next ms, not past it
    assert (following.timestamp_ms, following.counter) == (full[0].timestamp_ms + 1, 0)
    assert full[-1] < following
    assert generator.ids_per_tick == 262_144


def test_strictly_increasing_across_a_step_back_it_waits_out() -> None:
    clock = ManualClock(start_ns=START_NS)
    generator = Uuid7Generator(node=9, clock=clock, max_clock_wait_ms=10)
    before = [generator.generate() for _ in range(10)]
    clock.advance_ms(1)
    before += generator.batch(10)
    clock.step_back_ms(5)
    after = [generator.generate() for _ in range(10)] + list(generator.batch(10))
    ids = before + after
    assert all(earlier < later for earlier, later in itertools.pairwise(ids))
    assert generator.clock_steps_back >= 1


def test_a_large_step_back_refuses_then_recovers_above_every_earlier_uuid() -> None:
    clock = ManualClock(start_ns=START_NS)
    generator = Uuid7Generator(node=9, clock=clock, max_clock_wait_ms=10)
    issued = list(generator.batch(600))
    clock.advance_ms(1)
    issued.append(generator.generate())  # opens the next ms: a step back is seen below
    clock.step_back_ms(50)
    with pytest.raises(ClockMovedBackwards):
        generator.batch(300_000)  # past the open ms: a new one is needed
    with pytest.raises(ClockMovedBackwards):
        generator.generate()
    clock.advance_ms(50)
    later = list(generator.batch(600))
    assert max(issued) < min(later)


def test_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="needs its node ID"):
        Uuid7Generator()
    with pytest.raises(ConfigurationError, match="node 65536 is out of range"):
        Uuid7Generator(node=65536)
    after_9999 = ManualClock(start_ns=(uu.MAX_TIMESTAMP_MS + 1) * MS)
    with pytest.raises(GeneratorError, match="outside what uuid7 IDs can hold"):
        Uuid7Generator(node=0, clock=after_9999).generate()
