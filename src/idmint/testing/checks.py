"""The claims contract, one check per rule: what every coordinator driver must do.

Each check is a function of a :class:`~idmint.testing.kit.Trial` that raises
(an ``AssertionError`` saying what broke) when the driver breaks the rule.
Timings follow the driver's own settings (its TTL or session timeout, the
skew), so the checks run on a URL as a fleet gives it; a short TTL (2 s) makes
them quick, and the outage checks want one long enough for a client to
reconnect to a restarted server (5 s).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idmint.clock import OffsetClock
from idmint.coordinate import ClaimState, Coordinator, CoordinatorUrl
from idmint.coordinate.base import HighWaterMark, holder_description
from idmint.coordinate.leases import LeaseOptions
from idmint.coordinate.options import ClaimOptions
from idmint.coordinate.spaces import GENERATOR
from idmint.errors import (
    ClaimLost,
    ClockMovedBackwards,
    ConfigurationError,
    CoordinatorUnavailable,
    IdentityInUse,
    PoolExhausted,
)
from idmint.factory import new_generator, who_minted
from idmint.schemes import Uid64
from idmint.testing.kit import Check, Skipped, Trial, check
from idmint.testing.minting import Minter, RenewalWatch, minting, wait_for, wait_for_new_claim

__all__ = ["CHECKS"]


def _timestamps(values: list[int]) -> list[int]:
    return [Uid64(value).timestamp_ms for value in values]


def _assert_unique(values: list[int]) -> None:
    twice = len(values) - len(set(values))
    assert twice == 0, f"{twice} IDs issued twice"


def span(ids: range) -> str:
    """``ids`` as the ``generators`` option writes them: ``LO-HI``."""
    return f"{ids.start}-{ids.stop - 1}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _raises(kind: type[BaseException], call: Callable[[], Any], what: str) -> BaseException:
    """The ``kind`` error ``call`` raised; an ``AssertionError`` naming ``what`` if none."""
    try:
        made = call()
    except kind as error:
        return error
    closer = getattr(made, "close", None)
    if closer is not None:
        closer()
    raise AssertionError(f"{what}: no {kind.__name__} was raised")


# -- minting ---------------------------------------------------------------------------


@check("any")
def ids_are_unique_and_carry_the_identity(trial: Trial) -> None:
    """IDs minted in batches and one by one are unique and carry the claim's identity."""
    url = trial.pool()
    generator = trial.generator(url)
    values = generator.batch(20_000).ints()
    values += [int(generator.generate()) for _ in range(3_000)]
    values += generator.batch(5_000).ints()

    _assert_unique(values)
    identity = (generator.generator, generator.cluster)
    assert {(Uid64(v).generator, Uid64(v).cluster) for v in values} == {identity}
    claim = generator.claim
    assert claim is not None
    assert claim.state is ClaimState.ACTIVE, claim.problem
    assert dict(claim.identity or {}) == {"generator": identity[0], "cluster": identity[1]}
    configured = trial.coordinator(url).configured_identity()
    if configured is not None:
        # A configured identity is the URL's, held on this host, nothing more.
        assert identity == (configured["generator"], configured["cluster"]), identity


@check("claimed")
def two_claimants_get_distinct_identities(trial: Trial) -> None:
    """Two claimants of one pool get different generator IDs, in one cluster."""
    url = trial.pool()
    first = trial.generator(url)
    second = trial.generator(url)

    assert first.generator != second.generator
    assert first.cluster == second.cluster
    _assert_unique(first.batch(5_000).ints() + second.batch(5_000).ints())
    assert set(trial.claims(url)) == {first.generator, second.generator}


@check("configured")
def a_configured_identity_is_held_once(trial: Trial) -> None:
    """A second holder of a configured identity is refused until the first lets go."""
    url = trial.pool()
    first = trial.generator(url)
    # The same identity for everyone given it: on one host a second holder
    # refuses, since together they would mint the same IDs.
    error = _raises(IdentityInUse, lambda: new_generator("uid64", coordinator=url), "a second")
    assert f"generator {first.generator}, cluster" in str(error), error
    first.close()
    again = trial.generator(url)
    assert again.generator == first.generator, "a closed holder lets the identity go"


