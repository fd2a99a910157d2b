"""The database coordinators (PostgreSQL, Redis, MySQL/MariaDB) failing under holders.

Frozen, killed, crashed; forgetting the pool under holders with longer leases
than their successor's; older claims data written back into the running store (a
restore); the claims table locked by another session; a replica promoted while
the old primary still serves its holders (a split brain). Holders are CLI
processes minting until stopped, some cut off from the store by a proxy (as a
network partition does) so that they mint up to their deadlines; every ID minted
by every process is collected and none may appear twice.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.integration.claims_helpers import (
    CLAIMS_DATABASE,
    Backend,
    CliProcess,
    assert_one_error_line,
    backend_params,
    mint_beside_a_successor,
    run_idmint,
    start_holders,
    wait_for,
)
from tests.servers.mariadb import MariaDbServer
from tests.servers.partition import TcpProxy
from tests.servers.ports import LOOPBACK
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer

from idmint import new_generator
from idmint.coordinate import CoordinatorUrl

TTL_S = 2.0

stores = pytest.mark.parametrize(
    "backend", backend_params(["postgres", "redis", "mysql"]), indirect=True
)
Store = PostgresServer | RedisServer | MariaDbServer


def _mint_and_collect(
    backend: Backend,
    exit_stack: contextlib.ExitStack,
    fault: str,
) -> list[int]:
    """Three holders of a four-ID pool mint; ``fault`` hits the store; a successor
    claims at once; everyone mints on. Every ID minted."""
    server = backend.server
    assert isinstance(server, (PostgresServer, RedisServer, MariaDbServer))
    url = backend.url(ttl=TTL_S, generators="0-3", claim_timeout=60, wait_timeout=60)
    arguments = ("generate", "--coordinator", url, "--count", "0")
    holders = start_holders(arguments, 3, exit_stack)
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
        if isinstance(server, PostgresServer):
            server.crash()
        else:
            assert isinstance(server, MariaDbServer)
            server.kill()
        server.start()
    return mint_beside_a_successor(arguments, holders, exit_stack)


@stores
def test_store_frozen_past_the_leases_then_killed_and_restarted_repeats_no_id(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """SIGSTOP the store past every lease, SIGKILL it, start it again: holders fence
    themselves meanwhile, then carry on (the same claim or a new one); none twice."""
    every = _mint_and_collect(backend, exit_stack, "frozen-then-killed")
    duplicates = [value for value, n in Counter(every).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:3]}"


@pytest.mark.parametrize("backend", backend_params(["postgres", "mysql"]), indirect=True)
def test_a_crash_and_restart_under_holders_repeats_no_id(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """An immediate shutdown (PostgreSQL's SIGQUIT; MariaDB killed) under holders: crash
    recovery at the next start."""
    every = _mint_and_collect(backend, exit_stack, "crash-restart")
    duplicates = [value for value, n in Counter(every).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:3]}"


def _duplicates(processes: Sequence[CliProcess]) -> list[int]:
    """Stop ``processes`` (SIGTERM) and return the IDs more than one of them minted.

    One cut off from the store may be waiting for its claim (``wait_timeout``) and
    stop only between IDs: a second SIGTERM stops it at once, releasing what it can.
    """
    for process in processes:
        if process.running:
            process.send(signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        wait_for(
            lambda: not any(process.running for process in processes),
            timeout=5,
            what="the processes to stop",
        )
    for process in processes:
        if process.running:
            process.send(signal.SIGTERM)
    for process in processes:
        process.wait(timeout=30)
    every = [int(i) for process in processes for i in process.ids()]
    return [value for value, n in Counter(every).items() if n > 1]


def _store_backend(request: pytest.FixtureRequest, store: str) -> Backend:
    server = request.getfixturevalue(store)
    if isinstance(server, (PostgresServer, MariaDbServer)):
        server.create_database(CLAIMS_DATABASE)
    if isinstance(server, MariaDbServer):
        return Backend("mysql", server)
    return Backend("postgres" if isinstance(server, PostgresServer) else "redis", server)


def _with(url: str, **options: object) -> str:
    """``url`` with ``options`` added (``ttl`` alone: the pool's max_ttl left to its default)."""
    parsed = CoordinatorUrl.parse(url)
    return parsed.replace(options={**parsed.options, **options}).text


def _through(proxy: TcpProxy) -> str:
    return f"{LOOPBACK}:{proxy.port}"


# -- the store forgets under holders with longer leases --------------------------------------


def _forget(server: Store, root: str) -> None:
    """The store forgets the pool: its keys deleted (FLUSHALL, a restart without
    persistence), its rows deleted (a failover to a replica that never had them)."""
    if isinstance(server, RedisServer):
        with server.client() as client:
            client.delete(*(f"{root}:{space}" for space in ("generator", "node", "short60")))
    elif isinstance(server, MariaDbServer):
        server.sql(f"DELETE FROM `{root}`", database=CLAIMS_DATABASE)
    else:
        server.psql(f'DELETE FROM "{root}"', CLAIMS_DATABASE)


@pytest.mark.parametrize("store", ["redis", "postgres", "mariadb"])
def test_a_forget_under_holders_with_the_longest_leases_repeats_no_id(
    store: str, request: pytest.FixtureRequest, exit_stack: contextlib.ExitStack
) -> None:
    """Two holders with the default TTL (10 s) mint, cut off from the store; the store
    forgets the pool (Redis: its keys deleted, as FLUSHALL does; PostgreSQL: its rows
    deleted); a successor with ``ttl=1`` claims at once.

    The successor must wait out the pool's longest lease (``max_ttl``, 10 s by
    default), not its own: the holders mint until their deadlines, up to 9 s after
    the forget. (Once it waited its own TTL + the skew: 20,544 duplicates on Redis,
    20,480 on PostgreSQL.)
    """
    backend = _store_backend(request, store)
    server = backend.server
    assert isinstance(server, (PostgresServer, RedisServer, MariaDbServer))
    root = backend.new_root()
    common = {"generators": "0-1", "claim_timeout": 60, "wait_timeout": 60}
    with TcpProxy((LOOPBACK, server.port)) as proxy:
        # ttl=None: the URL says nothing of the TTL, as a fleet's does.
        holder_url = backend.url(root, ttl=None, hosts=_through(proxy), **common)
        arguments = ("generate", "--coordinator", holder_url, "--count", "0")
        holders = start_holders(arguments, 2, exit_stack)
        proxy.partition()
        _forget(server, root)
        successor_url = _with(backend.url(root, ttl=None, **common), ttl=1)
        successor = exit_stack.enter_context(
            CliProcess("generate", "--coordinator", successor_url, "--count", "0")
        )
        successor.wait_for_lines(20_000, timeout=60, what="the successor to mint")
        duplicates = _duplicates([*holders, successor])
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:3]}"


