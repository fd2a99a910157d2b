"""The test adapters of idmint's own drivers: what each can do beyond a URL.

Registered by scheme in the entry-point group ``idmint.contract_hooks``
(pyproject.toml). None of them can stop a server it does not run: the test
suite adds that for the servers it starts (``tests/integration/claims_helpers.py``);
``memory://`` stops its in-process "server" itself. Each works on its driver's
documented layout (the module docstring of the driver), through the driver's
own connection.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from collections.abc import Iterator
from typing import Any, TypeVar

from idmint.coordinate import connect
from idmint.coordinate.base import Claim, Coordinator, HighWaterMark
from idmint.coordinate.etcd import EtcdClaim, EtcdCoordinator
from idmint.coordinate.leases import LeaseClaim, PoolRecord
from idmint.coordinate.local import (
    DirectoryPool,
    LocalCoordinator,
    configured_directory,
    lock_key,
)
from idmint.coordinate.memory import MemoryCoordinator
from idmint.coordinate.mysql import MysqlCoordinator
from idmint.coordinate.postgres import INCARNATION_SQL, WRITTEN_XID_SQL, PostgresCoordinator
from idmint.coordinate.redis import GENERATION_WITNESS_MS, RedisCoordinator
from idmint.coordinate.spaces import SPACES, Identity, Space
from idmint.coordinate.static import DEFAULT_HOST_POOL, StaticCoordinator
from idmint.coordinate.url import CoordinatorUrl
from idmint.coordinate.zookeeper import ZooKeeperCoordinator
from idmint.coordinate.zookeeper_session import ZooKeeperSessionClaim
from idmint.testing.hooks import Hooks
from idmint.testing.minting import wait_for

__all__ = [
    "EtcdHooks",
    "LeaseHooks",
    "LocalHooks",
    "MemoryHooks",
    "MysqlHooks",
    "PostgresHooks",
    "RedisHooks",
    "StaticHooks",
    "ZooKeeperHooks",
    "expire_zookeeper_session",
]

CoordinatorT = TypeVar("CoordinatorT", bound=Coordinator)


def _driver(coordinator: Coordinator, kind: type[CoordinatorT]) -> CoordinatorT:
    if not isinstance(coordinator, kind):
        raise TypeError(f"{coordinator.url} is not a {kind.__name__}")
    return coordinator


@contextlib.contextmanager
def _connected(url: CoordinatorUrl, kind: type[CoordinatorT]) -> Iterator[CoordinatorT]:
    """A coordinator of ``kind`` for ``url``, closed after the block."""
    with connect(url) as coordinator:
        yield _driver(coordinator, kind)


class MemoryHooks(Hooks):
    """``memory://``: the in-process "server" does every drill itself."""

    hosts_are_servers = False

    def expire(self, coordinator: Coordinator, claim: Claim) -> None:
        _driver(coordinator, MemoryCoordinator).expire(claim)

    def stop_server(self, url: CoordinatorUrl) -> None:
        with _connected(url, MemoryCoordinator) as memory:
            memory.stop_serving()

    def start_server(self, url: CoordinatorUrl) -> None:
        with _connected(url, MemoryCoordinator) as memory:
            memory.serve_again()

    def remove_pool(self, url: CoordinatorUrl) -> None:
        with _connected(url, MemoryCoordinator) as memory:
            memory.discard()


class LocalHooks(Hooks):
    """``local://``: marks are files; a hold lasts as long as its process, so none expires."""

    def write_mark(
        self, coordinator: Coordinator, space: Space, identity: Identity, mark: HighWaterMark
    ) -> None:
        pool = self._local(coordinator).pool
        if isinstance(pool, DirectoryPool):
            # Makes its directory, as a claim does.
            pool.young_floor_ms(space.name, mark.renewed_ms, 0)
        pool.write_mark(space.name, lock_key(space, identity), mark.to_json())

    def _local(self, coordinator: Coordinator) -> LocalCoordinator:
        return _driver(coordinator, LocalCoordinator)

    def settle(self, url: CoordinatorUrl) -> None:
        # A directory made less than a TTL ago holds claims back for a TTL (it may
        # have replaced one deleted under a live holder): this one was made by the
        # kit a moment ago, with nobody in it.
        directory = configured_directory(url.path)
        if directory is None:
            return
        for space in SPACES:
            (directory / space.name).mkdir(parents=True, exist_ok=True)
            (directory / space.name / ".created").write_text(json.dumps({"created_ms": 0}))

    def remove_pool(self, url: CoordinatorUrl) -> None:
        directory = configured_directory(url.path)
        if directory is None:
            raise ValueError("this host's pool is never removed: its marks protect every process")
        shutil.rmtree(directory, ignore_errors=True)


