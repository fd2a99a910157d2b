"""A TCP proxy in front of one server that a test can cut off, as a network partition does.

Clients connect to :attr:`TcpProxy.port` instead of the server's; bytes pass both
ways unchanged until :meth:`TcpProxy.partition`. From then on nothing passes in
either direction and nothing is closed: a client's requests go unanswered (its own
time limits end them), new connections are accepted and answered by nobody, as
with a link that drops every packet. :meth:`TcpProxy.heal` lets what waited
through::

    with TcpProxy(("127.0.0.1", redis.port)) as proxy:
        url = f"redis://127.0.0.1:{proxy.port}/0"
        ...
        proxy.partition()   # the holders on ``url`` can no longer reach Redis
"""

from __future__ import annotations

import contextlib
import socket
import threading

from .ports import LOOPBACK

__all__ = ["TcpProxy"]


class TcpProxy:
    """A proxy to ``upstream`` on a free port of 127.0.0.1 (see the module docs)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server((LOOPBACK, 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> TcpProxy:
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()
        return self

    def partition(self) -> None:
        """From now on nothing passes, either way, on any connection, old or new."""
        self._flowing.clear()

    def heal(self) -> None:
        """Let everything through again, what waited first."""
        self._flowing.set()

    def stop(self) -> None:
        """Close the listener and every connection."""
        self._closed.set()
        self._flowing.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), name="tcp-proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                # While partitioned, what arrived waits here, as in a network that
                # drops it and a TCP that sends it again once the link is back.
                self._flowing.wait()
                if self._closed.is_set():
                    break
                sink.sendall(data)
        except OSError:
            pass
        if not self._flowing.is_set():
            return  # a partition closes nothing: the peer hears nothing at all
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