# -- older claims data written back into the running store -------------------------------------

RESTORE_TTL_S = 4.0
"""Every claimant's TTL (and the pool's max_ttl) in the restore tests: a holder cut off
goes on minting up to 3.6 s, longer than a successor process takes to start."""


def _saved(server: Store, root: str) -> Any:
    """The pool's claims data as it is now, as a backup keeps it."""
    if isinstance(server, MariaDbServer):
        for table in (root, f"{root}_witness"):
            server.sql(
                f"CREATE TABLE `{table}_saved` AS SELECT * FROM `{table}`",
                database=CLAIMS_DATABASE,
            )
        return "_saved"
    if isinstance(server, RedisServer):
        key = f"{root}:generator"
        with server.client() as client:
            return client.dump(key), client.pexpiretime(key), client.hgetall(key)
    server.psql(f'CREATE TABLE "{root}_saved" AS SELECT * FROM "{root}"', CLAIMS_DATABASE)
    return f"{root}_saved"


def _write_back(server: Store, root: str, saved: Any, how: str) -> None:
    """Write the saved claims data back into the running store, ``how`` an operator would."""
    if isinstance(server, MariaDbServer):
        # What loading mysqldump's output of the table (--no-create-info) does.
        # The witness too when the whole database is restored from one copy.
        tables = [root, f"{root}_witness"] if how == "rows-and-witness" else [root]
        for table in tables:
            server.sql(
                "START TRANSACTION",
                f"DELETE FROM `{table}`",
                f"INSERT INTO `{table}` SELECT * FROM `{table}{saved}`",
                "COMMIT",
                database=CLAIMS_DATABASE,
            )
        return
    if isinstance(server, PostgresServer):
        # What pg_restore --data-only into the emptied table does: rows written anew.
        server.psql(
            f'BEGIN; DELETE FROM "{root}"; INSERT INTO "{root}" SELECT * FROM "{saved}"; COMMIT',
            CLAIMS_DATABASE,
        )
        return
    key = f"{root}:generator"
    dumped, expires_at, fields = saved
    with server.client() as client:
        if how == "restore":
            client.restore(key, 0, dumped, replace=True)
        elif how == "restore-abs-ttl":
            # The key's exact expiry too: nothing in the key tells it from the old one.
            client.restore(key, max(expires_at, 0), dumped, replace=True, absttl=True)
        else:  # field by field, into the key as it is (its expiry stays)
            newer = set(client.hkeys(key)) - set(fields)
            pipeline = client.pipeline()
            if newer:
                pipeline.hdel(key, *newer)
            pipeline.hset(key, mapping=fields)
            pipeline.execute()