class StaticHooks(LocalHooks):
    """``static://``: a configured identity is held where ``local://`` holds."""

    def _local(self, coordinator: Coordinator) -> LocalCoordinator:
        _driver(coordinator, StaticCoordinator)
        return LocalCoordinator(CoordinatorUrl.parse(DEFAULT_HOST_POOL))


class ZooKeeperHooks(Hooks):
    """``zk://``: a session expired from a second connection; marks are znodes."""

    expiry_seen_at_once = True

    def expire(self, coordinator: Coordinator, claim: Claim) -> None:
        if not isinstance(claim, ZooKeeperSessionClaim):
            raise TypeError(f"{claim!r} is not a ZooKeeper claim")
        client = claim.client
        # Reconnecting (after a restart, say): expire the session it gets back.
        wait_for(
            lambda: client is not None and client.connected and client.client_id is not None,
            timeout=15,
            what="the claim's ZooKeeper client to be connected",
        )
        expire_zookeeper_session(client)

    def remove_pool(self, url: CoordinatorUrl) -> None:
        from kazoo.exceptions import NoNodeError

        with (
            _connected(url, ZooKeeperCoordinator) as zookeeper,
            zookeeper.short_session() as client,
        ):
            for root in dict.fromkeys((zookeeper.root, zookeeper.groups.root)):
                with contextlib.suppress(NoNodeError):
                    client.delete(root, recursive=True)


def expire_zookeeper_session(
    client: Any, *, timeout: float = 15.0, wait_reconnect: bool = True, attempts: int = 5
) -> None:
    """Expire the session of a connected kazoo client on the server.

    A second connection attaches to the same session (same session id and password)
    and closes it: the server ends the session, deletes its ephemeral nodes and drops
    the original connection, whose reconnection attempt is then told that the session
    expired. The client moves to ``KazooState.LOST`` and, like every kazoo client,
    opens a new session by itself (``wait_reconnect``: and this waits for that).
    kazoo's own test harness only simulates the expiry on the client side, which
    leaves the session and its ephemeral nodes alive on the server.

    Raises ``RuntimeError`` if the client is not connected, ``TimeoutError`` if it
    does not notice the expiry (or reconnect) within ``timeout``.
    """
    from kazoo.client import KazooClient
    from kazoo.protocol.states import KazooState

    client_id = client.client_id
    if client_id is None:
        raise RuntimeError("the kazoo client is not connected")
    lost = threading.Event()
    reconnected = threading.Event()

    def watch(state: Any) -> bool:
        if state == KazooState.LOST:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            reconnected.set()
            return True  # remove the listener
        return False

    client.add_listener(watch)
    try:
        hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
        for _ in range(attempts):
            twin = KazooClient(hosts=hosts, client_id=client_id, auth_data=list(client.auth_data))
            try:
                twin.start(timeout=timeout)
            finally:
                twin.stop()
                twin.close()
            if lost.wait(timeout / attempts):
                break
        if not lost.wait(timeout):
            raise TimeoutError("the kazoo client did not see its session expire")
        if wait_reconnect and not reconnected.wait(timeout):
            raise TimeoutError("the kazoo client did not reconnect after expiry")
    finally:
        if not (wait_reconnect and reconnected.is_set()):
            client.remove_listener(watch)


class EtcdHooks(Hooks):
    """``etcd://``: a lease revoked; marks are keys."""

    def expire(self, coordinator: Coordinator, claim: Claim) -> None:
        if not isinstance(claim, EtcdClaim) or claim.lease is None:
            raise TypeError(f"{claim!r} is not an etcd claim holding a lease")
        _driver(coordinator, EtcdCoordinator).gateway.revoke(claim.lease)

    def remove_pool(self, url: CoordinatorUrl) -> None:
        with _connected(url, EtcdCoordinator) as etcd:
            etcd.gateway.delete_prefix(f"{etcd.prefix}/")


class LeaseHooks(Hooks):
    """A store of leases (:class:`~idmint.coordinate.leases.LeaseClaim`'s): a lease
    ended as if it lapsed. A store's adapter adds the rest (its marks, its pools)."""

    def expire(self, coordinator: Coordinator, claim: Claim) -> None:
        if not isinstance(claim, LeaseClaim) or claim.lease is None:
            raise TypeError(f"{claim!r} is not a claim holding a lease")
        # The lease goes, as when it lapses and another holder takes it: the claim
        # learns it at its next renewal.
        claim.store.release(claim.lease, None, 0)


