"""Limits on what one connection may send: the size of a request and the time to send it.

uvicorn leaves both open. Its one size limit, ``h11_max_incomplete_event_size``,
applies only to its h11 parser; with httptools (which ``uvicorn[standard]``
installs and prefers) a request head of any size is buffered in full. And
neither parser times a request that arrives slowly or never ends: uvicorn's
keep-alive timer runs only between a response and the next request's first byte,
so a connection that sends half a request line and waits stays open for good.

:func:`limited_http_protocol` returns uvicorn's HTTP/1.1 protocol class for the
parser it would pick itself (httptools when importable, else h11), subclassed
so that each connection counts the bytes of the request it is receiving before
the parser sees them, and times it:

* more than ``max_request_bytes`` before the request has fully arrived: the
  connection answers 431 (head still incomplete) or 413 (the excess is body)
  and closes, having buffered at most one read beyond the limit;
* a request not fully arrived ``request_timeout_s`` after its first byte (or
  after the connection opened, for the first request): 408 if any of it came,
  and the connection closes.

Why here and not in the app: the app sees a request only once its head is
complete, which is too late for both. Why subclass rather than wrap the
transport: only the parser knows where one request ends and the next begins,
and both of uvicorn's parsers report it (httptools through callbacks, h11
through its state), so the counting can restart per request without parsing
anything twice.

The per-request cost is kept to a few attribute updates: the timer is one
``call_later`` per connection that re-arms itself lazily, not one per request
(``benchmarks/bench_server.py`` measures it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GRACEFUL_SHUTDOWN_S",
    "HEARTBEAT_S",
    "MAX_REQUEST_BYTES",
    "REQUEST_TIMEOUT_S",
    "WORKER_TIMEOUT_S",
    "RequestLimits",
    "limited_http_protocol",
]

MAX_REQUEST_BYTES = 16 * 1024
"""The largest request (head and body) a connection may send: 16 KiB, as h11's default.

Every route is a GET without a body, so this is a limit on the request line and
headers; 8 KiB of cookies still fit with room to spare."""

REQUEST_TIMEOUT_S = 10.0
"""How long a request may take to arrive in full, from its first byte."""

GRACEFUL_SHUTDOWN_S = 10
"""How long requests in flight get to finish when the server stops."""

WORKER_TIMEOUT_S = 30.0
"""With ``--workers``: a worker whose event loop has not turned for this long is
killed and replaced (it would keep its share of new connections and answer none)."""

HEARTBEAT_S = 0.25
"""How often a serving worker's event loop tells the supervisor it is alive."""


@dataclass(frozen=True)
class RequestLimits:
    max_request_bytes: int = MAX_REQUEST_BYTES
    request_timeout_s: float = REQUEST_TIMEOUT_S

    def __post_init__(self) -> None:
        from idmint.errors import ConfigurationError

        if self.max_request_bytes < 1024:
            raise ConfigurationError(
                f"the request size limit must be at least 1024 bytes, got {self.max_request_bytes}"
            )
        if not self.request_timeout_s > 0:
            raise ConfigurationError(
                f"the request timeout must be more than 0 s, got {self.request_timeout_s:g}"
            )


