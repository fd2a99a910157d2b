"""Shared helpers for the claims tests (``tests/integration/test_claims_*.py``).

* :class:`Backend` names a coordinator under test (``static``, ``zk``, ``etcd``,
  ``postgres``, ``redis``, ...) and
  builds its URLs; the ``backend`` fixture (``conftest.py``) makes one from a name
  given by indirect parametrization over :data:`ALL_BACKENDS` or
  :data:`CLAIMED_BACKENDS`.
* :class:`CliProcess` runs ``python -m idmint`` with its output drained by threads,
  each line stamped with the monotonic time it arrived.
* :class:`Minter` mints from an in-process generator in a thread, recording when each
  ID was asked for and returned, and every error.
* :class:`RenewalWatch` samples a claim's renewal counter, so tests can check that no
  ID was issued past the deadline the renewals allowed.

Waiting is always on a condition with a deadline (:func:`tests.servers.wait_until`);
nothing sleeps in place of synchronisation.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from tests.cli_process import CliProcess as _CliProcess
from tests.cli_process import assert_one_error_line, now_ms, run_idmint
from tests.servers import wait_until
from tests.servers.etcd import EtcdCluster
from tests.servers.ports import LOOPBACK, free_port
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer
from tests.servers.zookeeper import ZooKeeperEnsemble, expire_session

from idmint import Uid64
from idmint.coordinate import Claim, ClaimInfo, connect

__all__ = [
    "ALL_BACKENDS",
    "CLAIMED_BACKENDS",
    "DEFAULT_TTL_S",
    "SERVER_BACKENDS",
    "SESSION_BACKENDS",
    "SHARED_BACKENDS",
    "STATIC_CLUSTER",
    "STATIC_GENERATOR",
    "Backend",
    "CliProcess",
    "MintError",
    "Minter",
    "RenewalWatch",
    "all_backends",
    "assert_one_error_line",
    "backend_params",
    "claimed_backends",
    "decode",
    "held_generators",
    "holder_of_this_process",
    "known_bug",
    "make_backend",
    "minting",
    "now_ms",
    "run_idmint",
    "server_backends",
    "session_backends",
    "settle_pool",
    "settled_local_directory",
    "shared_backends",
    "unique_root",
    "wait_for",
    "wait_for_new_claim",
]

SERVER_BACKENDS: list[str] = ["zk", "etcd", "postgres", "redis"]
"""Coordinators that are servers: they can be unreachable, and other processes share them."""

SESSION_BACKENDS: list[str] = ["memory", *SERVER_BACKENDS]
"""Coordinators whose claims are sessions that expire, behind a server that can go down
(``memory://`` drills both in-process)."""

SHARED_BACKENDS: list[str] = ["local", *SERVER_BACKENDS]
"""Coordinators whose claims every process sees: for tests that run the CLI."""

CLAIMED_BACKENDS: list[str] = ["memory", "local", *SERVER_BACKENDS, "zk-lockfree"]
"""Coordinators that claim generator IDs from a pool: every pool rule is checked on each
(ZooKeeper both with java-uniqueid's queue lock, the default, and without it)."""

ALL_BACKENDS: list[str] = ["static", *CLAIMED_BACKENDS]
"""Every coordinator, for the contract tests that also hold for a configured identity."""

DEFAULT_TTL_S = 2.0
"""Session timeout / lease TTL of the tests' claims (the ZooKeeper server's minimum is 1 s)."""

STATIC_GENERATOR = 7
STATIC_CLUSTER = 3
"""The identity the static backend configures (anything but the defaults)."""

CLAIMS_DATABASE = "idmint_claims"
"""The PostgreSQL database the claims tests' tables live in (one table per test)."""

Server = ZooKeeperEnsemble | EtcdCluster | PostgresServer | RedisServer


def backend_params(names: Iterable[str], *, xfail: dict[str, str] | None = None) -> list[Any]:
    """``pytest.param``s for ``names``, marking those in ``xfail`` strict xfails.

    For a bug in one driver: ``backend_params(CLAIMED_BACKENDS, xfail={"zk": "BUG: ..."})``.
    """
    known = xfail or {}
    return [
        pytest.param(
            name,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=known[name])] if name in known else [],
        )
        for name in names
    ]


