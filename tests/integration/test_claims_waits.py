"""Every wait over a second says once what it waits for, and for how long at most.

README promises it: one WARNING on ``idmint.coordinate.waiting`` (the CLI shows it
as ``idmint: waiting up to N s for ...``) for a store that does not answer, a pool
whose IDs are all held or held off, and a first claim that settles on a pool the
store cannot vouch for; a wait under a second says nothing.
"""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import Iterator

import pytest
from tests.cli_process import ERROR_PREFIX, assert_one_error_line, run_idmint
from tests.integration.claims_helpers import (
    SHARED_BACKENDS,
    Backend,
    backend_params,
)
from tests.servers import wait_until
from tests.servers.ports import LOOPBACK
from tests.servers.redis import RedisServer

from idmint import PoolExhausted, new_generator
from idmint.coordinate import connect
from idmint.coordinate.memory import MemoryCoordinator
from idmint.errors import CoordinatorUnavailable
from idmint.waiting import waiting_log

SHORT_S = 3
"""A wait long enough to be announced, short enough for the suite."""


def notices(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == waiting_log.name]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.mark.parametrize("backend", backend_params(["postgres", "redis"]), indirect=True)
def test_a_store_that_does_not_answer_is_announced_once(backend: Backend, silent_port: int) -> None:
    url = backend.url(hosts=f"{LOOPBACK}:{silent_port}", connect_timeout=SHORT_S)
    result = run_idmint("generate", "--coordinator", url)
    assert result.returncode == 69, result.stderr
    waiting, error = result.stderr.splitlines()
    store = "PostgreSQL" if backend.name == "postgres" else "Redis"
    assert re.match(
        rf"^idmint: waiting up to {SHORT_S} s for {store} at \S+:{silent_port}/", waiting
    )
    assert error.startswith(ERROR_PREFIX), error


@pytest.mark.parametrize("backend", backend_params(["redis"]), indirect=True)
def test_a_paused_store_is_announced_once_while_claiming(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """The session's own Redis, frozen (SIGSTOP) after the coordinator reached it; the
    harness thaws it after the test."""
    server = backend.server
    assert isinstance(server, RedisServer)
    caplog.set_level("WARNING", logger=waiting_log.name)
    with connect(backend.url(connect_timeout=SHORT_S)) as coordinator:
        server.freeze()
        try:
            with pytest.raises(CoordinatorUnavailable):
                coordinator.claim()
        finally:
            server.thaw()
    (notice,) = notices(caplog)
    assert re.match(rf"waiting up to {SHORT_S} s for redis://\S+ \S+ to answer$", notice), notice


@pytest.mark.parametrize("backend", backend_params(SHARED_BACKENDS), indirect=True)
def test_a_claimant_waiting_for_a_held_id_says_so_once(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger=waiting_log.name)
    url = backend.url(generators="5-5", claim_timeout=SHORT_S)
    with (
        connect(url) as holder,
        holder.claim(),
        connect(url) as other,
        pytest.raises(PoolExhausted),
    ):
        other.claim()
    (notice,) = notices(caplog)
    assert re.match(rf"waiting up to {SHORT_S} s for a free generator ID at ", notice), notice
    assert "pool 5-5" in notice


@pytest.mark.parametrize("backend", backend_params(["local"]), indirect=True)
def test_a_host_pool_hold_off_is_announced_once(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A released ID is held off its TTL + the skew (2 s on local://) when no other is free."""
    url = backend.url(generators="5-5", ttl=1)
    with connect(url) as first, first.claim() as claim:
        claim.wait()
    caplog.set_level("WARNING", logger=waiting_log.name)
    with connect(url) as second, second.claim():
        pass
    (notice,) = notices(caplog)
    assert re.match(r"waiting up to \d+ s for a free generator ID at ", notice), notice


@pytest.mark.parametrize("backend", backend_params(["postgres", "redis"]), indirect=True)
def test_a_first_claim_on_a_new_pool_says_it_settles_and_the_next_says_nothing(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A new pool looks like one the store forgot: its first claim waits max_ttl + the
    skew, and says so once; a claim on the settled pool waits under a second, silently."""
    caplog.set_level("WARNING", logger=waiting_log.name)
    root = backend.new_root(settled=False)
    url = backend.url(root, ttl=SHORT_S)
    with new_generator("uid64", coordinator=url) as generator:
        generator.generate()
    (notice,) = notices(caplog)
    assert re.match(r"waiting up to \d+ s for the generator ID claim at \S+ .*to settle", notice)
    caplog.clear()
    with new_generator("uid64", coordinator=url) as generator:
        generator.generate()
    assert notices(caplog) == []


def test_a_redis_database_the_server_does_not_have_is_a_usage_error(redis: RedisServer) -> None:
    """``redis://HOST/99`` on a server of 16 databases: the URL's mistake (exit 2), said
    at once, not an unexplained failure (exit 1)."""
    url = redis.url().rsplit("/", 1)[0] + "/99?connect_timeout=600"
    result = run_idmint("generate", "--coordinator", url)
    assert result.returncode == 2, result.stderr
    assert "no database 99" in assert_one_error_line(result.stderr)


def test_a_generator_waiting_for_its_claim_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    """A claim whose server is out of reach past its deadline: what a generator calls,
    ``Claim.wait``, waits ``wait_timeout`` for it, says so once (with the claim's state),
    then raises."""
    caplog.set_level("WARNING", logger=waiting_log.name)
    url = f"memory://waits-{uuid.uuid4().hex}?ttl=1&wait_timeout={SHORT_S}"
    with connect(url) as coordinator, coordinator.claim() as claim:
        claim.wait()
        assert isinstance(coordinator, MemoryCoordinator)
        with coordinator.outage():
            wait_until(lambda: claim.grant() is None, timeout=30, description="the deadline")
            with pytest.raises(CoordinatorUnavailable):
                claim.wait()
    (notice,) = notices(caplog)
    assert re.match(rf"waiting up to {SHORT_S} s for a usable claim \(", notice), notice
