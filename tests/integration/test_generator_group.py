"""Several generators minting as one: ``new_generator(scheme, generators=K)`` and
``idmint generate --generators K``.

K generators, each with a claimed identity of its own, give K times the rate of
one: a tick's worth from each in turn. Shown without timing anything: on a
manual clock, K x 64 uid64 IDs come from one tick, which one generator cannot
give. The IDs are unique, come in the documented order, and every claim is
released on close (and on the command's exit).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
from tests.cli_process import assert_one_error_line, run_idmint
from tests.integration.claims_helpers import Backend

from idmint import Uid64
from idmint.clock import ManualClock
from idmint.factory import new_generator
from idmint.generate.group import GeneratorGroup

UID64_TICK = 64
"""uid64 IDs a generator mints in a millisecond."""
START_MS = 1_790_000_000_000


def _runs(values: list[Uid64]) -> list[tuple[int, int]]:
    """(generator ID, how many in a row) along the IDs."""
    return [(key, len(list(run))) for key, run in itertools.groupby(v.generator for v in values)]


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_k_generators_mint_k_ticks_worth_in_one_tick(backend: Backend) -> None:
    """On a clock that moves only when told, 4 x 64 IDs in one millisecond and no wait;
    one generator waits three times for as many. (The rate is the point.)"""
    clock = ManualClock(START_MS * 1_000_000)
    with new_generator("uid64", backend.url(), generators=4, clock=clock) as group:
        assert isinstance(group, GeneratorGroup)
        assert group.ids_per_tick == 4 * UID64_TICK
        ids = group.batch(4 * UID64_TICK)
        assert {value.timestamp_ms for value in ids} == {START_MS}
        assert clock.sleeps == []
    clock = ManualClock(START_MS * 1_000_000)
    with new_generator("uid64", backend.url(), clock=clock) as single:
        ids = single.batch(4 * UID64_TICK)
        assert len({value.timestamp_ms for value in ids}) == 4
        assert len(clock.sleeps) == 3


@pytest.mark.parametrize("backend", ["local", "etcd"], indirect=True)
def test_a_group_mints_unique_ids_a_tick_from_each_in_turn_and_releases_every_claim(
    backend: Backend,
) -> None:
    url = backend.url()
    with new_generator("uid64", url, generators=3) as group:
        assert isinstance(group, GeneratorGroup)
        identities = [generator.generator for generator in group.generators]
        assert len(set(identities)) == 3
        held = sorted(row.generator for row in backend.list_claims(url))
        assert held == sorted(identities)
        values = list(group.batch(3 * UID64_TICK * 5 + 10))
        values += [group.generate() for _ in range(100)]
        values += list(asyncio.run(group.abatch(500)))
        values.append(asyncio.run(group.agenerate()))
        assert len({value.int for value in values}) == len(values)
        batch = values[: 3 * UID64_TICK * 5 + 10]
        # Rounds: 64 from each generator in turn, the last round short.
        expected = [
            *[(identities[i % 3], UID64_TICK) for i in range(15)],
            (identities[0], 10),
        ]
        assert _runs(batch) == expected
        assert group.issued == len(values)
    assert backend.list_claims(url) == []


@pytest.mark.parametrize("backend", ["local", "etcd"], indirect=True)
def test_idmint_generate_with_k_generators(backend: Backend) -> None:
    """The command's IDs: unique, from K identities a tick's worth each in turn; every
    claim released at exit."""
    url = backend.url()
    done = run_idmint(
        "generate", "--coordinator", url, "--generators", "4", "--count", "5000", timeout=120
    )
    assert done.returncode == 0, done.stderr
    values = [Uid64(line) for line in done.stdout.split()]
    assert len({value.int for value in values}) == len(values) == 5000
    runs = _runs(values)
    assert len({generator for generator, _ in runs}) == 4
    assert {length for _, length in runs[:-1]} == {UID64_TICK}
    assert [generator for generator, _ in runs[:8]] == [generator for generator, _ in runs[:4]] * 2
    assert backend.list_claims(url) == []


@pytest.mark.parametrize("count", ["0", "65", "-1", "many"])
def test_a_generator_count_out_of_range_is_a_usage_error(count: str) -> None:
    done = run_idmint("generate", "--generators", count)
    assert done.returncode == 2
    line = assert_one_error_line(done.stderr)
    assert ("1..64" in line) or ("not an integer" in line), line
