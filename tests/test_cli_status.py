"""The CLI's exit statuses, as documented in idmint.cli: what kind of trouble it was.

0 done, 1 no ID could be issued, 2 usage, 69 coordinator unreachable, 74 stdout
cannot be written (tests/test_cli_output.py), 77 coordinator refused us (tested
with real servers in tests/integration/test_claims_security.py), 128+N a
signal. Always one line on stderr, ``idmint: error: ...``, never a traceback;
a wait for a coordinator that lasts says once what it waits for.
"""

from __future__ import annotations

import re
import time

import pytest
from tests.cli_process import ERROR_PREFIX, CliProcess, assert_one_error_line, run_idmint
from tests.server.error_samples import error_classes
from tests.servers import wait_until
from tests.servers.ports import LOOPBACK, free_port

from idmint import errors
from idmint.cli import EXIT_OUTPUT, exit_status

CONNECT_TIMEOUT_S = 3
WAITING = re.compile(r"^idmint: waiting up to (\d+) s for (ZooKeeper|etcd) at \S*127\.0\.0\.1:\d+")


def unreachable(scheme: str) -> str:
    return f"{scheme}://{LOOPBACK}:{free_port()}/idmint?connect_timeout={CONNECT_TIMEOUT_S}"


@pytest.mark.parametrize("scheme", ["zk", "etcd"])
def test_an_unreachable_coordinator_is_said_while_waited_for_then_exits_69(scheme: str) -> None:
    """After about a second the CLI says once what it waits for; the error says how long it did."""
    url = unreachable(scheme)
    started = time.monotonic()
    with CliProcess("generate", "--coordinator", url) as cli:
        wait_until(
            lambda: "waiting" in cli.stderr or not cli.running,
            timeout=30,
            description="the waiting notice",
        )
        assert cli.running, f"said nothing while it waited: {cli.stderr}"
        status = cli.wait(60)
        took = time.monotonic() - started
        waiting, error = cli.stderr.splitlines()
    assert status == 69, cli.stderr
    notice = WAITING.match(waiting)
    assert notice is not None, waiting
    assert notice.group(1) == str(CONNECT_TIMEOUT_S)
    assert error.startswith(ERROR_PREFIX), error
    assert "Traceback" not in cli.stderr
    assert LOOPBACK in error, "the message names the hosts tried"
    assert "connect_timeout=" in error, "and how to wait longer"
    waited = re.search(r"waited (\d+\.\d) s", error)
    assert waited is not None, error
    assert CONNECT_TIMEOUT_S - 0.5 <= float(waited.group(1)) <= took, (error, took)


@pytest.mark.parametrize(
    "command",
    [
        ["discovery", "register", "--service", "s"],
        ["generate", "--scheme", "elastic64"],
        ["discovery", "list"],
        ["claims", "list"],
    ],
    ids=["register", "elastic64", "discovery-list", "claims-list"],
)
def test_every_path_to_zookeeper_waits_once_and_says_how_long(command: list[str]) -> None:
    """The discovery paths once waited the connect timeout twice and said they waited once."""
    started = time.monotonic()
    result = run_idmint(*command, "--coordinator", unreachable("zk"))
    took = time.monotonic() - started
    assert result.returncode == 69, result.stderr
    waiting, error = result.stderr.splitlines()
    assert WAITING.match(waiting), waiting
    assert error.startswith(ERROR_PREFIX), error
    waited = re.search(r"waited (\d+\.\d) s", error)
    assert waited is not None, error
    assert float(waited.group(1)) <= took
    # One wait of connect_timeout (and an interpreter's start), not two.
    assert took < 2 * CONNECT_TIMEOUT_S, f"took {took:.1f} s"


def test_a_short_wait_gets_no_notice() -> None:
    """A connect_timeout of a second or two ends about when a notice would be read."""
    result = run_idmint("generate", "--coordinator", unreachable("zk").replace("=3", "=1"))
    assert result.returncode == 69
    assert "waited" in assert_one_error_line(result.stderr)


@pytest.mark.parametrize(
    "url",
    ["zk://127.0.0.1:99999/x", "zk://[::1/x", "etcd://127.0.0.1:99999/x", "etcd://[::1/x"],
)
def test_a_malformed_coordinator_url_exits_2(url: str) -> None:
    result = run_idmint("generate", "--coordinator", url)
    assert result.returncode == 2
    assert "coordinator URL" in assert_one_error_line(result.stderr)


def test_the_documented_statuses() -> None:
    """Covered with a real holder in tests/faults/test_second_process.py; here the table."""
    documented = {
        errors.IdentityInUse: 1,
        errors.PoolExhausted: 1,
        errors.ClaimLost: 1,
        errors.ClockMovedBackwards: 1,
        errors.GeneratorForked: 1,
        errors.ConfigurationError: 2,
        errors.InvalidId: 2,
        errors.CoordinatorUnavailable: 69,
        errors.NoServerAnswered: 69,
        errors.CoordinatorRefused: 77,
        errors.ServerRefused: 77,
    }
    assert {kind: kind.exit_status for kind in documented} == documented
    assert EXIT_OUTPUT == 74


@pytest.mark.parametrize("kind", error_classes(), ids=lambda kind: kind.__name__)
def test_each_errors_status_is_its_class_fact(kind: type[errors.IdmintError]) -> None:
    """The CLI reads the status off the error class: no table of its own to drift."""
    error = kind.__new__(kind)
    assert exit_status(error) == kind.exit_status
    assert kind.exit_status in (1, 2, 69, 77)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["generate", "--scheme", "snowflake", "--time-bits", "42"], "make 64"),
        (["generate", "--scheme", "snowflake", "--worker-bits", "17"], "make 70"),
        (
            ["generate", "--scheme", "snowflake", "--worker-bits", "17", "--sequence-bits", "5"],
            "worker_bits must be 1..16",
        ),
        (["generate", "--scheme", "snowflake", "--until-year", "2100"], "before 2100"),
        (["generate", "--scheme", "snowflake", "--tick-ms", "10"], "whole number of 10 ms"),
        (["generate", "--scheme", "snowflake", "--worker", "1024"], "worker 1024"),
        (["generate", "--scheme", "uid64", "--layout", "sonyflake"], "no layout option"),
        (["decode", "--layout", "sonyflake", "1"], "name the scheme too"),
        (["decode", "--scheme", "uid64", "--layout", "sonyflake", "1"], "one layout"),
        (["decode", "1212092628029698048"], "elastic64 (give its node_bits) or snowflake"),
        (["decode", "--scheme", "snowflake", str(1 << 63)], "out of range"),
        (["encode", "--scheme", "snowflake", "--timestamp-ms", "1"], "out of range"),
        (
            [
                *("encode", "--scheme", "snowflake", "--layout", "sonyflake"),
                *("--timestamp-ms", "1409529600005"),
            ],
            "5 ms into a 10 ms tick",
        ),
    ],
)
def test_snowflake_layout_errors_are_one_line_and_2(argv: list[str], fragment: str) -> None:
    done = run_idmint(*argv)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert fragment in assert_one_error_line(done.stderr)
