"""Session fixtures giving tests real ZooKeeper, etcd, PostgreSQL, Redis and MariaDB servers.

Loaded by ``tests/conftest.py``, so every directory shares one server of each kind
per session (integration, faults, client, storage and the docs test alike). Every
server fixture is lazy: a server starts the first time a test asks for it and is
shared by the rest of the session, so tests must not assume an empty server (use
unique paths, keys and databases). Servers listen on free ports of 127.0.0.1, never
on the default ports, and are stopped at the end of the session (and killed at
interpreter exit if anything goes wrong).

Tests that stop a member should use the context managers of the harness::

    def test_failover(zk3: ZooKeeperEnsemble) -> None:
        with zk3.member_stopped(zk3.leader()):
            ...

Whatever a test does, after each test any member left stopped is started again and the
cluster awaited (``_restart_stopped_members``), so the next test finds it whole.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
from tests.servers import Cluster, SingleServer
from tests.servers.etcd import EtcdCluster
from tests.servers.mariadb import MariaDbServer
from tests.servers.postgres import PostgresServer
from tests.servers.redis import RedisServer
from tests.servers.zookeeper import ZooKeeperEnsemble

__all__ = [
    "_restart_stopped_members",
    "etcd",
    "etcd3",
    "etcd_secure",
    "mariadb",
    "mariadb_secure",
    "postgres",
    "postgres_secure",
    "redis",
    "redis_secure",
    "redis_volatile",
    "zk",
    "zk3",
    "zk_auth",
]

_started: list[Cluster[Any] | SingleServer] = []
"""Servers and clusters started by the fixtures of this session."""

_S = TypeVar("_S", bound="Cluster[Any] | SingleServer")


def _serve(server: _S) -> Iterator[_S]:
    """Start ``server``, hand it to the session, close it when the session ends."""
    try:
        server.start()
        _started.append(server)
        yield server
    finally:
        server.close()
        if server in _started:
            _started.remove(server)


@pytest.fixture(scope="session")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A standalone ZooKeeper server (``zk.hosts``; super user in ``zk.super_auth``)."""
    yield from _serve(ZooKeeperEnsemble(1, tmp_path_factory.mktemp("zk")))


@pytest.fixture(scope="session")
def zk3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A three-member ZooKeeper ensemble."""
    yield from _serve(ZooKeeperEnsemble(3, tmp_path_factory.mktemp("zk3")))


@pytest.fixture(scope="session")
def zk_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A standalone ZooKeeper server refusing clients without ``digest`` authentication.

    Connect with ``auth_data=[("digest", "user:password")]`` (any pair).
    """
    yield from _serve(ZooKeeperEnsemble(1, tmp_path_factory.mktemp("zk-auth"), enforce_auth=True))


SHORT_SESSION_LIMIT_MS = 4000
"""The longest session timeout ``zk_short_sessions`` grants (``maxSessionTimeout``)."""


@pytest.fixture(scope="session")
def zk_short_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A standalone ZooKeeper server granting sessions of at most
    :data:`SHORT_SESSION_LIMIT_MS`, whatever a client asks for."""
    yield from _serve(
        ZooKeeperEnsemble(
            1,
            tmp_path_factory.mktemp("zk-short"),
            extra_cfg={"maxSessionTimeout": SHORT_SESSION_LIMIT_MS},
        )
    )


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """A single etcd member over plain HTTP, without authentication."""
    yield from _serve(EtcdCluster(1, tmp_path_factory.mktemp("etcd")))


@pytest.fixture(scope="session")
def etcd3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """A three-member etcd cluster over plain HTTP, without authentication."""
    yield from _serve(EtcdCluster(3, tmp_path_factory.mktemp("etcd3")))


@pytest.fixture(scope="session")
def etcd_secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """A single etcd member over HTTPS with authentication enabled.

    ``etcd_secure.ca_path`` verifies it; ``etcd_secure.user_credentials`` may read and
    write under ``etcd_secure.auth_prefix``; ``etcd_secure.client(credentials=...)``
    returns a ready etcd3gw client.
    """
    yield from _serve(EtcdCluster(1, tmp_path_factory.mktemp("etcd-secure"), tls=True, auth=True))


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL server on a free port of 127.0.0.1 (superuser ``postgres``, trusted)."""
    yield from _serve(PostgresServer(tmp_path_factory.mktemp("postgres")))


@pytest.fixture(scope="session")
def postgres_secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL server that asks for the superuser's password (``.password``) over TLS
    (``.ca_path`` verifies it)."""
    yield from _serve(
        PostgresServer(
            tmp_path_factory.mktemp("postgres-secure"),
            password=secrets.token_urlsafe(12),
            tls=True,
        )
    )


@pytest.fixture(scope="session")
def mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDbServer]:
    """A MariaDB server on a free port of 127.0.0.1: the user ``idmint`` with a password
    (``.password``; ``.url(database)`` carries it), root without one for administration."""
    yield from _serve(MariaDbServer(tmp_path_factory.mktemp("mariadb")))


@pytest.fixture(scope="session")
def mariadb_secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDbServer]:
    """A MariaDB server that also serves TLS (``.ca_path`` verifies it), with
    ``tests.servers.mariadb.TLS_USER`` let in only over TLS (``.password``)."""
    yield from _serve(MariaDbServer(tmp_path_factory.mktemp("mariadb-secure"), tls=True))


@pytest.fixture(scope="session")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server that keeps its data across restarts (an append-only file, fsync
    always), without authentication."""
    yield from _serve(RedisServer(tmp_path_factory.mktemp("redis"), persistence=True))


@pytest.fixture(scope="session")
def redis_volatile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server without persistence: a restart comes back empty."""
    yield from _serve(RedisServer(tmp_path_factory.mktemp("redis-volatile"), persistence=False))


@pytest.fixture(scope="session")
def redis_secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server over TLS only (``.ca_path``) with ACL users: the default user's
    password is ``.admin_password``; ``tests.servers.redis.USER`` (``.user_password``)
    may touch keys starting with ``tests.servers.redis.USER_KEYS`` only."""
    yield from _serve(RedisServer(tmp_path_factory.mktemp("redis-secure"), tls=True, acl=True))


@pytest.fixture(autouse=True)
def _restart_stopped_members() -> Iterator[None]:
    """After each test, start again any member a test left stopped (or frozen)."""
    yield
    for server in list(_started):
        if isinstance(server, SingleServer):
            server.thaw()
            if not server.running:
                server.start()
        elif not all(server.is_running(i) for i in range(server.size)):
            server.heal()
