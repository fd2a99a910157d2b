"""Hostile clients against real ``idmint serve`` processes: oversized and unfinished requests.

What is attacked (the fault model of docs/server.md, "Limits"): a request may hold at
most 16 KiB (request line, headers and body) and must arrive in full within the
request timeout (``--request-timeout``, 1 s here) after its first byte, or after the
connection opened. Before the limits, uvicorn's httptools parser (what ``uvicorn[standard]``
installs) buffered a header of any size (a 1 MiB header was answered 200, 64 MiB took
6.5 s) and no parser ever closed a connection holding half a request.

Every case runs against both HTTP parsers uvicorn can use: httptools (the default, when
installed) and h11 (the server started with httptools made unimportable, as on an
install without it); which one a server really uses is checked in its memory map.
Clients are raw sockets: an HTTP client library would refuse to send such requests.
"""

from __future__ import annotations

import contextlib
import json
import re
import selectors
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.server.server_helpers import LOOPBACK, IdmintServer, wait_until

from idmint.server.limits import MAX_REQUEST_BYTES

REQUEST_TIMEOUT_S = 1.0
WAIT_S = 30.0
"""Deadline for anything the server must do by itself (far above the request timeout)."""

_WITHOUT_HTTPTOOLS = (
    "import sys; sys.modules['httptools'] = None; from idmint.cli import main; sys.exit(main())"
)


class ServerWithParser(IdmintServer):
    """``idmint serve`` whose uvicorn uses the given parser: httptools, or h11 without it."""

    def __init__(self, parser: str, *args: str) -> None:
        super().__init__(*args)
        self.parser = parser

    def argv(self) -> list[str]:
        argv = super().argv()
        if self.parser == "h11":
            assert argv[1:3] == ["-m", "idmint"], argv
            argv[1:3] = ["-c", _WITHOUT_HTTPTOOLS]
        return argv

    def loaded_httptools(self) -> bool:
        maps = Path(f"/proc/{self.pid}/maps").read_text()
        return re.search(r"/httptools/parser/parser[^/]*\.so", maps) is not None

    def peak_resident_kib(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
        assert match is not None, status
        return int(match.group(1))


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerWithParser]:
    parser: str = request.param
    with ServerWithParser(parser, "--request-timeout", f"{REQUEST_TIMEOUT_S:g}") as started:
        started.start()
        assert_still_serves(started)  # by now uvicorn has loaded its parser
        assert started.loaded_httptools() == (parser == "httptools")
        yield started
        assert started.returncode is None, started.stderr_text()
        assert " ERROR " not in started.stderr_text(), started.stderr_text()


# -- raw HTTP ------------------------------------------------------------------------------------


def connect(server: IdmintServer) -> socket.socket:
    return socket.create_connection((LOOPBACK, server.port), timeout=WAIT_S)


def head(target: str = "/v1/id", *, padding: int = 0, name: str = "X-Padding") -> bytes:
    """A GET request's head, with a header of ``padding`` bytes when asked."""
    lines = [f"GET {target} HTTP/1.1", f"Host: {LOOPBACK}", "Connection: close"]
    if padding:
        lines.append(f"{name}: " + "a" * padding)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def head_of_size(size: int) -> bytes:
    """A complete request head of exactly ``size`` bytes."""
    bare = len(head(padding=1)) - 1
    request = head(padding=size - bare)
    assert len(request) == size
    return request


def read_until_closed(connection: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset counts as a close)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := connection.recv(65536):
            received += chunk
    return received


