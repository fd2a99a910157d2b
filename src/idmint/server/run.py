"""Run the ID server with uvicorn: ``idmint serve`` and :func:`serve`.

One process by default; with ``workers`` above 1, a supervisor and that many
worker processes on one port (:mod:`idmint.server.supervisor`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from idmint.errors import needs_extra
from idmint.server.app import IdServer, create_app
from idmint.server.config import ServerConfig, given_config
from idmint.server.limits import GRACEFUL_SHUTDOWN_S, limited_http_protocol
from idmint.server.logs import held_until_started, server_logging
from idmint.server.sockets import listen_socket

__all__ = [
    "GRACEFUL_SHUTDOWN_S",
    "Hangups",
    "browser_url",
    "listen_socket",
    "new_server",
    "reloads_on_hangup",
    "serve",
    "server_class",
    "startup_line",
    "stop_signals_handled_by",
    "uvicorn_config",
]

log = logging.getLogger("idmint.server")

KEEP_ALIVE_S = 5
"""An idle keep-alive connection is closed after this long (uvicorn's timer)."""


def serve(
    config: ServerConfig | None = None,
    *,
    announce: Callable[[int], None] | None = None,
    **settings: Any,
) -> int:
    """Serve ``config`` (or a :class:`ServerConfig` of ``settings``) until SIGTERM/SIGINT.

    Then finish in-flight requests, release claims, return 0. ``settings`` are
    :class:`~idmint.server.config.ServerConfig`'s fields as keywords
    (``serve(port=0, generators=4)``). ``announce(port)`` is called once the
    socket listens (with workers: once every worker serves).

    While it serves, the ``idmint`` logger (claim events, unexpected errors) and
    uvicorn's go to stderr at ``log_level`` as ``log_format``; ``access_log``
    adds a line per request. A request must arrive in full within
    ``request_timeout`` seconds and hold at most
    :data:`~idmint.server.limits.MAX_REQUEST_BYTES` (see :mod:`idmint.server.limits`);
    with TLS (``tls_cert``), so must the handshake. In the main thread, SIGHUP
    re-reads the token file and the TLS files (:mod:`idmint.server.credentials`).

    ``workers`` above 1 runs that many worker processes on the port, each with
    its own ``generators`` claims, under a supervisor (this process, which
    claims nothing) that replaces a worker that dies, or whose event loop has
    not turned for ``worker_timeout`` seconds (0: never). This must then run in
    the main thread (the supervisor handles SIGCHLD).
    """
    config = given_config(config, settings)
    with (
        server_logging(
            level=config.log_level, format=config.log_format, access_log=config.access_log
        ),
        reloads_on_hangup() as hangups,
    ):
        if config.workers > 1:
            from idmint.server.supervisor import serve_workers

            return serve_workers(config, announce=announce)
        return _serve(config, announce, hangups)


def _serve(config: ServerConfig, announce: Callable[[int], None] | None, hangups: Hangups) -> int:
    with needs_extra("server", "uvicorn", needed_by="the ID server"):
        import uvicorn  # noqa: F401 - here, so that a missing extra is said first
    listener = listen_socket(config.host, config.port)
    bound_port = listener.getsockname()[1]
    try:
        app = create_app(config, advertise=(config.host, bound_port))
        hangups.serve(app)
        # Claims before serving: a coordinator that cannot be reached is one
        # clear error, not a failed ASGI lifespan.
        with held_until_started():
            app.start_now()
    except BaseException:
        listener.close()
        raise
    server = new_server(app, config, bound_port)
    stopped_by: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped_by.append(signum)
        server.handle_exit(signum, frame)

    with stop_signals_handled_by(stop):
        if announce is not None:
            # The socket already listens: connections wait in its backlog until
            # uvicorn accepts them, so saying where to connect now is true.
            announce(bound_port)
        server.run(sockets=[listener])
    if stopped_by:
        log.info(
            "stopped by %s: released %s; exit status 0",
            signal.Signals(stopped_by[0]).name,
            ", ".join(app.released) or "nothing (no claim was held)",
        )
    return 0


def uvicorn_config(app: Any, config: ServerConfig, port: int) -> Any:
    """uvicorn's settings for the ID server (one process, or each worker)."""
    import uvicorn

    limits = config.limits
    return uvicorn.Config(
        app,
        host=config.host,
        port=port,
        lifespan="on",
        # uvicorn's parser, with the request size limit and timeout it lacks.
        http=limited_http_protocol(limits),
        # The app serves no WebSocket: an upgrade request is an ordinary request.
        ws="none",
        access_log=config.access_log,
        # server_logging() has set the loggers up: uvicorn must not reconfigure them.
        log_config=None,
        log_level=None,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        h11_max_incomplete_event_size=limits.max_request_bytes,
        server_header=False,
    )


def new_server(
    app: IdServer, config: ServerConfig, port: int, kind: type[Any] | None = None
) -> Any:
    """The uvicorn server for ``app`` on ``port``: ``kind`` (a :func:`server_class`), or that."""
    server = (kind or server_class())(uvicorn_config(app, config, port))
    server.tls = app.credentials.context
    server.handshake_timeout = config.request_timeout
    return server


def server_class() -> type[Any]:
    """uvicorn's ``Server``, listening with the app's TLS context when it has one.

    uvicorn creates its listening servers without a handshake timeout, so
    asyncio's default (60 s) would let a connection that never finishes its
    TLS handshake hold a file descriptor that long, untouched by the request
    timeout (which starts once the handshake is done). With TLS, this class
    creates them itself, the handshake limited to the request timeout, the
    protocol made as uvicorn makes it.
    """
    global _server_class
    if _server_class is not None:
        return _server_class
    import uvicorn

    class Server(uvicorn.Server):
        tls: ssl.SSLContext | None = None
        handshake_timeout: float | None = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            if self.tls is None or sockets is None:
                await super().startup(sockets=sockets)
                return
            await super().startup(sockets=[])  # the lifespan, and no listener yet
            config = self.config

            def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> Any:
                return config.http_protocol_class(  # type: ignore[call-arg]
                    config=config,
                    server_state=self.server_state,
                    app_state=self.lifespan.state,
                    _loop=_loop,
                )

            loop = asyncio.get_running_loop()
            for sock in sockets:
                self.servers.append(
                    await loop.create_server(
                        create_protocol,
                        sock=sock,
                        ssl=self.tls,
                        backlog=config.backlog,
                        ssl_handshake_timeout=self.handshake_timeout,
                    )
                )

    _server_class = Server
    return Server


_server_class: type[Any] | None = None


class Hangups:
    """SIGHUP: the app re-reads its credentials (token file, TLS files).

    Before the app exists there is nothing to re-read: it reads the files when
    it is made. One that arrives while it is being made is passed on once it
    is, in case the files were read before the signal.
    """

    def __init__(self) -> None:
        self.app: IdServer | None = None
        self.missed = False

    def __call__(self, signum: int = signal.SIGHUP, frame: FrameType | None = None) -> None:
        app = self.app
        if app is None:
            self.missed = True
        else:
            app.request_reload()

    def serve(self, app: IdServer) -> None:
        self.app = app
        if self.missed:
            app.request_reload()


@contextlib.contextmanager
def reloads_on_hangup() -> Iterator[Hangups]:
    """SIGHUP handled by a :class:`Hangups` while inside (its default would end the process)."""
    hangups = Hangups()
    if threading.current_thread() is not threading.main_thread():
        yield hangups
        return
    previous = signal.signal(signal.SIGHUP, hangups)
    try:
        yield hangups
    finally:
        signal.signal(signal.SIGHUP, previous)


@contextlib.contextmanager
def stop_signals_handled_by(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
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


def browser_url(host: str, port: int, *, tls: bool = False) -> str:
    """A URL a browser on this host can open for a server bound to ``host``.

    IPv6 addresses go in brackets; the wildcard addresses (``0.0.0.0``, ``::``)
    are not addresses one can connect to, so the loopback of the same family is
    given instead. ``tls``: https.
    """
    scheme = "https" if tls else "http"
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return f"{scheme}://{host}:{port}/"  # a host name
    if address.is_unspecified:
        loopback = "[::1]" if address.version == 6 else "127.0.0.1"
        return f"{scheme}://{loopback}:{port}/"
    if address.version == 6:
        return f"{scheme}://[{host.replace('%', '%25')}]:{port}/"
    return f"{scheme}://{host}:{port}/"


def startup_line(scheme: str, host: str, port: int, workers: int = 1, *, tls: bool = False) -> str:
    """What ``idmint serve`` prints once it listens (starts with ``... open URL``)."""
    line = f"idmint server for {scheme} IDs: open {browser_url(host, port, tls=tls)}"
    try:
        unspecified = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        unspecified = False
    if unspecified:
        where = "IPv4" if ":" not in host else "IPv6 (and IPv4, where the system maps it)"
        line += f" (listening on all {where} addresses, port {port})"
    if workers > 1:
        line += f" ({workers} worker processes)"
    return line
