"""Settings every test shares.

The default coordinator (``local://``) is this host's pool; the session gets a
pool directory of its own instead, through ``IDMINT_LOCAL_DIR``, inherited by
every process the tests start, so tests never touch (or wait on) the IDs held
by whoever else runs on this machine. Tests of this host's pool itself use the
``host_pool`` fixture (a pool of the test's own) or a simulated host
(tests/faults/simulated_host.py).

The session's ZooKeeper, etcd and PostgreSQL servers are fixtures of
``tests/servers/fixtures.py``, loaded here so that every directory shares them.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from idmint.coordinate import hostpool
from idmint.coordinate.hostpool import HostLocation

pytest_plugins = ["tests.servers.fixtures"]


@pytest.fixture(scope="session", autouse=True)
def host_lock_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The ``local://`` directory of this test session."""
    directory = tmp_path_factory.mktemp("idmint-local")
    previous = os.environ.get("IDMINT_LOCAL_DIR")
    os.environ["IDMINT_LOCAL_DIR"] = str(directory)
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop("IDMINT_LOCAL_DIR", None)
        else:
            os.environ["IDMINT_LOCAL_DIR"] = previous


@pytest.fixture
def host_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostLocation:
    """This host's pool (``local://`` with no directory), private to the test.

    Its socket names have a prefix of their own and its mark directories are
    the test's, so a test can empty, corrupt or fill them; everything else is
    the real mechanism. ``persistent`` does not exist yet: the first process
    running as root makes it, as on a new host. The tests that run whole
    processes on the real locations do so in namespaces of their own
    (tests/faults/simulated_host.py).
    """
    if os.geteuid() != 0:
        pytest.skip("this host's pool trusts only a root-owned /var/lib/idmint: run as root")
    volatile = tmp_path / "dev-shm"
    volatile.mkdir()
    volatile.chmod(0o1777)
    location = HostLocation(
        namespace=f"idmint-test-{secrets.token_hex(6)}",
        persistent=tmp_path / "var-lib-idmint",
        volatile=volatile,
    )
    monkeypatch.setattr(hostpool, "HOST", location)
    monkeypatch.delenv("IDMINT_LOCAL_DIR", raising=False)
    return location
