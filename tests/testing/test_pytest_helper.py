"""``idmint.testing.contract_tests`` in a pytest suite, as a driver's author uses it.

One test per check, for a URL (here ``memory://``, and a URL a fixture gives);
a check that fails is a failed test, one that cannot run a skipped one.
"""

from __future__ import annotations

import uuid

import pytest

from idmint.testing import contract_tests
from idmint.testing.checks import by_name

test_memory_contract = contract_tests(
    "memory://kit-pytest?ttl=2",
    checks=by_name(
        ["two_claimants_get_distinct_identities", "an_expired_claim_moves_to_a_free_id"]
    ),
)
"""What a driver's test module holds: the checks it wants, for its URL."""


@pytest.fixture
def pool_url() -> str:
    return f"memory://kit-{uuid.uuid4().hex[:8]}?ttl=2"


test_contract_on_a_fixtures_url = contract_tests(
    lambda request: request.getfixturevalue("pool_url"),
    checks=by_name(["close_releases_the_claim"]),
)


@pytest.mark.usefixtures("registered")
def test_a_check_a_driver_breaks_fails_its_test(request: pytest.FixtureRequest) -> None:
    (check,) = by_name(["two_claimants_get_distinct_identities"])
    test = contract_tests("sharedid://x?ttl=2", checks=[check])
    with pytest.raises(pytest.fail.Exception, match="AssertionError"):
        test(check, request)


def test_a_check_that_cannot_run_is_skipped_saying_why(request: pytest.FixtureRequest) -> None:
    (check,) = by_name(["a_configured_identity_is_held_once"])
    test = contract_tests("memory://kit-skip", checks=[check])
    with pytest.raises(pytest.skip.Exception, match="claims free identities"):
        test(check, request)
