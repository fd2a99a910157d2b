"""Self-fencing: deadlines, high-water marks and lost sessions, against real servers.

See the module docstring of :mod:`idmint.coordinate.base` for the design: a claim
issues nothing past its deadline (last round trip sent + TTL - margin), timestamps
stay at or below the ceiling its last renewal recorded, and a new holder of the same
generator ID starts above the recorded high-water mark.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.integration.claims_helpers import (
    DEFAULT_TTL_S,
    Backend,
    Minter,
    RenewalWatch,
    claimed_backends,
    decode,
    held_generators,
    holder_of_this_process,
    minting,
    session_backends,
    wait_for,
    wait_for_new_claim,
)
from tests.servers.etcd import EtcdCluster
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint import (
    ClaimLost,
    ClockMovedBackwards,
    CoordinatorUnavailable,
    Uid64,
    new_generator,
)
from idmint.coordinate import ClaimState
from idmint.generate.clock import OffsetClock


def _timestamps(values: list[int]) -> list[int]:
    return [Uid64(value).timestamp_ms for value in values]


def _assert_unique(values: list[int]) -> None:
    duplicates = len(values) - len(set(values))
    assert duplicates == 0, f"{duplicates} IDs issued twice"


# -- the coordinator goes away -----------------------------------------------------------

# Long enough for the client to reconnect to a restarted server before the session it
# restored times out again, even on a loaded machine.
OUTAGE_TTL_S = 5.0
OUTAGE_WAIT_TIMEOUT_S = 0.5
OUTAGES = [
    pytest.param("short", id="short"),
    pytest.param("long", id="long"),
    pytest.param("long-session-lost", id="long-session-lost"),
]


@pytest.mark.parametrize("outage", OUTAGES)
@session_backends
def test_coordinator_outage_fences_then_resumes(
    backend: Backend, outage: str, exit_stack: contextlib.ExitStack
) -> None:
    """The server stops: no ID past the deadline, errors after wait_timeout; then back.

    ``short``: down for less than the session timeout. ``long``: down for longer; a
    ZooKeeper server restores its sessions (with a fresh timeout) when it restarts, so
    the claim normally survives that too (if it does not, a new claim is made).
    ``long-session-lost``: the session does not survive (it is expired the moment the
    server is back): a new claim is made, here generator 1 (generator 0 is held off),
    and minting carries on.
    """
    root = backend.new_root()
    url = backend.url(root, ttl=OUTAGE_TTL_S, wait_timeout=OUTAGE_WAIT_TIMEOUT_S, generators="0-1")
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    claim = generator.claim
    assert claim is not None
    first_generator = generator.generator
    first_grant = claim.last_grant
    assert first_grant is not None

    with minting(generator) as (minter, watch):
        minter.wait_for_count(3_000, timeout=10)
        stopped_at = backend.stop_server()
        try:
            minter.wait_for_errors(
                2, timeout=OUTAGE_TTL_S + 2 * OUTAGE_WAIT_TIMEOUT_S + 5, what="generate() to fail"
            )
            down_for = 1.0 if outage == "short" else OUTAGE_TTL_S + 0.5
            # The outage itself (a duration under test, not a synchronisation).
            time.sleep(max(0.0, stopped_at + down_for - time.monotonic()))
        finally:
            # From here the server may serve again (before start_server() returns).
            restarting_at = time.monotonic()
            backend.start_server()
        expired_mark = None
        if outage == "long-session-lost":
            backend.expire(claim)
            expired_mark = backend.read_mark(root, first_generator)
            assert expired_mark is not None
            # etcd learns of it at the next renewal; until then the old claim may
            # still issue (below its ceiling).
            wait_for_new_claim(claim, first_grant.epoch, timeout=OUTAGE_TTL_S)
        resumed_at = time.monotonic()
        minter.wait_for_count(minter.count + 3_000, timeout=10, what="minting to resume")

    # Nothing was issued once the claim could have expired on the server.
    late = minter.issued_between(stopped_at + claim.ttl_s, restarting_at)
    assert not late, f"{len(late)} IDs issued after stop + TTL, while the server was down"
    watch.check_deadline(minter)

    # generate() waited wait_timeout, then said what to check.
    outage_errors = [e for e in minter.errors if e.called_at < restarting_at]
    assert outage_errors
    for failure in outage_errors:
        assert isinstance(failure.error, (CoordinatorUnavailable, ClaimLost)), failure.error
        assert failure.raised_at - failure.called_at >= OUTAGE_WAIT_TIMEOUT_S
        assert "check" in str(failure.error)
    assert outage_errors[0].raised_at < stopped_at + claim.ttl_s + OUTAGE_WAIT_TIMEOUT_S + 1

    values = minter.values
    _assert_unique(values)
    stamps = zip(values, minter.asked, minter.returned, strict=True)
    before = [v for v, _, returned in stamps if returned <= stopped_at]
    after = [v for v, asked in zip(values, minter.asked, strict=True) if asked >= resumed_at]
    assert len(after) >= 3_000
    generators_after = {Uid64(v).generator for v in after}
    last_grant = claim.last_grant
    assert last_grant is not None
    if last_grant.epoch == first_grant.epoch:
        # The session survived (ZooKeeper restores sessions when it restarts).
        assert outage != "long-session-lost", "the expired session was not noticed"
        assert generators_after == {first_generator}, "the session survived: same claim"
        assert min(_timestamps(after)) > max(_timestamps(before))
    else:
        # A new claim: one generator ID of the pool; the same one again only above
        # the ceiling the old claim recorded (or at least above what it issued).
        assert len(generators_after) == 1, generators_after
        assert generators_after <= {0, 1}
        if generators_after == {first_generator}:
            floor = expired_mark["ceiling_ms"] if expired_mark else max(_timestamps(before))
            assert min(_timestamps(after)) > floor
    assert claim.state is ClaimState.ACTIVE
    held = held_generators(backend, url)
    assert set(held) == {generator.generator}
    assert held[generator.generator].holder == holder_of_this_process()


# -- high-water marks ---------------------------------------------------------------------


def _mint_and_release(url: str) -> list[int]:
    """Mint with the pool's one generator ID, then release it; return what was minted."""
    with new_generator("uid64", coordinator=url) as first:
        return first.batch(5_000).ints() + [int(first.generate()) for _ in range(500)]