all_backends = pytest.mark.parametrize("backend", backend_params(ALL_BACKENDS), indirect=True)
"""Run a test once per backend, static included (the ``backend`` fixture)."""
claimed_backends = pytest.mark.parametrize(
    "backend", backend_params(CLAIMED_BACKENDS), indirect=True
)
"""Run a test once per backend that claims its identity (local, ZooKeeper, etcd)."""
server_backends = pytest.mark.parametrize("backend", backend_params(SERVER_BACKENDS), indirect=True)
"""Run a test once per coordinator that is a server (ZooKeeper, etcd)."""
session_backends = pytest.mark.parametrize(
    "backend", backend_params(SESSION_BACKENDS), indirect=True
)
"""Run a test once per coordinator with expiring sessions (memory, ZooKeeper, etcd)."""
shared_backends = pytest.mark.parametrize("backend", backend_params(SHARED_BACKENDS), indirect=True)
"""Run a test once per coordinator other processes share (local, ZooKeeper, etcd)."""


def known_bug(request: pytest.FixtureRequest, reason: str) -> None:
    """Mark the running test a strict xfail (for a bug in one parametrization only)."""
    request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))


def unique_root(prefix: str = "") -> str:
    """A root path (ZooKeeper) or key prefix (etcd) no other test uses."""
    return f"{prefix}/t-{uuid.uuid4().hex}"


