"""The server's listening sockets: bound and listening before uvicorn starts, so a
busy port is one clear error, and shared by the workers of ``--workers N``."""

from __future__ import annotations

import socket

from idmint.errors import ConfigurationError

__all__ = ["bound_socket", "listen_socket"]


def listen_socket(host: str, port: int, *, shared_port: bool = False) -> socket.socket:
    """Bind and listen ourselves, so a busy port is one clear error.

    ``shared_port``: with ``SO_REUSEPORT``, as each worker of ``--workers N``
    listens on the port the supervisor reserved (the kernel spreads new
    connections over the listening sockets).
    """
    listener = bound_socket(host, port, shared_port=shared_port)
    try:
        listener.listen(2048)
    except OSError as error:
        listener.close()
        raise ConfigurationError(
            f"the ID server cannot listen on {host}:{port}: {error.strerror or error}"
        ) from None
    listener.set_inheritable(True)
    return listener


def bound_socket(host: str, port: int, *, shared_port: bool) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not listening); a busy port is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        if shared_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise ConfigurationError(
            f"the ID server cannot listen on {host}:{port}: {error.strerror or error}"
        ) from None
    return sock