def status_of(response: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", response)
    assert match is not None, response[:200]
    return int(match.group(1))


def json_body(response: bytes) -> dict[str, str]:
    body: dict[str, str] = json.loads(response.partition(b"\r\n\r\n")[2])
    return body


def assert_still_serves(server: IdmintServer) -> None:
    with httpx.Client(base_url=server.url, timeout=WAIT_S, trust_env=False) as http:
        answer = http.get("/v1/id")
    assert answer.status_code == 200, answer.text
    assert re.fullmatch(r"[0-9a-f]{16}\n", answer.text)


# -- size ----------------------------------------------------------------------------------------


def test_a_head_at_the_limit_is_served_and_one_byte_more_is_431(server: ServerWithParser) -> None:
    """The limit is exact: 16 KiB of request head is served, 16 KiB + 1 gets 431 (JSON)."""
    with connect(server) as connection:
        connection.sendall(head_of_size(MAX_REQUEST_BYTES))
        served = read_until_closed(connection)
    assert status_of(served) == 200, served[:300]

    with connect(server) as connection:
        connection.sendall(head_of_size(MAX_REQUEST_BYTES + 1))
        refused = read_until_closed(connection)
    assert status_of(refused) == 431, refused[:300]
    body = json_body(refused)
    assert body["error"] == "request header too large"
    assert str(MAX_REQUEST_BYTES) in body["detail"]
    assert_still_serves(server)


def test_eight_kib_of_cookies_are_served(server: ServerWithParser) -> None:
    """A legitimate request with largish headers (8 KiB of cookies) is not refused."""
    cookies = {f"cookie{index}": "v" * 512 for index in range(16)}
    with httpx.Client(base_url=server.url, timeout=WAIT_S, trust_env=False) as http:
        answer = http.get(
            "/v1/id", headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
        )
    assert answer.status_code == 200, answer.text
    assert sum(len(k) + len(v) for k, v in cookies.items()) >= 8 * 1024


def test_a_one_mib_header_is_refused(server: ServerWithParser) -> None:
    """A 1 MiB header (answered 200 before) gets 431 or a closed connection, never an answer."""
    with connect(server) as connection:
        try:
            connection.sendall(head(padding=1 << 20))
        except (BrokenPipeError, ConnectionResetError):
            received = b""  # closed while we were still sending: refused
        else:
            received = read_until_closed(connection)
    if received:
        assert status_of(received) == 431, received[:300]
    assert_still_serves(server)


def test_a_64_mib_header_sent_progressively_is_cut_off_early(server: ServerWithParser) -> None:
    """The server stops a 64 MiB header after a small part of it, without buffering it all.

    The client sends 64 KiB at a time and looks for an answer after each piece; the
    server must answer 431 or close while less than 4 MiB has been sent, and its peak
    resident memory must not grow by anything like the header's size.
    """
    total = 64 << 20
    piece = b"a" * (64 << 10)
    peak_before = server.peak_resident_kib()
    sent = 0
    answer = b""
    with connect(server) as connection, selectors.DefaultSelector() as selector:
        selector.register(connection, selectors.EVENT_READ)
        try:
            connection.sendall(b"GET /v1/id HTTP/1.1\r\nHost: x\r\nX-Big: ")
            while sent < total:
                connection.sendall(piece)
                sent += len(piece)
                if selector.select(timeout=0):
                    answer = read_until_closed(connection)
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection: refused
    assert sent < 4 << 20, f"the server took {sent} bytes of a header"
    if answer:
        assert status_of(answer) == 431, answer[:300]
    growth_kib = server.peak_resident_kib() - peak_before
    assert growth_kib < 16 << 10, f"peak resident memory grew by {growth_kib} KiB"
    assert_still_serves(server)


def test_a_body_is_refused_and_the_connection_closed(server: ServerWithParser) -> None:
    """A request announcing a large body gets 413 and the connection is closed, body unread."""
    with connect(server) as connection:
        connection.sendall(
            b"GET /v1/id HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n" + b"a" * 1000
        )
        answer = read_until_closed(connection)  # returns: the server closes
    assert status_of(answer) == 413, answer[:300]
    assert b"\r\nconnection: close\r\n" in answer.lower()


def test_a_malformed_request_gets_a_json_400(server: ServerWithParser) -> None:
    """What the parser rejects is answered like every other error: JSON error and detail."""
    with connect(server) as connection:
        connection.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = read_until_closed(connection)
    assert status_of(answer) == 400, answer[:300]
    assert set(json_body(answer)) == {"error", "detail"}


# -- time ----------------------------------------------------------------------------------------


def test_half_open_connections_are_closed_while_requests_are_served(
    server: ServerWithParser,
) -> None:
    """50 connections holding half a request line (slowloris) are closed after the timeout.

    Ten more connections send nothing at all; they are closed too. Meanwhile and
    afterwards, ordinary requests are answered. The half-open ones get 408 (JSON) first.
    """
    half_open = [connect(server) for _ in range(50)]
    silent = [connect(server) for _ in range(10)]
    try:
        for connection in half_open:
            connection.sendall(b"GET /v1/id HT")
        for _ in range(20):
            assert_still_serves(server)

        answers: dict[socket.socket, bytes] = {}
        with selectors.DefaultSelector() as selector:
            for connection in [*half_open, *silent]:
                connection.setblocking(False)
                selector.register(connection, selectors.EVENT_READ)
                answers[connection] = b""
            open_count = len(answers)

            def drain() -> bool:
                nonlocal open_count
                for key, _ in selector.select(timeout=0.1):
                    connection = key.fileobj
                    assert isinstance(connection, socket.socket)
                    try:
                        chunk = connection.recv(65536)
                    except ConnectionResetError:
                        chunk = b""
                    if chunk:
                        answers[connection] += chunk
                    else:
                        selector.unregister(connection)
                        open_count -= 1
                return open_count == 0

            wait_until(
                drain,
                timeout=WAIT_S,
                interval=0,
                description="the server to close every unfinished connection",
            )
        for connection in half_open:
            assert status_of(answers[connection]) == 408, answers[connection][:300]
            assert json_body(answers[connection])["error"] == "request timeout"
        for connection in silent:
            assert answers[connection] == b""
    finally:
        for connection in [*half_open, *silent]:
            connection.close()
    assert_still_serves(server)


def test_a_request_trickling_in_is_cut_at_the_timeout(server: ServerWithParser) -> None:
    """Bytes that keep coming do not keep a request alive: its whole must arrive in time.

    One header byte every 20 ms would take 10 s for the 500-byte head; each byte would
    reset an idle timer, but the request timeout counts from the first byte.
    """
    request = head(padding=450)
    assert len(request) >= 500
    with connect(server) as connection, selectors.DefaultSelector() as selector:
        selector.register(connection, selectors.EVENT_READ)
        answer = None
        for index in range(len(request)):
            try:
                connection.sendall(request[index : index + 1])
            except (BrokenPipeError, ConnectionResetError):
                answer = b""
                break
            # Pace the bytes by waiting for the server's answer, which ends the trickle.
            if selector.select(timeout=0.02):
                answer = read_until_closed(connection)
                break
    assert answer is not None, "the whole request trickled in and was served"
    if answer:
        assert status_of(answer) == 408, answer[:300]
