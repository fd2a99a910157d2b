"""What answers at a coordinator's address when the driver cannot make sense of it.

A URL that names the wrong port (``etcd://`` at Redis's, ``zk://`` at etcd's)
used to wait out the whole ``connect_timeout`` as if the store were down: each
client library takes the other service's answer (or its closing the
connection) for an outage and tries again. A driver whose first contact fails
asks :func:`wrong_service` once: it sends each kind of store's smallest
harmless greeting at once, on connections of their own, and reads what comes
back within a second. If nothing answers as the store the URL names but
something answers, the error says what (``127.0.0.1:6379 answered as Redis,
not etcd``) and waiting ends: :class:`~idmint.errors.WrongService`, exit 69.
An address where nothing listens, or that accepts and says nothing (a store
paused, a proxy whose backend is down) is an outage as before.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from idmint.errors import WrongService

__all__ = [
    "ETCD",
    "HTTP",
    "MYSQL",
    "POSTGRESQL",
    "REDIS",
    "ZOOKEEPER",
    "FirstFailure",
    "identify",
    "wrong_service",
]

ZOOKEEPER = "ZooKeeper"
ETCD = "etcd"
POSTGRESQL = "PostgreSQL"
MYSQL = "MySQL"
REDIS = "Redis"
HTTP = "an HTTP server"
"""An HTTP server that is not etcd, or does not say (a proxy in front of etcd may
answer for it while etcd is down: to the etcd driver, it may be etcd)."""
SOMETHING_ELSE = ""
"""A service that answered, as none of the stores idmint knows."""

PROBE_S = 1.0
"""How long a probe waits for an answer: every store answers its greeting at once."""


def _redis(reply: bytes) -> str | None:
    # PING: +PONG, or an error line (-NOAUTH, -LOADING, -DENIED): RESP either way.
    return REDIS if reply[:1] in (b"+", b"-") and b"\r\n" in reply else None


def _zookeeper(reply: bytes) -> str | None:
    # "srvr", the four-letter word every server keeps enabled; one that has them all
    # disabled, or is not serving yet, says so in words of its own.
    known = (b"Zookeeper version", b"ZooKeeper instance", b"whitelist")
    return ZOOKEEPER if any(text in reply for text in known) else None


def _postgresql(reply: bytes) -> str | None:
    # SSLRequest: one byte, S or N, and the server then waits for the next message.
    return POSTGRESQL if reply in (b"S", b"N") else None


def _mysql(reply: bytes) -> str | None:
    # MySQL and MariaDB speak first: packet 0 (a 3-byte length, sequence 0), the
    # handshake (protocol 10) or an error packet (0xff: too many connections...).
    if len(reply) < 5 or reply[3] != 0 or reply[4] not in (0x0A, 0xFF):
        return None
    return MYSQL if int.from_bytes(reply[:3], "little") >= len(reply) - 4 else None


def _http(reply: bytes) -> str | None:
    if not reply.startswith(b"HTTP/"):
        return None
    return ETCD if b"etcdserver" in reply else HTTP


@dataclass(frozen=True)
class _Probe:
    greeting: bytes
    kind_of: Callable[[bytes], str | None]
    until_closed: bool
    """Whether the answer ends when the service closes the connection (else: its
    first packet is all of it)."""


_PROBES: Sequence[_Probe] = (
    # First: MySQL's handshake comes before any greeting, so it is every probe's answer,
    # and its random bytes must not be read as another store's.
    _Probe(b"", _mysql, until_closed=False),
    _Probe(b"PING\r\n", _redis, until_closed=False),
    _Probe(b"srvr", _zookeeper, until_closed=True),
    _Probe(b"\x00\x00\x00\x08\x04\xd2\x16\x2f", _postgresql, until_closed=False),
    _Probe(b"GET /version HTTP/1.0\r\n\r\n", _http, until_closed=True),
)


def _ask(host: str, port: int, probe: _Probe) -> bytes | None:
    """What ``host:port`` sends back to ``probe``'s greeting (None: no connection)."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_S) as sock:
            sock.sendall(probe.greeting)
            reply = b""
            with contextlib.suppress(OSError):  # a timeout, a reset: what came is all
                while len(reply) < 4096:
                    chunk = sock.recv(4096)
                    reply += chunk
                    if not chunk or not probe.until_closed:
                        break
            return reply
    except OSError:
        return None


def identify(host: str, port: int) -> str | None:
    """The kind of store at ``host:port`` (:data:`SOMETHING_ELSE` for a service that
    answered as none of them), or None if nothing answered."""
    replies: list[bytes | None] = [None] * len(_PROBES)
    pending = [len(_PROBES)]
    lock = threading.Lock()
    settled = threading.Event()
    """Set when a probe recognised the store, or every probe is done."""

    def ask(index: int) -> None:
        reply = replies[index] = _ask(host, port, _PROBES[index])
        with lock:
            pending[0] -= 1
            if pending[0] == 0 or (reply and _PROBES[index].kind_of(reply)):
                settled.set()

    threads = [
        threading.Thread(target=ask, args=(i,), name="idmint-probe", daemon=True)
        for i in range(len(_PROBES))
    ]
    for thread in threads:
        thread.start()
    # The other probes may wait out their second: one that recognised the store is enough.
    settled.wait(PROBE_S + 1)
    answered = False
    for probe, reply in zip(_PROBES, list(replies), strict=True):
        if reply:
            answered = True
            kind = probe.kind_of(reply)
            if kind:
                return kind
    return SOMETHING_ELSE if answered else None


def wrong_service(
    hosts: Sequence[tuple[str, int]], expected: str, *, tls: bool = False
) -> WrongService | None:
    """The error for ``hosts`` when none is ``expected`` and one answered as something
    else; None if any is (or may be) ``expected``, or none answered (an outage).

    With ``tls`` the store answers only after a handshake: a service that answers
    the plain greetings as none of the stores may be the store itself.
    """
    may_be = {expected, *([HTTP] if expected == ETCD else []), *([SOMETHING_ELSE] if tls else [])}
    found: list[tuple[str, int, str]] = []
    for host, port in hosts:
        kind = identify(host, port)
        if kind in may_be:
            return None
        if kind is not None:
            found.append((host, port, kind))
    if not found:
        return None
    host, port, kind = found[0]
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    said = f"answered as {kind}, not {expected}" if kind else f"answered, but not as {expected}"
    return WrongService(f"{where} {said}; check the URL's scheme, hosts and ports")


class FirstFailure:
    """Asks :func:`wrong_service` once, at a first contact's first failure: a retry loop's
    ``seen(error)`` raises the :class:`~idmint.errors.WrongService` if there is one."""

    def __init__(self, hosts: Sequence[tuple[str, int]], expected: str, *, tls: bool = False):
        self._hosts = hosts
        self._expected = expected
        self._tls = tls
        self._asked = False

    def seen(self, error: Exception) -> None:
        if self._asked:
            return
        self._asked = True
        wrong = wrong_service(self._hosts, self._expected, tls=self._tls)
        if wrong is not None:
            raise wrong from error
