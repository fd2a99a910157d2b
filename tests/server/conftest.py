"""Real ``idmint serve`` processes for the server tests.

``server_url`` is one uid64 server for the whole session (its base URL, ending in
``/``); ``start_idmint_server(*args)`` starts another with extra ``idmint serve``
arguments (e.g. ``--scheme muid`` or ``--token-file F``). Each listens on a port the
kernel picks (``--port 0``), read from the line the server prints once it listens, and
is stopped with SIGTERM at the end of the session.
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 20
_ANNOUNCE = re.compile(r"open (http://\S+/)")


def _start(args: tuple[str, ...], log_dir: Path) -> tuple[subprocess.Popen[str], str]:
    log = log_dir / f"idmint-serve-{len(list(log_dir.iterdir()))}.log"
    command = [sys.executable, "-m", "idmint", "serve", "--host", "127.0.0.1", "--port", "0"]
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [*command, *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    assert process.stdout is not None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    seen = []
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=0.2):
                if process.poll() is not None:
                    break
                continue
            line = process.stdout.readline()
            if not line:  # the server exited
                break
            seen.append(line)
            match = _ANNOUNCE.search(line)
            if match:
                return process, match.group(1)
    process.kill()
    process.wait()
    pytest.fail(
        f"idmint serve {' '.join(args)} did not start: stdout {''.join(seen)!r}, "
        f"stderr {log.read_text()!r}"
    )


@pytest.fixture(scope="session")
def start_idmint_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., str]]:
    """``start(*serve_args) -> base URL``; every server started is stopped at the end."""
    log_dir = tmp_path_factory.mktemp("idmint-serve")
    processes: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        process, url = _start(args, log_dir)
        processes.append(process)
        return url

    yield start
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(scope="session")
def server_url(start_idmint_server: Callable[..., str]) -> str:
    """Base URL (``http://127.0.0.1:PORT/``) of a uid64 ``idmint serve`` for the session."""
    return start_idmint_server()