def holder_of_this_process(pid: int | None = None) -> str:
    """``host:pid`` as ``claims list`` shows the holder (this process by default)."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


# -- coordinators under test ---------------------------------------------------------


@dataclass
class Backend:
    """A coordinator under test: its kind, the server behind it and how to reach it.

    ``name`` is ``static``, ``zk`` or ``etcd``; ``server`` is the test server (``None``
    for static). ``credentials`` make URLs that authenticate (``zk_auth``,
    ``etcd_secure``); ``tls`` (``etcds://``) and ``ca_path`` (``ca=``) that use and
    verify TLS; ``root_prefix`` goes before every new root (etcd users own a prefix).
    """

    name: str
    server: Server | None = None
    credentials: tuple[str, str] | None = None
    tls: bool = False
    ca_path: Path | None = None
    root_prefix: str = ""
    url_options: dict[str, str] = field(default_factory=dict)
    """Options every URL of this backend carries (``queue=false``: ZooKeeper lock-free)."""
    roots: list[str] = field(default_factory=list)
    """The pools this backend made (memory://), which stop_server() takes down."""

    @property
    def claims(self) -> bool:
        """Whether generator IDs are claimed (not configured)."""
        return self.name != "static"

    @property
    def scheme(self) -> str:
        if self.name == "etcd":
            return "etcds" if self.tls else "etcd"
        if self.name == "redis":
            return "rediss" if self.tls else "redis"
        if self.name == "postgres":
            return "postgresql"
        return self.name

    @property
    def stores(self) -> bool:
        """Whether the coordinator is a database that may forget (PostgreSQL, Redis)."""
        return self.name in ("postgres", "redis")

    def new_root(self, *, settled: bool = True) -> str:
        """A pool of its own: a ZooKeeper root, an etcd prefix, a PostgreSQL table, a
        Redis key prefix, a local:// directory.

        A database's pool is ``settled``: made as a fleet's has been since its first
        minute, so its claims need not wait for holders it might have forgotten
        (tests of that rule ask for a new pool with ``settled=False``).
        """
        if self.name == "local":
            return str(settled_local_directory())
        if self.name == "memory":
            self.roots.append(unique_root().strip("/"))
            return self.roots[-1]
        if self.name == "postgres":
            root = f"t_{uuid.uuid4().hex}"
        elif self.name == "redis":
            root = f"{self.root_prefix}t-{uuid.uuid4().hex}"
        else:
            return unique_root(self.root_prefix)
        if settled:
            settle_pool(self, root)
        return root

    def hosts(self) -> str:
        if self.name in ("local", "memory"):
            return self.new_root()  # what a URL of this kind names: a directory, a pool
        server = self._server()
        if isinstance(server, ZooKeeperEnsemble):
            return server.hosts
        if isinstance(server, (PostgresServer, RedisServer)):
            return f"{LOOPBACK}:{server.port}"
        return ",".join(server.endpoints)

    def url(
        self,
        root: str | None = None,
        *,
        ttl: float | str | None = DEFAULT_TTL_S,
        hosts: str | None = None,
        credentials: tuple[str, str] | None = None,
        **options: object,
    ) -> str:
        """The coordinator URL for ``root`` with ``options`` in its query string.

        ``ttl`` becomes ``session_timeout`` (ZooKeeper) or ``ttl`` (etcd); ``None``
        leaves it out. The static backend configures generator 7, cluster 3 unless the
        options say otherwise, and ignores ``root`` and ``ttl``.
        """
        if self.name == "static":
            query = {"generator": STATIC_GENERATOR, "cluster": STATIC_CLUSTER, **options}
            return f"static://?{urlencode(query)}"
        query = {**self.url_options, **options}
        if ttl is not None:
            query["session_timeout" if self.name == "zk" else "ttl"] = ttl
        if self.name in ("local", "memory"):
            text = f"{self.name}://{root if root is not None else self.new_root()}"
            return f"{text}?{urlencode(query, safe='/:')}" if query else text
        if self.ca_path is not None:
            query.setdefault("sslrootcert" if self.name == "postgres" else "ca", str(self.ca_path))
        user_password = credentials or self.credentials
        userinfo = ""
        if user_password is not None:
            userinfo = f"{quote(user_password[0], safe='')}:{quote(user_password[1], safe='')}@"
        location = hosts if hosts is not None else self.hosts()
        path = root if root is not None else self.new_root()
        if self.stores:
            # The URL's path is the database; the pool is a table or a key prefix.
            query = {("table" if self.name == "postgres" else "prefix"): path, **query}
            if self.name == "postgres" and not userinfo:
                userinfo = "postgres@"
            path = f"/{CLAIMS_DATABASE}" if self.name == "postgres" else "/0"
        text = f"{self.scheme}://{userinfo}{location}{path}"
        return f"{text}?{urlencode(query, safe='/:')}" if query else text

    def unreachable_url(self, root: str, **options: object) -> str:
        """A URL of this kind whose host is a reserved port where nothing listens."""
        return self.url(root, hosts=f"{LOOPBACK}:{free_port()}", **options)

    # -- what only the server can tell -----------------------------------------------

    def read_mark(self, root: str, generator: int, cluster: int = 0) -> dict[str, Any] | None:
        """The high-water mark recorded for ``generator`` (the documented layout), if any."""
        if self.name == "local":
            path = Path(root) / "generator" / f"{cluster}-{generator}.mark"
            if not path.exists():
                return None
            local_mark: dict[str, Any] = json.loads(path.read_text())
            return local_mark
        if self.name == "memory":
            marks = self._memory(root).pool.marks
            found = marks.get(("generator", cluster, generator))
            return None if found is None else found[0].to_json()
        server = self._server()
        if isinstance(server, PostgresServer):
            rows = server.psql(
                "SELECT json_build_object('ceiling_ms', ceiling_ms, 'renewed_ms', renewed_ms, "
                "'released_ms', released_ms, 'holder', mark_holder, 'incarnation', incarnation) "
                f"FROM \"{root}\" WHERE space = 'generator' AND cluster = {cluster} "
                f"AND id = {generator} AND ceiling_ms IS NOT NULL",
                CLAIMS_DATABASE,
            ).strip()
            return json.loads(rows) if rows else None
        if isinstance(server, RedisServer):
            with server.client() as client:
                raw = client.hget(f"{root}:generator", f"mark:{cluster}:{generator}")
            if raw is None:
                return None
            incarnation, _, text = raw.decode().partition(" ")
            redis_mark: dict[str, Any] = {**json.loads(text), "incarnation": incarnation}
            return redis_mark
        if isinstance(server, ZooKeeperEnsemble):
            from kazoo.client import KazooClient
            from kazoo.exceptions import NoNodeError

            client = KazooClient(hosts=server.hosts, auth_data=[server.super_auth])
            client.start(timeout=15)
            try:
                data, _ = client.get(f"{root}/hwm/{generator}")
            except NoNodeError:
                return None
            finally:
                client.stop()
                client.close()
            mark: dict[str, Any] = json.loads(data)
            return mark
        etcd = server.client(credentials=server.root_credentials)
        values = etcd.get(f"{root}/hwm/{cluster}:{generator}")
        if not values:
            return None
        etcd_mark: dict[str, Any] = json.loads(values[0])
        return etcd_mark

    def expire(self, claim: Claim) -> None:
        """End the claim on the server: expire its ZooKeeper session, revoke its lease.

        ZooKeeper tells the client at once (the claim goes LOST); etcd does not, and
        the claim learns it at its next renewal.
        """
        if self.name == "memory":
            pool = claim._pool  # type: ignore[attr-defined]
            with pool.lock:
                pool._end(claim._session)  # type: ignore[attr-defined]
            return
        server = self._server()
        if isinstance(server, (PostgresServer, RedisServer)):
            # The lease goes, as when it lapses and another holder takes it: the
            # claim learns it at its next renewal.
            token = claim._token  # type: ignore[attr-defined]
            held = claim._held  # type: ignore[attr-defined]
            assert held is not None, "the claim holds no lease"
            store = claim.store  # type: ignore[attr-defined]
            if isinstance(server, PostgresServer):
                server.psql(
                    f'UPDATE "{store.table}" SET token = NULL, expires_ms = NULL '
                    f"WHERE token = '{token}'",
                    CLAIMS_DATABASE,
                )
            else:
                with server.client() as client:
                    client.hdel(store.key(claim.space), f"lease:{held[0]}:{held[1]}")  # type: ignore[attr-defined]
            return
        if isinstance(server, ZooKeeperEnsemble):
            client = claim._client  # type: ignore[attr-defined]
            # Reconnecting (after a restart, say): expire the session it gets back.
            wait_for(
                lambda: client.connected and client.client_id is not None,
                timeout=15,
                what="the claim's ZooKeeper client to be connected",
            )
            expire_session(client)
            return
        lease = claim._lease  # type: ignore[attr-defined]
        assert lease is not None, "the etcd claim holds no lease"
        client = server.client(credentials=server.root_credentials)
        client.post(client.get_url("/kv/lease/revoke"), json={"ID": lease})

    def stop_server(self) -> float:
        """Stop the (single) server; return the monotonic time it was certainly down."""
        if self.name == "memory":
            for root in self.roots:
                with self._memory(root).pool.lock:
                    self._memory(root).pool.reachable = False
            return time.monotonic()
        server = self._server()
        if isinstance(server, (PostgresServer, RedisServer)):
            server.stop()
        else:
            server.stop_member(0)
        return time.monotonic()

    def start_server(self) -> None:
        """Start the server again (same port, same data) and wait until it serves."""
        if self.name == "memory":
            for root in self.roots:
                pool = self._memory(root).pool
                with pool.lock:
                    pool.reachable = True
                    pool.changed.notify_all()
            return
        server = self._server()
        if isinstance(server, (PostgresServer, RedisServer)):
            server.start()
        else:
            server.start_member(0)

    @staticmethod
    def _memory(root: str) -> Any:
        return connect(f"memory://{root}")

    def list_claims(self, url: str) -> list[ClaimInfo]:
        coordinator = connect(url)
        try:
            return list(coordinator.list_claims())
        finally:
            coordinator.close()

    def _server(self) -> Server:
        if self.server is None:
            raise TypeError(f"the {self.name} backend has no server")
        return self.server


def settle_pool(backend: Backend, root: str, *, ttl_s: float = 0.0) -> None:
    """Make the database pool ``root`` as a fleet's is after its first minute.

    Its record (the documented layout) says the store's current incarnation has
    been seen since the epoch: claims need not settle past holders it may have
    forgotten. The rule itself is tested on new pools. ``ttl_s``: the longest TTL
    the record says claimants declared (a claimant with a longer one raises it).
    """
    server = backend._server()
    ttl_ms = round(ttl_s * 1000)
    if isinstance(server, RedisServer):
        with server.client() as client:
            run_id = client.info("server")["run_id"]
            record = json.dumps({"incarnation": run_id, "since_ms": 0, "ttl_ms": ttl_ms})
            for space in ("generator", "node", "short60"):
                client.hset(f"{root}:{space}", "pool", record)
        return
    assert isinstance(server, PostgresServer)
    admin = Backend(
        "postgres",
        server,
        credentials=("postgres", server.password) if server.password else None,
        ca_path=server.ca_path,
    )
    coordinator = connect(admin.url(root, ttl=None))
    try:
        coordinator.store._run(  # creates the table first
            "settling the pool",
            lambda connection: connection.execute(
                f'INSERT INTO "public"."{root}" (space, cluster, id, incarnation, since_ms, '
                "lease_ms) SELECT space, -1, -1, (extract(epoch FROM pg_postmaster_start_time()) "
                "* 1000000)::bigint::text, 0, %s FROM unnest(ARRAY['generator', 'node', "
                "'short60']) AS space",
                (ttl_ms,),
            ),
        )
    finally:
        coordinator.close()


def settled_local_directory() -> Path:
    """A ``local://`` directory of its own, as a host has it after its first minute.

    A directory made less than a TTL ago makes every claim wait for the TTL to
    pass (it may have replaced one deleted under a live holder; see
    :mod:`idmint.coordinate.local`). Tests of other rules start from a directory
    whose spaces were made long ago; the young-directory rule has tests of its own.
    """
    directory = Path(os.environ["IDMINT_LOCAL_DIR"]) / unique_root().strip("/")
    for space in ("generator", "node", "short60"):
        (directory / space).mkdir(parents=True)
        (directory / space / ".created").write_text(json.dumps({"created_ms": 0}))
    return directory


def make_backend(name: str, request: pytest.FixtureRequest) -> Backend:
    """The backend called ``name``, starting its (session-scoped) server if needed."""
    if name in ("static", "local", "memory"):
        return Backend(name)
    if name == "zk":
        return Backend("zk", request.getfixturevalue("zk"))
    if name == "zk-lockfree":
        return Backend("zk", request.getfixturevalue("zk"), url_options={"queue": "false"})
    if name == "etcd":
        return Backend("etcd", request.getfixturevalue("etcd"))
    if name == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres")
        postgres.create_database(CLAIMS_DATABASE)
        return Backend("postgres", postgres)
    if name == "redis":
        return Backend("redis", request.getfixturevalue("redis"))
    raise ValueError(f"unknown backend {name!r}")


def held_generators(backend: Backend, url: str) -> dict[int, ClaimInfo]:
    """``claims list`` as a dict: generator ID -> its row."""
    return {row.generator: row for row in backend.list_claims(url)}


# -- decoding -----------------------------------------------------------------------


def decode(texts: Iterable[str]) -> list[Uid64]:
    """uid64 IDs from their text forms (one per line of ``idmint generate``)."""
    return [Uid64(text) for text in texts]


# -- the CLI ------------------------------------------------------------------------


class CliProcess(_CliProcess):
    """A running ``idmint generate`` whose lines are uid64 IDs."""

    def ids(self) -> list[Uid64]:
        return decode(self.lines)


# -- in-process minting --------------------------------------------------------------


@dataclass
class MintError:
    called_at: float
    raised_at: float
    error: BaseException


@dataclass
class Minter:
    """Calls ``generator.generate()`` in a thread until stopped, recording everything.

    For the i-th ID: ``values[i]`` (its int), ``asked[i]`` and ``returned[i]`` (the
    monotonic time before the call and after it returned). The generator decided to
    issue it somewhere between the two. Errors are recorded with the time of the call
    and of the raise, and minting carries on.
    """

    generator: Any
    values: list[int] = field(default_factory=list)
    asked: list[float] = field(default_factory=list)
    returned: list[float] = field(default_factory=list)
    errors: list[MintError] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Minter:
        self._thread = threading.Thread(target=self._run, name="minter", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        generate = self.generator.generate
        clock = time.monotonic
        values, asked, returned = self.values, self.asked, self.returned
        while not self._stop.is_set():
            before = clock()
            try:
                value = generate()
            except Exception as error:
                self.errors.append(MintError(before, clock(), error))
                continue
            after = clock()
            values.append(int(value))
            asked.append(before)
            returned.append(after)

    @property
    def count(self) -> int:
        return len(self.values)

    def wait_for_count(self, count: int, *, timeout: float, what: str = "") -> None:
        self._wait(lambda: len(self.values) >= count, timeout, what or f"{count} IDs minted")

    def wait_for_errors(self, count: int, *, timeout: float, what: str = "") -> None:
        self._wait(
            lambda: len(self.errors) >= count, timeout, what or f"{count} errors from generate()"
        )

    def _wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            wait_until(
                predicate, timeout=timeout, description=what, interval=0.01, check=self._check_alive
            )
        except TimeoutError as timeout_error:
            raise TimeoutError(f"{timeout_error}; {self.describe()}") from None

    def describe(self) -> str:
        """The minting so far and the claim's state, for failure messages."""
        claim = getattr(self.generator, "claim", None)
        state = f"claim {claim.state.value} ({claim.problem})" if claim is not None else ""
        last = f"; last error: {self.errors[-1].error}" if self.errors else ""
        return f"{len(self.values)} IDs, {len(self.errors)} errors, {state}{last}"

    def _check_alive(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            raise AssertionError("the minting thread is not running")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            assert not self._thread.is_alive(), "the minting thread did not stop"

    def issued_between(self, start: float, end: float) -> list[int]:
        """Indexes of the IDs the generator certainly decided on within [start, end]."""
        return [i for i, t in enumerate(self.asked) if t >= start and self.returned[i] <= end]

    def __enter__(self) -> Minter:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class RenewalWatch:
    """Samples ``claim.renewals`` in a thread to bound the claim's deadline from above.

    A renewal observed first at ``o`` and not yet at the sample before, ``p``, landed
    in ``(p, o]``. The deadline it gives is at most its landing + TTL - margin, so at
    any time ``t`` the claim's deadline is at most ``max(o_k for p_k < t) + TTL -
    margin``: :meth:`check_deadline` asserts every ID was asked for before that bound.
    """

    def __init__(self, claim: Claim, *, interval: float = 0.002) -> None:
        self.claim = claim
        self.interval = interval
        started = time.monotonic()
        # Renewals before the watch began all landed before `started`.
        self.landed: list[tuple[float, float, int]] = [(-1.0, started, claim.renewals)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="renewal-watch", daemon=True)

    def _run(self) -> None:
        previous = time.monotonic()
        seen = self.landed[-1][2]
        while not self._stop.wait(self.interval):
            renewals = self.claim.renewals
            observed = time.monotonic()
            if renewals != seen:
                self.landed.append((previous, observed, renewals))
                seen = renewals
            previous = observed

    def renewals_after(self, moment: float) -> int:
        """How many renewals certainly landed after ``moment``."""
        before = [count for previous, _, count in self.landed if previous < moment]
        return self.landed[-1][2] - before[-1]

    def check_deadline(self, minter: Minter) -> None:
        """Assert no ID was issued past the deadline the observed renewals allowed."""
        allowance = self.claim.ttl_s - self.claim.margin_s
        landed = self.landed
        position = 0
        bound = -1.0
        for index, (asked, returned) in enumerate(zip(minter.asked, minter.returned, strict=True)):
            while position < len(landed) and landed[position][0] < returned:
                bound = max(bound, landed[position][1] + allowance)
                position += 1
            assert asked < bound, (
                f"ID #{index} ({Uid64(minter.values[index])}) was asked for at {asked:.3f}, "
                f"after the deadline {bound:.3f} the renewals before it allowed"
            )

    def __enter__(self) -> RenewalWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def minting(generator: Any) -> Iterator[tuple[Minter, RenewalWatch]]:
    """Mint from ``generator`` in a thread while watching its claim's renewals."""
    with RenewalWatch(generator.claim) as watch, Minter(generator) as minter:
        yield minter, watch


def wait_for_new_claim(claim: Claim, after_epoch: int, *, timeout: float) -> None:
    """Wait until ``claim`` has made a claim newer than ``after_epoch``."""

    def renewed() -> bool:
        grant = claim.last_grant
        return grant is not None and grant.epoch > after_epoch

    try:
        wait_until(renewed, timeout=timeout, description="a new claim", interval=0.01)
    except TimeoutError as error:
        raise TimeoutError(f"{error}; the claim is {claim.state.value}: {claim.problem}") from None


def wait_for(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    """``wait_until`` with a short poll interval, for conditions that change quickly."""
    wait_until(predicate, timeout=timeout, description=what, interval=0.01)
