"""What every coordinator promises, whatever it is: static, ZooKeeper or etcd.

Each test runs against the backends of :data:`ALL_BACKENDS` (configured identity
included) or :data:`CLAIMED_BACKENDS` (claimed identities only); see
``claims_helpers``. Every test uses a root of its own.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
from collections.abc import Callable

import pytest
from tests.integration.claims_helpers import (
    DEFAULT_TTL_S,
    SHARED_BACKENDS,
    STATIC_CLUSTER,
    STATIC_GENERATOR,
    Backend,
    CliProcess,
    all_backends,
    assert_one_error_line,
    backend_params,
    claimed_backends,
    decode,
    held_generators,
    holder_of_this_process,
    now_ms,
    run_idmint,
    server_backends,
    wait_for,
)

from idmint import (
    ClaimLost,
    ConfigurationError,
    CoordinatorUnavailable,
    IdentityInUse,
    PoolExhausted,
    new_generator,
)
from idmint.coordinate import ClaimState

# -- minting ---------------------------------------------------------------------------


@all_backends
def test_minted_ids_are_unique_and_carry_the_claimed_identity(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=backend.url()))
    values = generator.batch(20_000).ints()
    values += [int(generator.generate()) for _ in range(3_000)]
    values += generator.batch(5_000).ints()

    assert len(set(values)) == len(values)
    ids = decode(f"{value:016x}" for value in values)
    assert {(i.generator, i.cluster) for i in ids} == {(generator.generator, generator.cluster)}
    if backend.claims:
        assert generator.claim is not None
        assert generator.claim.state is ClaimState.ACTIVE
        assert dict(generator.claim.identity or {}) == {
            "generator": generator.generator,
            "cluster": generator.cluster,
        }
    else:
        assert (generator.generator, generator.cluster) == (STATIC_GENERATOR, STATIC_CLUSTER)
        # A configured identity is held on this host, nothing more.
        assert generator.claim is not None
        assert dict(generator.claim.identity or {}) == {
            "generator": STATIC_GENERATOR,
            "cluster": STATIC_CLUSTER,
        }


@all_backends
def test_two_generators_get_distinct_generator_ids(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    url = backend.url()
    first = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    if not backend.claims:
        # A configured identity is the same for everyone given it, so on one host
        # a second holder refuses: together they would mint the same IDs.
        assert (first.generator, first.cluster) == (STATIC_GENERATOR, STATIC_CLUSTER)
        with pytest.raises(IdentityInUse, match=f"generator {STATIC_GENERATOR}, cluster"):
            new_generator("uid64", coordinator=url)
        first.close()
        again = exit_stack.enter_context(new_generator("uid64", coordinator=url))
        assert again.generator == STATIC_GENERATOR, "a closed holder lets the identity go"
        return
    second = exit_stack.enter_context(new_generator("uid64", coordinator=url))

    assert first.generator != second.generator
    assert first.cluster == second.cluster
    values = first.batch(5_000).ints() + second.batch(5_000).ints()
    assert len(set(values)) == len(values)
    assert set(held_generators(backend, url)) == {first.generator, second.generator}


@claimed_backends
def test_generators_option_limits_the_pool(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    url = backend.url(generators="5-7", claim_timeout=0.5)
    generators = [exit_stack.enter_context(new_generator("uid64", coordinator=url)) for _ in "abc"]

    assert sorted(g.generator for g in generators) == [5, 6, 7]
    for generator in generators:
        assert {i.generator for i in generator.batch(200)} == {generator.generator}
    assert set(held_generators(backend, url)) == {5, 6, 7}
    with pytest.raises(PoolExhausted):
        new_generator("uid64", coordinator=url)


@claimed_backends
def test_close_releases_the_claim(backend: Backend, exit_stack: contextlib.ExitStack) -> None:
    url = backend.url()
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    generator.batch(100)
    held = held_generators(backend, url)
    assert set(held) == {generator.generator}
    assert held[generator.generator].holder == holder_of_this_process()

    generator.close()

    assert held_generators(backend, url) == {}
    assert generator.claim is not None
    assert generator.claim.state is ClaimState.RELEASED
    started = time.monotonic()
    with pytest.raises(ClaimLost, match="released"):
        generator.generate()
    assert time.monotonic() - started < 1.0, "a closed generator should refuse at once"


# -- claims list -----------------------------------------------------------------------


def _claims_json(url: str) -> list[dict[str, object]]:
    listed = run_idmint("claims", "list", "--coordinator", url, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    return [json.loads(line) for line in listed.stdout.splitlines()]


@pytest.mark.parametrize("backend", backend_params(["static", *SHARED_BACKENDS]), indirect=True)
def test_cli_claims_list_shows_holder_since_and_high_water_mark(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    url = backend.url()
    if not backend.claims:
        assert _claims_json(url) == [
            {
                "cluster": STATIC_CLUSTER,
                "generator": STATIC_GENERATOR,
                "holder": "static (configured, not claimed)",
                "since_ms": None,
                "high_water_mark_ms": None,
                "state": "static",
                "space": "generator",
            }
        ]
        return

    minting = exit_stack.enter_context(
        CliProcess("generate", "--coordinator", url, "--count", "0", stamp=False)
    )
    minting.wait_for_lines(1_000, timeout=30, what="the CLI to mint its first IDs")
    printed = decode(minting.lines[:1_000])
    generator = printed[0].generator
    newest_printed = max(i.timestamp_ms for i in printed)

    rows = _claims_json(url)
    listed_at = now_ms()

    assert len(rows) == 1, rows
    row = rows[0]
    assert row["generator"] == generator
    assert row["cluster"] == printed[0].cluster
    assert row["holder"] == holder_of_this_process(minting.pid)
    since = row["since_ms"]
    mark = row["high_water_mark_ms"]
    assert isinstance(since, int)
    assert minting.started_ms <= since <= listed_at
    assert isinstance(mark, int)
    # The mark is a ceiling: at or above every timestamp used, at most one TTL ahead.
    assert newest_printed <= mark <= listed_at + round(DEFAULT_TTL_S * 1000)

    minting.send(signal.SIGTERM)
    assert minting.wait(timeout=30) == 128 + signal.SIGTERM, minting.stderr
    assert _claims_json(url) == [], "SIGTERM should release the claim"
    values = [int(i) for i in minting.ids()]
    assert len(set(values)) == len(values)


# -- failures: pool, coordinator, configuration ----------------------------------------------


@claimed_backends
def test_pool_exhausted_after_claim_timeout(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    url = backend.url(generators="0-1", claim_timeout=1)
    for _ in range(2):
        exit_stack.enter_context(new_generator("uid64", coordinator=url))

    started = time.monotonic()
    with pytest.raises(PoolExhausted) as exhausted:
        new_generator("uid64", coordinator=url)
    waited = time.monotonic() - started

    assert 1.0 <= waited < 4.0, f"gave up after {waited:.2f} s; claim_timeout is 1 s"
    message = str(exhausted.value)
    assert re.search(r"\b2\b", message), f"the pool size (2) is not named: {message}"
    assert "0-1" in message, message


WAITER_TIMEOUT_S = 4


@claimed_backends
def test_a_claimant_waiting_for_its_range_does_not_hold_up_others(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """A claim that waits (its range is full) leaves the rest of the pool claimable.

    ZooKeeper's queue lock orders claimants; one that waited inside it would
    stall every other claimant until its claim_timeout ran out.
    """
    root = backend.new_root()
    exit_stack.enter_context(
        new_generator("uid64", coordinator=backend.url(root, generators="0-0"))
    )
    waiter_outcome: list[BaseException | None] = []

    def wait_for_generator_0() -> None:
        url = backend.url(root, generators="0-0", claim_timeout=WAITER_TIMEOUT_S)
        try:
            new_generator("uid64", coordinator=url).close()
            waiter_outcome.append(None)
        except BaseException as error:
            waiter_outcome.append(error)

    waiter = threading.Thread(target=wait_for_generator_0, daemon=True)
    waiter.start()
    for generator in (1, 2, 3):  # the later ones certainly overlap the waiter's wait
        started = time.monotonic()
        url = backend.url(root, generators=f"{generator}-{generator}", claim_timeout=5)
        with new_generator("uid64", coordinator=url) as bystander:
            assert bystander.generate().generator == generator
        took = time.monotonic() - started
        assert took < 2, f"claiming free generator {generator} took {took:.2f} s"
    assert waiter.is_alive(), "the waiter should still be waiting for generator 0"
    waiter.join(WAITER_TIMEOUT_S + 10)
    assert len(waiter_outcome) == 1, "the waiter did not give up after its claim_timeout"
    assert isinstance(waiter_outcome[0], PoolExhausted), waiter_outcome


@claimed_backends
def test_failed_claim_leaves_nothing_running(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    url = backend.url(generators="0-0", claim_timeout=0.2)
    exit_stack.enter_context(new_generator("uid64", coordinator=url))
    threads_before = threading.active_count()
    for _ in range(3):
        with pytest.raises(PoolExhausted):
            new_generator("uid64", coordinator=url)
    try:
        wait_for(
            lambda: threading.active_count() <= threads_before,
            timeout=2,
            what="the failed claims' threads to end",
        )
    except TimeoutError:
        names = sorted(thread.name for thread in threading.enumerate())
        pytest.fail(f"{threading.active_count() - threads_before} threads left running: {names}")


@server_backends
def test_unreachable_coordinator_raises_coordinator_unavailable_quickly(backend: Backend) -> None:
    url = backend.unreachable_url(backend.new_root(), connect_timeout=1)
    started = time.monotonic()
    with pytest.raises(CoordinatorUnavailable) as unavailable:
        new_generator("uid64", coordinator=url)
    waited = time.monotonic() - started
    assert waited < 4.0, f"took {waited:.2f} s with connect_timeout=1"
    assert "127.0.0.1" in str(unavailable.value)


@server_backends
def test_cli_unreachable_coordinator_prints_one_line(backend: Backend) -> None:
    url = backend.unreachable_url(backend.new_root(), connect_timeout=1)
    started = time.monotonic()
    result = run_idmint("generate", "--coordinator", url, "--count", "5")
    waited = time.monotonic() - started

    assert result.returncode != 0
    assert result.stdout == ""
    assert waited < 6.0
    assert "Traceback" not in result.stderr, result.stderr
    line = assert_one_error_line(result.stderr)
    assert "127.0.0.1" in line


_Bad = Callable[[Backend], str]

BAD_CLAIMED_URLS: dict[str, _Bad] = {
    "unknown option": lambda b: b.url(bogus=1),
    "reversed range": lambda b: b.url(generators="5-2"),
    "range too wide": lambda b: b.url(generators="0-2048"),
    "range not numbers": lambda b: b.url(generators="a-b"),
    "ttl not a number": lambda b: b.url(ttl="soon"),
    "negative claim_timeout": lambda b: b.url(claim_timeout=-1),
    "margin over half the ttl": lambda b: b.url(margin=1.5),
    "cluster out of range": lambda b: b.url(cluster=16),
    "unknown scheme": lambda b: b.url().replace(f"{b.scheme}://", "nosuch://", 1),
    "not a url": lambda b: b.hosts(),
}
BAD_STATIC_URLS: dict[str, _Bad] = {
    "generator out of range": lambda b: b.url(generator=2048),
    "cluster out of range": lambda b: b.url(cluster=16),
    "claiming option": lambda b: b.url(generators="0-3"),
    "hosts": lambda b: "static://127.0.0.1:2181?generator=1",
    "not a number": lambda b: b.url(generator="five"),
    "option twice": lambda b: "static://?generator=1&generator=2",
    "not a url": lambda b: "static",
}


def _bad_urls(backend: Backend) -> dict[str, str]:
    table = BAD_CLAIMED_URLS if backend.claims else BAD_STATIC_URLS
    return {case: make(backend) for case, make in table.items()}


@all_backends
def test_bad_url_or_option_raises_configuration_error(backend: Backend) -> None:
    accepted = {}
    for case, url in _bad_urls(backend).items():
        try:
            generator = new_generator("uid64", coordinator=url)
        except ConfigurationError:
            continue
        except Exception as error:
            accepted[case] = f"{url}: {type(error).__name__}: {error}"
            continue
        generator.close()
        accepted[case] = f"{url}: accepted"
    assert not accepted, f"not refused with ConfigurationError: {accepted}"

    # Identity options contradict (static) or cannot be given with (claimed) a coordinator.
    with pytest.raises(ConfigurationError):
        new_generator("uid64", coordinator=backend.url(), generator=5)
    with pytest.raises(ConfigurationError):
        new_generator("muid", coordinator=backend.url())


@all_backends
def test_cli_bad_url_or_option_exits_2_with_one_line(backend: Backend) -> None:
    urls = _bad_urls(backend)
    for case in ("unknown option", "reversed range", "not a url", "generator out of range"):
        if case not in urls:
            continue
        result = run_idmint("generate", "--coordinator", urls[case], "--count", "3")
        assert result.returncode == 2, (case, result.stderr)
        assert result.stdout == "", case
        assert_one_error_line(result.stderr)
    listed = run_idmint("claims", "list", "--coordinator", urls["not a url"])
    assert listed.returncode == 2
    assert_one_error_line(listed.stderr)
