"""A claim's deadline and ceiling bound what a generator issues, on both cores.

The compiled core opens ticks by itself only within the grant the pure core
opened its last tick under (its ceiling, its deadline), and a claim that is
lost, suspended or changed fences it. The claims contract's checks of fencing,
deadlines and high-water marks, on the in-process ``memory://`` driver (the
contract kit's own, tests/integration runs every driver), once per core.
"""

from __future__ import annotations

import pytest

from idmint.testing import CHECKS, contract_tests

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
