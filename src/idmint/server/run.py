"""Run the ID server with uvicorn: ``idmint serve`` and :func:`serve`."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType
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
    with _stop_signals_handled_by(server.handle_exit):
        if announce is not None:
            # The socket already listens: connections wait in its backlog until
            # uvicorn accepts them, so saying where to connect now is true.
            announce(bound_port)
        server.run(sockets=[listener])
    return 0


@contextlib.contextmanager
def _stop_signals_handled_by(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Send SIGTERM/SIGINT to uvicorn's own handler, also before and after it runs.

    Before: a stop signal that arrives between "open http://..." and uvicorn
    installing its handlers still gives a graceful shutdown. After: uvicorn
    restores the previous handlers and raises the signal again so the caller
    hears of it; by then in-flight requests are answered and the claims are
    released, so the stop was clean and ``idmint serve`` exits 0, where the
    CLI's handler (143) or Python's KeyboardInterrupt (130) would say otherwise.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stop_signals = (signal.SIGTERM, signal.SIGINT)
    previous = {signum: signal.signal(signum, handler) for signum in stop_signals}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


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
