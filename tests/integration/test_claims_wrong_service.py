"""A URL naming a port where a store of another kind answers fails at once, saying what.

``etcd://`` at a Redis port once waited out the whole ``connect_timeout`` as if etcd
were down. Each built-in driver is pointed at each other kind of server the session
runs, with a ``connect_timeout`` of 600 s: a driver that waited would meet the test's
own deadline (``run_idmint``'s), not exit 69 naming what answered.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading

import pytest
from tests.cli_process import assert_one_error_line, run_idmint
from tests.integration.claims_helpers import make_backend
from tests.servers.ports import LOOPBACK

from idmint.coordinate import peers

KINDS = {
    "zk": peers.ZOOKEEPER,
    "etcd": peers.ETCD,
    "postgres": peers.POSTGRESQL,
    "redis": peers.REDIS,
    "mysql": peers.MYSQL,
}
PAIRS = [(driver, other) for driver in KINDS for other in KINDS if other != driver]


@pytest.mark.parametrize(("driver", "other"), PAIRS, ids=[f"{d}-at-{o}" for d, o in PAIRS])
def test_a_store_of_another_kind_at_the_port_fails_at_once_naming_it(
    driver: str, other: str, request: pytest.FixtureRequest
) -> None:
    address = make_backend(other, request).hosts().split(",")[0]
    url = make_backend(driver, request).url(hosts=address, connect_timeout=600)
    result = run_idmint("generate", "--coordinator", url, timeout=60)
    assert result.returncode == 69, result.stderr
    error = assert_one_error_line(result.stderr.replace(_notice(result.stderr), ""))
    assert f"{address} answered as {KINDS[other]}, not {KINDS[driver]}" in error, error


def _notice(stderr: str) -> str:
    """The waiting notice a wait of over a second may print first (or nothing)."""
    first = stderr.splitlines(keepends=True)[0] if stderr else ""
    return first if first.startswith("idmint: waiting ") else ""


def test_a_service_that_answers_as_no_store_is_said_so(request: pytest.FixtureRequest) -> None:
    """A service that answers anything with a line of its own, at a Redis URL's port."""
    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen(16)
        address = f"{LOOPBACK}:{listener.getsockname()[1]}"

        def answer() -> None:
            with contextlib.suppress(OSError):
                while True:
                    connection, _ = listener.accept()
                    with connection:
                        connection.sendall(b"hello from something else\n")

        threading.Thread(target=answer, daemon=True).start()
        url = make_backend("redis", request).url(hosts=address, connect_timeout=600)
        result = run_idmint("generate", "--coordinator", url, timeout=60)
    assert result.returncode == 69, result.stderr
    error = assert_one_error_line(result.stderr.replace(_notice(result.stderr), ""))
    assert f"{address} answered, but not as Redis" in error, error


def test_an_http_server_is_named(request: pytest.FixtureRequest) -> None:
    """To a Redis URL an HTTP server is not Redis. (To an etcd URL it may be etcd behind a
    proxy that answers while etcd is down: the etcd driver reads its answers itself.)"""
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"{LOOPBACK}:{server.server_address[1]}"
        url = make_backend("redis", request).url(hosts=address, connect_timeout=600)
        result = run_idmint("generate", "--coordinator", url, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 69, result.stderr
    error = assert_one_error_line(result.stderr.replace(_notice(result.stderr), ""))
    assert f"{address} answered as an HTTP server, not Redis" in error, error
