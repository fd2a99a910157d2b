"""What only databases that may forget must prove: PostgreSQL, Redis and MySQL/MariaDB.

The contract, fencing, process and fork suites run on both through the ``backend``
fixture (``postgres``, ``redis``). Here: a new pool settles its first claims; a
store that forgets (flushed, restarted empty, rolled back to an older state, as a
failover to a replica that missed the latest writes is) never lets a successor
repeat an ID; a lost reply to a claim; the connection of a claim ended by the
server; what a claim asks of the store (requests, a flushed script cache, the
session's settings); 64 claimants making the table at once; credentials,
permissions and TLS; what is not one Redis server; malformed URLs.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.claims_helpers import (
    CLAIMS_DATABASE,
    Backend,
    CliProcess,
    assert_one_error_line,
    backend_params,
    held_generators,
    mint_beside_a_successor,
    run_idmint,
    settle_pool,
    start_holders,
    wait_for,
)
from tests.servers.mariadb import TLS_USER as MARIADB_TLS_USER
from tests.servers.mariadb import X509_USER as MARIADB_X509_USER
from tests.servers.mariadb import MariaDbServer
from tests.servers.postgres import PostgresServer
from tests.servers.redis import USER, USER_KEYS, RedisCommands, RedisServer

from idmint import (
    ConfigurationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
    Uid64,
    new_generator,
)
from idmint.coordinate import connect

STORES = backend_params(["postgres", "redis", "mysql"])
stores = pytest.mark.parametrize("backend", STORES, indirect=True)

TTL_S = 2.0
SKEW_S = 1.0


def _record(backend: Backend, root: str) -> dict[str, Any]:
    """The pool's record (the documented layout) of the generator space."""
    server = backend.server
    if isinstance(server, RedisServer):
        with server.client() as client:
            raw = client.hget(f"{root}:generator", "pool")
        assert raw is not None, "the pool has no record"
        found: dict[str, Any] = json.loads(raw)
        return found
    if isinstance(server, MariaDbServer):
        rows = server.sql(
            f"SELECT incarnation, since_ms, lease_ms FROM `{root}` "
            "WHERE space = 'generator' AND id = -1",
            database=CLAIMS_DATABASE,
        )
        assert rows, "the pool has no record"
        incarnation, since, max_ttl = rows[0]
        return {"incarnation": incarnation, "since_ms": since, "max_ttl_ms": max_ttl}
    assert isinstance(server, PostgresServer)
    text = server.psql(
        "SELECT json_build_object('incarnation', incarnation, 'since_ms', since_ms, "
        f"'max_ttl_ms', lease_ms) FROM \"{root}\" WHERE space = 'generator' AND id = -1",
        CLAIMS_DATABASE,
    ).strip()
    assert text, "the pool has no record"
    row: dict[str, Any] = json.loads(text)
    return row


# -- a new pool, a pool the store forgot ---------------------------------------------------


