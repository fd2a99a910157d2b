"""The session timeout ZooKeeper grants, not the one asked for, is what fences a claim.

A server may grant less than a client asks (its ``maxSessionTimeout``); it then
expires the session, and hands the claim's ID to another claimant, that much sooner.
A claim that kept fencing with the timeout it asked for would go on issuing IDs
after that.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.integration.claims_helpers import Backend, wait_for_new_claim
from tests.servers.fixtures import SHORT_SESSION_LIMIT_MS
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint.coordinate import connect

REQUESTED_S = 10


def test_the_fence_follows_a_granted_timeout_below_the_requested(
    zk_short_sessions: ZooKeeperEnsemble,
) -> None:
    granted_s = SHORT_SESSION_LIMIT_MS / 1000
    url = f"zk://{zk_short_sessions.hosts}/granted-{time.monotonic_ns()}"
    claim = connect(f"{url}?session_timeout={REQUESTED_S}").claim()
    try:
        grant = claim.grant()
        assert grant is not None
        # The deadline was set from a request sent before now: it lies no further
        # ahead than the granted timeout, far short of the requested one.
        assert grant.deadline_mono_ns - time.monotonic_ns() <= granted_s * 1e9
        assert claim.ttl_s == granted_s
        assert claim.renew_every_s < granted_s / 3
        # Each renewal fences the same way.
        renewals = claim.renewals
        grant = claim.wait(min_ceiling_ms=grant.ceiling_ms + 1, timeout_s=granted_s)
        assert claim.renewals > renewals
        assert grant.deadline_mono_ns - time.monotonic_ns() <= granted_s * 1e9
    finally:
        claim.close()


def test_a_new_session_granted_less_fences_with_what_it_got(tmp_path: Path) -> None:
    """The operator lowers ``maxSessionTimeout`` and restarts the server: the claim's
    session outlives the restart with what it was granted, but the session it makes
    after that one expires gets the new limit, and must fence by it."""
    ensemble = ZooKeeperEnsemble(1, tmp_path)
    ensemble.start()
    try:
        claim = connect(f"zk://{ensemble.hosts}/granted?session_timeout={REQUESTED_S}").claim()
        try:
            assert claim.ttl_s == REQUESTED_S
            ensemble.stop_member(0)
            ensemble.configure(maxSessionTimeout=SHORT_SESSION_LIMIT_MS)
            ensemble.start_member(0)
            grant = claim.wait(timeout_s=30)
            Backend("zk", ensemble).expire("/granted", claim)
            wait_for_new_claim(claim, grant.epoch, timeout=30)

            grant = claim.wait(timeout_s=10)
            granted_s = SHORT_SESSION_LIMIT_MS / 1000
            assert claim.ttl_s == granted_s
            assert grant.deadline_mono_ns - time.monotonic_ns() <= granted_s * 1e9
        finally:
            claim.close()
    finally:
        ensemble.stop()
