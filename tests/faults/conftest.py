"""The fault suite: each test provokes one way an ID could be issued twice or a caller hang.

Run it alone with ``pytest tests/faults``; docs/reliability.md lists the fault
model it covers. Tests that need ZooKeeper or etcd use the same session servers
as tests/integration (started on first use, on free ports of 127.0.0.1); the
clock tests use a wall-clock shim built once per session.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cores import core
from tests.faults.wallclock import WallClockOffset, build_shim
from tests.integration.conftest import backend, exit_stack

__all__ = ["backend", "core", "exit_stack"]


@pytest.fixture(scope="session")
def wallclock_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("wallclock-shim"))


@pytest.fixture
def wallclock(wallclock_shim: Path, tmp_path: Path) -> WallClockOffset:
    """The wall clock of the children this test starts with ``wallclock.env()``."""
    return WallClockOffset(wallclock_shim, tmp_path / "wallclock-offset")
