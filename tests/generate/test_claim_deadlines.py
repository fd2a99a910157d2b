"""A claim's deadline and ceiling bound what a generator issues, on both cores.

The compiled core opens ticks by itself only within the grant the pure core
opened its last tick under (its ceiling, its deadline), and a claim that is
lost, suspended or changed fences it. The claims contract's checks of fencing,
deadlines and high-water marks, on the in-process ``memory://`` driver (the
contract kit's own, tests/integration runs every driver), once per core.
"""

from __future__ import annotations

import time

import pytest

from idmint import new_generator
from idmint.clock import OffsetClock
from idmint.coordinate import CoordinatorUrl
from idmint.coordinate.spaces import GENERATOR
from idmint.testing import CHECKS, contract_tests
from idmint.testing.adapters import MemoryHooks

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py

DEADLINE_CHECKS = {
    "ids_are_unique_and_carry_the_identity",
    "close_releases_the_claim",
    "release_records_the_newest_timestamp",
    "a_successor_with_a_slow_clock_starts_above_the_mark",
    "an_expired_claim_comes_back_above_its_mark",
    "an_expired_claim_moves_to_a_free_id",
    "a_short_outage_fences_then_resumes",
    "a_long_outage_fences_then_resumes",
    "an_outage_that_loses_the_session_fences_then_claims_again",
}

test_fencing_and_deadlines = contract_tests(
    "memory://core-deadlines?ttl=2",
    checks=[found for found in CHECKS if found.name in DEADLINE_CHECKS],
)


def test_every_check_named_exists() -> None:
    assert {found.name for found in CHECKS} >= DEADLINE_CHECKS


def test_the_deadline_alone_stops_a_generator_no_fence_reaches() -> None:
    """A claim in doubt fences its generators at once; this one never hears of it (as if
    its renewal thread were stuck), and its server is down: it issues nothing once the
    grant's deadline has passed. The deadline suffices on its own, on either core,
    in the tick it was opened in and in every tick after."""
    url = CoordinatorUrl.parse("memory://deadline-alone?ttl=1")
    generator = new_generator("uid64", coordinator=url)
    claim = generator.claim
    assert claim is not None
    try:
        generator.batch(100)
        claim.detach(generator)  # no fence reaches it from now on
        MemoryHooks().stop_server(url)  # and no renewal succeeds
        issued_at: list[int] = []
        while True:
            grant = claim.last_grant
            assert grant is not None
            started = time.monotonic_ns()
            if started > grant.deadline_mono_ns + 300_000_000:
                break
            if generator.generate_nowait() is not None:
                issued_at.append(started)
        deadline = grant.deadline_mono_ns  # the last grant's: no renewal came after it
        late = [at for at in issued_at if at >= deadline]
        assert issued_at, "nothing was issued before the deadline: the scenario did not happen"
        assert not late, f"{len(late)} IDs issued after the claim's deadline"
    finally:
        MemoryHooks().start_server(url)
        generator.close()


def test_a_tick_above_the_claims_ceiling_waits_for_the_store_to_record_it() -> None:
    """The wall clock jumps 10 minutes forward (the monotonic clock does not, so the
    deadline stands): the next tick lies above the high-water mark the store holds,
    and is opened only once the claim has recorded a mark above it. A crash right
    after would otherwise leave IDs above the mark a successor starts from."""
    url = CoordinatorUrl.parse("memory://ceiling-jump?ttl=2")
    clock = OffsetClock(0)
    with new_generator("uid64", coordinator=url, clock=clock) as generator:
        claim = generator.claim
        assert claim is not None
        generator.batch(200)
        identity = {"generator": generator.generator, "cluster": generator.cluster}
        before = MemoryHooks().read_mark(claim.coordinator, GENERATOR, identity)
        assert before is not None
        clock.offset_ns += 600 * 1_000_000_000
        value = generator.generate()
        mark = MemoryHooks().read_mark(claim.coordinator, GENERATOR, identity)
        assert mark is not None
        assert value.timestamp_ms > before.ceiling_ms  # the scenario: a tick above the mark
        assert value.timestamp_ms <= mark.ceiling_ms, "issued above the recorded mark"
