"""A TCP proxy between kazoo and one ZooKeeper server that loses the messages it is told to.

ZooKeeper's client protocol is a stream of frames (a 4-byte big-endian length, then
the body). After the session handshake (the first frame each way), a request body
starts with its ``xid`` and operation code, and a reply body with the ``xid`` of the
request it answers. :class:`ZooKeeperFaultProxy` forwards frames unchanged until a
fault is armed::

    proxy = ZooKeeperFaultProxy(("127.0.0.1", zk.client_port(0)))
    proxy.start()
    fault = proxy.lose_reply(MULTI, lambda body: b"/queue/" in body)
    ...  # kazoo connected to proxy.hosts sends a matching transaction
    assert fault.fired.wait(10)

A lost reply is one the server sent after applying the request; a swallowed request
is one the server never saw. Either way TCP does not lose single frames, so the
connection that lost one is cut at that moment, as a broken network would cut it.
With ``hold=True`` the proxy then keeps new connections waiting (accepted, nothing
forwarded) until :meth:`Fault.restore` is called, so a test decides when the
connection comes back (:attr:`Fault.holding` is set once a reconnection waits).
:attr:`Fault.reconnected` is set, and :attr:`Fault.reconnected_at` stamped
(``time.monotonic()``), when the server's handshake reply of the next connection
has been forwarded to the client.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .ports import LOOPBACK

__all__ = ["CREATE", "DELETE", "MULTI", "Fault", "ZooKeeperFaultProxy"]

CREATE = 1
DELETE = 2
MULTI = 14
"""ZooKeeper operation codes (``ZooDefs.OpCode``) that tests match requests by."""

_LENGTH = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">ii")  # xid, operation
_REPLY_XID = struct.Struct(">i")


@dataclass(eq=False)
class Fault:
    """One armed fault: which request it matches and what became of it."""

    operation: int
    matches: Callable[[bytes], bool]
    lose: str
    """``"reply"`` (the server applies the request, its answer is lost) or
    ``"request"`` (the server never sees it)."""
    hold: bool
    fired: threading.Event = field(default_factory=threading.Event)
    """Set when the message was lost and the connection cut."""
    reconnected: threading.Event = field(default_factory=threading.Event)
    """Set when a later connection's handshake has reached the client."""
    reconnected_at: float | None = None
    holding: threading.Event = field(default_factory=threading.Event)
    """Set when a connection is being held (``hold=True``), waiting for :meth:`restore`."""
    _released: threading.Event = field(default_factory=threading.Event)

    def restore(self) -> None:
        """Let connections held since the fault (``hold=True``) through."""
        self._released.set()


class _Link:
    """One client connection and its connection to the server."""

    def __init__(self, proxy: ZooKeeperFaultProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server: socket.socket | None = None
        self.lose_xids: dict[int, Fault] = {}
        self.closed = threading.Event()

    def run(self, held_by: Fault | None) -> None:
        if held_by is not None:
            held_by._released.wait()
        try:
            self.server = socket.create_connection(self.proxy.upstream, timeout=10)
        except OSError:
            self.cut()
            return
        self.server.settimeout(None)
        self.client.settimeout(None)
        threading.Thread(target=self._requests, daemon=True, name="proxy c->s").start()
        self._replies(held_by)

    def cut(self) -> None:
        self.closed.set()
        for sock in (self.client, self.server):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _requests(self) -> None:
        assert self.server is not None
        try:
            handshake = _read_frame(self.client)
            self.server.sendall(handshake)
            while True:
                frame = _read_frame(self.client)
                xid, operation = _REQUEST_HEADER.unpack_from(frame, 4)
                fault = self.proxy._take_fault(operation, frame[4 + _REQUEST_HEADER.size :])
                if fault is not None and fault.lose == "request":
                    self.proxy._fired(fault, self)
                    return
                if fault is not None:
                    self.lose_xids[xid] = fault
                self.server.sendall(frame)
        except (OSError, EOFError, struct.error):
            self.cut()

    def _replies(self, held_by: Fault | None) -> None:
        assert self.server is not None
        try:
            handshake = _read_frame(self.server)
            self.client.sendall(handshake)
            self.proxy._handshake_done()
            while True:
                frame = _read_frame(self.server)
                (xid,) = _REPLY_XID.unpack_from(frame, 4)
                fault = self.lose_xids.pop(xid, None)
                if fault is not None:
                    self.proxy._fired(fault, self)
                    return
                self.client.sendall(frame)
        except (OSError, EOFError, struct.error):
            self.cut()


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise EOFError("connection closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(sock: socket.socket) -> bytes:
    """One frame, its length prefix included."""
    prefix = _read_exactly(sock, _LENGTH.size)
    (length,) = _LENGTH.unpack(prefix)
    return prefix + _read_exactly(sock, length)


class ZooKeeperFaultProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream``; see the module docs."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed: list[Fault] = []
        self._holding: Fault | None = None
        self._awaiting_reconnect: list[Fault] = []
        self._links: set[_Link] = set()
        self._stopped = threading.Event()

    @property
    def hosts(self) -> str:
        """The connection string kazoo (or an idmint URL) is given: ``127.0.0.1:port``."""
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> ZooKeeperFaultProxy:
        threading.Thread(target=self._accept, daemon=True, name="proxy accept").start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links, self._links = list(self._links), set()
            holding, self._holding = self._holding, None
        if holding is not None:
            holding.restore()
        for link in links:
            link.cut()

    def __enter__(self) -> ZooKeeperFaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def lose_reply(
        self, operation: int, matches: Callable[[bytes], bool], *, hold: bool = False
    ) -> Fault:
        """Lose the reply to the next request of ``operation`` whose body ``matches``."""
        return self._arm(Fault(operation, matches, "reply", hold))

    def swallow_request(
        self, operation: int, matches: Callable[[bytes], bool], *, hold: bool = False
    ) -> Fault:
        """Swallow the next request of ``operation`` whose body ``matches``."""
        return self._arm(Fault(operation, matches, "request", hold))

    def cut_all(self) -> None:
        """Cut every open connection (clients reconnect at once)."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.cut()

    # -- internals -----------------------------------------------------------------------
    def _arm(self, fault: Fault) -> Fault:
        with self._lock:
            self._armed.append(fault)
        return fault

    def _take_fault(self, operation: int, body: bytes) -> Fault | None:
        with self._lock:
            for fault in self._armed:
                if fault.operation == operation and fault.matches(body):
                    self._armed.remove(fault)
                    return fault
        return None

    def _fired(self, fault: Fault, link: _Link) -> None:
        with self._lock:
            if fault.hold:
                self._holding = fault
            self._awaiting_reconnect.append(fault)
        fault.fired.set()
        link.cut()

    def _handshake_done(self) -> None:
        with self._lock:
            waiting, self._awaiting_reconnect = self._awaiting_reconnect, []
        now = time.monotonic()
        for fault in waiting:
            fault.reconnected_at = now
            fault.reconnected.set()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            link = _Link(self, client)
            with self._lock:
                self._links.add(link)
                held_by = self._holding
                if held_by is not None and held_by._released.is_set():
                    held_by = self._holding = None
            if held_by is not None:
                held_by.holding.set()
            threading.Thread(
                target=link.run, args=(held_by,), daemon=True, name="proxy link"
            ).start()
