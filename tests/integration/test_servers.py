"""The test-server harness works with the real clients idmint uses (kazoo, etcd3gw)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import etcd3gw
import pytest
from etcd3gw.exceptions import ConnectionFailedError, Etcd3Exception
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.security import make_digest_acl
from tests.servers.etcd import EtcdCluster
from tests.servers.ports import LOWEST_PORT, free_ports
from tests.servers.zookeeper import ZooKeeperEnsemble, expire_session

KazooFactory = Callable[..., KazooClient]

TIMEOUT = 15.0


@pytest.fixture
def kazoo() -> Iterator[KazooFactory]:
    """Start kazoo clients (``kazoo(hosts, **options)``) that are closed after the test."""
    clients: list[KazooClient] = []

    def connect(hosts: str, **options: Any) -> KazooClient:
        client = KazooClient(hosts=hosts, **options)
        clients.append(client)
        client.start(timeout=TIMEOUT)
        return client

    yield connect
    for client in clients:
        client.stop()
        client.close()


def unique(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex}"


# -- ports ---------------------------------------------------------------------------


def test_free_ports_are_distinct_and_avoid_default_ports() -> None:
    ports = free_ports(50) + free_ports(50)
    assert len(set(ports)) == len(ports)
    assert all(port >= LOWEST_PORT for port in ports)
    assert not {2181, 2379, 2380} & set(ports)


# -- ZooKeeper -----------------------------------------------------------------------


def test_zookeeper_create_and_read(zk: ZooKeeperEnsemble, kazoo: KazooFactory) -> None:
    client = kazoo(zk.hosts)
    path = unique("/harness")
    client.create(path, b"hello", makepath=True)
    data, stat = client.get(path)
    assert data == b"hello"
    assert stat.version == 0
    assert zk.mode(0) == "standalone"


def test_zookeeper_super_user_overrides_acls(zk: ZooKeeperEnsemble, kazoo: KazooFactory) -> None:
    owner = kazoo(zk.hosts, auth_data=[("digest", "owner:secret")])
    path = unique("/harness-acl")
    owner.create(
        path, b"private", makepath=True, acl=[make_digest_acl("owner", "secret", all=True)]
    )
    stranger = kazoo(zk.hosts)
    with pytest.raises(NoAuthError):
        stranger.get(path)
    admin = kazoo(zk.hosts, auth_data=[zk.super_auth])
    assert admin.get(path)[0] == b"private"
    admin.delete(path)
    assert owner.exists(path) is None


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_zookeeper_ensemble_serves_with_one_member_stopped(
    zk3: ZooKeeperEnsemble, kazoo: KazooFactory, role: str
) -> None:
    client = kazoo(zk3.hosts)
    path = unique("/harness-quorum")
    client.create(path, b"0", makepath=True)
    leader = zk3.leader()
    assert leader is not None
    victim = leader if role == "leader" else (leader + 1) % zk3.size

    with zk3.member_stopped(victim):
        assert not zk3.is_running(victim)
        for value in (b"1", b"2", b"3"):
            client.retry(client.set, path, value)  # rides over the client's reconnection
        survivor = (victim + 1) % zk3.size
        direct = kazoo(zk3.member_hosts(survivor))
        direct.sync(path)
        assert direct.get(path)[0] == b"3"

    assert all(zk3.is_running(i) for i in range(zk3.size))
    assert zk3.leader() is not None
    rejoined = kazoo(zk3.member_hosts(victim))
    rejoined.sync(path)
    assert rejoined.get(path)[0] == b"3"


def test_expire_session_removes_ephemeral_nodes(zk: ZooKeeperEnsemble, kazoo: KazooFactory) -> None:
    client = kazoo(zk.hosts)
    states: list[KazooState] = []

    def record(state: KazooState) -> None:
        states.append(state)

    client.add_listener(record)
    path = unique("/harness-ephemeral")
    client.create(path, b"mine", ephemeral=True, makepath=True)
    old_session = client.client_id
    assert old_session is not None

    observer = kazoo(zk.hosts)
    deleted = threading.Event()

    def on_change(event: WatchedEvent) -> None:
        if event.type == "DELETED":
            deleted.set()

    assert observer.exists(path, watch=on_change) is not None

    expire_session(client)

    assert deleted.wait(TIMEOUT), "the ephemeral node outlived its session"
    assert KazooState.LOST in states
    assert client.state == KazooState.CONNECTED  # kazoo opened a new session
    new_session = client.client_id
    assert new_session is not None
    assert new_session[0] != old_session[0]
    assert client.exists(path) is None


def test_enforce_auth_rejects_unauthenticated_clients(
    zk_auth: ZooKeeperEnsemble, kazoo: KazooFactory
) -> None:
    anonymous = kazoo(zk_auth.hosts)
    with pytest.raises(SessionClosedRequireSaslError):
        anonymous.get("/")

    authenticated = kazoo(zk_auth.hosts, auth_data=[("digest", "user:pw")])
    path = unique("/harness-auth")
    authenticated.create(path, b"ok", makepath=True)
    assert authenticated.get(path)[0] == b"ok"


# -- etcd ----------------------------------------------------------------------------


def test_etcd_put_and_get(etcd: EtcdCluster) -> None:
    client = etcd.client()
    key = unique("/harness")
    assert client.put(key, "hello")
    assert client.get(key) == [b"hello"]
    assert etcd.leader() == 0


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_etcd_cluster_accepts_writes_with_one_member_stopped(etcd3: EtcdCluster, role: str) -> None:
    leader = etcd3.leader()
    assert leader is not None
    victim = leader if role == "leader" else (leader + 1) % etcd3.size
    writer_index, reader_index = ((victim + 1) % etcd3.size, (victim + 2) % etcd3.size)
    key = unique("/harness-quorum")

    with etcd3.member_stopped(victim):
        assert not etcd3.is_running(victim)
        assert etcd3.client(writer_index).put(key, "written")
        assert etcd3.client(reader_index).get(key) == [b"written"]

    assert all(etcd3.serves(i) for i in range(etcd3.size))
    assert etcd3.client(victim).get(key) == [b"written"]


def test_etcd_tls_and_auth(etcd_secure: EtcdCluster) -> None:
    assert etcd_secure.ca_path is not None
    assert etcd_secure.user_credentials is not None
    key = f"{etcd_secure.auth_prefix}/{uuid.uuid4().hex}"

    anonymous = etcd_secure.client()
    with pytest.raises(Etcd3Exception) as refused:
        anonymous.put(key, "nope")
    assert "user name is empty" in (refused.value.detail_text or "")

    user = etcd_secure.client(credentials=etcd_secure.user_credentials)
    assert user.put(key, "yes")
    assert user.get(key) == [b"yes"]
    with pytest.raises(Etcd3Exception) as denied:
        user.put(unique("/elsewhere"), "nope")
    assert "permission denied" in (denied.value.detail_text or "")

    untrusting = etcd3gw.client(host="127.0.0.1", port=etcd_secure.client_port(0), protocol="https")
    untrusting.session.trust_env = False  # use the system CAs, which do not know ours
    with pytest.raises(ConnectionFailedError):
        untrusting.status()


def test_etcd_mutual_tls(tmp_path: Path) -> None:
    cluster = EtcdCluster(1, tmp_path, tls=True, client_cert_auth=True)
    cluster.start()
    try:
        assert cluster.ca_path is not None
        assert cluster.client_cert_path is not None
        assert cluster.client_key_path is not None
        port = cluster.client_port(0)

        # etcd3gw's own TLS arguments, in a session that ignores $REQUESTS_CA_BUNDLE.
        with_cert = etcd3gw.client(
            host="127.0.0.1",
            port=port,
            protocol="https",
            ca_cert=str(cluster.ca_path),
            cert_cert=str(cluster.client_cert_path),
            cert_key=str(cluster.client_key_path),
        )
        with_cert.session.trust_env = False
        assert with_cert.put("/mtls", "ok")
        assert cluster.client().get("/mtls") == [b"ok"]

        without_cert = etcd3gw.client(
            host="127.0.0.1", port=port, protocol="https", ca_cert=str(cluster.ca_path)
        )
        without_cert.session.trust_env = False
        with pytest.raises(ConnectionFailedError):
            without_cert.get("/mtls")
    finally:
        cluster.stop()
