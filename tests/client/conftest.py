"""The client suite: ``idmint.client`` against real ``idmint serve`` processes.

Two uid64 servers run for the whole session (``pair``); a test that kills,
stops or reconfigures a server starts its own. Each server holds its own
generator ID (claimed on this host by the default ``local://`` coordinator), so
an ID's generator field says which server issued it. ZooKeeper for discovery
and lost claims is the session's (``zk``) or, where a test stops it, private.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.server.server_helpers import IdmintServer

__all__ = ["pair"]


@pytest.fixture(scope="session")
def pair() -> Iterator[tuple[IdmintServer, IdmintServer]]:
    """Two uid64 servers on 127.0.0.1, time-sequential so one server's IDs ascend."""
    servers = [IdmintServer("--mode", "time-sequential") for _ in range(2)]
    try:
        for server in servers:
            server.start()
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.close()