@stores
def test_a_new_pool_issues_nothing_before_its_record_plus_ttl_and_skew(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """A new pool looks like one the store forgot: its first claims settle.

    Nothing is minted with a timestamp before the pool's record + TTL + skew, by
    when any holder the store might have forgotten has fenced itself.
    """
    root = backend.new_root(settled=False)
    url = backend.url(root, ttl=TTL_S, skew=SKEW_S)
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    values = generator.batch(2_000).ints()
    record = _record(backend, root)
    assert generator.claim is not None
    assert not generator.claim.proven  # type: ignore[attr-defined]

    settled_at = record["since_ms"] + round((TTL_S + SKEW_S) * 1000)
    assert min(Uid64(value).timestamp_ms for value in values) > settled_at

    # A second claim once the pool has settled: another ID, minted at once.
    second = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    assert second.generator != generator.generator
    assert second.generate().timestamp_ms > settled_at


@stores
def test_a_released_mark_of_this_incarnation_is_proof(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """A clean release in the store's current incarnation: the successor floors at it."""
    root = backend.new_root()
    url = backend.url(root, ttl=TTL_S, generators="0-0", claim_timeout=20)
    with new_generator("uid64", coordinator=url) as first:
        before = first.batch(3_000).ints()
    mark = backend.read_mark(root, 0)
    assert mark is not None
    assert mark["released_ms"] is not None

    successor = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    assert successor.claim is not None
    assert successor.claim.proven  # type: ignore[attr-defined]
    grant = successor.claim.last_grant
    assert grant is not None
    assert grant.floor_ms == mark["ceiling_ms"]
    after = successor.batch(3_000).ints()
    assert not set(before) & set(after)


def _snapshot(server: PostgresServer | RedisServer, into: Path) -> None:
    """A copy of the store's data as it is now (the server keeps running, or restarts)."""
    if isinstance(server, RedisServer):
        # Every write is in the append-only file already (fsync always).
        shutil.copytree(server.tmpdir / "data", into)
        return
    server.stop()
    shutil.copytree(server.data_dir, into, symlinks=True)
    server.start()


def _roll_back(server: PostgresServer | RedisServer, snapshot: Path) -> None:
    """Crash the store and bring it back with the data of ``snapshot``: the latest
    writes are lost, as in a failover to an asynchronous replica."""
    data = server.tmpdir / "data" if isinstance(server, RedisServer) else server.data_dir
    if isinstance(server, RedisServer):
        server.kill()
    else:
        server.crash()
    owner = data.stat()
    shutil.rmtree(data)
    shutil.copytree(snapshot, data, symlinks=True)
    for path in [data, *data.rglob("*")]:
        with contextlib.suppress(OSError):
            shutil.chown(path, owner.st_uid, owner.st_gid)
    if isinstance(server, PostgresServer):
        data.chmod(0o700)
    server.start()


@pytest.fixture
def private_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[PostgresServer | RedisServer]:
    """A store of this test's own (its data is rolled back), by name."""
    server: PostgresServer | RedisServer
    if request.param == "postgres":
        server = PostgresServer(tmp_path / "postgres")
        server.start()
        server.create_database(CLAIMS_DATABASE)
    else:
        server = RedisServer(tmp_path / "redis", persistence=True)
        server.start()
    try:
        yield server
    finally:
        if isinstance(server, PostgresServer):
            server.close()
        else:
            server.stop()


@pytest.mark.parametrize("private_store", ["postgres", "redis"], indirect=True)
def test_a_store_rolled_back_past_a_claim_never_lets_a_successor_repeat_its_ids(
    private_store: PostgresServer | RedisServer, exit_stack: contextlib.ExitStack, tmp_path: Path
) -> None:
    """The store loses its latest writes (a failover to a replica that missed them).

    Generator 0 was released cleanly (a released mark) and the store's state kept
    (the replica); then B claims generator 0 and mints. B is paused (so that it
    cannot claim again first) and the store comes back with the old state: B's
    claim is gone, generator 0 shows the old released mark. C claims it, and B
    resumes within its deadline. The mark is of an earlier incarnation, so it
    proves nothing: C settles past anything B may mint before it fences itself.
    Trusting the mark as a clean release gives duplicates here.
    """
    backend = Backend("postgres" if isinstance(private_store, PostgresServer) else "redis")
    backend.server = private_store
    root = backend.new_root()
    ttl = 15.0  # B's deadline outlasts the roll-back and C's claim
    url = backend.url(root, ttl=ttl, generators="0-0", claim_timeout=60, wait_timeout=60)
    with new_generator("uid64", coordinator=url) as first:
        first.batch(1_000)
    _snapshot(private_store, tmp_path / "snapshot")

    arguments = ("generate", "--coordinator", url, "--count", "0")
    holder = exit_stack.enter_context(CliProcess(*arguments))
    holder.wait_for_lines(20_000, timeout=60, what="B to mint")
    holder.send(signal.SIGSTOP)
    _roll_back(private_store, tmp_path / "snapshot")
    successor = exit_stack.enter_context(CliProcess(*arguments))
    successor.wait_for_lines(1, timeout=60, what="C to mint")
    holder.send(signal.SIGCONT)
    successor.wait_for_lines(50_000, timeout=60, what="C to go on minting")
    for process in (successor, holder):
        if process.running:
            process.send(signal.SIGTERM)
        process.wait(timeout=30)

    b_ids, c_ids = holder.ids(), successor.ids()
    shared = {int(i) for i in b_ids} & {int(i) for i in c_ids}
    assert not shared, f"{len(shared)} IDs minted by both B and C"
    c_zero = [i.timestamp_ms for i in c_ids if i.generator == 0]
    # B's IDs come before C's, or (B claimed generator 0 again once C let it go) after.
    inside = [i for i in b_ids if i.generator == 0 and min(c_zero) <= i.timestamp_ms <= max(c_zero)]
    assert not inside, f"B minted {len(inside)} IDs within C's range of timestamps"


@pytest.mark.parametrize("forget", ["flushall", "restart-empty", "drop-table"])
def test_a_store_that_forgets_under_holders_never_repeats_an_id(
    forget: str, request: pytest.FixtureRequest, exit_stack: contextlib.ExitStack
) -> None:
    """Holders mint; the store forgets every claim and mark (Redis FLUSHALL, a Redis
    restart without persistence, the table dropped); a successor claims at once.

    Every ID minted by every process is collected: none twice.
    """
    if forget == "drop-table":
        server: PostgresServer | RedisServer = request.getfixturevalue("postgres")
        assert isinstance(server, PostgresServer)
        server.create_database(CLAIMS_DATABASE)
        backend = Backend("postgres", server)
    else:
        server = request.getfixturevalue("redis" if forget == "flushall" else "redis_volatile")
        backend = Backend("redis", server)
    root = backend.new_root()
    url = backend.url(root, ttl=TTL_S, generators="0-2", claim_timeout=30, wait_timeout=30)
    arguments = ("generate", "--coordinator", url, "--count", "0")
    holders = start_holders(arguments, 2, exit_stack)

    if forget == "flushall":
        assert isinstance(server, RedisServer)
        with server.client() as client:
            client.flushall()
    elif forget == "restart-empty":
        assert isinstance(server, RedisServer)
        server.restart()
    else:
        assert isinstance(server, PostgresServer)
        server.psql(f'DROP TABLE "{root}"', CLAIMS_DATABASE)
    every = mint_beside_a_successor(arguments, holders, exit_stack)
    duplicates = [value for value, n in Counter(every).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} IDs minted twice, e.g. {duplicates[:3]}"


@stores
def test_the_pools_max_ttl_is_recorded_and_a_claimant_given_less_is_refused(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """The pool's record keeps the longest ``max_ttl`` its claimants were given; while
    the store remembers it, a claimant given a smaller one is refused with one line
    (status 2): after a forget it would wait too little for the others' leases."""
    root = backend.new_root()
    longer = exit_stack.enter_context(
        new_generator("uid64", coordinator=backend.url(root, ttl=20))  # max_ttl=20 too
    )
    longer.generate()
    assert _record(backend, root)["max_ttl_ms"] == 20_000

    result = run_idmint("generate", "--coordinator", backend.url(root, ttl=None), "--count", "1")
    assert result.returncode == 2, result.stderr
    line = assert_one_error_line(result.stderr)
    assert "max_ttl=20" in line, line
    assert "max_ttl=10" in line, line

    # Given the pool's max_ttl, a claimant may hold a shorter lease.
    shorter = exit_stack.enter_context(
        new_generator("uid64", coordinator=backend.url(root, ttl=2, max_ttl=20))
    )
    assert shorter.generator != longer.generator
    assert _record(backend, root)["max_ttl_ms"] == 20_000


# -- lost replies and broken connections ---------------------------------------------------


@stores
def test_a_claim_whose_reply_was_lost_is_recognised_as_ours(
    backend: Backend, exit_stack: contextlib.ExitStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The take lands but its reply is lost: sent again, the store finds it ours.

    Without the token the claimant would take another ID, leaving the first one
    held by nobody until its lease lapsed.
    """
    url = backend.url(generators="0-3")
    coordinator = connect(url)
    exit_stack.callback(coordinator.close)
    store = coordinator.store
    real_take = store.take
    landed: list[int] = []

    def take_and_lose_the_reply(space: str, attempt: Any) -> bool:
        taken = real_take(space, attempt)
        if not landed:
            landed.append(attempt.free.number)
            raise CoordinatorUnavailable("the reply was lost")
        return taken

    monkeypatch.setattr(store, "take", take_and_lose_the_reply)
    claim = exit_stack.enter_context(coordinator.claim(pool=range(2048)))
    assert landed
    assert claim.identity == {"generator": landed[0], "cluster": 0}
    assert set(held_generators(backend, url)) == {landed[0]}


def _end_the_claims_connection(backend: Backend, claim: Any) -> None:
    """The server ends the claim's connection (``pg_terminate_backend``, ``KILL
    CONNECTION``), as an administrator or a failover does."""
    connection = claim.store.connection._connection
    assert connection is not None
    server = backend.server
    if isinstance(server, MariaDbServer):
        server.sql(f"KILL CONNECTION {connection.thread_id()}")
        return
    assert isinstance(server, PostgresServer)
    pid: int = connection.pgconn.backend_pid
    server.psql(f"SELECT pg_terminate_backend({pid})", CLAIMS_DATABASE)


@pytest.mark.parametrize("backend", backend_params(["postgres", "mysql"]), indirect=True)
def test_the_server_ending_a_claims_connection_costs_a_renewal_not_the_claim(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """``pg_terminate_backend`` (PostgreSQL), ``KILL CONNECTION`` (MariaDB) of the
    claim's connection: the next renewal fails, the one after reconnects; the claim
    and its generator ID stay."""
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=backend.url()))
    claim = generator.claim
    assert claim is not None
    grant = claim.last_grant
    assert grant is not None
    before = generator.batch(2_000).ints()
    failures = claim.renewal_failures
    _end_the_claims_connection(backend, claim)
    wait_for(
        lambda: claim.renewal_failures > failures,
        timeout=TTL_S * 3,
        what="a renewal to fail on the terminated connection",
    )
    renewals = claim.renewals
    wait_for(
        lambda: claim.renewals > renewals, timeout=TTL_S * 3, what="a renewal on a new connection"
    )
    after = generator.batch(2_000).ints()
    assert claim.last_grant is not None
    assert claim.last_grant.epoch == grant.epoch, "the claim was made again"
    assert {Uid64(v).generator for v in before + after} == {generator.generator}
    assert len(set(before + after)) == len(before + after)


# -- 64 claimants at once on a new table ------------------------------------------------------


@stores
def test_64_claimants_at_once_make_the_pool_and_get_64_ids(
    backend: Backend, exit_stack: contextlib.ExitStack
) -> None:
    """64 claimants, each with its own connection, on a pool that does not exist yet:
    one makes the table (PostgreSQL) and the record, none fails, all IDs differ."""
    root = backend.new_root(settled=False)
    barrier = threading.Barrier(64)
    claimed: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def claim(index: int) -> None:
        # A connection each: application_name (libpq) or a database-unique option.
        extra: dict[str, object] = (
            {"application_name": f"c{index}"} if backend.name == "postgres" else {}
        )
        if backend.name == "mysql":
            extra["timeout"] = 2 + index / 1000
        url = backend.url(root, ttl=TTL_S, claim_timeout=60, **extra)
        if backend.name == "redis":
            url = url.replace("/0?", f"/0?timeout={2 + index / 1000}&")
        try:
            barrier.wait(30)
            generator = new_generator("uid64", coordinator=url)
            exit_stack.callback(generator.close)
            with lock:
                claimed.append(generator.generator)
        except BaseException as error:
            with lock:
                errors.append(error)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, [f"{type(e).__name__}: {e}" for e in errors[:3]]
    assert len(set(claimed)) == 64


# -- what a claim asks of the store -----------------------------------------------------------


def _sent_by_holders_of(commands: RedisCommands, key: str) -> list[str]:
    """The commands sent so far by the connections that sent one naming ``key``."""
    sent = commands.sent()
    ports = {c["client_port"] for c in sent if key in c["command"].split()}
    return [c["command"].split()[0] for c in sent if c["client_port"] in ports]


def test_redis_a_claim_costs_three_requests_and_a_renewal_one(
    redis: RedisServer, exit_stack: contextlib.ExitStack
) -> None:
    """A new process's claim: a look at the server (INFO), the look, the take; then, in
    the renewal thread, a look at how full the pool is (the ``idmint_pool_*`` gauges'),
    and one script per renewal, at most one per TTL/3 and still two before the
    deadline; one to release. Nothing else: no HELLO, CLIENT SETINFO or SCRIPT LOAD,
    whose round trips a fleet starting at once would wait for."""
    backend = Backend("redis", redis)
    root = backend.new_root()
    # A server that has run the scripts (claim, renew, release), as a fleet's has.
    with new_generator("uid64", coordinator=backend.url(root)) as warm:
        warm_claim = warm.claim
        assert warm_claim is not None
        first = warm_claim.renewals
        wait_for(lambda: warm_claim.renewals > first, timeout=TTL_S * 5, what="a renewal")
    commands = redis.commands()
    exit_stack.callback(commands.close)
    # A client of its own (its settings differ), as a new process has.
    url = backend.url(root, timeout=2.017)
    generator = new_generator("uid64", coordinator=url)
    generator.generate()
    claim = generator.claim
    assert claim is not None
    key = f"{root}:generator"
    wait_for(lambda: claim.pool_seen is not None, timeout=TTL_S * 5, what="the pool's look")
    assert _sent_by_holders_of(commands, key)[:4] == ["INFO", "EVALSHA", "EVALSHA", "EVALSHA"]

    assert claim.renew_every_s <= claim.ttl_s / 3
    assert 2 * claim.renew_every_s < claim.ttl_s - claim.margin_s
    renewed = claim.renewals
    wait_for(lambda: claim.renewals >= renewed + 2, timeout=TTL_S * 5, what="two renewals")
    generator.close()
    after = _sent_by_holders_of(commands, key)[4:]
    assert after == ["EVALSHA"] * (claim.renewals - renewed + 1)  # the renewals, the release


def test_redis_a_script_cache_flushed_under_holders_costs_them_nothing(
    redis: RedisServer, exit_stack: contextlib.ExitStack
) -> None:
    """``SCRIPT FLUSH`` (or a server that never ran the scripts): a request whose script
    the server does not know sends it whole, once; renewals and claims go on."""
    backend = Backend("redis", redis)
    url = backend.url(generators="0-1")
    holder = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    claim = holder.claim
    assert claim is not None
    grant = claim.last_grant
    assert grant is not None
    with redis.client() as client:
        client.script_flush()
    failures, renewed = claim.renewal_failures, claim.renewals
    wait_for(lambda: claim.renewals >= renewed + 2, timeout=TTL_S * 5, what="two renewals")
    assert claim.renewal_failures == failures
    assert claim.last_grant is not None
    assert claim.last_grant.epoch == grant.epoch, "the claim was made again"
    with redis.client() as client:
        client.script_flush()
    second = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    assert {holder.generator, second.generator} == {0, 1}


@pytest.mark.parametrize(
    ("table", "commits"),
    [("existing", "off"), ("missing", "off"), ("existing", "local")],
)
def test_postgres_a_claims_session_commits_synchronously_on_a_server_that_does_not(
    table: str, commits: str, postgres: PostgresServer, exit_stack: contextlib.ExitStack
) -> None:
    """The harness's server commits asynchronously (``synchronous_commit`` off; or
    ``local``, which does not wait for a synchronous standby, from the role's or the
    URL's settings). The session's set-up (synchronous commits, a statement timeout,
    a lock timeout of 3/4 of it) goes with the first request of a new connection;
    when that request fails (the table is missing: it is made and the request sent
    again) the set-up is undone with it, and made again."""
    postgres.create_database(CLAIMS_DATABASE)
    backend = Backend("postgres", postgres)
    root = backend.new_root(settled=table == "existing")
    # A connection of its own (libpq's settings differ), as a new process has.
    url = backend.url(
        root,
        timeout=3,
        application_name=f"sync-{table}-{commits}",
        options=f"-c synchronous_commit={commits}",
    )
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    assert generator.claim is not None
    connection = generator.claim.store.connection  # type: ignore[attr-defined]
    settings = connection.run(
        "reading the session's settings",
        lambda c: c.execute(
            "SELECT current_setting('synchronous_commit'), current_setting('statement_timeout'),"
            " current_setting('lock_timeout')"
        ),
        lambda cursor: cursor.fetchone(),
    )
    assert settings == ("on", "3s", "2250ms")


# -- credentials, permissions, TLS ------------------------------------------------------------


def _secure_postgres(server: PostgresServer, password: str | None = None) -> Backend:
    assert server.password is not None
    backend = Backend(
        "postgres",
        server,
        credentials=("postgres", password if password is not None else server.password),
        ca_path=server.ca_path,
        url_options={"sslmode": "verify-full"},
    )
    server.create_database(CLAIMS_DATABASE)
    return backend


def _secure_redis(server: RedisServer, password: str | None = None) -> Backend:
    assert server.user_password is not None
    return Backend(
        "redis",
        server,
        credentials=(USER, password if password is not None else server.user_password),
        tls=True,
        ca_path=server.ca_path,
        root_prefix=USER_KEYS,
    )


def _secure_mariadb(server: MariaDbServer, password: str | None = None) -> Backend:
    server.create_database(CLAIMS_DATABASE)
    return Backend(
        "mysql",
        server,
        # A user the server lets in only over TLS: that its claims work proves they are.
        credentials=(MARIADB_TLS_USER, password if password is not None else server.password),
        ca_path=server.ca_path,
        url_options={"tls": "true"},
    )


SECURE = ["postgres_secure", "redis_secure", "mariadb_secure"]
"""Servers that ask for a password over TLS."""


def _secure(name: str, request: pytest.FixtureRequest, password: str | None = None) -> Backend:
    server = request.getfixturevalue(name)
    if name == "postgres_secure":
        return _secure_postgres(server, password)
    if name == "mariadb_secure":
        return _secure_mariadb(server, password)
    return _secure_redis(server, password)


@pytest.mark.parametrize("name", SECURE)
def test_claims_work_over_tls_with_credentials_and_the_password_is_never_shown(
    name: str, request: pytest.FixtureRequest, exit_stack: contextlib.ExitStack
) -> None:
    backend = _secure(name, request)
    assert backend.credentials is not None
    password = backend.credentials[1]
    url = backend.url()
    generator = exit_stack.enter_context(new_generator("uid64", coordinator=url))
    assert generator.batch(1_000)
    assert set(held_generators(backend, url)) == {generator.generator}
    assert password not in str(connect(url).url)

    messages: list[str] = []
    for arguments in (
        ("generate", "--coordinator", url, "--count", "3"),
        ("claims", "list", "--coordinator", url),
        ("claims", "list", "--coordinator", url, "--format", "json"),
        ("generate", "--coordinator", url + "&bogus=1"),
        ("generate", "--coordinator", url.replace("://", "://x", 1) + "&connect_timeout=1"),
    ):
        result = run_idmint(*arguments)
        messages += [result.stdout, result.stderr]
    leaked = [message for message in messages if password in message]
    assert not leaked, f"the password was printed: {leaked}"


@pytest.mark.parametrize("name", SECURE)
def test_a_wrong_password_is_refused_with_status_77_and_one_line(
    name: str, request: pytest.FixtureRequest
) -> None:
    wrong = "wrong-password"
    url = _secure(name, request, password=wrong).url(connect_timeout=3)
    with pytest.raises(CoordinatorRefused) as refused:
        new_generator("uid64", coordinator=url)
    assert wrong not in str(refused.value)
    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 77, result.stderr
    assert result.stdout == ""
    line = assert_one_error_line(result.stderr)
    assert wrong not in line
    assert re.search(r"(?i)password|credential|refused", line), line


@pytest.mark.parametrize("name", SECURE)
def test_an_untrusted_certificate_is_refused_with_status_77(
    name: str, request: pytest.FixtureRequest
) -> None:
    backend = _secure(name, request)
    backend.ca_path = None  # TLS, trusting only the system's CAs
    url = backend.url(connect_timeout=3)
    if backend.name == "postgres":
        url += "&sslrootcert=system"
    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 77, result.stderr
    assert re.search(r"(?i)certificate|tls|ssl", assert_one_error_line(result.stderr))


def test_mysql_tls_false_never_uses_tls(mariadb_secure: MariaDbServer) -> None:
    """The user the server lets in only over TLS is refused with ``tls=false``: so the
    TLS test's claims, which log in as it, were encrypted."""
    backend = _secure_mariadb(mariadb_secure)
    backend.ca_path = None
    backend.url_options = {"tls": "false"}
    url = backend.url(connect_timeout=3)
    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 77, result.stderr
    line = assert_one_error_line(result.stderr)
    assert re.search(r"(?i)password|credential|refused|denied", line), line


def test_mysql_claims_with_a_client_certificate(mariadb_secure: MariaDbServer) -> None:
    """A user the server lets in only with a client certificate its CA signed (``REQUIRE
    X509``): with ``cert=`` and ``key=`` it claims, in process and through the CLI;
    without them it is refused (77, one line), so the certificate is what let it in."""
    mariadb_secure.create_database(CLAIMS_DATABASE)
    backend = Backend(
        "mysql",
        mariadb_secure,
        credentials=(MARIADB_X509_USER, mariadb_secure.password),
        ca_path=mariadb_secure.ca_path,
        url_options={"tls": "true"},
    )
    with_certificate = backend.url(
        connect_timeout=3,
        cert=mariadb_secure.client_cert_path,
        key=mariadb_secure.client_key_path,
    )
    with new_generator("uid64", coordinator=with_certificate) as generator:
        assert len(set(generator.batch(100).ints())) == 100
    result = run_idmint("generate", "--coordinator", with_certificate, "--count", "3")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) == 3
    without = run_idmint(
        "generate", "--coordinator", backend.url(connect_timeout=3), "--count", "3"
    )
    assert without.returncode == 77, without.stderr
    assert_one_error_line(without.stderr)
    assert mariadb_secure.password not in without.stderr


def test_mysql_tls_true_against_a_server_without_tls_is_refused(
    mariadb: MariaDbServer,
) -> None:
    """``tls=true`` against a server that offers no TLS (as a man in the middle stripping
    the offer would make it look): refused with one line, never a claim in the clear."""
    mariadb.create_database(CLAIMS_DATABASE)
    backend = Backend("mysql", mariadb, url_options={"tls": "true"})
    url = backend.url(connect_timeout=3)
    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 77, result.stderr
    line = assert_one_error_line(result.stderr)
    assert re.search(r"(?i)tls|ssl", line), line
    assert mariadb.password not in result.stderr
    with pytest.raises(CoordinatorRefused, match=r"(?i)tls|ssl"):
        new_generator("uid64", coordinator=url)


def test_redis_acl_user_outside_its_keys_is_refused(redis_secure: RedisServer) -> None:
    backend = _secure_redis(redis_secure)
    backend.root_prefix = "not-" + USER_KEYS
    result = run_idmint("generate", "--coordinator", backend.url(), "--count", "3")
    assert result.returncode == 77, result.stderr
    assert_one_error_line(result.stderr)


def test_postgres_role_that_may_not_create_the_table_is_told_how(
    postgres: PostgresServer,
) -> None:
    """A role without CREATE on the schema, and no table yet: a refusal saying what to do;
    once the table is made and granted, the same role claims."""
    postgres.create_database(CLAIMS_DATABASE)
    role = "idmint_limited"
    with contextlib.suppress(Exception):
        postgres.psql(f"CREATE ROLE {role} LOGIN", CLAIMS_DATABASE)
    backend = Backend("postgres", postgres, credentials=(role, "unused"))
    root = backend.new_root(settled=False)
    url = backend.url(root, connect_timeout=3)
    with pytest.raises(CoordinatorRefused, match=r"(?i)create|privilege|permission") as refused:
        new_generator("uid64", coordinator=url)
    assert "GRANT" in str(refused.value)
    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 77, result.stderr
    assert_one_error_line(result.stderr)

    settle_pool(Backend("postgres", postgres), root)  # the superuser makes it
    postgres.psql(f'GRANT SELECT, INSERT, UPDATE ON "{root}" TO {role}', CLAIMS_DATABASE)
    with new_generator("uid64", coordinator=url) as generator:
        assert generator.batch(100)


# -- what is not one Redis server, malformed URLs ---------------------------------------------


@pytest.mark.parametrize("mode", ["cluster", "sentinel"])
def test_redis_cluster_and_sentinel_are_refused_with_one_line(mode: str, tmp_path: Path) -> None:
    server = RedisServer(tmp_path, mode=mode)
    server.start()
    try:
        url = f"redis://{server.endpoint}/0"
        with pytest.raises(ConfigurationError, match=mode.title()):
            new_generator("uid64", coordinator=url)
        result = run_idmint("generate", "--coordinator", url, "--count", "3")
        assert result.returncode == 2, result.stderr
        assert mode.title() in assert_one_error_line(result.stderr)
    finally:
        server.stop()


MALFORMED = {
    "postgres port": "postgresql://127.0.0.1:notaport/db",
    "postgres table": "postgresql://127.0.0.1/db?table=no-dashes",
    "postgres schema": "postgresql://127.0.0.1/db?schema=a.b",
    "postgres libpq parameter": "postgresql://127.0.0.1/db?sslmod=require",
    "postgres libpq value": "postgresql://127.0.0.1/db?sslmode=sometimes",
    "postgres ttl": "postgres://127.0.0.1/db?ttl=soon",
    "redis database": "redis://127.0.0.1:6379/zero",
    "redis hosts": "redis://127.0.0.1:6379,127.0.0.1:6380/0",
    "redis prefix": "redis://127.0.0.1:6379/0?prefix=",
    "redis option": "rediss://127.0.0.1:6379/0?bogus=1",
    "postgres ttl over max_ttl": "postgresql://127.0.0.1/db?ttl=20",
    "redis ttl over max_ttl": "redis://127.0.0.1:6379/0?ttl=12&max_ttl=11",
    "mysql database": "mysql://u:secret@127.0.0.1:3306",
    "mysql table": "mysql://127.0.0.1/db?table=no-dashes",
    "mysql hosts": "mariadb://127.0.0.1:3306,127.0.0.1:3307/db",
    "mysql option": "mysql://127.0.0.1/db?sslmode=require",
    "mysql ttl over max_ttl": "mysql://127.0.0.1/db?ttl=12",
}


@pytest.mark.parametrize("url", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_store_urls_exit_2_with_one_line(url: str) -> None:
    result = run_idmint("generate", "--coordinator", url, "--count", "3")
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert_one_error_line(result.stderr)


@pytest.mark.parametrize("name", SECURE)
def test_serve_workers_claim_each_their_own_and_never_show_the_password(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``idmint serve --workers 2`` with a store's URL: each worker its own claim;
    ``/v1/claims`` (what the page shows) carries the URL without its password."""
    from tests.server.server_helpers import get_alone, running_server

    backend = _secure(name, request)
    assert backend.credentials is not None
    password = backend.credentials[1]
    url = backend.url()
    (tmp_path / "tmp").mkdir()
    with running_server(
        "--workers", "2", "--coordinator", url, env={"TMPDIR": str(tmp_path / "tmp")}
    ) as server:
        status, body = get_alone(server.port, "/v1/claims")
        assert status == 200, body
        text = body.decode()
        assert password not in text
        view = json.loads(text)
        generators = {row["identity"] for row in view["claims"]}
        assert len(generators) == 2, view["claims"]
        assert len(held_generators(backend, url)) == 2
        page_status, page = get_alone(server.port, "/")
        assert page_status == 200
        assert password not in page.decode()
