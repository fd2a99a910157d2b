"""The hold-off holds on its own, whoever last held the ID and however often.

A released or lost generator ID is not claimed again until its high-water mark's
ceiling + the skew allowance has passed by the clock, or the TTL + skew of real
time since the claimant first saw *that* mark. The high-water mark alone would
keep IDs unique; the hold-off is there for claimants that do not read it
(java-uniqueid) and for clocks that disagree, so it must not lapse early.
"""

from __future__ import annotations

import contextlib
import time

from tests.integration.claims_helpers import (
    DEFAULT_TTL_S,
    Backend,
    session_backends,
    wait_for_new_claim,
)

from idmint import new_generator

SKEW_S = 1.0


@session_backends
def test_the_real_time_bound_restarts_for_each_new_mark(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """A claimant that once waited out a hold-off on generator 0 waits again later.

    It first sees generator 0 held off by a released mark and waits; later its
    own claim is lost and generator 0 carries a new mark. Timing the new hold-off
    from the first sighting let it re-take generator 0 at once (0.17 s in one run).
    """
    root = backend.new_root()
    url = backend.url(root, generators="0-0", skew=SKEW_S, claim_timeout=20, wait_timeout=20)
    with new_generator("uid64", coordinator=url) as first:
        first.batch(1_000)

    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    claim = generator.claim
    assert claim is not None
    grant = claim.last_grant
    assert grant is not None
    generator.batch(1_000)

    backend.expire(root, claim)
    expired_at = time.monotonic()
    wait_for_new_claim(claim, grant.epoch, timeout=DEFAULT_TTL_S + SKEW_S + 10)
    waited = time.monotonic() - expired_at
    # The lost claim's ceiling lies ahead of the expiry, so its hold-off lasts
    # at least the skew allowance beyond it.
    assert waited >= SKEW_S, f"generator 0 was taken again {waited:.2f} s after the loss"
    assert generator.generator == 0
