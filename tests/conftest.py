"""Settings every test shares.

The host-local coordinator (``local://``, the default when no coordinator is
given) keeps its lock files in a directory; the session gets one of its own
through ``IDMINT_LOCAL_DIR``, inherited by every process the tests start, so
tests never touch (or wait on) the lock files of whoever runs them.

The session's ZooKeeper, etcd and PostgreSQL servers are fixtures of
``tests/servers/fixtures.py``, loaded here so that every directory shares them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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
