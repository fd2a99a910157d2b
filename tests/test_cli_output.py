"""The CLI when stdout cannot be written: closed (``>&-``) or full (``> /dev/full``).

Every command says so in one line on stderr and exits 74 (EX_IOERR), with or
without Python's output buffering; a generator's claim is released as on any
exit, so the identity is free again at once. A reader that goes away (``|
head``) is not an error: that is in tests/test_cli.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from tests.cli_process import CliProcess, assert_one_error_line
from tests.servers.etcd import EtcdCluster

EXIT_IOERR = 74
COMMANDS = {
    "generate": ["generate", "--count", "3"],
    "generate-endless": ["generate", "--count", "0"],
    "generate-json": ["generate", "--scheme", "muid", "--format", "json"],
    "schemes": ["schemes"],
    "decode": ["decode", "ab6278961f7f88d5"],
    "decode-stdin": ["decode", "-"],
    "encode": ["encode", "--scheme", "uid64", "--timestamp-ms", "1700000000000"],
    "completion": ["completion", "bash"],
    "claims-list": ["claims", "list"],
    # argparse ignores a failed write of its help (once: status 0, or a traceback).
    "help": ["--help"],
    "generate-help": ["generate", "--help"],
    "version": ["--version"],
    "bare": [],
}
STDOUT = {"full": "> /dev/full", "closed": ">&-"}


def run_redirected(
    argv: Sequence[str],
    redirect: str,
    *,
    buffered: bool,
    stdin: str = "",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m idmint ARGV`` with stdout redirected by the shell as ``redirect`` says."""
    env = {**os.environ, **(env or {})}
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "idmint", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("stdout", list(STDOUT))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unwritable_stdout_is_one_line_and_74(command: str, stdout: str, buffered: bool) -> None:
    result = run_redirected(
        COMMANDS[command], STDOUT[stdout], buffered=buffered, stdin="ab6278961f7f88d5\n"
    )
    assert result.returncode == EXIT_IOERR, result.stderr
    line = assert_one_error_line(result.stderr)
    reason = "No space left on device" if stdout == "full" else "it is closed"
    assert line == f"idmint: error: cannot write to stdout: {reason}"


def test_the_claim_is_released_when_stdout_fails(etcd: EtcdCluster) -> None:
    """etcd keeps a claim for its TTL unless released: listed free at once, it was released."""
    url = f"etcd://127.0.0.1:{etcd.client_port(0)}/cli-output-{uuid.uuid4().hex[:8]}?ttl=60"

    def held() -> list[dict[str, object]]:
        listed = run_redirected(
            ["claims", "list", "--coordinator", url, "--format", "json"], "", buffered=True
        )
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        return [row for row in rows if row["state"] == "held"]

    with CliProcess("generate", "--coordinator", url, "--count", "0", stamp=False) as running:
        running.wait_for_lines(1, timeout=30)
        assert len(held()) == 1, "a running generator's claim is listed as held"
        running.send(signal.SIGTERM)
        assert running.wait(30) == 128 + signal.SIGTERM
    assert held() == []
    for redirect in STDOUT.values():
        failed = run_redirected(
            ["generate", "--coordinator", url, "--count", "0"], redirect, buffered=True
        )
        assert failed.returncode == EXIT_IOERR, failed.stderr
        assert held() == [], f"still held after `generate {redirect}`"


def test_a_static_identity_is_free_again_for_the_next_process(tmp_path: Path) -> None:
    """``--generator 5`` is held on this host; the next process may take it at once."""
    pool = {"IDMINT_LOCAL_DIR": str(tmp_path)}
    argv = ["generate", "--generator", "5", "--count", "0"]
    failed = run_redirected(argv, "> /dev/full", buffered=True, env=pool)
    assert failed.returncode == EXIT_IOERR, failed.stderr
    again = run_redirected(["generate", "--generator", "5"], "", buffered=True, env=pool)
    assert again.returncode == 0, again.stderr
