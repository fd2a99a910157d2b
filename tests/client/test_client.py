"""IdClient and AsyncIdClient against running servers: buffer, order, options, bad input.

Servers that misbehave (garbage, silence, a wrong scheme) are small socket
servers in this process, so each misbehaviour is exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from tests.server.server_helpers import IdmintServer, metric, parse_metrics, running_server

from idmint.client import AsyncIdClient, IdClient
from idmint.errors import ConfigurationError, IdmintError, NoServerAnswered, ServerRefused
from idmint.schemes import Muid, Uid64

pytestmark = pytest.mark.integration

Pair = tuple[IdmintServer, IdmintServer]


def ids_requests(server: IdmintServer) -> float:
    """How many ``/v1/ids`` requests the server answered with IDs."""
    with server.client() as http:
        samples = parse_metrics(http.get("/metrics").text)
    return metric(samples, "idmint_http_requests_total", route="/v1/ids", code="200")


# -- the buffer ---------------------------------------------------------------------------


def test_get_returns_the_servers_value_type_and_distinct_ids(pair: Pair) -> None:
    with IdClient([pair[0].url, pair[1].url]) as ids:
        one = ids.get()
        many = ids.get_many(3000)
    assert isinstance(one, Uid64)
    assert all(isinstance(value, Uid64) for value in many)
    every = [one, *many]
    assert len(set(every)) == len(every)
    # Both servers gave IDs (taken in turn), each under its own generator ID.
    generators = {value.generator for value in every}  # type: ignore[attr-defined]
    assert len(generators) == 2, generators


def test_one_servers_ids_come_in_the_order_it_issued_them(pair: Pair) -> None:
    with IdClient([pair[0].url]) as ids:
        values = [ids.get() for _ in range(2500)] + ids.get_many(2500)
    numbers = [value.int for value in values]
    assert numbers == sorted(numbers)
    assert len(set(numbers)) == len(numbers)


def test_the_buffer_is_refilled_in_batches_that_grow_with_the_rate(pair: Pair) -> None:
    server = pair[1]
    before = ids_requests(server)
    with IdClient([server.url], min_batch=100) as ids:
        drawn = [ids.get() for _ in range(30_000)]
    requests = ids_requests(server) - before
    assert len(set(drawn)) == len(drawn)
    # One request per 100 IDs would be 300; the batch follows the rate instead.
    assert 1 <= requests < 100, requests


def test_a_caller_waits_for_no_request_while_the_buffer_holds_ids(pair: Pair) -> None:
    server = pair[0]
    with IdClient([server.url], min_batch=500, max_batch=500) as ids:
        ids.get()  # the first batch, then the refill it triggers
        ids.get_many(1)
        requests = ids_requests(server)
        # 450 IDs leave at least 50 of the 500 buffered: no request on the caller's path.
        taken = ids.get_many(450)
    assert len(taken) == 450
    # The refills that happened were started in the background at the low-water mark.
    assert ids_requests(server) - requests <= 2


def test_ids_left_in_the_buffer_at_close_are_never_handed_out(pair: Pair) -> None:
    ids = IdClient([pair[0].url], min_batch=1000)
    first = ids.get()
    ids.close()
    with pytest.raises(ConfigurationError, match="closed"):
        ids.get()
    with IdClient([pair[0].url], min_batch=1000) as again:
        later = again.get_many(2000)
    assert first not in later


def test_many_threads_and_an_event_loop_at_once_get_distinct_ids(pair: Pair) -> None:
    urls = [pair[0].url, pair[1].url]
    taken: list[list[Uid64]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(9)

    def draw(ids: IdClient) -> None:
        got: list[Uid64] = []
        try:
            start.wait()
            for index in range(3000):
                got.append(ids.get() if index % 10 else ids.get_many(5)[0])  # type: ignore[arg-type]
        except BaseException as error:
            errors.append(error)
        taken.append(got)

    async def draw_async() -> list[Uid64]:
        async with AsyncIdClient(urls) as ids:
            await asyncio.to_thread(start.wait)
            values = [await ids.get() for _ in range(5000)]
            values += await ids.get_many(3000)
        return values  # type: ignore[return-value]

    with IdClient(urls) as shared:
        threads = [threading.Thread(target=draw, args=(shared,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        from_loop = asyncio.run(draw_async())
        for thread in threads:
            thread.join()
    assert not errors, errors
    every = [value for got in taken for value in got] + from_loop
    assert len(every) == 8 * 3000 + 8000
    assert len(set(every)) == len(every), "an ID was handed out twice"


def test_the_async_client_keeps_one_servers_order(pair: Pair) -> None:
    async def draw() -> list[int]:
        async with AsyncIdClient([pair[1].url], min_batch=200) as ids:
            values = [await ids.get() for _ in range(3000)]
            values += await ids.get_many(1000)
        return [value.int for value in values]

    numbers = asyncio.run(draw())
    assert numbers == sorted(numbers)
    assert len(set(numbers)) == len(numbers)


# -- options -----------------------------------------------------------------------------


def test_the_scheme_asked_for_is_checked_against_the_servers(pair: Pair) -> None:
    with (
        IdClient([pair[0].url], scheme="muid", timeout=2) as ids,
        pytest.raises(ConfigurationError, match="serves uid64 IDs, not the muid"),
    ):
        ids.get()


def test_a_scheme_the_server_serves_gives_its_type() -> None:
    with running_server("--scheme", "muid") as server, IdClient([server.url]) as ids:
        assert isinstance(ids.get(), Muid)


def test_elastic64_needs_the_node_width() -> None:
    with pytest.raises(ConfigurationError, match="node_bits"):
        IdClient(["http://127.0.0.1:1"], scheme="elastic64")
    with running_server("--scheme", "elastic64") as server:
        with IdClient([server.url], timeout=2) as ids, pytest.raises(ConfigurationError):
            ids.get()
        with IdClient([server.url], node_bits=8) as ids:
            assert ids.get().node_bits == 8  # type: ignore[attr-defined]


def refusals(server: IdmintServer) -> float:
    with server.client() as http:
        samples = parse_metrics(http.get("/metrics").text)
    return metric(samples, "idmint_http_requests_total", route="/v1/ids", code="401")


def test_a_token_is_sent_and_a_refusal_is_not_waited_out() -> None:
    """401 is no outage: the first refusal of every server ends the call, asked once each."""
    with running_server(token="s3cret-token") as server:
        with IdClient([server.url], token="s3cret-token") as ids:
            assert isinstance(ids.get(), Uid64)
        before = refusals(server)
        started = time.monotonic()
        with IdClient([server.url], token="wrong", timeout=60) as ids:
            with pytest.raises(ServerRefused) as refused:
                ids.get()
            # A later call asks again (the server's token may have changed), once.
            with pytest.raises(ServerRefused):
                ids.get_many(5)

        async def draw() -> None:
            async with AsyncIdClient([server.url], token="wrong", timeout=60) as ids:
                await ids.get()

        with pytest.raises(ServerRefused):
            asyncio.run(draw())
        # Not a speed check: a client that waited out its timeout would take a minute.
        assert time.monotonic() - started < 30
        assert refusals(server) - before == 3
    message = str(refused.value)
    assert f"{server.url}: 401" in message
    assert "token" in message
    assert isinstance(refused.value, NoServerAnswered), "callers catching outages catch it too"


def test_one_server_refusing_the_token_does_not_stop_the_others() -> None:
    with running_server(token="other-token") as other, running_server(token="ours") as ours:
        with IdClient([other.url, ours.url], token="ours", min_batch=10) as ids:
            values = ids.get_many(500)
        assert len(set(values)) == 500
        assert refusals(other) >= 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "urls or a discovery URL"),
        ({"urls": ["http://a:1"], "discovery": "zk://a:1"}, "urls or a discovery URL"),
        ({"urls": "http://a:1"}, "not one string"),
        ({"urls": []}, "no ID server URL"),
        ({"urls": ["ftp://a:1"]}, "not http://host:port"),
        ({"urls": ["http://a:99999"]}, "ID server URL"),
        ({"urls": ["http://a:1/v1/ids"]}, "only scheme, host and port"),
        ({"urls": ["http://user:pw@a:1"]}, "only scheme, host and port"),
        ({"urls": [None]}, "is a string"),
        ({"urls": ["http://a:1"], "scheme": "uuid"}, "unknown scheme"),
        ({"urls": ["http://a:1"], "timeout": 0}, "timeout must be a positive"),
        ({"urls": ["http://a:1"], "request_timeout": -1}, "request_timeout"),
        ({"urls": ["http://a:1"], "timeout": True}, "timeout must be"),
        ({"urls": ["http://a:1"], "min_batch": 0}, "min_batch"),
        ({"urls": ["http://a:1"], "min_batch": 500, "max_batch": 100}, "max_batch"),
        ({"urls": ["http://a:1"], "low_water": 0}, "low_water"),
        ({"urls": ["http://a:1"], "low_water": "half"}, "low_water"),
        ({"urls": ["http://a:1"], "token": " "}, "token is empty"),
        ({"discovery": "etcd://a:1"}, "ZooKeeper"),
    ],
)
def test_bad_options_are_configuration_errors(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        IdClient(**arguments)  # type: ignore[arg-type]
    if "discovery" not in arguments or "urls" in arguments:
        with pytest.raises(ConfigurationError, match=message):
            AsyncIdClient(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [-1, 1.5, True, "3"])
def test_a_bad_count_is_a_configuration_error(pair: Pair, count: object) -> None:
    with IdClient([pair[0].url]) as ids, pytest.raises(ConfigurationError, match="count"):
        ids.get_many(count)  # type: ignore[arg-type]


def test_get_many_of_nothing_is_empty(pair: Pair) -> None:
    with IdClient([pair[0].url]) as ids:
        assert ids.get_many(0) == []


# -- servers that misbehave ------------------------------------------------------------


@contextlib.contextmanager
def fake_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A server on 127.0.0.1 that runs ``answer(connection)`` for each connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close() alone does not
        listener.close()
        thread.join(5)


def replying(raw: bytes) -> Callable[[socket.socket], None]:
    def answer(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            connection.recv(65536)
            connection.sendall(raw)

    return answer


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
        len(body),
        body,
    )


OPENAPI = (
    b'{"paths": {"/v1/ids": {"get": {"parameters": '
    b'[{"name": "count", "schema": {"maximum": 10000}}]}}}}'
)

HOSTILE = {
    "not HTTP": b"SSH-2.0-OpenSSH_9.2\r\n",
    "not JSON": ok(b"<html>hello</html>"),
    "no ids": ok(b'{"scheme": "uid64"}'),
    "an unknown scheme": ok(b'{"scheme": "uuid4", "ids": ["x"]}'),
    "ids that are not IDs": ok(b'{"scheme": "uid64", "ids": ["not-an-id!"]}'),
    "ids not a list": ok(b'{"scheme": "uid64", "ids": "AAAAAAAAAAA"}'),
    "a 500": b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno",
    "a cut answer": b'HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n{"scheme"',
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_server_is_set_aside_and_named(kind: str) -> None:
    raw = HOSTILE[kind]

    def answer(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            request = connection.recv(65536)
            connection.sendall(ok(OPENAPI) if b"openapi" in request else raw)

    with (
        fake_server(answer) as url,
        IdClient([url], timeout=0.5) as ids,
        pytest.raises(NoServerAnswered) as error,
    ):
        ids.get()
    assert url in str(error.value)

    async def draw() -> None:
        async with AsyncIdClient([url], timeout=0.5) as ids:
            await ids.get()

    with fake_server(answer) as url, pytest.raises(NoServerAnswered) as error:
        asyncio.run(draw())
    assert url in str(error.value)


def test_a_hostile_server_does_not_stop_a_good_one(pair: Pair) -> None:
    with (
        fake_server(replying(HOSTILE["ids that are not IDs"])) as bad,
        IdClient([bad, pair[0].url], timeout=5) as ids,
    ):
        values = [ids.get() for _ in range(2000)]
    assert len(set(values)) == 2000


def test_a_silent_server_times_out_and_the_next_one_answers(pair: Pair) -> None:
    held: list[socket.socket] = []

    def silent(connection: socket.socket) -> None:
        held.append(connection)  # accepted, never answered

    with fake_server(silent) as quiet:
        with IdClient([quiet, pair[1].url], request_timeout=0.3, timeout=5) as ids:
            values = ids.get_many(500)

        async def draw() -> list[object]:
            async with AsyncIdClient([quiet, pair[1].url], request_timeout=0.3) as ids:
                return list(await ids.get_many(500))

        from_loop = asyncio.run(draw())
    for connection in held:
        connection.close()
    assert len(set(values)) == 500
    assert len(from_loop) == 500


def test_no_server_answering_is_one_clear_error_within_the_timeout() -> None:
    closed = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            closed.append(f"http://127.0.0.1:{probe.getsockname()[1]}")
    with IdClient(closed, timeout=1.0) as ids:
        started = time.monotonic()
        with pytest.raises(NoServerAnswered) as error:
            ids.get()
        waited = time.monotonic() - started
    # Not a speed check: a client that retried forever would never get here.
    assert 0.9 <= waited < 3.0, waited
    message = str(error.value)
    assert "within 1 s" in message
    for url in closed:
        assert f"{url}: Connection refused" in message
    assert isinstance(error.value, IdmintError)

    async def draw() -> None:
        async with AsyncIdClient(closed, timeout=1.0) as ids:
            await ids.get()

    with pytest.raises(NoServerAnswered, match="Connection refused"):
        asyncio.run(draw())
