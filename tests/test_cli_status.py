"""The CLI's exit statuses, as documented in idmint.cli: what kind of trouble it was.

0 done, 1 no ID could be issued, 2 usage, 69 coordinator unreachable, 77
coordinator refused us (tested with real servers in
tests/integration/test_claims_security.py), 128+N a signal. Always one line
on stderr, never a traceback.
"""

from __future__ import annotations

import time

import pytest
from tests.cli_process import assert_one_error_line, run_idmint
from tests.servers.ports import LOOPBACK, free_port

CONNECT_TIMEOUT_S = 2


@pytest.mark.parametrize("scheme", ["zk", "etcd"])
def test_an_unreachable_coordinator_exits_69_within_its_connect_timeout(scheme: str) -> None:
    url = f"{scheme}://{LOOPBACK}:{free_port()}/idmint?connect_timeout={CONNECT_TIMEOUT_S}"
    started = time.monotonic()
    result = run_idmint("generate", "--coordinator", url)
    took = time.monotonic() - started
    assert result.returncode == 69, result.stderr
    line = assert_one_error_line(result.stderr)
    assert f"within {CONNECT_TIMEOUT_S} s" in line
    assert LOOPBACK in line, "the message names the hosts tried"
    assert "connect_timeout=" in line, "and how to wait longer"
    # An interpreter start and the wait; etcd once took 12.5 s for 10.
    assert took < CONNECT_TIMEOUT_S + 3, f"took {took:.1f} s"


@pytest.mark.parametrize(
    "url",
    ["zk://127.0.0.1:99999/x", "zk://[::1/x", "etcd://127.0.0.1:99999/x", "etcd://[::1/x"],
)
def test_a_malformed_coordinator_url_exits_2(url: str) -> None:
    result = run_idmint("generate", "--coordinator", url)
    assert result.returncode == 2
    assert "coordinator URL" in assert_one_error_line(result.stderr)


def test_an_identity_in_use_exits_1() -> None:
    """Covered with a real holder in tests/faults/test_second_process.py; here the code path."""
    from idmint.cli import exit_status
    from idmint.errors import (
        ClaimLost,
        ConfigurationError,
        CoordinatorRefused,
        CoordinatorUnavailable,
        IdentityInUse,
        InvalidId,
        PoolExhausted,
    )

    assert [
        exit_status(error)
        for error in (
            IdentityInUse("x"),
            PoolExhausted("x"),
            ClaimLost("x"),
            ConfigurationError("x"),
            InvalidId(None, "x"),
            CoordinatorUnavailable("x"),
            CoordinatorRefused("x"),
        )
    ] == [1, 1, 1, 2, 2, 69, 77]
