"""Run the ID server with uvicorn: ``idmint serve`` and :func:`serve`."""

from __future__ import annotations

import logging
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
    app = create_app(
        scheme=scheme,
        coordinator=coordinator,
        generators=generators,
        token=token,
        max_count=max_count,
        discovery=discovery,
        advertise=(host, port),
        options=options,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
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
        original_startup = server.startup

        async def startup(sockets: Any = None) -> None:
            await original_startup(sockets=sockets)
            if server.started:
                bound = server.servers[0].sockets[0].getsockname() if server.servers else None
                announce(bound[1] if bound else port)

        server.startup = startup  # type: ignore[method-assign]
    server.run()
    if not server.started:
        # Lifespan startup failed (e.g. the coordinator is unreachable): uvicorn
        # has logged the reason; the CLI turns this into one line and status 2.
        raise ConfigurationError("the ID server could not start (see the message above)")
    return 0
