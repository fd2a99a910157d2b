"""The server's log: the ``idmint`` logger (and uvicorn's) to stderr, as text or JSON lines.

The library itself never installs a handler; :func:`idmint.server.run.serve`
calls :func:`server_logging` for as long as it serves, so claim events
(claimed, suspended, lost, re-claimed), unexpected errors with their traceback
and, if asked for, one access line per request reach stderr.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import TextIO

from idmint.errors import ConfigurationError, quoted
from idmint.waiting import waiting_log

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "JsonFormatter",
    "LogHold",
    "TextFormatter",
    "held_until_started",
    "server_logging",
]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
WAITING = waiting_log.name
"""The logger that says what a slow wait for a coordinator waits for."""
LOG_FORMATS = ("text", "json")


def _iso_time(record: logging.LogRecord) -> str:
    moment = _dt.datetime.fromtimestamp(record.created, tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-01-01T00:00:00.000Z WARNING idmint.coordinate: message`` (+ traceback lines).

    A worker of ``idmint serve --workers N`` names itself after the logger:
    ``... idmint.coordinate (worker 2): message``.
    """

    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self._worker = "" if worker is None else f" (worker {worker})"

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{_iso_time(record)} {record.levelname} {record.name}{self._worker}: "
            f"{record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, ``exception``.

    ``exception`` (the traceback text) is present only when the record has one;
    ``worker`` (its index) only in a worker of ``idmint serve --workers N``.
    """

    def __init__(self, worker: int | None = None) -> None:
        super().__init__()
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": _iso_time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._worker is not None:
            entry["worker"] = self._worker
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False)


def _level(name: str) -> int:
    if name.lower() not in LOG_LEVELS:
        raise ConfigurationError(
            f"unknown log level {quoted(name)}; expected one of {', '.join(LOG_LEVELS)}"
        )
    return logging.getLevelName(name.upper())  # type: ignore[no-any-return]


@contextlib.contextmanager
def server_logging(
    *,
    level: str = "info",
    format: str = "text",
    access_log: bool = False,
    stream: TextIO | None = None,
    worker: int | None = None,
) -> Iterator[None]:
    """Send the ``idmint`` and ``uvicorn`` loggers to ``stream`` (stderr) while inside.

    uvicorn's own messages pass at WARNING and above (its INFO lines repeat what
    ``idmint serve`` prints), at DEBUG when ``level`` is debug. The access log
    (``uvicorn.access``, one line per request) only when ``access_log``. What
    was configured before is restored on exit. ``worker``: each line names
    this worker of ``idmint serve --workers N``.
    """
    numeric = _level(level)
    if format not in LOG_FORMATS:
        raise ConfigurationError(
            f"unknown log format {quoted(format)}; expected one of {', '.join(LOG_FORMATS)}"
        )
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter(worker) if format == "json" else TextFormatter(worker))
    settings = {
        "idmint": numeric,
        "uvicorn": logging.DEBUG if numeric <= logging.DEBUG else max(numeric, logging.WARNING),
        "uvicorn.error": logging.NOTSET,
        "uvicorn.access": logging.INFO if access_log else logging.CRITICAL + 1,
    }
    saved = []
    for name, logger_level in settings.items():
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate, list(logger.handlers)))
        logger.setLevel(logger_level)
        logger.handlers = []
        if name in ("idmint", "uvicorn"):
            logger.addHandler(handler)
            # The application may have handlers of its own on the root: one line each, not two.
            logger.propagate = False
    access = logging.getLogger("uvicorn.access")
    # uvicorn formats an access line only when this logger has a handler somewhere up.
    access.propagate = access_log
    try:
        yield
    finally:
        for logger, logger_level, propagate, handlers in saved:
            logger.setLevel(logger_level)
            logger.propagate = propagate
            logger.handlers = handlers
        handler.close()


class LogHold:
    """What ``name`` logs, held from :meth:`start` until :meth:`release` or :meth:`drop`.

    Released, the records are passed on in order (from any thread); dropped,
    they are forgotten. Either restores the logger's handlers. Records of the
    loggers named in ``passing`` are passed on at once: a wait for a
    coordinator is worth saying while the server waits, whether it then starts
    or not.
    """

    def __init__(self, name: str = "idmint", passing: Iterable[str] = (WAITING,)) -> None:
        self._logger = logging.getLogger(name)
        self._passing = frozenset(passing)
        self._held: list[logging.LogRecord] = []
        self._handlers: list[logging.Handler] | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        held = self._held
        passing = self._passing
        with self._lock:
            handlers = self._handlers = list(self._logger.handlers)

            class Hold(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    if record.name not in passing:
                        held.append(record)
                        return
                    for handler in handlers:
                        if record.levelno >= handler.level:
                            handler.handle(record)

            self._logger.handlers = [Hold()]

    def release(self) -> None:
        with self._lock:
            if self._handlers is None:
                return
            self._logger.handlers, self._handlers = self._handlers, None
            held, self._held[:] = list(self._held), []
        for record in held:
            self._logger.handle(record)

    def drop(self) -> None:
        with self._lock:
            if self._handlers is not None:
                self._logger.handlers, self._handlers = self._handlers, None
            self._held.clear()


@contextlib.contextmanager
def held_until_started(name: str = "idmint") -> Iterator[None]:
    """Hold what ``name`` logs while the server starts; pass it on if it starts.

    A server that cannot start says so in one line on stderr; the claims it
    made and gave back on the way are not part of that story. One that starts
    logs them as they happened, in order.
    """
    hold = LogHold(name)
    hold.start()
    try:
        yield
    except BaseException:
        hold.drop()
        raise
    hold.release()