class _RenewedElsewhere:
    """A holder of ``identity`` that renews its mark through the adapter, in a thread, as
    one whose hold this process cannot see would (another view of the host)."""

    holder = "elsewhere:4242"
    ttl_ms = 1000

    def __init__(self, trial: Trial, coordinator: Coordinator, identity: dict[str, int]) -> None:
        self._hooks = trial.hooks
        self._coordinator = coordinator
        self._identity = identity
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True)
        self.last_ceiling_ms = -1

    def _renew(self) -> None:
        while not self._stop.is_set():
            now = _now_ms()
            ceiling = now + self.ttl_ms
            mark = HighWaterMark(ceiling, renewed_ms=now, holder=self.holder)
            self._hooks.write_mark(self._coordinator, GENERATOR, self._identity, mark)
            self.last_ceiling_ms = ceiling
            self._stop.wait(self.ttl_ms / 4000)

    def __enter__(self) -> _RenewedElsewhere:
        self._thread.start()
        wait_for(lambda: self.last_ceiling_ms > 0, timeout=10, what="the first mark elsewhere")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


@check("configured", needs=("write_mark",))
def a_configured_identity_is_refused_while_its_mark_is_renewed(trial: Trial) -> None:
    """A configured identity whose mark another holder keeps renewing is refused, even
    where that holder's hold cannot be seen; once the renewals stop, it is taken above
    the mark."""
    url = trial.pool()
    coordinator = trial.coordinator(url)
    identity = coordinator.identity_in(GENERATOR)
    assert identity is not None, f"{url.redacted()} configures no identity"
    with _RenewedElsewhere(trial, coordinator, identity) as elsewhere:
        error = _raises(
            IdentityInUse,
            lambda: new_generator("uid64", coordinator=url),
            "a configured identity beside a holder that renews its mark",
        )
        assert elsewhere.holder in str(error), error
    generator = trial.generator(url)
    assert generator.generator == identity["generator"]
    first = generator.generate().timestamp_ms
    assert first > elsewhere.last_ceiling_ms, (first, elsewhere.last_ceiling_ms)


@check("claimed")
def generators_option_limits_the_pool(trial: Trial) -> None:
    """``generators=LO-HI`` claims those three IDs, and a fourth claimant finds none."""
    ids = trial.ids(3, first=5)
    url = trial.pool(generators=span(ids), claim_timeout=0.5)
    generators = [trial.generator(url) for _ in "abc"]

    assert sorted(g.generator for g in generators) == list(ids)
    for generator in generators:
        assert {i.generator for i in generator.batch(200)} == {generator.generator}
    assert set(trial.claims(url)) == set(ids)
    _raises(PoolExhausted, lambda: new_generator("uid64", coordinator=url), "a fourth claimant")


@check("claimed")
def close_releases_the_claim(trial: Trial) -> None:
    """Closing a generator releases its claim, and it refuses at once afterwards."""
    url = trial.pool()
    generator = trial.generator(url)
    generator.batch(100)
    held = trial.claims(url)
    assert set(held) == {generator.generator}
    assert held[generator.generator].holder == holder_description()

    generator.close()

    assert trial.claims(url) == {}
    assert generator.claim is not None
    assert generator.claim.state is ClaimState.RELEASED
    started = time.monotonic()
    error = _raises(ClaimLost, generator.generate, "generate() after close()")
    assert "released" in str(error), error
    assert time.monotonic() - started < 1.0, "a closed generator should refuse at once"


@check("claimed")
def claims_list_shows_holder_since_and_mark(trial: Trial) -> None:
    """``claims list`` shows the holder, since when, and a ceiling above what it minted."""
    url = trial.pool()
    started_ms = _now_ms()
    generator = trial.generator(url)
    minted = generator.batch(1_000).ints()
    rows = list(trial.claims(url).values())
    listed_at = _now_ms()

    assert len(rows) == 1, rows
    row = rows[0]
    assert (row.generator, row.cluster) == (generator.generator, generator.cluster)
    assert row.holder == holder_description()
    assert row.since_ms is not None
    assert started_ms - 1_000 <= row.since_ms <= listed_at, (started_ms, row.since_ms)
    assert row.high_water_mark_ms is not None
    assert generator.claim is not None
    ttl_ms = round(generator.claim.ttl_s * 1000)
    # The mark is a ceiling: at or above every timestamp used, at most one TTL ahead.
    assert max(_timestamps(minted)) <= row.high_water_mark_ms <= listed_at + ttl_ms


