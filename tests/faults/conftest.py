"""The fault suite: each test provokes one way an ID could be issued twice or a caller hang.

Run it alone with ``pytest tests/faults``; docs/reliability.md lists the fault
model it covers. Tests that need ZooKeeper or etcd use the same session servers
as tests/integration (started on first use, on free ports of 127.0.0.1).
"""

from __future__ import annotations

from tests.integration.conftest import (
    _restart_stopped_members,
    backend,
    etcd,
    exit_stack,
    zk,
)

__all__ = ["_restart_stopped_members", "backend", "etcd", "exit_stack", "zk"]