@claimed_backends
def test_successor_with_slow_clock_starts_above_high_water_mark(backend: Backend) -> None:
    url = backend.url(generators="0-0", wait_timeout=5, claim_timeout=15)
    before = _mint_and_release(url)
    highest = max(_timestamps(before))

    clock = OffsetClock(-1_500)
    with new_generator("uid64", coordinator=url, clock=clock) as second:
        after = second.batch(3_000).ints() + [int(second.generate()) for _ in range(300)]
        clock_now_ms = clock.time_ns() // 1_000_000
        assert second.generator == 0

    stamps = _timestamps(after)
    assert min(stamps) > highest, f"issued at {min(stamps)}, not above {highest}"
    # It waited for its own clock to pass the mark; it did not mint in its future.
    assert max(stamps) <= clock_now_ms
    _assert_unique(before + after)


def _mint_one(url: str, clock: OffsetClock) -> Any:
    with new_generator("uid64", coordinator=url, clock=clock) as generator:
        return generator.generate()


@claimed_backends
def test_successor_with_clock_far_behind_refuses(backend: Backend) -> None:
    url = backend.url(generators="0-0", wait_timeout=2, claim_timeout=4)
    _mint_and_release(url)

    started = time.monotonic()
    with pytest.raises(ClockMovedBackwards, match="high-water mark"):
        _mint_one(url, OffsetClock(-60_000))
    assert time.monotonic() - started < 2 + 2.0, "should refuse within its wait timeout"


@claimed_backends
def test_release_records_newest_timestamp_as_high_water_mark(backend: Backend) -> None:
    root = backend.new_root()
    url = backend.url(root, generators="0-0")
    highest = max(_timestamps(_mint_and_release(url)))

    mark = backend.read_mark(root, 0)
    assert mark is not None
    assert mark["released_ms"] is not None
    assert mark["ceiling_ms"] >= highest, (
        f"released with high-water mark {mark['ceiling_ms']}, below {highest} issued"
    )


# -- the session expires under a live generator ----------------------------------------------