@check("claimed")
def claims_see_their_pool_fill(trial: Trial) -> None:
    """Each claim's view of its pool (``pool_seen``, the ``idmint_pool_*`` gauges) has
    one free identity fewer than the claim before it saw."""
    ids = trial.ids(4)
    url = trial.pool(generators=span(ids))
    seen = []
    for _ in range(3):
        claim = trial.generator(url).claim
        assert claim is not None
        # Looked at by the claim's renewal thread once it has claimed.
        wait_for(
            lambda: claim.pool_seen is not None,  # noqa: B023 - called in this iteration only
            timeout=claim.ttl_s + 5,
            what="the claim's view of its pool (Claim.pool_seen)",
        )
        view = claim.pool_seen
        assert view is not None
        assert (view.space, view.size) == (GENERATOR.name, len(ids)), view
        seen.append(view.free)
    assert seen == [3, 2, 1], f"free identities seen by three claims in turn: {seen}"


@check("claimed")
def each_holder_of_an_identity_is_recorded(trial: Trial) -> None:
    """Two holders of one identity in turn: each one's IDs name it (``idmint whois``,
    :meth:`Coordinator.read_mark`'s ``holders``), with this process, its claim's first
    and last timestamps around them; a time before both names nobody."""
    url = trial.pool(generators=span(trial.ids(1)))
    started_ms = _now_ms()
    minted = []
    for _ in range(2):
        generator = trial.generator(url)
        minted.append(generator.generate())
        generator.close()  # the next claim takes the same identity, after its hold-off
    first, second = (who_minted(value, url) for value in minted)
    for holder, value in ((first, minted[0]), (second, minted[1])):
        assert holder is not None, f"no holder recorded for {value} at {url.redacted()}"
        assert (holder.host, holder.pid) == (socket.gethostname(), os.getpid()), holder
        assert started_ms <= holder.first_ms <= value.timestamp_ms <= holder.last_ms, holder
    assert first is not None
    assert second is not None
    assert first.last_ms <= second.first_ms, (first, second)
    before = Uid64.build(
        timestamp_ms=started_ms - 60_000,
        sequence=0,
        generator=minted[0].generator,
        cluster=minted[0].cluster,
    )
    assert who_minted(before, url) is None, "a holder named for a time nobody held it"


# -- failures: pool, coordinator, configuration ----------------------------------------------


@check("claimed")
def pool_exhausted_after_claim_timeout(trial: Trial) -> None:
    """A claimant finding no free ID gives up after claim_timeout, naming the pool."""
    ids = trial.ids(2)
    url = trial.pool(generators=span(ids), claim_timeout=1)
    for _ in range(2):
        trial.generator(url)

    started = time.monotonic()
    error = _raises(PoolExhausted, lambda: new_generator("uid64", coordinator=url), "a third")
    waited = time.monotonic() - started

    assert 1.0 <= waited < 4.0, f"gave up after {waited:.2f} s; claim_timeout is 1 s"
    assert re.search(r"\b2\b", str(error)), f"the pool size (2) is not named: {error}"
    assert span(ids) in str(error), error


@check("claimed")
def a_claimant_waiting_for_its_range_does_not_hold_up_others(trial: Trial) -> None:
    """A claim that waits (its range is full) leaves the rest of the pool claimable."""
    waiter_timeout_s = 4
    base = trial.pool()
    first, *others = trial.ids(4)
    trial.generator(base.replace(options={**base.options, "generators": f"{first}-{first}"}))
    waiter_outcome: list[BaseException | None] = []

    def wait_for_the_first() -> None:
        url = base.replace(
            options={
                **base.options,
                "generators": f"{first}-{first}",
                "claim_timeout": waiter_timeout_s,
            }
        )
        try:
            new_generator("uid64", coordinator=url).close()
            waiter_outcome.append(None)
        except BaseException as error:
            waiter_outcome.append(error)

    waiter = threading.Thread(target=wait_for_the_first, daemon=True)
    waiter.start()
    for number in others:  # the later ones certainly overlap the waiter's wait
        started = time.monotonic()
        url = base.replace(
            options={**base.options, "generators": f"{number}-{number}", "claim_timeout": 5}
        )
        with new_generator("uid64", coordinator=url) as bystander:
            assert bystander.generate().generator == number
        took = time.monotonic() - started
        assert took < 2, f"claiming free generator {number} took {took:.2f} s"
    assert waiter.is_alive(), f"the waiter should still be waiting for generator {first}"
    waiter.join(waiter_timeout_s + 10)
    assert len(waiter_outcome) == 1, "the waiter did not give up after its claim_timeout"
    assert isinstance(waiter_outcome[0], PoolExhausted), waiter_outcome