def _restored_under_a_holder(
    backend: Backend,
    root: str,
    how: str,
    exit_stack: contextlib.ExitStack,
    after: Callable[[], None] = lambda: None,
) -> list[int]:
    """Generator 0 claimed and released, the claims data saved; B claims it and mints,
    then is cut off; the data are written back (``how``); ``after()``; C claims
    generator 0 at once. The IDs both minted."""
    server = backend.server
    assert isinstance(server, (PostgresServer, RedisServer, MariaDbServer))
    options = {"generators": "0-0", "claim_timeout": 60, "wait_timeout": 60}
    url = backend.url(root, ttl=RESTORE_TTL_S, **options)
    with new_generator("uid64", coordinator=url) as first:
        first.batch(1_000)
    saved = _saved(server, root)
    with TcpProxy((LOOPBACK, server.port)) as proxy:
        holder_url = backend.url(root, ttl=RESTORE_TTL_S, hosts=_through(proxy), **options)
        holder = exit_stack.enter_context(
            CliProcess("generate", "--coordinator", holder_url, "--count", "0")
        )
        holder.wait_for_lines(20_000, timeout=60, what="B to mint")
        proxy.partition()
        _write_back(server, root, saved, how)
        after()
        successor = exit_stack.enter_context(
            CliProcess("generate", "--coordinator", url, "--count", "0")
        )
        successor.wait_for_lines(20_000, timeout=60, what="C to mint")
        return _duplicates([holder, successor])


@pytest.mark.parametrize(
    ("store", "how"),
    [("redis", "restore"), ("redis", "fields"), ("postgres", "rows"), ("mariadb", "rows")],
    ids=[
        "redis-restore-replace",
        "redis-fields-written-back",
        "postgres-rows-written-back",
        "mariadb-rows-written-back",
    ],
)
def test_older_claims_data_written_back_under_a_holder_repeats_no_id(
    store: str, how: str, request: pytest.FixtureRequest, exit_stack: contextlib.ExitStack
) -> None:
    """Generator 0 is claimed and released cleanly, and the claims data saved; B claims
    it and mints, cut off from the store; the saved data are written back into the
    running store (Redis ``RESTORE ... REPLACE``, or the hash's fields written back
    one by one; PostgreSQL's rows deleted and inserted again from the copy, as
    ``pg_restore --data-only`` does); C claims generator 0 at once.

    The store's incarnation is unchanged, so the released mark looks like the last
    word on generator 0; only the witness of idmint's writes (the rows' versions,
    the hash's generation) shows it written back. C must wait out B's lease.
    (Once C trusted the mark: 19,456 to 20,352 duplicates in each.)
    """
    backend = _store_backend(request, store)
    root = backend.new_root()
    duplicates = _restored_under_a_holder(backend, root, how, exit_stack)
    assert not duplicates, f"{len(duplicates)} IDs minted by both B and C, e.g. {duplicates[:3]}"


@pytest.mark.parametrize(
    ("store", "how"),
    [("redis", "restore-abs-ttl"), ("mariadb", "rows-and-witness")],
    ids=["redis-restore-abs-ttl", "mariadb-rows-and-witness"],
)
def test_a_restore_that_writes_its_witness_back_too_is_found_by_a_live_holder(
    store: str, how: str, request: pytest.FixtureRequest, exit_stack: contextlib.ExitStack
) -> None:
    """A restore that writes the witness back with the data (Redis: the key with its
    exact expiry, ``RESTORE ... ABSTTL``; MariaDB: the witness table too, the whole
    database from one copy) leaves the pool as it was, witness and all; D, a holder
    of generator 1 that still reaches the store, finds the pool's generation below
    what its last renewal saw, and the pool begins a new epoch: C, claiming
    generator 0 after that, waits out B's lease (B cut off, minting on generator 0).
    """
    backend = _store_backend(request, store)
    server = backend.server
    assert isinstance(server, (RedisServer, MariaDbServer))
    root = backend.new_root()
    bystander_url = backend.url(root, ttl=RESTORE_TTL_S, generators="1-1", claim_timeout=60)
    bystander = exit_stack.enter_context(new_generator("uid64", coordinator=bystander_url))
    bystander.batch(1_000)

    def in_doubt() -> bool:
        """Whether the pool's record is no longer vouched for."""
        if isinstance(server, RedisServer):
            with server.client() as client:
                return not client.hexists(f"{root}:generator", "pool")
        assert isinstance(server, MariaDbServer)
        witness = server.sql(
            f"SELECT 1 FROM `{root}_witness` WHERE space = 'generator' AND id = -1",
            database=CLAIMS_DATABASE,
        )
        return not witness

    def noticed() -> None:
        wait_for(
            in_doubt,
            timeout=RESTORE_TTL_S,
            what="D's renewal to find the pool's generation gone back",
        )

    duplicates = _restored_under_a_holder(backend, root, how, exit_stack, noticed)
    assert not duplicates, f"{len(duplicates)} IDs minted by both B and C, e.g. {duplicates[:3]}"