@pytest.mark.parametrize("pool", ["0-0", "0-1"])
@session_backends
def test_session_expiry_makes_a_new_claim(
    backend: Backend, pool: str, exit_stack: contextlib.ExitStack
) -> None:
    """Expired on the server: no IDs from the old claim, then a new claim, unique IDs.

    With ``0-0`` the same generator ID comes back once its hold-off has passed; with
    ``0-1`` the other one is taken at once.
    """
    root = backend.new_root()
    url = backend.url(root, generators=pool, wait_timeout=6)
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    claim = generator.claim
    assert claim is not None
    before = generator.batch(3_000).ints()
    old_generator = generator.generator
    old_grant = claim.last_grant
    assert old_grant is not None

    backend.expire(claim)
    # The old claim can record nothing more, and the new one has not started yet.
    mark = backend.read_mark(root, old_generator)
    assert mark is not None

    if backend.name == "zk":
        # ZooKeeper tells the client: the claim is fenced at once. (etcd tells
        # nothing: the next renewal finds the lease gone; until then the ceiling
        # keeps the old claim's IDs below any successor's.) With another ID free
        # the new claim may be made by now, in one round trip: the old one is over
        # either way.
        grant = claim.last_grant
        assert claim.state in (ClaimState.LOST, ClaimState.CLAIMING) or (
            grant is not None and grant.epoch > old_grant.epoch
        )
    # 0-1: the other ID at once (etcd: at the next renewal); 0-0: after the hold-off.
    wait_for_new_claim(claim, old_grant.epoch, timeout=3 if pool == "0-1" else DEFAULT_TTL_S + 4)
    after = generator.batch(3_000).ints()
    assert claim.state is ClaimState.ACTIVE

    _assert_unique(before + after)
    new_ids = decode(f"{value:016x}" for value in after)
    if pool == "0-1":
        assert {i.generator for i in new_ids} == {1 - old_generator}
    else:
        assert {i.generator for i in new_ids} == {old_generator}
        assert min(i.timestamp_ms for i in new_ids) > mark["ceiling_ms"]
    assert set(held_generators(backend, url)) == {generator.generator}


# -- one member of three stops ------------------------------------------------------------------


def _connected_member(cluster: ZooKeeperEnsemble, claim: Any) -> int | None:
    """The member the claim's kazoo client talks to (kazoo internals; None if unknown)."""
    try:
        port = claim._client._connection._socket.getpeername()[1]
    except (AttributeError, OSError):
        return None
    return next((i for i in range(cluster.size) if cluster.client_port(i) == port), None)


def _minting_survives_member_stop(
    backend: Backend,
    cluster: ZooKeeperEnsemble | EtcdCluster,
    victim_of: Callable[[Any], int | None],
    exit_stack: contextlib.ExitStack,
) -> None:
    # A session long enough to ride out a leader election on a loaded machine.
    url = backend.url(ttl=5)
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    claimed = generator.generator
    minter: Minter
    watch: RenewalWatch
    with minting(generator) as (minter, watch):
        minter.wait_for_count(3_000, timeout=10)
        victim = victim_of(generator)
        assert victim is not None
        with cluster.member_stopped(victim):
            stopped_at = time.monotonic()
            minted_at_stop = minter.count
            wait_for(
                lambda: (
                    watch.renewals_after(stopped_at) >= 2 and minter.count > minted_at_stop + 5_000
                ),
                timeout=30,
                what="renewals and minting to carry on with a member stopped",
            )
        minter.wait_for_count(minter.count + 2_000, timeout=10)

    assert not minter.errors, [str(e.error) for e in minter.errors[:3]]
    watch.check_deadline(minter)
    _assert_unique(minter.values)
    assert {Uid64(v).generator for v in minter.values} == {claimed}


@pytest.mark.parametrize("role", ["leader", "connected"])
def test_zookeeper_ensemble_member_stopped_mid_run(
    zk3: ZooKeeperEnsemble, role: str, exit_stack: contextlib.ExitStack
) -> None:
    def victim(generator: Any) -> int | None:
        if role == "leader":
            return zk3.leader()
        return _connected_member(zk3, generator.claim)

    _minting_survives_member_stop(Backend("zk", zk3), zk3, victim, exit_stack)


@pytest.mark.parametrize("role", ["leader", "first"])
def test_etcd_cluster_member_stopped_mid_run(
    etcd3: EtcdCluster, role: str, exit_stack: contextlib.ExitStack
) -> None:
    def victim(generator: Any) -> int | None:
        return etcd3.leader() if role == "leader" else 0

    _minting_survives_member_stop(Backend("etcd", etcd3), etcd3, victim, exit_stack)