class PostgresHooks(LeaseHooks):
    """``postgresql://``: a lease row ended; marks are columns of the table."""

    def settle(self, url: CoordinatorUrl) -> None:
        with _connected(url, PostgresCoordinator) as postgres:
            postgres.list_claims()  # makes the table
            store = postgres.store
            store.connection.run(
                "settling the pool",
                lambda c: c.execute(
                    f"INSERT INTO {store.qualified} (space, cluster, id, incarnation, "
                    f"since_ms, lease_ms, written_xid) SELECT space, -1, -1, {INCARNATION_SQL} "
                    f"|| '/' || %s, 0, 0, {WRITTEN_XID_SQL} FROM unnest(%s::text[]) AS space "
                    "ON CONFLICT DO NOTHING",
                    (_new_epoch(), [space.name for space in SPACES]),
                ),
            )

    def forget(self, url: CoordinatorUrl) -> None:
        with _connected(url, PostgresCoordinator) as postgres:
            table = postgres.store.qualified
            postgres.store.connection.run(
                "forgetting the pool", lambda c: c.execute(f"DELETE FROM {table}")
            )

    def remove_pool(self, url: CoordinatorUrl) -> None:
        with _connected(url, PostgresCoordinator) as postgres:
            table = postgres.store.qualified
            postgres.store.connection.run(
                "removing the pool", lambda c: c.execute(f"DROP TABLE IF EXISTS {table}")
            )


def _new_epoch() -> str:
    """The epoch of a pool the kit made and settled (see :class:`PoolRecord`)."""
    return PoolRecord.begin("", 0, 0).epoch


class RedisHooks(LeaseHooks):
    """``redis://``: a lease field deleted; marks are fields of the pool's hash."""

    def settle(self, url: CoordinatorUrl) -> None:
        with _connected(url, RedisCoordinator) as redis:
            client = redis.store.client
            run_id = client.info("server")["run_id"]
            record = PoolRecord(run_id, _new_epoch(), 0, 0).to_json()
            for space in SPACES:
                # A record, generation 0 and its witness, unless the pool has begun.
                client.eval(
                    "if redis.call('EXISTS', KEYS[1]) == 0 then "
                    "redis.call('HSET', KEYS[1], 'pool', ARGV[1], 'generation', 0) "
                    "redis.call('PEXPIREAT', KEYS[1], ARGV[2]) end",
                    1,
                    redis.store.key(space),
                    record,
                    GENERATION_WITNESS_MS,
                )

    def forget(self, url: CoordinatorUrl) -> None:
        # The pool is its keys: forgetting it is removing them, under its holders.
        self.remove_pool(url)

    def remove_pool(self, url: CoordinatorUrl) -> None:
        with _connected(url, RedisCoordinator) as redis:
            redis.store.client.delete(*(redis.store.key(space) for space in SPACES))


class MysqlHooks(LeaseHooks):
    """``mysql://``: a lease row ended; marks are columns of the claims table."""

    def settle(self, url: CoordinatorUrl) -> None:
        with _connected(url, MysqlCoordinator) as mysql:
            mysql.list_claims()  # makes the tables
            store = mysql.store
            epoch = _new_epoch()

            def settle(cursor: Any) -> None:
                _, incarnation = store.server(cursor)
                for space in SPACES:
                    # A record idmint vouches for, unless the pool has begun.
                    cursor.execute(
                        f"INSERT IGNORE INTO {store.table} (space, cluster, id, incarnation, "
                        "since_ms, lease_ms, written) VALUES (%s, -1, -1, %s, 0, 0, 0)",
                        (space.name, f"{incarnation}/{epoch}"),
                    )
                    cursor.execute(
                        f"INSERT IGNORE INTO {store.witness} (space, cluster, id, written) "
                        "VALUES (%s, -1, -1, 0)",
                        (space.name,),
                    )

            store.connection.run("settling the pool", settle)

    def forget(self, url: CoordinatorUrl) -> None:
        # The claims and their witness emptied: the store forgot them, kept its run.
        with _connected(url, MysqlCoordinator) as mysql:
            store = mysql.store
            store.connection.run(
                "forgetting the pool",
                lambda c: [c.execute(f"DELETE FROM {t}") for t in store.tables[:2]],
            )

    def remove_pool(self, url: CoordinatorUrl) -> None:
        with _connected(url, MysqlCoordinator) as mysql:
            tables = ", ".join(mysql.store.tables)
            mysql.store.connection.run(
                "removing the pool", lambda c: c.execute(f"DROP TABLE IF EXISTS {tables}")
            )
