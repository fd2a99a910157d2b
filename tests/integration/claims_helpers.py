"""Shared helpers for the claims tests (``tests/integration/test_claims_*.py``).

* :class:`Backend` names a coordinator under test (``static``, ``zk``, ``etcd``,
  ``postgres``, ``redis``, ...), builds its URLs, and gives its driver's contract
  hooks (:mod:`idmint.testing.hooks`: the driver's own test adapter, plus stopping
  and starting the server the session runs); the ``backend`` fixture
  (``conftest.py``) makes one from a name given by indirect parametrization over
  :data:`ALL_BACKENDS` or :data:`CLAIMED_BACKENDS`. What only the store can tell
  (a high-water mark, an expired session) goes through those hooks: nothing here
  knows a driver's insides.
* :class:`CliProcess` runs ``python -m idmint`` with its output drained by threads,
  each line stamped with the monotonic time it arrived.
* :class:`Minter`, :class:`RenewalWatch` and :func:`minting` (from
  :mod:`idmint.testing.minting`) mint in a thread while a claim's renewals are watched.

Waiting is always on a condition with a deadline (:func:`tests.servers.wait_until`);
nothing sleeps in place of synchronisation.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from tests.cli_process import CliProcess as _CliProcess
from tests.cli_process import assert_one_error_line, now_ms, run_idmint
from tests.servers import SingleServer, wait_until
from tests.servers.etcd import EtcdCluster
from tests.servers.mariadb import USER as MARIADB_USER
from tests.servers.mariadb import MariaDbServer
from tests.servers.ports import LOOPBACK, free_port
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer
from tests.servers.zookeeper import ZooKeeperEnsemble

from idmint import Uid64
from idmint.coordinate import Claim, ClaimInfo, CoordinatorUrl, connect
from idmint.coordinate.spaces import GENERATOR, SPACES
from idmint.testing import HOOKS, Hooks
from idmint.testing.minting import Minter, MintError, RenewalWatch, minting, wait_for_new_claim

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
    "mint_beside_a_successor",
    "minting",
    "now_ms",
    "run_idmint",
    "server_backends",
    "session_backends",
    "settle_pool",
    "settled_local_directory",
    "shared_backends",
    "start_holders",
    "unique_root",
    "wait_for",
    "wait_for_new_claim",
]

SERVER_FIXTURES = {
    "zk": "zk",
    "etcd": "etcd",
    "postgres": "postgres",
    "redis": "redis",
    "mysql": "mariadb",
}
"""The session fixture (tests/servers/fixtures.py) of each backend that is a server."""

SERVER_BACKENDS: list[str] = list(SERVER_FIXTURES)
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
"""The PostgreSQL and MariaDB database the claims tests' tables live in (one table per
test)."""

Server = ZooKeeperEnsemble | EtcdCluster | PostgresServer | RedisServer | MariaDbServer
TABLES = ("postgres", "mysql")
"""Stores whose pool is a table of the URL's database."""


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
        return self.name in ("postgres", "redis", "mysql")

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
        if self.name in TABLES:
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
        if isinstance(server, SingleServer):
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

        ``ttl`` becomes ``session_timeout`` (ZooKeeper) or ``ttl`` (etcd, and
        ``max_ttl`` too for PostgreSQL and Redis unless given); ``None`` leaves it
        out. The static backend configures generator 7, cluster 3 unless the options
        say otherwise, and ignores ``root`` and ``ttl``.
        """
        if self.name == "static":
            query = {"generator": STATIC_GENERATOR, "cluster": STATIC_CLUSTER, **options}
            return f"static://?{urlencode(query)}"
        query = {**self.url_options, **options}
        if ttl is not None:
            query["session_timeout" if self.name == "zk" else "ttl"] = ttl
            if self.stores:
                # The pool's longest lease: its claims' own unless a test says otherwise,
                # so that a pool the store forgot holds claims back for that TTL only.
                query.setdefault("max_ttl", ttl)
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
            query = {("table" if self.name in TABLES else "prefix"): path, **query}
            if self.name == "postgres" and not userinfo:
                userinfo = "postgres@"
            if isinstance(self.server, MariaDbServer) and not userinfo:
                userinfo = f"{MARIADB_USER}:{quote(self.server.password, safe='')}@"
            path = f"/{CLAIMS_DATABASE}" if self.name in TABLES else "/0"
        text = f"{self.scheme}://{userinfo}{location}{path}"
        return f"{text}?{urlencode(query, safe='/:')}" if query else text

    def unreachable_url(self, root: str, **options: object) -> str:
        """A URL of this kind whose host is a reserved port where nothing listens."""
        return self.url(root, hosts=f"{LOOPBACK}:{free_port()}", **options)

    # -- what only the store can tell: the driver's contract hooks ---------------------

    def hooks(self) -> Hooks:
        """The driver's test adapter, able also to stop and start this session's server."""
        adapter = HOOKS.find(self.scheme) or Hooks
        server = self.server
        if server is None:
            return adapter()

        class WithServer(adapter):  # type: ignore[valid-type,misc]
            def stop_server(self, url: CoordinatorUrl) -> None:
                if isinstance(server, SingleServer):
                    server.stop()
                else:
                    server.stop_member(0)

            def start_server(self, url: CoordinatorUrl) -> None:
                if isinstance(server, SingleServer):
                    server.start()
                else:
                    server.start_member(0)

        return WithServer()

    def kit_url(self, ttl: float = DEFAULT_TTL_S) -> CoordinatorUrl:
        """A URL whose pool the contract kit makes pools of its own in."""
        root = None if self.name in ("local", "static") else self.new_root(settled=False)
        if self.name == "local":
            root = str(Path(os.environ["IDMINT_LOCAL_DIR"]) / unique_root().strip("/"))
        if self.name in TABLES:
            root = "idmint_claims"  # the kit's pools are tables beside it
        return CoordinatorUrl.parse(self.url(root, ttl=ttl))

    def read_mark(self, root: str, generator: int, cluster: int = 0) -> dict[str, Any] | None:
        """The high-water mark recorded for ``generator`` (through the driver's hooks)."""
        with connect(self.url(root, ttl=None)) as coordinator:
            mark = self.hooks().read_mark(
                coordinator, GENERATOR, GENERATOR.identity(generator, cluster)
            )
        return None if mark is None else mark.to_json()

    def expire(self, root: str, claim: Claim) -> None:
        """End the claim on the server: expire its ZooKeeper session, end its lease.

        ZooKeeper tells the client at once (the claim goes LOST); the others do not,
        and the claim learns it at its next renewal.
        """
        with connect(self.url(root, ttl=None)) as coordinator:
            self.hooks().expire(coordinator, claim)

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


def settle_pool(backend: Backend, root: str) -> None:
    """Make the database pool ``root`` as a fleet's is after its first minute.

    Its record (the documented layout) says the store's current incarnation has
    been seen since the epoch: claims need not settle past holders it may have
    forgotten. The rule itself is tested on new pools. Done as the server's
    administrator (a test role may not create the table).
    """
    server = backend._server()
    if isinstance(server, RedisServer):
        admin_url = server.url(root)
    elif isinstance(server, MariaDbServer):
        admin_url = Backend("mysql", server).url(root, ttl=None)
    else:
        admin = Backend(
            "postgres",
            server,
            credentials=("postgres", server.password) if server.password else None,
            ca_path=server.ca_path,
        )
        admin_url = admin.url(root, ttl=None)
    backend.hooks().settle(CoordinatorUrl.parse(admin_url))


def settled_local_directory() -> Path:
    """A ``local://`` directory of its own, as a host has it after its first minute.

    A directory made less than a TTL ago makes every claim wait for the TTL to
    pass (it may have replaced one deleted under a live holder; see
    :mod:`idmint.coordinate.local`). Tests of other rules start from a directory
    whose spaces were made long ago; the young-directory rule has tests of its own.
    """
    directory = Path(os.environ["IDMINT_LOCAL_DIR"]) / unique_root().strip("/")
    for space in SPACES:
        (directory / space.name).mkdir(parents=True)
        (directory / space.name / ".created").write_text(json.dumps({"created_ms": 0}))
    return directory


def make_backend(name: str, request: pytest.FixtureRequest) -> Backend:
    """The backend called ``name``, starting its (session-scoped) server if needed."""
    if name in ("static", "local", "memory"):
        return Backend(name)
    if name == "zk-lockfree":
        return Backend("zk", request.getfixturevalue("zk"), url_options={"queue": "false"})
    if name not in SERVER_FIXTURES:
        raise ValueError(f"unknown backend {name!r}")
    server = request.getfixturevalue(SERVER_FIXTURES[name])
    if name in TABLES:
        server.create_database(CLAIMS_DATABASE)
    return Backend(name, server)


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
        """The IDs of its whole lines. A last line shorter than an ID is the end of a
        write the process did not finish (once seen in CI after a SIGTERM, whose
        handler lets the write finish: tests/test_cli.py holds that), not an ID."""
        lines = self.lines
        if lines and len(lines[-1]) < Uid64.text_length:
            lines = lines[:-1]
        return decode(lines)


MINTED = 10_000
"""How many IDs a CLI process of :func:`start_holders` mints before it counts as minting."""


def start_holders(
    arguments: Sequence[str], count: int, exit_stack: contextlib.ExitStack
) -> list[CliProcess]:
    """``count`` CLI processes running ``arguments`` (a ``generate --count 0``, minting
    until stopped), once each has minted :data:`MINTED` IDs."""
    holders = [exit_stack.enter_context(CliProcess(*arguments)) for _ in range(count)]
    for holder in holders:
        holder.wait_for_lines(MINTED, timeout=60, what="the holders to mint")
    return holders


def mint_beside_a_successor(
    arguments: Sequence[str], holders: Sequence[CliProcess], exit_stack: contextlib.ExitStack
) -> list[int]:
    """A successor runs ``arguments`` until it and every holder have minted
    :data:`MINTED` IDs more; then all stop (``SIGTERM``, each exiting 128 + SIGTERM).
    Every ID they minted, successor last."""
    successor = exit_stack.enter_context(CliProcess(*arguments))
    successor.wait_for_lines(MINTED, timeout=60, what="the successor to mint")
    for holder in holders:
        count = len(holder.lines)
        holder.wait_for_lines(count + MINTED, timeout=60, what="the holders to mint again")
    processes = [*holders, successor]
    for process in processes:
        process.send(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM, process.stderr
    return [int(i) for process in processes for i in process.ids()]


def wait_for(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    """``wait_until`` with a short poll interval, for conditions that change quickly."""
    wait_until(predicate, timeout=timeout, description=what, interval=0.01)
