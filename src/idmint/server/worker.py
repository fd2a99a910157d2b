"""One worker of ``idmint serve --workers N``: ``python -m idmint.server.worker FD``.

Started by the supervisor (:mod:`idmint.server.supervisor`), never by hand.
``FD`` is this worker's end of a socket pair: the supervisor writes the
server's configuration (:class:`~idmint.server.config.ServerConfig`) and this
worker's place as one JSON line; the worker answers ``{"ready": pid}`` once uvicorn
serves, or ``{"failed": ...}`` (:func:`idmint.errors.error_to_json`) if it cannot
start. The
supervisor answers ``{"go": true}`` once the server is up (every worker ready,
or this one replacing a dead one): until then the worker holds what it logs, so
a server that cannot start says so in one line (the supervisor's), as a single
process does. After that the supervisor sends nothing: end of file means it is
gone, and the worker stops as on SIGTERM.

In order: make the app and its claims (worker i of K generators each takes
configured identities from i x K, claimed ones from the pool); listen on the
reserved port with ``SO_REUSEPORT`` (only once the claims are held, so the
kernel sends no connection to a worker that cannot issue IDs); serve with the
same uvicorn settings as a single ``idmint serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from idmint.errors import IdmintError, error_to_json
from idmint.server.app import IdServer, create_app
from idmint.server.config import ServerConfig
from idmint.server.limits import HEARTBEAT_S
from idmint.server.logs import LogHold, server_logging
from idmint.server.run import (
    Hangups,
    new_server,
    reloads_on_hangup,
    server_class,
    stop_signals_handled_by,
)
from idmint.server.siblings import Siblings
from idmint.server.sockets import listen_socket

__all__ = ["main"]

log = logging.getLogger("idmint.server")


class _Stop:
    """SIGTERM/SIGINT before uvicorn runs are remembered; while it runs, passed to it."""

    def __init__(self) -> None:
        self.requested = False
        self.server: Any = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self.server is not None:
            self.server.handle_exit(signum, frame)


def _tell(control: socket.socket, message: dict[str, Any]) -> None:
    # The supervisor may be gone: the watcher thread stops this worker then.
    with contextlib.suppress(OSError):
        control.sendall(json.dumps(message).encode() + b"\n")


async def _beat(control: socket.socket) -> None:
    """Tell the supervisor this event loop turns (see ``--worker-timeout``).

    Never blocks the loop: with the supervisor stopped and the socket's buffer
    full, a beat is dropped (the supervisor reads the others when it resumes).
    """
    while True:
        with contextlib.suppress(OSError):
            control.send(b'{"alive":1}\n', socket.MSG_DONTWAIT)
        await asyncio.sleep(HEARTBEAT_S)


class _Lines:
    """The supervisor's messages, one JSON object a line."""

    def __init__(self, control: socket.socket) -> None:
        self._control = control
        self._received = b""

    def next(self) -> dict[str, Any] | None:
        """The next message; None once the supervisor's end is closed."""
        while b"\n" not in self._received:
            try:
                chunk = self._control.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                return None
            self._received += chunk
        line, _, self._received = self._received.partition(b"\n")
        message = json.loads(line)
        return message if isinstance(message, dict) else {}


def _watch_supervisor(lines: _Lines, hold: LogHold, hangups: Hangups) -> None:
    """Pass the held log on at ``go``, re-read the credentials at ``reload``; stop this
    worker when the supervisor's end closes."""
    while (message := lines.next()) is not None:
        if "go" in message:
            hold.release()
        if "reload" in message:
            hangups()
    hold.release()
    log.warning("the supervisor is gone: stopping this worker")
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if len(arguments) != 1 or not arguments[0].isdigit():
        sys.stderr.write("idmint.server.worker is started by idmint serve --workers N\n")
        return 2
    # As in the CLI: libraries (kazoo) log their retries, which must not reach
    # stderr through Python's last-resort handler.
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())
    with reloads_on_hangup() as hangups:  # first: SIGHUP's default would end the process
        control = socket.socket(fileno=int(arguments[0]))
        lines = _Lines(control)
        place = lines.next()
        if place is None:
            raise SystemExit("idmint worker: the supervisor closed the control socket")
        return _serve(control, lines, place, hangups)


def _serve(control: socket.socket, lines: _Lines, place: dict[str, Any], hangups: Hangups) -> int:
    config = ServerConfig.from_json(place["config"])
    stop = _Stop()
    with (
        server_logging(
            level=config.log_level,
            format=config.log_format,
            access_log=config.access_log,
            worker=place["index"],
        ),
        stop_signals_handled_by(stop),
    ):
        # One worker says what a slow start waits for, not every one.
        hold = LogHold() if place["index"] == 0 else LogHold(passing=())
        hold.start()
        try:
            return _run(
                control,
                lines=lines,
                place=place,
                config=config,
                stop=stop,
                hold=hold,
                hangups=hangups,
            )
        finally:
            hold.drop()  # never told to go: the server did not start


def _run(
    control: socket.socket,
    *,
    lines: _Lines,
    place: dict[str, Any],
    config: ServerConfig,
    stop: _Stop,
    hold: LogHold,
    hangups: Hangups,
) -> int:
    host = config.host
    port: int = place["port"]
    try:
        app = create_app(
            config,
            advertise=(host, port),
            identity_offset=place["index"] * config.generators,
        )
        hangups.serve(app)
        app.siblings = Siblings(
            index=place["index"],
            count=place["count"],
            generation=place["generation"],
            run_dir=Path(place["run_dir"]),
            collect=app.metrics.collect,
            claims=app.issuer.claim_rows,
        )
        app.start_now()
    except IdmintError as error:
        _tell(control, {"failed": error_to_json(error)})
        return 1
    try:
        listener = listen_socket(host, port, shared_port=True)
    except IdmintError as error:
        _release(app)
        _tell(control, {"failed": error_to_json(error)})
        return 1
    if stop.requested:  # stopped while claiming: give the claims back, never serve
        listener.close()
        _release(app)
        return 0

    class ReportingServer(server_class()):  # type: ignore[misc]
        heartbeat: asyncio.Task[None] | None = None

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                _tell(control, {"ready": os.getpid()})
                self.heartbeat = asyncio.create_task(_beat(control))

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.heartbeat is not None:
                self.heartbeat.cancel()
            await super().shutdown(sockets=sockets)

    server = new_server(app, config, port, ReportingServer)
    stop.server = server
    if stop.requested:  # a signal between the check above and now
        server.should_exit = True
    threading.Thread(
        target=_watch_supervisor,
        args=(lines, hold, hangups),
        name="idmint-supervisor-watch",
        daemon=True,
    ).start()
    server.run(sockets=[listener])
    return 0


def _release(app: IdServer) -> None:
    app.issuer.close()


if __name__ == "__main__":
    raise SystemExit(main())
