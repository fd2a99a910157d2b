"""The database coordinators (PostgreSQL, Redis) frozen, killed, crashed under holders.

Holders are CLI processes minting until stopped; every ID minted by every process
is collected and none may appear twice. A successor claims while the store is
back but its holders may not have noticed yet.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections import Counter

import pytest
from tests.integration.claims_helpers import Backend, CliProcess, backend_params
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer

TTL_S = 2.0

stores = pytest.mark.parametrize("backend", backend_params(["postgres", "redis"]), indirect=True)


def _mint_and_collect(
    backend: Backend,
    exit_stack: contextlib.ExitStack,
    fault: str,
) -> list[int]:
    """Three holders of a four-ID pool mint; ``fault`` hits the store; a successor
    claims at once; everyone mints on. Every ID minted."""
    server = backend.server
    assert isinstance(server, (PostgresServer, RedisServer))
    url = backend.url(ttl=TTL_S, generators="0-3", claim_timeout=60, wait_timeout=60)
    arguments = ("generate", "--coordinator", url, "--count", "0")
    holders = [exit_stack.enter_context(CliProcess(*arguments)) for _ in range(3)]
    for holder in holders:
        holder.wait_for_lines(10_000, timeout=60, what="the holders to mint")
    if fault == "frozen-then-killed":
        server.freeze()
        # Frozen past every holder's deadline (a duration under test, not a wait).
        time.sleep(TTL_S * 1.5)
        if isinstance(server, PostgresServer):
            server.process.kill()
        else:
            server.kill()
        server.start()
    elif fault == "crash-restart":
        assert isinstance(server, PostgresServer)
        server.crash()
        server.start()
    successor = exit_stack.enter_context(CliProcess(*arguments))
    successor.wait_for_lines(10_000, timeout=60, what="the successor to mint")
    for holder in holders:
        count = len(holder.lines)
        holder.wait_for_lines(count + 10_000, timeout=60, what="the holders to mint again")
    processes = [*holders, successor]
    for process in processes:
        process.send(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM, process.stderr
    return [int(i) for process in processes for i in process.ids()]


@stores
def test_store_frozen_past_the_leases_then_killed_and_restarted_repeats_no_id(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """SIGSTOP the store past every lease, SIGKILL it, start it again: holders fence
    themselves meanwhile, then carry on (the same claim or a new one); none twice."""
    every = _mint_and_collect(backend, exit_stack, "frozen-then-killed")
    duplicates = [value for value, n in Counter(every).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:3]}"


@pytest.mark.parametrize("backend", backend_params(["postgres"]), indirect=True)
def test_postgres_crash_restart_under_holders_repeats_no_id(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """An immediate shutdown (crash recovery at the next start) under holders."""
    every = _mint_and_collect(backend, exit_stack, "crash-restart")
    duplicates = [value for value, n in Counter(every).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:3]}"