@check("claimed")
def a_failed_claim_leaves_nothing_running(trial: Trial) -> None:
    """Claims that fail leave no thread behind."""
    url = trial.pool(generators=span(trial.ids(1)), claim_timeout=0.2)
    trial.generator(url)
    threads_before = threading.active_count()
    for _ in range(3):
        _raises(PoolExhausted, lambda: new_generator("uid64", coordinator=url), "a second")
    try:
        wait_for(
            lambda: threading.active_count() <= threads_before,
            timeout=2,
            what="the failed claims' threads to end",
        )
    except TimeoutError:
        names = sorted(thread.name for thread in threading.enumerate())
        raise AssertionError(
            f"{threading.active_count() - threads_before} threads left running: {names}"
        ) from None


def _unused_port() -> int:
    """A port of 127.0.0.1 nothing listens on (the kernel's pick, let go at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@check("any", needs_servers=True)
def an_unreachable_coordinator_is_unavailable_quickly(trial: Trial) -> None:
    """A server that cannot be reached is CoordinatorUnavailable within connect_timeout."""
    url = trial.pool(connect_timeout=1).replace(hosts=[("127.0.0.1", _unused_port())])
    started = time.monotonic()
    error = _raises(
        CoordinatorUnavailable,
        lambda: new_generator("uid64", coordinator=url),
        "an unreachable coordinator",
    )
    waited = time.monotonic() - started
    assert waited < 4.0, f"took {waited:.2f} s with connect_timeout=1"
    assert "127.0.0.1" in str(error), error


def _bad_urls(trial: Trial, url: CoordinatorUrl, ttl_s: float) -> dict[str, str]:
    """Malformed URLs and options, each of which must be a ConfigurationError."""

    def option(**changed: object) -> str:
        return url.replace(options={**url.options, **changed}).text

    twice = url.text + ("&" if "?" in url.text else "?") + "generators=0-1&generators=0-1"
    if trial.configured:
        return {
            "generator out of range": option(generator=2048),
            "cluster out of range": option(cluster=16),
            "claiming option": option(generators="0-3"),
            "hosts": url.replace(hosts=[("127.0.0.1", 2181)]).text,
            "not a number": option(generator="five"),
            "option twice": url.text + ("&" if "?" in url.text else "?") + "cluster=1&cluster=2",
            "not a url": url.scheme,
        }
    return {
        "unknown option": option(bogus=1),
        "reversed range": option(generators="5-2"),
        "range too wide": option(**ClaimOptions.query(pool=range(ClaimOptions().pool.stop + 1))),
        "range not numbers": option(generators="a-b"),
        "negative claim_timeout": option(claim_timeout=-1),
        "margin over half the ttl": option(margin=ttl_s),
        "cluster out of range": option(cluster=16),
        "option twice": twice,
        "unknown scheme": url.text.replace(f"{url.scheme}://", "nosuch://", 1),
        "not a url": url.text.partition("://")[2] or "nothing",
    }


@check("any")
def bad_urls_and_options_are_configuration_errors(trial: Trial) -> None:
    """A malformed URL or option is a ConfigurationError, whatever is wrong with it."""
    url = trial.pool()
    generator = trial.generator(url)
    assert generator.claim is not None
    ttl_s = generator.claim.ttl_s
    accepted = {}
    for case, bad in _bad_urls(trial, url, ttl_s).items():
        try:
            made = new_generator("uid64", coordinator=bad)
        except ConfigurationError:
            continue
        except Exception as error:
            accepted[case] = f"{bad}: {type(error).__name__}: {error}"
            continue
        made.close()
        accepted[case] = f"{bad}: accepted"
    assert not accepted, f"not refused with ConfigurationError: {accepted}"

    # Identity options contradict (configured) or cannot be given with (claimed) a URL.
    other = (generator.generator + 1) % 2048
    if not trial.configured or "generator" in url.options:
        _raises(
            ConfigurationError,
            lambda: new_generator("uid64", coordinator=url, generator=other),
            f"generator={other} beside {url.redacted()}",
        )
    _raises(ConfigurationError, lambda: new_generator("muid", coordinator=url), "muid on a URL")


# -- high-water marks ---------------------------------------------------------------------


def _mint_and_release(url: CoordinatorUrl) -> list[int]:
    """Mint with the pool's one generator ID, then release it; return what was minted."""
    with new_generator("uid64", coordinator=url) as first:
        return first.batch(5_000).ints() + [int(first.generate()) for _ in range(500)]