# -- the claims table locked by another session ----------------------------------------------


class _Locker:
    """Another session holding the claims table ``root`` locked, as a migration does."""

    def __init__(self, backend: Backend, root: str, exit_stack: contextlib.ExitStack) -> None:
        self.server = backend.server
        self.root = root
        if isinstance(self.server, MariaDbServer):
            self.session = self.server.connect(CLAIMS_DATABASE)
            exit_stack.callback(self.session.close)
            with self.session.cursor() as cursor:
                cursor.execute(f"LOCK TABLES `{root}` WRITE")
            return
        import psycopg

        assert isinstance(self.server, PostgresServer)
        settings: Any = self.server.connection_settings(CLAIMS_DATABASE)
        self.session = psycopg.connect(**settings)
        exit_stack.callback(self.session.close)
        self.session.execute(f'LOCK TABLE "{root}" IN ACCESS EXCLUSIVE MODE')

    def waited_for(self) -> bool:
        """Whether another session waits for the lock."""
        if isinstance(self.server, MariaDbServer):
            rows = self.server.sql(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                "WHERE STATE LIKE 'Waiting for table metadata lock%'"
            )
            return int(rows[0][0]) > 0
        assert isinstance(self.server, PostgresServer)
        waiting = (
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            f"WHERE c.relname = '{self.root}' AND NOT l.granted"
        )
        return int(self.server.psql(waiting, CLAIMS_DATABASE)) > 0

    def let_go(self) -> None:
        if isinstance(self.server, MariaDbServer):
            with self.session.cursor() as cursor:
                cursor.execute("UNLOCK TABLES")
        else:
            self.session.rollback()


@pytest.mark.parametrize("backend", backend_params(["postgres", "mysql"]), indirect=True)
def test_a_locked_claims_table_is_waited_for_then_named(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """Another session holds the claims table (PostgreSQL's ``LOCK TABLE ... IN ACCESS
    EXCLUSIVE MODE``, MariaDB's ``LOCK TABLES ... WRITE``, as a migration does). A new
    claimant looks again until ``connect_timeout`` has passed without an answer, then
    gives up with status 69 and one line naming the lock; one whose
    ``connect_timeout`` outlasts the lock claims once it is let go.

    (Once both gave up after one 2 s statement timeout, saying psycopg's "cannot exit
    pipeline mode while busy".)
    """
    root = backend.new_root()  # made, with its record
    connect_timeout_s = 4.0
    locker = _Locker(backend, root, exit_stack)
    started = time.monotonic()
    gave_up = run_idmint(
        "generate",
        "--coordinator",
        backend.url(root, connect_timeout=connect_timeout_s),
        "--count",
        "1",
    )
    waited = time.monotonic() - started
    notice, rest = gave_up.stderr.split("\n", 1)
    assert notice.startswith(f"idmint: waiting up to {connect_timeout_s:g} s for "), notice
    assert notice.endswith(" to answer"), notice
    line = assert_one_error_line(rest)
    assert gave_up.returncode == 69, gave_up.stderr
    assert "lock" in line, line
    assert root in line, line
    assert "pipeline" not in line, line
    assert waited >= connect_timeout_s, f"gave up after {waited:.1f} s"

    patient_url = backend.url(root, connect_timeout=60)
    patient = exit_stack.enter_context(
        CliProcess("generate", "--coordinator", patient_url, "--count", "1")
    )
    wait_for(locker.waited_for, timeout=30, what="the claimant to wait for the lock")
    locker.let_go()
    assert patient.wait(timeout=30) == 0, patient.stderr
    assert len(patient.ids()) == 1


# -- a split brain: a replica promoted, the old primary still serving its holders --------------


def _mint_on_both_sides(
    old: Backend, new: Backend, root: str, promote: Any, exit_stack: contextlib.ExitStack
) -> tuple[CliProcess, CliProcess]:
    """A holder mints on the old primary; ``promote()`` makes the replica a primary while
    the old one runs on; a successor claims the same ID on the new one and mints."""
    options = {"generators": "0-0", "claim_timeout": 60, "wait_timeout": 60}
    arguments = ("generate", "--count", "0", "--coordinator")
    holder = exit_stack.enter_context(CliProcess(*arguments, old.url(root, **options)))
    holder.wait_for_lines(10_000, timeout=60, what="the holder to mint on the old primary")
    promote()
    successor = exit_stack.enter_context(CliProcess(*arguments, new.url(root, **options)))
    successor.wait_for_lines(10_000, timeout=60, what="the successor to mint on the new one")
    return holder, successor


def _assert_the_hazard(holder: CliProcess, successor: CliProcess, *, fenced: bool) -> None:
    """Unfenced, the old primary's holder mints on beside the successor: duplicates."""
    if not fenced:
        count = len(holder.lines)
        holder.wait_for_lines(count + 10_000, timeout=30, what="the old primary's holder")
    duplicates = _duplicates([holder, successor])
    if fenced:
        assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:3]}"
    else:
        assert duplicates, "the old primary's holder and the new one's minted no ID twice"


