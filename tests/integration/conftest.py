"""Fixtures giving integration tests real ZooKeeper and etcd servers.

Every server fixture is session-scoped and lazy: a server starts the first time a test
asks for it and is shared by the rest of the session, so tests must not assume an empty
server (use unique paths and keys). Servers listen on free ports of 127.0.0.1, never on
the default ports, and are stopped at the end of the session (and killed at interpreter
exit if anything goes wrong).

Tests that stop a member should use the context managers of the harness::

    def test_failover(zk3: ZooKeeperEnsemble) -> None:
        with zk3.member_stopped(zk3.leader()):
            ...

Whatever a test does, after each test any member left stopped is started again and the
cluster awaited (``_restart_stopped_members``), so the next test finds it whole.

Every test collected under this directory is marked ``integration``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from tests.servers.etcd import EtcdCluster
from tests.servers.zookeeper import ZooKeeperEnsemble

_HERE = Path(__file__).resolve().parent


_started: list[ZooKeeperEnsemble | EtcdCluster] = []
"""Clusters started by the fixtures of this session."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of this directory (and only those) ``integration``."""
    for item in items:
        if item.path.resolve().is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


_C = TypeVar("_C", ZooKeeperEnsemble, EtcdCluster)


def _serve(cluster: _C) -> Iterator[_C]:
    """Start ``cluster``, hand it to the session, stop it when the session ends."""
    try:
        cluster.start()
        _started.append(cluster)
        yield cluster
    finally:
        cluster.stop()
        if cluster in _started:
            _started.remove(cluster)


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


@pytest.fixture(autouse=True)
def _restart_stopped_members() -> Iterator[None]:
    """After each test, start again any member a test left stopped."""
    yield
    for cluster in list(_started):
        if not all(cluster.is_running(i) for i in range(cluster.size)):
            cluster.heal()


# -- coordinators for the claims tests (test_claims_*.py) ------------------------------

import contextlib  # noqa: E402

from tests.integration.claims_helpers import Backend, make_backend  # noqa: E402


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Backend:
    """The coordinator a claims test runs against, by indirect parametrization::

        @pytest.mark.parametrize("backend", CLAIMED_BACKENDS, indirect=True)

    Its server (a session fixture) is started on first use; see ``claims_helpers``.
    """
    name = getattr(request, "param", None)
    if not isinstance(name, str):
        raise TypeError("parametrize `backend` indirectly with a backend name")
    return make_backend(name, request)


@pytest.fixture
def exit_stack() -> Iterator[contextlib.ExitStack]:
    """An ExitStack closed after the test: generators, processes, mint threads."""
    with contextlib.ExitStack() as stack:
        yield stack