def _holdoff_s(trial: Trial, url: CoordinatorUrl) -> float:
    """How long a released ID of ``url``'s pool is held off at most: the driver's TTL
    (or session timeout) + the skew, by real time."""
    coordinator = trial.coordinator(url)
    return coordinator.ttl_s + coordinator.options.skew_ms / 1000


@check("claimed")
def a_successor_with_a_slow_clock_starts_above_the_mark(trial: Trial) -> None:
    """A successor whose clock runs behind starts above its predecessor's high-water mark."""
    ids = trial.ids(1)
    url = trial.pool(generators=span(ids), wait_timeout=5)
    url = url.replace(options={**url.options, "claim_timeout": _holdoff_s(trial, url) + 4})
    before = _mint_and_release(url)
    highest = max(_timestamps(before))

    clock = OffsetClock(-1_500)
    with new_generator("uid64", coordinator=url, clock=clock) as second:
        after = second.batch(3_000).ints() + [int(second.generate()) for _ in range(300)]
        clock_now_ms = clock.time_ns() // 1_000_000
        assert {Uid64(value).generator for value in after} == set(ids)

    stamps = _timestamps(after)
    assert min(stamps) > highest, f"issued at {min(stamps)}, not above {highest}"
    # It waited for its own clock to pass the mark; it did not mint in its future.
    assert max(stamps) <= clock_now_ms
    _assert_unique(before + after)


@check("claimed")
def a_successor_with_a_clock_far_behind_refuses(trial: Trial) -> None:
    """A successor whose clock is a minute behind refuses rather than mint below the mark."""
    wait_timeout_s = 2
    url = trial.pool(generators=span(trial.ids(1)), wait_timeout=wait_timeout_s)
    # Its clock a minute behind, the successor waits out the hold-off by real time.
    holdoff_s = _holdoff_s(trial, url)
    url = url.replace(options={**url.options, "claim_timeout": holdoff_s + 4})
    _mint_and_release(url)

    started = time.monotonic()

    def mint_one() -> Any:
        with new_generator("uid64", coordinator=url, clock=OffsetClock(-60_000)) as generator:
            return generator.generate()

    error = _raises(ClockMovedBackwards, mint_one, "a successor a minute behind")
    assert "high-water mark" in str(error), error
    took = time.monotonic() - started
    limit = holdoff_s + wait_timeout_s + 2.0
    assert took < limit, f"refused after {took:.1f} s: not within its hold-off and wait timeout"


@check("claimed")
def release_records_the_newest_timestamp(trial: Trial) -> None:
    """Releasing records a final high-water mark at or above every timestamp used."""
    url = trial.pool(generators=span(trial.ids(1)))
    values = _mint_and_release(url)
    highest = max(_timestamps(values))

    identity = {"generator": Uid64(values[0]).generator, "cluster": Uid64(values[0]).cluster}
    mark = trial.hooks.read_mark(trial.coordinator(url), GENERATOR, identity)
    assert mark is not None, "no high-water mark was recorded"
    assert mark.released_ms is not None, mark
    assert mark.ceiling_ms >= highest, (
        f"released with high-water mark {mark.ceiling_ms}, below {highest} issued"
    )


# -- the session expires under a live generator ----------------------------------------------


