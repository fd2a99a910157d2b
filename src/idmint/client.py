"""A client of ID servers (``idmint serve``): a local buffer, refilled before it runs dry.

::

    from idmint.client import IdClient

    with IdClient(["http://ids-1:8000", "http://ids-2:8000"]) as ids:
        ids.get()          # Uid64('...'): from the buffer, in about a microsecond
        ids.get_many(500)  # a list

    with IdClient(discovery="zk://zk1:2181/discovery") as ids:   # servers found in ZooKeeper
        ...

    async with AsyncIdClient([...]) as ids:
        await ids.get()

**The buffer.** IDs are fetched with ``GET /v1/ids?count=N``, parsed off the
caller's path, and handed out one by one. When the buffer falls below one
batch (by default; ``low_water`` sets the share) a refill starts in the
background (one thread per client; a task for :class:`AsyncIdClient`), so a
caller drawing at a steady rate never waits for the network: the buffer holds
between one and two batches, a double buffer. The batch follows the rate of
use: about ``refill_every`` seconds of IDs, at least ``min_batch``. One
request asks for at most the server's limit (read from its OpenAPI document)
or ``max_batch``; a batch above 1000 IDs is shared among the servers, asked at
once, so one client can draw faster than one server issues. A busy client
makes few requests; an idle one holds few IDs. IDs left in the buffer when the
client closes are dropped: never handed out, and never issued again by their
server either.

**Failover.** A server that refuses a connection, times out, or answers 5xx
is set aside with a backoff (0.1 s, doubling to 10 s) and the next one is
tried; servers are taken in turn, so two servers share a client's load. A
server that answers 503 (its claim lost or in doubt) is not asked for IDs
again until its ``/readyz`` answers 200. A caller sees an error only when no
server gave IDs within ``timeout``: :class:`~idmint.errors.NoServerAnswered`,
naming each server tried and why. A server that answers another 4xx is set
aside the same way and named in that error. A server that refuses the token
(401, 403) is set aside too; once every server has refused it, the caller gets
:class:`~idmint.errors.ServerRefused` at once: waiting would not change the
token.

**Guarantees.** IDs from one client are distinct, and distinct from those of
every other client of the same servers (each server's generators hold claimed
identities). IDs from one server come in the order it issued them.
``get()`` and ``get_many()`` are thread-safe. After ``fork()`` the child starts
with an empty buffer and connections of its own: it never hands out an ID its
parent may hand out. It also starts small: its batches follow its own rate of
use, not the parent's (thirty children of a busy parent each asking for the
parent's batch would ask the servers for more than they issue in time).

**Discovery.** With ``discovery``, the servers are the instances of service
``idmint`` that ``idmint serve --discovery`` registers, kept current by a
ZooKeeper watch rather than looked up per call; with ``scheme``, only those
serving it (over https when they registered so). Servers whose registration
is gone are dropped at once.

**TLS and tokens.** ``https://`` servers are checked against ``tls_ca`` (the
system's CAs by default); ``tls_cert`` and ``tls_key`` are the client's own
certificate for servers that ask for one (mutual TLS). A certificate the
client cannot verify is a refusal like a refused token. ``token_file`` is
read again when a server refuses the token, so a rotated token reaches a
running client.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import http.client
import json
import os
import ssl
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from idmint.errors import (
    ConfigurationError,
    IdmintError,
    NoServerAnswered,
    ServerRefused,
    quoted,
    reason_of,
)
from idmint.schemes import SCHEMES, IdValue, a_scheme

__all__ = ["AsyncIdClient", "IdClient"]

SERVICE = "idmint"
"""The service name ``idmint serve --discovery`` registers under."""
READY_PATH = "/readyz"
FIRST_BACKOFF_S = 0.1
LAST_BACKOFF_S = 10.0
DEFAULT_MAX_BATCH = 10_000
"""Assumed until a server's OpenAPI document gives its own limit."""
SPLIT_ABOVE = 1000
"""A refill of more IDs than this is shared among the servers, fetched at once."""
PARALLEL_MAX = 8
"""At most this many servers are asked at once for one refill."""
REFUSALS = (401, 403)
"""Answers that refuse the client's credentials: retrying will not change them."""


@dataclass
class _Server:
    """One ID server as the client sees it."""

    url: str
    host: str
    port: int
    tls: bool
    max_count: int | None = None
    set_aside_until: float = 0.0
    backoff_s: float = 0.0
    waiting_for_ready: bool = False
    refused: bool = False  # its last answer refused our token
    why: str = ""
    registrations: int = 0  # discovery: instances registered at this address
    idle: list[Any] = field(default_factory=list)  # keep-alive connections

    def usable(self, now: float) -> bool:
        return now >= self.set_aside_until

    def failed(
        self, why: str, now: float, *, until_ready: bool = False, refused: bool = False
    ) -> None:
        self.why = why
        self.backoff_s = min(LAST_BACKOFF_S, max(FIRST_BACKOFF_S, self.backoff_s * 2))
        self.set_aside_until = now + self.backoff_s
        self.waiting_for_ready = self.waiting_for_ready or until_ready
        self.refused = refused

    def answered(self) -> None:
        self.backoff_s = 0.0
        self.set_aside_until = 0.0
        self.waiting_for_ready = False
        self.refused = False
        self.why = ""