@pytest.mark.parametrize("fenced", [False, True], ids=["unfenced", "min-replicas-to-write"])
def test_redis_split_brain_is_fenced_by_min_replicas_to_write(
    fenced: bool, tmp_path: Path, exit_stack: contextlib.ExitStack
) -> None:
    """A replica is promoted while the old primary still runs and its holders still
    reach it: a failover that did not fence the old primary.

    Unfenced, the old primary goes on renewing its holder's lease, and a claimant of
    the new primary, its settling over, mints the same IDs: this shows the hazard
    (duplicates). With ``min-replicas-to-write 1`` the old primary refuses writes
    once its replica has left: the holder's renewals fail, it fences itself by its
    deadline, and the successor, which waits out the longest lease, starts after it.
    """
    settings = {"min-replicas-to-write": "1", "min-replicas-max-lag": "5"} if fenced else {}
    primary = RedisServer(tmp_path / "primary", persistence=False, settings=settings)
    primary.start()
    exit_stack.callback(primary.stop)
    replica = RedisServer(tmp_path / "replica", persistence=False, replica_of=primary)
    replica.start()
    exit_stack.callback(replica.stop)
    replica.wait_replicating()
    old, new = Backend("redis", primary), Backend("redis", replica)
    root = old.new_root()

    def promote() -> None:
        replica.wait_replicating()
        replica.promote()

    holder, successor = _mint_on_both_sides(old, new, root, promote, exit_stack)
    _assert_the_hazard(holder, successor, fenced=fenced)


@pytest.mark.parametrize("fenced", [False, True], ids=["asynchronous", "synchronous-standby"])
def test_postgres_split_brain_is_fenced_by_a_synchronous_standby(
    fenced: bool, tmp_path: Path, exit_stack: contextlib.ExitStack
) -> None:
    """A standby is promoted while the old primary still runs and its holders still
    reach it.

    With asynchronous replication the old primary goes on committing its holder's
    renewals, and a claimant of the promoted standby mints the same IDs: the hazard
    (duplicates). With the standby synchronous (``synchronous_standby_names``), the
    old primary's commits wait for a standby that no longer follows it: the
    holder's renewals time out, it fences itself by its deadline, and the
    successor starts after it.
    """
    primary = PostgresServer(tmp_path / "primary")
    primary.start()
    exit_stack.callback(primary.close)
    primary.create_database(CLAIMS_DATABASE)
    standby = PostgresServer(tmp_path / "standby", standby_of=primary)
    standby.start()
    exit_stack.callback(standby.close)
    replicating = "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
    wait_for(lambda: bool(primary.psql(replicating).strip()), timeout=30, what="streaming")
    if fenced:
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.psql("SELECT pg_reload_conf()")
        wait_for(
            lambda: primary.psql(replicating).strip() == "sync",
            timeout=30,
            what="the standby to be synchronous",
        )
    old, new = Backend("postgres", primary), Backend("postgres", standby)
    root = old.new_root()

    def promote() -> None:
        held = f'SELECT count(*) FROM "{root}" WHERE id = 0 AND token IS NOT NULL'
        wait_for(
            lambda: int(standby.psql(held, CLAIMS_DATABASE)) == 1,
            timeout=30,
            what="the standby to have the holder's claim",
        )
        standby.promote()

    holder, successor = _mint_on_both_sides(old, new, root, promote, exit_stack)
    _assert_the_hazard(holder, successor, fenced=fenced)