def _response(status: int, reason: str, error: str, detail: str) -> bytes:
    """A whole HTTP/1.1 error response (JSON, as every error of the server) that closes."""
    body = json.dumps({"error": error, "detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        "cache-control: no-store\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _bad_request(transport: asyncio.Transport, detail: str) -> None:
    """uvicorn's answer to a request its parser rejects, as JSON like every other error."""
    if not transport.is_closing():
        transport.write(_response(400, "Bad Request", "bad request", detail))
    transport.close()


class _RequestGuard:
    """One connection's count of request bytes and its request timer.

    The protocol counts each read with :meth:`counted` (one call a read, for
    both parsers) and marks where the parser says a request's head and end are
    by writing ``head_complete`` and ``started_at`` itself.
    """

    __slots__ = (
        "_limits",
        "_loop",
        "_responding",
        "_timer",
        "_transport",
        "head_complete",
        "received",
        "started_at",
    )

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        limits: RequestLimits,
        responding: Callable[[], bool],
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._limits = limits
        self._responding = responding
        self.received = 0
        self.head_complete = False
        # A connection that sends nothing is timed like a request that never ends.
        self.started_at: float | None = loop.time()
        self._timer: asyncio.TimerHandle | None = loop.call_later(
            limits.request_timeout_s, self._check_time
        )

    def begin(self) -> None:
        """The first byte of a new request has come: count and time it from here.

        The timer is not re-armed per request: while armed it re-arms itself for
        whatever request is under way when it fires.
        """
        self.started_at = self._loop.time()
        self.received = 0
        self.head_complete = False
        if self._timer is None:
            self._timer = self._loop.call_later(self._limits.request_timeout_s, self._check_time)

    def counted(self, data: bytes) -> bool:
        """Count ``data`` into the request under way (beginning one if none is); False
        once the request is over the size limit, which refuses it: then the parser must
        not see ``data``."""
        if self.started_at is None:
            self.begin()
        self.received += len(data)
        if self.received > self._limits.max_request_bytes:
            self.over_limit()
            return False
        return True

    def over_limit(self) -> None:
        limit = self._limits.max_request_bytes
        if self.head_complete:
            self._refuse(
                _response(
                    413,
                    "Content Too Large",
                    "request too large",
                    f"a request may be at most {limit} bytes; requests carry no body",
                )
            )
        else:
            self._refuse(
                _response(
                    431,
                    "Request Header Fields Too Large",
                    "request header too large",
                    f"the request line and headers may be at most {limit} bytes",
                )
            )

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check_time(self) -> None:
        self._timer = None
        started = self.started_at
        if started is None or self._transport.is_closing():
            return  # no request under way; begin() arms the timer for the next one
        remaining = started + self._limits.request_timeout_s - self._loop.time()
        if remaining > 0:  # a later request than the one the timer was set for
            self._timer = self._loop.call_later(remaining, self._check_time)
            return
        if self.received:
            self._refuse(
                _response(
                    408,
                    "Request Timeout",
                    "request timeout",
                    f"the request did not arrive in full within "
                    f"{self._limits.request_timeout_s:g} s",
                )
            )
        else:
            self._transport.close()

    def _refuse(self, response: bytes) -> None:
        self.stop()
        # An answer to an earlier request may be half written: nothing may follow it.
        if not self._responding() and not self._transport.is_closing():
            self._transport.write(response)
        self._transport.close()


class _Limited(asyncio.Protocol):
    """What the limited protocol of either parser adds that does not depend on the
    parser: the guard's life with the connection, the JSON 400, the quiet upgrade.

    Mixed in before uvicorn's class (``class P(_Limited, HttpToolsProtocol)``), so
    ``super()`` is uvicorn's. Each parser's class counts in its own
    ``data_received`` (the hot path: one call to the guard, then the parser's own).
    """

    limits: RequestLimits
    guard: _RequestGuard
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.guard = _RequestGuard(transport, self.loop, self.limits, self._responding)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.stop()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        _bad_request(self.transport, msg)

    def _unsupported_upgrade_warning(self) -> None:
        """Say nothing: see :func:`limited_http_protocol`."""

    def _responding(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete


def _httptools_protocol(limits: RequestLimits) -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    base = HttpToolsProtocol

    class LimitedHttpToolsProtocol(_Limited, HttpToolsProtocol):
        # The parser's callbacks say where requests begin and end. A request
        # pipelined behind another within one read is counted and timed from the
        # next read (until then uvicorn's keep-alive timer covers the connection).

        def data_received(self, data: bytes) -> None:
            if self.guard.counted(data):
                base.data_received(self, data)

        def on_headers_complete(self) -> None:
            self.guard.head_complete = True
            base.on_headers_complete(self)

        def on_message_complete(self) -> None:
            self.guard.started_at = None  # all in: nothing counted or timed until the next
            base.on_message_complete(self)

    LimitedHttpToolsProtocol.limits = limits
    return LimitedHttpToolsProtocol


def _h11_protocol(limits: RequestLimits) -> type[asyncio.Protocol]:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    base = H11Protocol

    class LimitedH11Protocol(_Limited, H11Protocol):
        def data_received(self, data: bytes) -> None:
            guard = self.guard
            if not guard.counted(data):
                return
            base.data_received(self, data)
            # h11 has no callbacks; its view of the client says how far the request got.
            state = self.conn.their_state
            if state is h11.SEND_BODY:
                guard.head_complete = True
            elif state is not h11.IDLE:  # DONE, or the connection is closing anyway
                guard.started_at = None

    LimitedH11Protocol.limits = limits
    return LimitedH11Protocol


def limited_http_protocol(limits: RequestLimits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol for the parser it would choose, with ``limits`` enforced.

    httptools when it can be imported (as uvicorn's ``http="auto"``), else h11.
    Two more changes: a request the parser rejects gets the server's JSON error
    rather than uvicorn's plain text, and an ``Upgrade`` request (answered as an
    ordinary request: the app serves no WebSocket) is not logged as a warning
    telling the operator to install a WebSocket library.
    """
    try:
        return _httptools_protocol(limits)
    except ImportError:
        return _h11_protocol(limits)
