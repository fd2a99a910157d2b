"""Generated IDs carry the clock's time and the generator's identity, at any time."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.cores import MS

from idmint.generate import (
    Elastic64Generator,
    ManualClock,
    MuidGenerator,
    Short60Generator,
    SnowflakeGenerator,
    TickGenerator,
    Uid64Generator,
    Uid64V1Generator,
    Uuid7Generator,
)
from idmint.generate.generators import GENERATORS
from idmint.schemes import Elastic64, Muid, Short60, Uid64, Uid64V1

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py

EPOCH_2018_MS = 1_519_862_400_000
times_ms = st.integers(EPOCH_2018_MS, 2**42 - 100)
offsets_ns = st.integers(0, MS - 1)
counts = st.integers(1, 300)


@settings(max_examples=60, deadline=None)
@given(
    start_ms=times_ms,
    offset_ns=offsets_ns,
    count=counts,
    generator_id=st.integers(0, 2047),
    cluster=st.integers(0, 15),
    mode=st.sampled_from(["spread", "time-sequential"]),
    single=st.booleans(),
)
def test_uid64_fields(
    start_ms: int,
    offset_ns: int,
    count: int,
    generator_id: int,
    cluster: int,
    mode: str,
    single: bool,
) -> None:
    clock = ManualClock(start_ns=start_ms * MS + offset_ns)
    generator = Uid64Generator(generator_id, cluster, mode, clock=clock)
    ids = [generator.generate() for _ in range(count)] if single else list(generator.batch(count))
    assert [Uid64(str(i)) for i in ids] == ids
    assert {(i.generator, i.cluster, i.mode.value) for i in ids} == {(generator_id, cluster, mode)}
    assert ids[0].timestamp_ms == start_ms
    assert [(i.timestamp_ms, i.sequence) for i in ids] == [
        (start_ms + n // 64, n % 64) for n in range(count)
    ]


@settings(max_examples=30, deadline=None)
@given(
    block=st.integers(EPOCH_2018_MS >> 14, (2**42 >> 14) - 1),
    mode=st.sampled_from(["spread", "time-sequential"]),
)
def test_uid64_fields_across_the_generators_16_s_blocks(block: int, mode: str) -> None:
    """The generator works out the timestamp's upper 28 bits once per 2**14 ms."""
    start_ms = (block << 14) - 2
    clock = ManualClock(start_ns=start_ms * MS)
    generator = Uid64Generator(3, 1, mode, clock=clock)
    ids = list(generator.batch(300))
    assert [i.timestamp_ms for i in ids] == [start_ms + n // 64 for n in range(300)]
    assert {(i.generator, i.cluster) for i in ids} == {(3, 1)}


def test_uid64_identity_change_reaches_the_next_tick() -> None:
    """A claimed generator that is given another generator ID mints with it at once."""
    clock = ManualClock(start_ns=1_700_000_000_000 * MS)
    generator = Uid64Generator(3, 1, clock=clock)
    assert generator.generate().generator == 3
    with generator._lock:  # what adopting a new claim does
        generator._set_identity({"generator": 9, "cluster": 2})
        generator._retire_tick()
    clock.advance_ms(1)
    value = generator.generate()
    assert (value.generator, value.cluster) == (9, 2)


@settings(max_examples=30, deadline=None)
@given(start_ms=times_ms, count=counts, generator_id=st.integers(0, 63))
def test_uid64_v1_fields(start_ms: int, count: int, generator_id: int) -> None:
    clock = ManualClock(start_ns=start_ms * MS)
    ids = list(Uid64V1Generator(generator_id, clock=clock).batch(count))
    assert [Uid64V1(i.int) for i in ids] == ids
    assert {i.generator for i in ids} == {generator_id}
    assert [(i.timestamp_ms, i.sequence) for i in ids] == [
        (start_ms + n // 64, n % 64) for n in range(count)
    ]


@settings(max_examples=60, deadline=None)
@given(
    start_ms=times_ms,
    offset_ns=offsets_ns,
    count=counts,
    node_bits=st.integers(8, 16),
    data=st.data(),
)
def test_elastic64_fields(
    start_ms: int, offset_ns: int, count: int, node_bits: int, data: st.DataObject
) -> None:
    node = data.draw(st.integers(0, 2**node_bits - 1))
    clock = ManualClock(start_ns=start_ms * MS + offset_ns)
    generator = Elastic64Generator(node, node_bits, clock=clock, max_ahead_ms=0)
    ids = list(generator.batch(count))
    per_ms = 2 ** (16 - node_bits)
    assert [Elastic64(str(i), node_bits) for i in ids] == ids
    assert {(i.node, i.node_bits) for i in ids} == {(node, node_bits)}
    assert [(i.timestamp_ms, i.burst) for i in ids] == [
        (start_ms + n // per_ms, n % per_ms) for n in range(count)
    ]


@settings(max_examples=60, deadline=None)
@given(start_ms=times_ms, offset_ns=offsets_ns, count=st.integers(1, 1200))
def test_short60_fields(start_ms: int, offset_ns: int, count: int) -> None:
    clock = ManualClock(start_ns=start_ms * MS + offset_ns)
    ids = list(Short60Generator(7, clock=clock).batch(count))
    assert [Short60(str(i)) for i in ids] == ids
    by_ms: dict[int, set[int]] = {}
    for i in ids:
        by_ms.setdefault(i.timestamp_ms, set()).add(i.sequence)
    assert min(by_ms) == start_ms
    # Every ms but the last is full: all 512 sequence numbers, each once.
    sizes = [len(by_ms[ms]) for ms in sorted(by_ms)]
    assert sizes[:-1] == [512] * (len(sizes) - 1)
    assert sum(sizes) == count


@settings(max_examples=40, deadline=None)
@given(
    start_us=st.integers(0, 2**56 - 10_000),
    count=st.integers(1, 200),
    medallion=st.integers(0, 2**52 - 1),
)
def test_muid_fields(start_us: int, count: int, medallion: int) -> None:
    clock = ManualClock(start_ns=start_us * 1000)
    generator = MuidGenerator(medallion, clock=clock, max_ahead_us=1000)
    ids = list(generator.batch(count))
    assert [Muid(str(i)) for i in ids] == ids
    assert [i.timestamp_us for i in ids] == list(range(start_us, start_us + count))
    assert {(i.medallion, i.offset) for i in ids} == {(medallion, 0)}


# (generator, the options its IDs' bounds need) per scheme: every scheme's generator.
BOUNDED: dict[str, tuple[Callable[[ManualClock], TickGenerator[Any]], dict[str, Any]]] = {
    "uid64": (lambda c: Uid64Generator(3, clock=c), {"mode": "spread"}),
    "uid64 time-sequential": (
        lambda c: Uid64Generator(3, mode="time-sequential", clock=c),
        {"mode": "time-sequential"},
    ),
    "uid64-v1": (lambda c: Uid64V1Generator(3, clock=c), {}),
    "elastic64": (lambda c: Elastic64Generator(3, 11, clock=c, max_ahead_ms=0), {"node_bits": 11}),
    "muid": (lambda c: MuidGenerator(clock=c, max_ahead_us=0), {}),
    "short60": (lambda c: Short60Generator(3, clock=c), {}),
    "uuid7": (lambda c: Uuid7Generator(3, clock=c), {}),
    "snowflake": (lambda c: SnowflakeGenerator(3, clock=c), {}),
}
assert {name.split()[0] for name in BOUNDED} == set(GENERATORS)


@settings(max_examples=20, deadline=None)
@given(start_ms=st.integers(EPOCH_2018_MS + 1, 2**42 - 100), offset_ns=offsets_ns)
@pytest.mark.parametrize("name", list(BOUNDED))
def test_ids_minted_at_a_time_lie_within_its_bounds(
    name: str, start_ms: int, offset_ns: int
) -> None:
    """Each ID a generator mints at ``t`` lies within ``[first_at(t), last_at(t)]``; where
    the layout sorts by time, those minted a tick before or after lie outside."""
    make, options = BOUNDED[name]
    # Within the times the scheme holds (Twitter's snowflakes end in 2080).
    field = GENERATORS[name.split(maxsplit=1)[0]].id_type._time_field
    end_ms = field.high * 1000 // field.per_second - 100
    start_ms = EPOCH_2018_MS + 1 + (start_ms - EPOCH_2018_MS - 1) % (end_ms - EPOCH_2018_MS - 1)
    clock = ManualClock(start_ns=start_ms * MS + offset_ns)
    generator = make(clock)
    cls = generator.id_type
    unit = dt.timedelta(microseconds=1_000_000 // cls._time_field.per_second)
    minted = [generator.generate() for _ in range(3)]
    when = minted[0].time
    first, last = cls.first_at(when, **options), cls.last_at(when, **options)
    same_tick = [value for value in minted if value.time == when]
    assert same_tick
    assert all(first <= value <= last for value in same_tick)
    if cls.orders_by_time(**options):
        clock.advance_ms(1)
        later = generator.generate()
        assert later > last
        assert later >= cls.first_at(when + unit, **options)
        earlier_last = cls.last_at(when - unit, **options)
        assert all(value > earlier_last for value in minted)