def _expiry_makes_a_new_claim(trial: Trial, size: int) -> None:
    """Expired on the server: no IDs from the old claim, then a new claim, unique IDs.

    With one ID in the pool the same one comes back once its hold-off has passed;
    with two the other one is taken at once.
    """
    ids = trial.ids(size)
    url = trial.pool(generators=span(ids), wait_timeout=6)
    generator = trial.generator(url)
    claim = generator.claim
    assert claim is not None
    before = generator.batch(3_000).ints()
    old = {"generator": generator.generator, "cluster": generator.cluster}
    old_grant = claim.last_grant
    assert old_grant is not None
    coordinator = trial.coordinator(url)

    trial.hooks.expire(coordinator, claim)
    # The old claim can record nothing more, and the new one has not started yet.
    mark = trial.hooks.read_mark(coordinator, GENERATOR, old)
    assert mark is not None, "the expired claim left no high-water mark"

    if trial.hooks.expiry_seen_at_once:
        # A session event tells the client: the claim is fenced at once. (A lease
        # tells nothing: the next renewal finds it gone; until then the ceiling
        # keeps the old claim's IDs below any successor's.) With another ID free
        # the new claim may be made by now: the old one is over either way.
        grant = claim.last_grant
        assert claim.state in (ClaimState.LOST, ClaimState.CLAIMING) or (
            grant is not None and grant.epoch > old_grant.epoch
        ), claim.state
    skew_s = claim.options.skew_ms / 1000
    # 0-1: the other ID at once (a lease: at the next renewal); 0-0: after the hold-off.
    timeout = claim.ttl_s + 3 if size == 2 else 2 * claim.ttl_s + skew_s + 4
    wait_for_new_claim(claim, old_grant.epoch, timeout=timeout)
    after = generator.batch(3_000).ints()
    assert claim.state is ClaimState.ACTIVE, claim.problem

    _assert_unique(before + after)
    minted = [Uid64(value) for value in after]
    if size == 2:
        assert {i.generator for i in minted} == set(ids) - {old["generator"]}
    else:
        assert {i.generator for i in minted} == {old["generator"]}
        assert min(i.timestamp_ms for i in minted) > mark.ceiling_ms
    assert set(trial.claims(url)) == {generator.generator}


@check("claimed", needs=("expire",))
def an_expired_claim_comes_back_above_its_mark(trial: Trial) -> None:
    """An expired claim's only ID comes back once held off, above the mark it left."""
    _expiry_makes_a_new_claim(trial, 1)


@check("claimed", needs=("expire",))
def an_expired_claim_moves_to_a_free_id(trial: Trial) -> None:
    """An expired claim moves to the pool's other ID, which is free at once."""
    _expiry_makes_a_new_claim(trial, 2)


# -- a store that forgets ------------------------------------------------------------------


@check("claimed", needs=("forget",))
def a_store_that_forgets_holds_claimants_back_for_the_longest_lease(trial: Trial) -> None:
    """After the store forgets, a successor with a short TTL starts above a holder's ceiling.

    The holder has the pool's longest lease (its ``max_ttl``); the store forgets
    just after a renewal, so the holder goes on minting the longest before its next
    one finds the lease gone; a successor with the shortest TTL claims the ID at
    once. What it may not rule out is waited for with the pool's longest lease,
    not its own.
    """
    base = trial.pool(generators=span(trial.ids(1)))
    longest_s = trial.coordinator(base).ttl_s
    shortest_s = 1.0
    if longest_s <= shortest_s:
        raise Skipped(f"the URL's ttl is {longest_s:g} s: give a longer one for this check")

    def leased(ttl_s: float) -> CoordinatorUrl:
        changed = LeaseOptions.query(ttl_s=ttl_s, max_ttl_s=longest_s)
        return base.replace(options={**base.options, **changed})

    holder = trial.generator(leased(longest_s))
    claim = holder.claim
    assert claim is not None
    with minting(holder) as (minter, _):
        minter.wait_for_count(3_000, timeout=10)
        renewals = claim.renewals
        wait_for(lambda: claim.renewals > renewals, timeout=longest_s, what="a renewal")
        trial.hooks.forget(base)
        successor = trial.generator(leased(shortest_s))
        after = [int(successor.generate()), *successor.batch(3_000).ints()]
        wait_for(
            lambda: claim.state is not ClaimState.ACTIVE,
            timeout=longest_s,
            what="the holder to find its lease gone",
        )
    assert {Uid64(value).generator for value in after} == {holder.generator}
    grant = claim.last_grant
    assert grant is not None
    first = min(_timestamps(after))
    assert first > grant.ceiling_ms, (
        f"the successor minted at {first}, at or below {grant.ceiling_ms}, the ceiling of a "
        f"holder the store forgot ({grant.ceiling_ms - first} ms)"
    )
    _assert_unique(minter.values + after)


