"""Run the ID server with uvicorn: ``idmint serve`` and :func:`serve`."""

from __future__ import annotations

import logging
import socket
from typing import Any

from idmint.errors import ConfigurationError
from idmint.server.app import create_app

__all__ = ["serve"]

GRACEFUL_SHUTDOWN_S = 10


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    scheme: str = "uid64",
    coordinator: str | None = None,
    generators: int = 1,
    token: str | None = None,
    max_count: int = 10_000,
    discovery: str | None = None,
    options: dict[str, Any] | None = None,
    announce: Any = None,
) -> int:
    """Serve until SIGTERM/SIGINT: finish in-flight requests, release claims, return 0."""
    try:
        import uvicorn
    except ImportError:  # pragma: no cover - depends on the install
        raise ConfigurationError(
            "the ID server needs uvicorn; install idmint with the server extra: "
            "pip install 'idmint[server]'"
        ) from None
    listener = _listen(host, port)
    bound_port = listener.getsockname()[1]
    app = create_app(
        scheme=scheme,
        coordinator=coordinator,
        generators=generators,
        token=token,
        max_count=max_count,
        discovery=discovery,
        advertise=(host, bound_port),
        options=options,
    )
    try:
        # Claims before serving: a coordinator that cannot be reached is one
        # clear error, not a failed ASGI lifespan.
        app.start_now()
    except BaseException:
        listener.close()
        raise
    config = uvicorn.Config(
        app,
        host=host,
        port=bound_port,
        lifespan="on",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        # No request bodies are accepted anyway; keep headers small too.
        h11_max_incomplete_event_size=16 * 1024,
        server_header=False,
    )
    server = uvicorn.Server(config)
    logging.getLogger("idmint").setLevel(logging.INFO)
    if announce is not None:
        # The socket already listens: connections wait in its backlog until
        # uvicorn accepts them, so saying where to connect now is true.
        announce(bound_port)
    server.run(sockets=[listener])
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """Bind and listen ourselves, so a busy port is one clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(2048)
    except OSError as error:
        listener.close()
        raise ConfigurationError(
            f"the ID server cannot listen on {host}:{port}: {error.strerror or error}"
        ) from None
    listener.set_inheritable(True)
    return listener