def _server(url: str) -> _Server:
    if not isinstance(url, str):
        raise ConfigurationError(f"an ID server URL is a string, got {url!r}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ConfigurationError(f"ID server URL {quoted(url)}: {error}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"ID server URL {quoted(url)} is not http://host:port (or https://host:port)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigurationError(f"ID server URL {quoted(url)}: give only scheme, host and port")
    tls = parts.scheme == "https"
    return _Server(
        url=f"{parts.scheme}://{parts.netloc}",
        host=parts.hostname,
        port=port or (443 if tls else 80),
        tls=tls,
    )


class _Answer(Exception):
    """An answer the client cannot use: not 200, or not an ``/v1/ids`` body."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}" if status else detail)
        self.status = status


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


class _Core:
    """What both clients share: options, servers, batch sizing, answers, failures."""

    def __init__(
        self,
        urls: Iterable[str] | None,
        discovery: str | None,
        *,
        scheme: str | None,
        node_bits: int | None,
        token: str | None,
        token_file: str | None,
        tls_ca: str | None,
        tls_cert: str | None,
        tls_key: str | None,
        timeout: float,
        request_timeout: float,
        min_batch: int,
        max_batch: int | None,
        refill_every: float,
        low_water: float,
    ) -> None:
        if (urls is None) == (discovery is None):
            raise ConfigurationError("give the ID servers' urls or a discovery URL (one of them)")
        if isinstance(urls, str):
            raise ConfigurationError("urls is a list of ID server URLs, not one string")
        if scheme is not None and scheme not in SCHEMES:
            raise ConfigurationError(
                f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}"
            )
        if scheme is not None and SCHEMES[scheme].needs_node_bits and node_bits is None:
            raise ConfigurationError(
                f"{a_scheme(scheme)} client needs node_bits: the IDs do not carry their node width"
            )
        if isinstance(min_batch, bool) or not isinstance(min_batch, int):
            raise ConfigurationError(f"min_batch must be a whole number, got {min_batch!r}")
        if not 1 <= min_batch <= 1_000_000:
            raise ConfigurationError(f"min_batch must be 1..1000000, got {min_batch}")
        if max_batch is not None and (
            isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < min_batch
        ):
            raise ConfigurationError(f"max_batch must be at least min_batch, got {max_batch!r}")
        self._set_credentials(token, token_file, (tls_ca, tls_cert, tls_key))
        self.scheme = scheme
        self.type: type[IdValue] | None = SCHEMES[scheme] if scheme is not None else None
        self.node_bits = node_bits
        self.timeout = _positive("timeout", timeout)
        self.request_timeout = _positive("request_timeout", request_timeout)
        self.refill_every = _positive("refill_every", refill_every)
        if isinstance(low_water, bool) or not isinstance(low_water, (int, float)):
            raise ConfigurationError(f"low_water is a share of a batch, got {low_water!r}")
        if not 0 < low_water <= 4:
            raise ConfigurationError(f"low_water must be in (0, 4], got {low_water}")
        self.low_water = float(low_water)
        self.min_batch = min_batch
        self.max_batch = max_batch
        self.discovery_url = discovery
        self.servers: dict[str, _Server] = {}
        self.order: list[str] = []
        self.next = 0
        self.lock = threading.Lock()  # the server table (discovery changes it from its thread)
        self.buffer: collections.deque[IdValue] = collections.deque()
        self.batch = min_batch
        self.refill_below = max(1, round(min_batch * self.low_water))
        self.taken = 0  # IDs handed out since the last batch was sized
        self.sized_at = time.monotonic()
        self.rate = 0.0  # IDs per second, smoothed
        for url in urls or ():
            self.add(_server(url).url, registered=False)
        if urls is not None and not self.servers:
            raise ConfigurationError("no ID server URL given")
        self.owner = os.getpid()

    def _set_credentials(
        self,
        token: str | None,
        token_file: str | None,
        tls_files: tuple[str | None, str | None, str | None],
    ) -> None:
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ConfigurationError("the bearer token is empty")
        if token is not None and token_file is not None:
            raise ConfigurationError("give token or token_file, not both")
        self.token_file = token_file
        if token_file is not None:
            token = _token_in(token_file)
        self.headers = {"Authorization": f"Bearer {token.strip()}"} if token else {}
        self.tls_files = tls_files
        self._tls: ssl.SSLContext | None = None
        if any(tls_files):  # a file that cannot be used is an error now, not at first use
            self._tls = _tls_context(*tls_files)

    @property
    def tls(self) -> ssl.SSLContext:
        """What https servers are checked with (the system's CAs unless ``tls_ca``)."""
        if self._tls is None:
            self._tls = _tls_context(*self.tls_files)
        return self._tls

    def token_renewed(self) -> bool:
        """After a refusal: re-read ``token_file``; whether it holds another token now."""
        if self.token_file is None:
            return False
        try:
            token = _token_in(self.token_file)
        except ConfigurationError:
            return False  # unreadable now: the refusal stands, with the token it refused
        headers = {"Authorization": f"Bearer {token}"}
        if headers == self.headers:
            return False
        self.headers = headers
        return True

    # -- servers -------------------------------------------------------------------------
    def add(self, url: str, *, registered: bool = True) -> None:
        with self.lock:
            server = self.servers.get(url)
            if server is None:
                server = self.servers[url] = _server(url)
                self.order.append(url)
            server.registrations += registered

    def remove(self, url: str) -> None:
        """One registration at ``url`` left; the server goes with its last one."""
        with self.lock:
            server = self.servers.get(url)
            if server is None:
                return
            server.registrations -= 1
            if server.registrations > 0:
                return
            del self.servers[url]
            self.order.remove(url)
        _close_all(server)

    def address(self, instance: Any) -> str | None:
        """The URL of a discovered instance, if it serves what this client wants."""
        if not instance.host or not instance.port:
            return None
        if self.scheme is not None and instance.metadata.get("scheme", self.scheme) != self.scheme:
            return None
        host = f"[{instance.host}]" if ":" in instance.host else instance.host
        scheme = "https" if instance.metadata.get("protocol") == "https" else "http"
        return f"{scheme}://{host}:{instance.port}"

    def turn(self, first: _Server | None = None) -> list[_Server]:
        """Every server, from ``first`` (else from the next in turn) round."""
        with self.lock:
            servers = [self.servers[url] for url in self.order]
            if first in servers:
                start = servers.index(first)
            else:
                start = self.next % max(1, len(servers))
                self.next += 1
        return servers[start:] + servers[:start]

    def candidates(self, first: _Server | None, now: float, deadline: float) -> list[_Server]:
        """The servers to try now, from ``first``.

        Set-aside servers wait out their backoff, unless time is up.
        """
        usable = [server for server in self.turn(first) if server.usable(now)]
        if usable or now >= deadline:
            return usable
        return []

    def pause(self, deadline: float) -> float:
        """How long to wait before the next round: until a server's backoff ends."""
        now = time.monotonic()
        with self.lock:
            soonest = min(
                (server.set_aside_until for server in self.servers.values()),
                default=now + FIRST_BACKOFF_S,
            )
        return max(0.005, min(soonest - now, deadline - now, 0.5))

    def failure(self, server: _Server, error: BaseException, tried: list[_Server]) -> None:
        """Set ``server`` aside for ``error``; :class:`ServerRefused` once every server refused."""
        status = error.status if isinstance(error, _Answer) else 0
        server.failed(
            _why(error),
            time.monotonic(),
            until_ready=status == 503,
            refused=status in REFUSALS or _refused_tls(error),
        )
        if server not in tried:
            tried.append(server)
        with self.lock:
            servers = list(self.servers.values())
        if servers and all(known.refused for known in servers):
            reasons = "; ".join(f"{known.url}: {known.why}" for known in servers)
            hint = ""
            if any(not known.why.startswith("TLS") for known in servers):
                hint = "; give the servers' token (token=..., idmint fetch --token-file)"
            raise ServerRefused(f"every ID server refused this client ({reasons}){hint}")

    def gave_up(self, tried: Sequence[_Server]) -> NoServerAnswered:
        if not self.servers and not tried:
            where = self.discovery_url or "the URLs given"
            reason = f"no ID server is registered ({where})"
        else:
            shown = tried or list(self.servers.values())
            reason = "; ".join(f"{server.url}: {server.why or 'not tried'}" for server in shown)
        return NoServerAnswered(f"no ID server gave IDs within {self.timeout:g} s: {reason}")

    # -- batches -------------------------------------------------------------------------
    def shares(self, at_least: int) -> list[tuple[_Server | None, int]]:
        """The next refill, split among servers: ``(server to ask first, count)``.

        Its size is about ``refill_every`` seconds of IDs at the recent rate (at
        least ``min_batch``, and what a waiting caller needs). A refill larger
        than ``SPLIT_ABOVE`` is asked of several servers at once, so a client
        drawing faster than one server issues draws from all of them.
        """
        now = time.monotonic()
        recent = self.taken / max(now - self.sized_at, 1e-3)
        self.rate = recent if self.rate == 0 else 0.7 * self.rate + 0.3 * recent
        self.taken = 0
        self.sized_at = now
        usable: list[_Server | None] = [s for s in self.turn() if s.usable(now)]
        usable = usable[:PARALLEL_MAX] or [None]
        per_request = self.max_batch or DEFAULT_MAX_BATCH
        most = per_request * len(usable)
        self.batch = max(self.min_batch, min(most, round(self.rate * self.refill_every)))
        self.refill_below = max(1, round(self.batch * self.low_water))
        total = max(self.batch, at_least)
        parts = max(1, min(len(usable), -(-total // min(per_request, SPLIT_ABOVE))))
        share, extra = divmod(total, parts)
        return [(usable[index], share + (index < extra)) for index in range(parts)]

    def ids_in(self, server: _Server, body: bytes) -> list[IdValue]:
        """The IDs of a ``/v1/ids`` answer, parsed, after checking their scheme."""
        try:
            answer = json.loads(body)
            scheme, texts = answer["scheme"], answer["ids"]
        except (ValueError, KeyError, TypeError) as error:
            raise _Answer(0, f"not an /v1/ids answer ({error})") from None
        if self.scheme is None:
            if scheme not in SCHEMES:
                raise _Answer(0, f"unknown scheme {quoted(scheme)}")
            if SCHEMES[scheme].needs_node_bits and self.node_bits is None:
                raise ConfigurationError(
                    f"{server.url} serves {scheme} IDs; give node_bits (their node width)"
                )
            self.scheme, self.type = scheme, SCHEMES[scheme]
        elif scheme != self.scheme:
            raise ConfigurationError(
                f"{server.url} serves {scheme} IDs, not the {self.scheme} this client asks for"
            )
        if not isinstance(texts, list):
            raise _Answer(0, "the ids are not a list")
        kind = self.type
        assert kind is not None
        try:
            if kind.needs_node_bits:
                return [kind._read_text(text, self.node_bits) for text in texts]
            return [kind.from_text(text) for text in texts]
        except (IdmintError, TypeError, ValueError) as error:
            raise _Answer(0, f"an ID the client cannot read: {error}") from None

    def forget_after_fork(self) -> None:
        """In a fork child: nothing of the parent's buffer, connections or rate is ours."""
        self.buffer.clear()
        self.lock = threading.Lock()
        for server in self.servers.values():
            server.idle.clear()  # the parent's sockets: neither used nor closed here
        # The child's own use sizes its batches, from the smallest up.
        self.rate = 0.0
        self.taken = 0
        self.sized_at = time.monotonic()
        self.batch = self.min_batch
        self.refill_below = max(1, round(self.min_batch * self.low_water))
        self.owner = os.getpid()


_CLOSED = (ConnectionResetError, ssl.SSLEOFError)
"""A connection closed under a request (``http.client.RemoteDisconnected`` is one too)."""


def _closed_unanswered(server: _Server) -> str:
    """Why a new connection may be closed before any answer: what the client can do."""
    if server.tls:
        # A server that refuses a client certificate (or its lack) ends the handshake
        # without a word: asyncio and uvloop close before sending the TLS alert.
        return (
            "closed the connection after the TLS handshake without answering: it may "
            "ask for a client certificate this client lacks or that it does not accept "
            "(mutual TLS: tls_cert=..., idmint fetch --tls-cert)"
        )
    return "closed the connection without answering (does it serve https://?)"


def _refused_tls(error: BaseException) -> bool:
    """A TLS failure that waiting will not mend: a certificate one side does not accept.

    A connection cut mid-handshake (the server stopping, its handshake
    timeout) is an outage like any other.
    """
    return isinstance(error, ssl.SSLError) and not isinstance(
        error, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)
    )


def _why(error: BaseException) -> str:
    if isinstance(error, _Answer):
        return str(error)
    if isinstance(error, ssl.SSLCertVerificationError):
        return (
            f"TLS: the server's certificate cannot be verified ({error.verify_message}); "
            "give the CA that signed it (tls_ca=..., idmint fetch --tls-ca)"
        )
    if _refused_tls(error):
        assert isinstance(error, ssl.SSLError)
        if error.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE"):
            return "TLS: the server does not speak TLS (an http:// server?)"
        return "TLS: " + (error.reason or str(error)).lower().replace("_", " ")
    if isinstance(error, TimeoutError):
        return "timed out"
    if isinstance(error, asyncio.IncompleteReadError):
        return "connection closed mid-answer"
    if isinstance(error, OSError):
        # asyncio words a refused connection its own way; the errno names it alike.
        return os.strerror(error.errno) if error.errno else error.strerror or type(error).__name__
    return f"{type(error).__name__}: {error}".rstrip(": ")


def _close_all(server: _Server) -> None:
    idle, server.idle = server.idle, []
    for connection in idle:
        with contextlib.suppress(Exception):
            (connection[1] if isinstance(connection, tuple) else connection).close()


_FAILURES: tuple[type[BaseException], ...] = (
    OSError,
    http.client.HTTPException,
    asyncio.IncompleteReadError,
    ValueError,
    _Answer,
)
"""What makes a server set aside (``TimeoutError`` is an ``OSError``)."""

_FINAL = (ConfigurationError, ServerRefused)
"""Refill errors a waiting caller gets at once: more time would not help."""


class _Client:
    """The options both clients take (see :class:`IdClient`); one server table and buffer."""

    def __init__(
        self,
        urls: Iterable[str] | None = None,
        *,
        discovery: str | None = None,
        scheme: str | None = None,
        node_bits: int | None = None,
        token: str | None = None,
        token_file: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        timeout: float = 5.0,
        request_timeout: float = 2.0,
        min_batch: int = 100,
        max_batch: int | None = None,
        refill_every: float = 0.5,
        low_water: float = 1.0,
    ) -> None:
        self._core = _Core(
            urls,
            discovery,
            scheme=scheme,
            node_bits=node_bits,
            token=token,
            token_file=token_file,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
            timeout=timeout,
            request_timeout=request_timeout,
            min_batch=min_batch,
            max_batch=max_batch,
            refill_every=refill_every,
            low_water=low_water,
        )
        self._set_up()

    def _set_up(self) -> None:
        raise NotImplementedError


class IdClient(_Client):
    """IDs from ID servers for threaded code (see the module docs).

    ``urls``: the servers (``http://host:port``); or ``discovery``: a ``zk://``
    discovery URL. ``scheme``: the scheme expected (checked against each
    server's; default: whatever they serve); ``node_bits`` for elastic64.
    ``token``: the servers' bearer token, or ``token_file``: a file holding it
    (its first line that is not blank or a ``#`` comment), read again when a
    server refuses it, so a rotated token reaches a running client.
    ``tls_ca``: the CA file https servers' certificates are checked against
    (default: the system's); ``tls_cert`` and ``tls_key``: the client's
    certificate for servers that ask for one (mutual TLS; the key may be in
    the certificate file). ``timeout``: how long a call may wait
    for IDs before :class:`~idmint.errors.NoServerAnswered`;
    ``request_timeout``: one request to one server. ``min_batch``,
    ``max_batch``, ``refill_every``: the batch (prefetch) size, see the module
    docs; ``min_batch == max_batch`` fixes it. ``low_water``: the refill starts
    when the buffer holds less than this share of a batch (default 1: the
    buffer spans one to two batches; Leaf's segments refill at 0.9).
    """

    def _set_up(self) -> None:
        self._buffer = self._core.buffer
        self._changed = threading.Condition()
        self._wanted = 0  # IDs a waiting caller needs beyond the buffer; >0 starts a refill
        self._refilling = False
        self._refiller: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None  # shares of one refill, at once
        self._closed = False
        self._error: IdmintError | None = None
        self._discovery: Any = None
        self._watch: Any = None
        if self._core.discovery_url is not None:
            self._follow(self._core.discovery_url)
        _CLIENTS.add(self)

    # -- what callers use -----------------------------------------------------------------
    def get(self) -> IdValue:
        """One ID: from the buffer, or fetched first if the buffer is empty."""
        if self._core.owner != os.getpid():
            self._after_fork()
        try:
            value = self._buffer.popleft()  # atomic: no lock on the common path
        except IndexError:
            return self.get_many(1)[0]
        self._core.taken += 1
        if len(self._buffer) < self._core.refill_below and not self._refilling:
            self._refill_soon(0)
        return value

    def get_many(self, count: int) -> list[IdValue]:
        """``count`` IDs, in the order the buffer holds them."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"count must be a non-negative integer, got {count!r}")
        core = self._core
        if core.owner != os.getpid():
            self._after_fork()
        deadline = time.monotonic() + core.timeout
        values: list[IdValue] = []
        with self._changed:
            if isinstance(self._error, ServerRefused):
                self._error = None  # each call asks again: the servers' token may have changed
            while True:
                if self._closed:
                    raise ConfigurationError("the client is closed")
                with contextlib.suppress(IndexError):
                    while len(values) < count:
                        values.append(self._buffer.popleft())
                if len(values) == count:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or isinstance(self._error, _FINAL):
                    # What was taken goes back: another caller may use it.
                    self._buffer.extendleft(reversed(values))
                    raise self._error or core.gave_up(())
                self._start_refill_locked(count - len(values))
                self._changed.wait(remaining)
        core.taken += count
        if len(self._buffer) < core.refill_below and not self._refilling:
            self._refill_soon(0)
        return values

    def close(self) -> None:
        """Stop refilling, drop the buffer and connections, stop following discovery."""
        if self._core.owner != os.getpid():
            self._after_fork()
        with self._changed:
            self._closed = True
            self._buffer.clear()
            self._changed.notify_all()
        refiller = self._refiller
        if refiller is not None and refiller is not threading.current_thread():
            refiller.join(self._core.request_timeout + 1)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._watch is not None:
            self._watch.cancel()
        if self._discovery is not None:
            self._discovery.close()
        for server in list(self._core.servers.values()):
            _close_all(server)
        _CLIENTS.discard(self)

    def __enter__(self) -> IdClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def servers(self) -> list[str]:
        """The servers known now (the URLs given, or discovery's current view)."""
        return list(self._core.order)

    # -- refilling ----------------------------------------------------------------------
    def _refill_soon(self, at_least: int) -> None:
        with self._changed:
            self._start_refill_locked(at_least)

    def _start_refill_locked(self, at_least: int) -> None:
        if self._closed:
            return
        self._wanted = max(self._wanted, at_least, 1)
        self._refilling = True
        if self._refiller is None or not self._refiller.is_alive():
            self._refiller = threading.Thread(
                target=self._refill_forever, name="idmint-client refill", daemon=True
            )
            self._refiller.start()
        self._changed.notify_all()

    def _refill_forever(self) -> None:
        """The refill thread: one batch each time the buffer runs low, until close."""
        core = self._core
        while True:
            with self._changed:
                while not self._wanted and not self._closed:
                    self._changed.wait()
                if self._closed:
                    return
                at_least, self._wanted = self._wanted, 0
            try:
                values = self._fetch_all(at_least)
            except (NoServerAnswered, ConfigurationError) as error:
                failed: IdmintError | None = error
                values = []
            except BaseException as error:  # a bug: waiting callers hear of it too
                with self._changed:
                    self._error = NoServerAnswered(
                        f"refilling failed: {type(error).__name__}: {error}"
                    )
                    self._refilling = False
                    self._changed.notify_all()
                raise
            else:
                failed = None
            with self._changed:
                self._error = failed
                if not self._closed and core.owner == os.getpid():
                    self._buffer.extend(values)
                self._refilling = bool(self._wanted)
                self._changed.notify_all()

    def _fetch_all(self, at_least: int) -> list[IdValue]:
        """One refill: its shares fetched at once, each from its server or the next."""
        shares = self._core.shares(at_least)
        if len(shares) == 1:
            return self._fetch(*shares[0])
        if self._pool is None:
            self._pool = ThreadPoolExecutor(PARALLEL_MAX - 1, "idmint-client fetch")
        pending = [self._pool.submit(self._fetch, *share) for share in shares[1:]]
        outcomes: list[list[IdValue] | BaseException] = []
        for call in [functools.partial(self._fetch, *shares[0])] + [f.result for f in pending]:
            try:
                outcomes.append(call())
            except NoServerAnswered as error:
                outcomes.append(error)
        return _joined(outcomes)

    def _fetch(self, first: _Server | None, count: int) -> list[IdValue]:
        """``count`` IDs from ``first`` or, failing that, the next server, within the timeout."""
        core = self._core
        deadline = time.monotonic() + core.timeout
        tried: list[_Server] = []
        while True:
            for server in core.candidates(first, time.monotonic(), deadline):
                if self._closed:
                    return []
                try:
                    if server.waiting_for_ready:
                        self._wait_ready(server)
                    values = self._ids(server, count)
                except ConfigurationError:
                    raise
                except _FAILURES as error:
                    core.failure(server, error, tried)
                    continue
                server.answered()
                return values
            if time.monotonic() >= deadline:
                raise core.gave_up(tried)
            with self._changed:  # woken early by close or a discovery change
                if not self._closed:
                    self._changed.wait(core.pause(deadline))

    def _wait_ready(self, server: _Server) -> None:
        status, body = self._request(server, READY_PATH)
        if status != 200:
            raise _Answer(status, f"not ready: {_detail(body)}")

    def _ids(self, server: _Server, count: int) -> list[IdValue]:
        if server.max_count is None:
            server.max_count = _max_count_in(*self._request(server, "/openapi.json"))
        count = min(count, server.max_count)
        status, body = self._request(server, f"/v1/ids?count={count}")
        if status in REFUSALS and self._core.token_renewed():
            status, body = self._request(server, f"/v1/ids?count={count}")
        if status != 200:
            raise _Answer(status, _detail(body))
        return self._core.ids_in(server, body)

    def _request(self, server: _Server, path: str) -> tuple[int, bytes]:
        """GET ``path`` over a keep-alive connection to ``server``."""
        core = self._core
        fresh = not server.idle
        connection = _connection(server, core) if fresh else server.idle.pop()
        connection.timeout = core.request_timeout
        if connection.sock is not None:
            connection.sock.settimeout(core.request_timeout)
        try:
            connection.request("GET", path, headers=core.headers)
            response = connection.getresponse()
            body = response.read()
        except _CLOSED as error:
            connection.close()
            if fresh:
                raise _Answer(0, _closed_unanswered(server)) from error
            raise
        except BaseException:
            connection.close()
            raise
        if response.will_close:
            connection.close()
        else:
            server.idle.append(connection)
        return response.status, body

    # -- discovery and fork -----------------------------------------------------------------
    def _follow(self, url: str) -> None:
        from idmint.discovery import Discovery

        self._discovery = Discovery(url)
        core = self._core

        def changed(event: str, instance: Any) -> None:
            address = core.address(instance)
            if address is None:
                return
            if event == "join":
                core.add(address)
            else:
                core.remove(address)
            with self._changed:
                self._changed.notify_all()

        self._watch = self._discovery.watch_service(SERVICE, changed)

    def _after_fork(self) -> None:
        self._core.forget_after_fork()
        self._buffer = self._core.buffer
        self._changed = threading.Condition()
        self._wanted = 0
        self._refilling = False
        self._refiller = None  # the parent's threads do not exist here
        self._pool = None
        self._error = None
        self._discovery = None  # the parent's session: the child follows nothing
        self._watch = None


class AsyncIdClient(_Client):
    """IDs from ID servers for asyncio code: :class:`IdClient`'s options and behaviour, awaited.

    Use it from one event loop. Requests run on that loop (a small HTTP/1.1
    client over asyncio streams, keep-alive) and the refill is a task; no
    thread is started except kazoo's, with ``discovery``.
    """

    def _set_up(self) -> None:
        self._refill_task: asyncio.Task[None] | None = None
        self._wanted = 0
        self._arrived: asyncio.Event | None = None
        self._woken: asyncio.Event | None = None
        self._error: IdmintError | None = None
        self._closed = False
        self._discovery: Any = None
        self._watch: Any = None

    async def __aenter__(self) -> AsyncIdClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Begin following discovery (``async with`` does this)."""
        url = self._core.discovery_url
        if url is not None and self._discovery is None:
            await asyncio.to_thread(self._follow, url, asyncio.get_running_loop())

    async def get(self) -> IdValue:
        """One ID: from the buffer, or fetched first if the buffer is empty."""
        core = self._core
        if core.owner != os.getpid():
            self._after_fork()
        buffer = core.buffer
        if not buffer:
            return (await self.get_many(1))[0]
        value = buffer.popleft()
        core.taken += 1
        if len(buffer) < core.refill_below:
            self._start_refill(0)
        return value

    async def get_many(self, count: int) -> list[IdValue]:
        """``count`` IDs, in the order the buffer holds them."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"count must be a non-negative integer, got {count!r}")
        core = self._core
        if core.owner != os.getpid():
            self._after_fork()
        deadline = time.monotonic() + core.timeout
        values: list[IdValue] = []
        if isinstance(self._error, ServerRefused):
            self._error = None  # each call asks again: the servers' token may have changed
        while True:
            if self._closed:
                raise ConfigurationError("the client is closed")
            buffer = core.buffer
            while buffer and len(values) < count:
                values.append(buffer.popleft())
            if len(values) == count:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or isinstance(self._error, _FINAL):
                buffer.extendleft(reversed(values))
                raise self._error or core.gave_up(())
            arrived = self._start_refill(count - len(values))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), remaining)
        core.taken += count
        if len(core.buffer) < core.refill_below:
            self._start_refill(0)
        return values

    async def close(self) -> None:
        """Stop refilling, drop the buffer and connections, stop following discovery."""
        self._closed = True
        self._core.buffer.clear()
        task, self._refill_task = self._refill_task, None
        if task is not None and self._core.owner == os.getpid():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._watch is not None:
            self._watch.cancel()
        if self._discovery is not None:
            await asyncio.to_thread(self._discovery.close)
        for server in list(self._core.servers.values()):
            _close_all(server)

    @property
    def servers(self) -> list[str]:
        """The servers known now (the URLs given, or discovery's current view)."""
        return list(self._core.order)

    def _start_refill(self, at_least: int) -> asyncio.Event:
        """Wake the refill task (started on first use); the event is set per batch."""
        if self._arrived is None or self._woken is None:
            self._arrived, self._woken = asyncio.Event(), asyncio.Event()
        self._wanted = max(self._wanted, at_least, 1)
        self._woken.set()
        if self._refill_task is None or self._refill_task.done():
            self._refill_task = asyncio.get_running_loop().create_task(self._refill_forever())
        return self._arrived

    async def _refill_forever(self) -> None:
        assert self._arrived is not None
        assert self._woken is not None
        core = self._core
        while not self._closed:
            await self._woken.wait()
            self._woken.clear()
            at_least, self._wanted = self._wanted, 0
            if not at_least:
                continue
            try:
                values = await self._fetch_all(at_least)
            except (NoServerAnswered, ConfigurationError) as error:
                self._error = error
            else:
                self._error = None
                if not self._closed:
                    core.buffer.extend(values)
            arrived, self._arrived = self._arrived, asyncio.Event()
            arrived.set()

    async def _fetch_all(self, at_least: int) -> list[IdValue]:
        shares = self._core.shares(at_least)
        outcomes = await asyncio.gather(
            *(self._fetch(*share) for share in shares), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, NoServerAnswered):
                raise outcome
        return _joined(outcomes)

    async def _fetch(self, first: _Server | None, count: int) -> list[IdValue]:
        core = self._core
        deadline = time.monotonic() + core.timeout
        tried: list[_Server] = []
        while True:
            for server in core.candidates(first, time.monotonic(), deadline):
                if self._closed:
                    return []
                try:
                    if server.waiting_for_ready:
                        await self._wait_ready(server)
                    values = await self._ids(server, count)
                except ConfigurationError:
                    raise
                except _FAILURES as error:
                    core.failure(server, error, tried)
                    continue
                server.answered()
                return values
            if time.monotonic() >= deadline:
                raise core.gave_up(tried)
            await asyncio.sleep(core.pause(deadline))

    async def _wait_ready(self, server: _Server) -> None:
        status, body = await self._request(server, READY_PATH)
        if status != 200:
            raise _Answer(status, f"not ready: {_detail(body)}")

    async def _ids(self, server: _Server, count: int) -> list[IdValue]:
        if server.max_count is None:
            server.max_count = _max_count_in(*await self._request(server, "/openapi.json"))
        count = min(count, server.max_count)
        status, body = await self._request(server, f"/v1/ids?count={count}")
        if status in REFUSALS and self._core.token_renewed():
            status, body = await self._request(server, f"/v1/ids?count={count}")
        if status != 200:
            raise _Answer(status, _detail(body))
        return self._core.ids_in(server, body)

    async def _request(self, server: _Server, path: str) -> tuple[int, bytes]:
        return await asyncio.wait_for(
            self._exchange(server, path), timeout=self._core.request_timeout
        )

    async def _exchange(self, server: _Server, path: str) -> tuple[int, bytes]:
        """One GET on a keep-alive connection."""
        fresh = not server.idle
        if fresh:
            reader, writer = await asyncio.open_connection(
                server.host, server.port, ssl=self._core.tls if server.tls else None
            )
        else:
            reader, writer = server.idle.pop()
        try:
            head = f"GET {path} HTTP/1.1\r\nHost: {server.host}:{server.port}\r\n"
            head += "".join(f"{name}: {value}\r\n" for name, value in self._core.headers.items())
            writer.write((head + "\r\n").encode("latin-1"))
            try:
                await writer.drain()
                line = await reader.readline()
            except _CLOSED as error:
                if fresh:
                    raise _Answer(0, _closed_unanswered(server)) from error
                raise
            status = _status_of(line, closed=_closed_unanswered(server) if fresh else None)
            length, chunked, keep = 0, False, True
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                name, value = name.strip().lower(), value.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "transfer-encoding":
                    chunked = "chunked" in value
                elif name == "connection":
                    keep = value != "close"
            body = await (_chunked(reader) if chunked else reader.readexactly(length))
        except BaseException:
            writer.close()
            raise
        if keep:
            server.idle.append((reader, writer))
        else:
            writer.close()
        return status, body

    def _follow(self, url: str, loop: asyncio.AbstractEventLoop) -> None:
        from idmint.discovery import Discovery

        self._discovery = Discovery(url)
        core = self._core

        def changed(event: str, instance: Any) -> None:
            address = core.address(instance)
            if address is not None:
                loop.call_soon_threadsafe(core.add if event == "join" else core.remove, address)

        self._watch = self._discovery.watch_service(SERVICE, changed)

    def _after_fork(self) -> None:
        self._core.forget_after_fork()
        self._refill_task = None
        self._arrived = self._woken = None
        self._wanted = 0
        self._error = None
        self._discovery = self._watch = None


def _joined(outcomes: Sequence[list[IdValue] | BaseException]) -> list[IdValue]:
    """The IDs of a refill's shares; its first error only if no share gave any."""
    values = [value for outcome in outcomes if isinstance(outcome, list) for value in outcome]
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if errors and not values:
        raise errors[0]
    return values


def _status_of(line: bytes, *, closed: str | None = None) -> int:
    """The status of an answer's first line; ``closed``: why when there is none."""
    if not line and closed is not None:
        raise _Answer(0, closed)
    parts = line.split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise _Answer(0, f"not an HTTP answer: {line[:80]!r}")
    return int(parts[1])


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    """A body sent in chunks (uvicorn's way when the app gives no length)."""
    parts: list[bytes] = []
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the chunk's CRLF


def _connection(server: _Server, core: _Core) -> http.client.HTTPConnection:
    if server.tls:
        return http.client.HTTPSConnection(
            server.host, server.port, timeout=core.request_timeout, context=core.tls
        )
    return http.client.HTTPConnection(server.host, server.port, timeout=core.request_timeout)


def _token_in(path: str) -> str:
    """The token in a client's token file: its first line not blank nor a ``#`` comment.

    A server's token file (several tokens during a rotation) can be shared: the
    client uses its first token until a server refuses it, then reads again.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"token_file: cannot read {path}: {reason_of(error)}") from None
    for line in lines:
        token = line.strip()
        if token and not token.startswith("#"):
            return token
    raise ConfigurationError(f"token_file: {path} is empty (it holds no token)")


def _tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext:
    """A client context: server certificates checked against ``ca`` (else the system's CAs)."""
    if key is not None and cert is None:
        raise ConfigurationError("tls_key needs tls_cert (the certificate it belongs to)")
    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as error:
        raise ConfigurationError(
            f"tls_ca: cannot read CA certificates from {ca}: {reason_of(error)}"
        ) from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as error:
            raise ConfigurationError(
                f"tls_cert: cannot use the certificate {cert} with the key "
                f"{key or 'in it'}: {reason_of(error)}"
            ) from None
    return context


def _detail(body: bytes) -> str:
    try:
        answer = json.loads(body)
        return f"{answer['error']}: {answer['detail']}"
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")


def _max_count_in(status: int, openapi: bytes) -> int:
    """The ``maximum`` of ``count`` in a server's OpenAPI document."""
    if status != 200:
        raise _Answer(status, _detail(openapi))
    try:
        document = json.loads(openapi)
        for parameter in document["paths"]["/v1/ids"]["get"]["parameters"]:
            if parameter.get("name") == "count":
                return int(parameter["schema"]["maximum"])
    except (ValueError, KeyError, TypeError):
        pass
    return DEFAULT_MAX_BATCH


class _Clients:
    """Every IdClient of this process, so a fork child resets them before any use."""

    def __init__(self) -> None:
        self.live: weakref.WeakSet[IdClient] = weakref.WeakSet()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def add(self, client: IdClient) -> None:
        self.live.add(client)

    def discard(self, client: IdClient) -> None:
        self.live.discard(client)

    def _after_fork(self) -> None:
        for client in list(self.live):
            client._after_fork()


_CLIENTS = _Clients()