# -- the coordinator goes away -----------------------------------------------------------

OUTAGE_WAIT_TIMEOUT_S = 0.5


def _outage(trial: Trial, kind: str) -> None:
    """The server stops: no ID past the deadline, errors after wait_timeout; then back.

    ``short``: down for less than the session timeout. ``long``: down for longer; a
    server that restores its sessions when it restarts (ZooKeeper) may keep the
    claim, else a new claim is made. ``session-lost``: the session does not survive
    (it is expired the moment the server is back): a new claim is made, here the
    pool's other ID (the first is held off), and minting carries on.
    """
    ids = trial.ids(2)
    url = trial.pool(wait_timeout=OUTAGE_WAIT_TIMEOUT_S, generators=span(ids))
    generator = trial.generator(url)
    claim = generator.claim
    assert claim is not None
    first = {"generator": generator.generator, "cluster": generator.cluster}
    first_grant = claim.last_grant
    assert first_grant is not None
    ttl_s = claim.ttl_s

    with minting(generator) as (minter, watch):
        minter.wait_for_count(3_000, timeout=10)
        trial.hooks.stop_server(url)
        stopped_at = time.monotonic()
        try:
            minter.wait_for_errors(
                2, timeout=ttl_s + 2 * OUTAGE_WAIT_TIMEOUT_S + 5, what="generate() to fail"
            )
            down_for = min(1.0, ttl_s / 2) if kind == "short" else ttl_s + 0.5
            # The outage itself (a duration under test, not a synchronisation).
            time.sleep(max(0.0, stopped_at + down_for - time.monotonic()))
        finally:
            # From here the server may serve again (before start_server() returns).
            restarting_at = time.monotonic()
            trial.hooks.start_server(url)
        expired_mark = None
        if kind == "session-lost":
            coordinator = trial.coordinator(url)
            trial.hooks.expire(coordinator, claim)
            expired_mark = trial.hooks.read_mark(coordinator, GENERATOR, first)
            assert expired_mark is not None, "the expired claim left no high-water mark"
            # A lease learns of it at the next renewal; until then the old claim may
            # still issue (below its ceiling).
            wait_for_new_claim(claim, first_grant.epoch, timeout=ttl_s)
        resumed_at = time.monotonic()
        minter.wait_for_count(minter.count + 3_000, timeout=10, what="minting to resume")

    outage = Outage(
        minter, watch, stopped_at, restarting_at, resumed_at, ids, first_grant.epoch, expired_mark
    )
    _check_the_outage(trial, url, generator, outage)


@dataclass(frozen=True)
class Outage:
    """What was minted around an outage, and when it began, ended and minting resumed."""

    minter: Minter
    watch: RenewalWatch
    stopped_at: float
    restarting_at: float
    resumed_at: float
    ids: range
    """The pool's IDs."""
    first_epoch: int
    """The epoch of the claim's grant before the outage."""
    expired_mark: HighWaterMark | None
    """The mark the claim left when its session was expired (None: it was not)."""


def _check_the_outage(trial: Trial, url: CoordinatorUrl, generator: Any, outage: Outage) -> None:
    """What must hold after an outage (see :func:`_outage`)."""
    claim = generator.claim
    minter, stopped_at, restarting_at = outage.minter, outage.stopped_at, outage.restarting_at
    expired_mark = outage.expired_mark
    # Nothing was issued once the claim could have expired on the server.
    late = minter.issued_between(stopped_at + claim.ttl_s, restarting_at)
    assert not late, f"{len(late)} IDs issued after stop + TTL, while the server was down"
    outage.watch.check_deadline(minter)

    # generate() waited wait_timeout, then said what to check.
    outage_errors = [e for e in minter.errors if e.called_at < restarting_at]
    assert outage_errors, "generate() never failed while the server was down"
    for failure in outage_errors:
        assert isinstance(failure.error, (CoordinatorUnavailable, ClaimLost)), failure.error
        assert failure.raised_at - failure.called_at >= OUTAGE_WAIT_TIMEOUT_S
        assert "check" in str(failure.error), failure.error
    assert outage_errors[0].raised_at < stopped_at + claim.ttl_s + OUTAGE_WAIT_TIMEOUT_S + 1

    values = minter.values
    _assert_unique(values)
    stamps = zip(values, minter.asked, minter.returned, strict=True)
    before = [v for v, _, returned in stamps if returned <= stopped_at]
    after = [v for v, asked in zip(values, minter.asked, strict=True) if asked >= outage.resumed_at]
    assert len(after) >= 3_000
    generators_after = {Uid64(v).generator for v in after}
    last_grant = claim.last_grant
    assert last_grant is not None
    first = Uid64(values[0]).generator
    if last_grant.epoch == outage.first_epoch:
        # The session survived (ZooKeeper restores sessions when it restarts).
        assert expired_mark is None, "the expired session was not noticed"
        assert generators_after == {first}, "the session survived: same claim"
        assert min(_timestamps(after)) > max(_timestamps(before))
    else:
        # A new claim: one generator ID of the pool; the same one again only above
        # the ceiling the old claim recorded (or at least above what it issued).
        assert len(generators_after) == 1, generators_after
        assert generators_after <= set(outage.ids)
        if generators_after == {first}:
            floor = expired_mark.ceiling_ms if expired_mark else max(_timestamps(before))
            assert min(_timestamps(after)) > floor
    assert claim.state is ClaimState.ACTIVE, claim.problem
    # After a new claim the old one may still be listed until the coordinator
    # lets it expire (a ZooKeeper session outlives a restart by its timeout).
    wait_for(
        lambda: set(trial.claims(url)) == {generator.generator},
        timeout=2 * claim.ttl_s + 5,
        what="the pool to list only the claim held now",
    )
    assert trial.claims(url)[generator.generator].holder == holder_description()


@check("claimed", needs=("stop_server", "start_server"))
def a_short_outage_fences_then_resumes(trial: Trial) -> None:
    """Down for less than a TTL: nothing past the deadline, errors after wait_timeout."""
    _outage(trial, "short")


@check("claimed", needs=("stop_server", "start_server"))
def a_long_outage_fences_then_resumes(trial: Trial) -> None:
    """Down for longer than a TTL: fenced, then the claim survives or a new one is made."""
    _outage(trial, "long")


@check("claimed", needs=("stop_server", "start_server", "expire"))
def an_outage_that_loses_the_session_fences_then_claims_again(trial: Trial) -> None:
    """Down, and the session lost as it comes back: a new claim above the old mark."""
    _outage(trial, "session-lost")


CHECKS: tuple[Check, ...] = (
    ids_are_unique_and_carry_the_identity,
    two_claimants_get_distinct_identities,
    a_configured_identity_is_held_once,
    a_configured_identity_is_refused_while_its_mark_is_renewed,
    generators_option_limits_the_pool,
    close_releases_the_claim,
    claims_list_shows_holder_since_and_mark,
    claims_see_their_pool_fill,
    each_holder_of_an_identity_is_recorded,
    pool_exhausted_after_claim_timeout,
    a_claimant_waiting_for_its_range_does_not_hold_up_others,
    a_failed_claim_leaves_nothing_running,
    an_unreachable_coordinator_is_unavailable_quickly,
    bad_urls_and_options_are_configuration_errors,
    a_successor_with_a_slow_clock_starts_above_the_mark,
    a_successor_with_a_clock_far_behind_refuses,
    release_records_the_newest_timestamp,
    an_expired_claim_comes_back_above_its_mark,
    an_expired_claim_moves_to_a_free_id,
    a_store_that_forgets_holds_claimants_back_for_the_longest_lease,
    a_short_outage_fences_then_resumes,
    a_long_outage_fences_then_resumes,
    an_outage_that_loses_the_session_fences_then_claims_again,
)
"""Every check, in the order a run takes them."""


def by_name(names: list[str]) -> list[Check]:
    """The checks called ``names``, in that order."""
    known = {found.name: found for found in CHECKS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigurationError(
            f"no check called {', '.join(unknown)}; `python -m idmint.testing --list` lists them"
        )
    return [known[name] for name in names]
