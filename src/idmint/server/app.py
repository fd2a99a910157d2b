"""The ID server: a plain ASGI application (no framework), made by :func:`create_app`.

Its routes are :data:`ROUTES`, each declared once there (path, handler, what
``/openapi.json`` says of it; :mod:`idmint.server.routes`): the dispatch, the
metrics labels and the OpenAPI document, the reference, are made from it.

Every route answers HEAD as GET without the body; ``HEAD /v1/id`` and
``HEAD /v1/ids`` say whether IDs could be issued without issuing any.

The generators are the :class:`~idmint.server.issuer.Issuer`'s
(:attr:`IdServer.issuer`). In a worker of ``idmint serve --workers N``
(:attr:`IdServer.siblings` set), ``/metrics`` and ``/v1/claims`` describe the whole server
(:mod:`idmint.server.siblings`); the probes describe the worker that answers.

Errors are JSON ``{"error": ..., "detail": ...}``: 400 malformed request, 401
missing or wrong bearer token (``/v1/*`` only, when a token is set), 404, 405,
408/413/431 a request too slow or too large (see :mod:`idmint.server.limits`),
422 an ID or count that is not valid, 503 IDs cannot be issued now. Nothing a
client sends can produce a 500.

The app is written against raw ASGI because the hot route, ``/v1/id``, must
cost little more than an empty response: a framework's routing and request
objects would be most of its budget. Routing is a dict lookup; the ID route's
handler tries the next generator before it awaits anything.

The server logs one WARNING when it stops being able to issue IDs (every
claim in doubt or lost: it answers 503) and one INFO when it can again; the
claims' own lines say why.

Its credentials (:attr:`IdServer.credentials`: the tokens ``/v1/*`` accept,
the TLS certificate ``idmint serve`` listens with) are re-read by
:meth:`IdServer.request_reload`, which ``idmint serve`` calls on SIGHUP
(:mod:`idmint.server.credentials`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs, unquote

from idmint.errors import (
    ConfigurationError,
    CoordinationError,
    GeneratorError,
    IdmintError,
    InvalidId,
    quoted,
)
from idmint.factory import who_minted
from idmint.schemes import SCHEMES, IdValue, parse_id, variant_of
from idmint.server import openapi
from idmint.server.config import ServerConfig, given_config
from idmint.server.credentials import Credentials
from idmint.server.issuer import Issuer, unavailable
from idmint.server.metrics import Metrics
from idmint.server.page import PageFiles
from idmint.server.routes import (
    GUARDED_PREFIX,
    UNMATCHED,
    HttpError,
    Response,
    Route,
    Router,
    Scope,
)
from idmint.server.siblings import Siblings

__all__ = ["ROUTES", "HttpError", "IdServer", "create_app"]

log = logging.getLogger("idmint.server")

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

ISSUING_CHECK_S = 0.1
"""How often the server looks whether it can issue IDs, to log when that changes."""
MAX_ID_LENGTH = 64  # longer than any scheme's text form, dashed muids included
MAX_BODY_BYTES = 0  # every route is a GET: no body is ever needed

_TEXT = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]
_JSON = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]


def create_app(
    config: ServerConfig | None = None,
    *,
    advertise: tuple[str, int] | None = None,
    identity_offset: int = 0,
    **settings: Any,
) -> IdServer:
    """The ASGI app for ``config``, or for a :class:`ServerConfig` made of ``settings``.

    ``create_app(scheme="muid", generators=4, token="...")`` takes any field of
    :class:`~idmint.server.config.ServerConfig` as a keyword. Nothing is
    claimed until the app starts (ASGI lifespan). So each worker process of an
    ASGI server (``uvicorn --workers N``, gunicorn, with or without
    ``--preload``) claims its own identities from this host's pool when it
    starts, never the parent before a fork. A configured identity
    (``static://?generator=G``) would be the same in every worker and refused
    in all but one: ``identity_offset`` (for worker i of K generators each:
    i x K) makes each take its own block. ``advertise``: the address to
    register in discovery.
    """
    return IdServer(
        given_config(config, settings), advertise=advertise, identity_offset=identity_offset
    )


class IdServer:
    """See the module docs. Create with :func:`create_app`."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        advertise: tuple[str, int] | None = None,
        identity_offset: int = 0,
    ) -> None:
        self.config = config
        self.credentials = Credentials(config)
        """The tokens callers must show and the TLS certificate served (:meth:`request_reload`)."""
        self.issuer = Issuer(config, offset=identity_offset)
        """The generators; made when the app starts."""
        self.siblings: Siblings | None = None
        """Set in a worker of ``idmint serve --workers N``: the whole server's view."""
        self.router = Router(ROUTES)
        self.released: list[str] = []
        """What the last :meth:`shutdown` gave back, for people."""
        self.metrics = Metrics(version=_version())
        self.metrics.families.extend(self.issuer.families())
        self.metrics.families.extend(self.credentials.families())
        self._advertise = advertise
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reload_wanted = False
        self._reloading: asyncio.Task[None] | None = None
        self._discovery: Any = None
        self._registration: Any = None
        self._started = False
        self._start_lock = asyncio.Lock()
        # One whois at a time: each connects to the coordinator, and a flood of them
        # must not open a connection (a ZooKeeper session) each at once.
        self._whois_turn = asyncio.Lock()
        self._issuing_watch: asyncio.Task[None] | None = None
        self._openapi = json.dumps(openapi.openapi_document(config, ROUTES)).encode()
        # IDs of the scheme this server mints are read in its layout (snowflake's).
        self._minted_type = variant_of(config.scheme, config.options)
        self._page = PageFiles()

    # -- lifecycle --------------------------------------------------------------------------
    async def startup(self) -> None:
        """Make (or claim) the generators; idempotent."""
        async with self._start_lock:
            if not self._started:
                await asyncio.to_thread(self.start_now)

    def start_now(self) -> None:
        """Make (or claim) the generators from synchronous code; idempotent.

        ``idmint serve`` calls this before the HTTP server starts, so a
        coordinator that cannot be reached is one clear error, not a failed
        ASGI lifespan.
        """
        if self._started:
            return
        self.issuer.start()
        if self.config.discovery is not None:
            self._register()
        self._started = True

    def _register(self) -> None:
        from idmint.discovery import Discovery

        config = self.config
        assert config.discovery is not None
        self._discovery = Discovery(config.discovery)
        host, port = self._advertise or ("127.0.0.1", 0)
        if host in ("", "0.0.0.0", "::"):
            # Bound to every address: a client elsewhere needs one it can reach.
            host = socket.getfqdn()
        metadata = {
            "scheme": config.scheme,
            "generators": str(config.generators),
            # Clients that follow discovery connect the way the server listens.
            "protocol": "https" if self.credentials.tls else "http",
        }
        if self.siblings is not None:
            # Each worker is an instance of its own (it holds its own claims).
            metadata.update(worker=str(self.siblings.index), workers=str(self.siblings.count))
        self._registration = self._discovery.register(
            "idmint",
            host=host,
            port=port,
            endpoints=["ids", f"ids:{config.scheme}"],
            metadata=metadata,
        )

    async def shutdown(self) -> None:
        """Release claims and the discovery registration."""
        if self._issuing_watch is not None:
            self._issuing_watch.cancel()
            self._issuing_watch = None
        if self._reloading is not None:
            self._reloading.cancel()
        self._loop = None
        if self.siblings is not None:
            await self.siblings.stop()  # its last snapshot, with every request counted
        self.released = await asyncio.to_thread(self.issuer.close)
        if self._registration is not None:
            await asyncio.to_thread(self._registration.close)
        if self._discovery is not None:
            await asyncio.to_thread(self._discovery.close)
        self._started = False

    # -- credentials -----------------------------------------------------------------------------
    def request_reload(self) -> None:
        """Re-read the token file and TLS files soon, on the app's event loop.

        Safe from a signal handler and from any thread. Requests that arrive
        while a reload runs make one more reload after it, however many they
        are (a burst of SIGHUPs reads the files at most twice).
        """
        self._reload_wanted = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._start_reload)

    def _start_reload(self) -> None:
        if self._reloading is None or self._reloading.done():
            assert self._loop is not None
            self._reloading = self._loop.create_task(self._reload_while_wanted())

    async def _reload_while_wanted(self) -> None:
        while self._reload_wanted:
            self._reload_wanted = False
            await asyncio.to_thread(self.credentials.reload)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                    if self.siblings is not None:
                        await self.siblings.start()
                except Exception as error:  # reported to the server, which exits
                    log.error("idmint server could not start: %s", error)  # noqa: TRY400
                    await send({"type": "lifespan.startup.failed", "message": str(error)})
                    return
                self._loop = asyncio.get_running_loop()
                self._issuing_watch = self._loop.create_task(self._watch_issuing())
                if self._reload_wanted:  # asked for while starting
                    self._start_reload()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _watch_issuing(self) -> None:
        """Log once when the server stops being able to issue IDs, and once when it can again.

        Also says when the certificate served comes near its expiry.
        """
        issuing = True
        while True:
            await asyncio.sleep(ISSUING_CHECK_S)
            self.credentials.check_expiry()
            if not self.issuer.generators:
                continue  # starting or stopping: not a claim's doing
            now = self.issuer.can_issue()
            if now == issuing:
                continue
            issuing = now
            if now:
                log.info("IDs are issued again: a claim is usable")
            else:
                why = self.issuer.why_unavailable()
                log.warning("IDs cannot be issued (answering 503): %s", why)

    # -- ASGI entry point ----------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, send: Send) -> None:
        """Answer a request; count it under its route, whatever the answer."""
        started = time.perf_counter()
        route = self.router.match(scope["path"])
        try:
            admitted = self._admitted(scope, route)
            if admitted.guarded and not self._started:
                await self.startup()
            head = admitted.head
            handler = head if head is not None and scope["method"] == "HEAD" else admitted.handler
            status, headers, body = await handler(self, scope)
        except HttpError as error:
            status, headers, body = _error(error)
        except GeneratorError as error:
            status, headers, body = _error(unavailable(error))
        except Exception as error:
            status, headers, body = _internal_error(scope, error)
        if scope["method"] == "HEAD":
            body = b""
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        label = UNMATCHED if route is None else route.label
        self.metrics.observe(label, status, time.perf_counter() - started)

    def _admitted(self, scope: Scope, route: Route | None) -> Route:
        """``route``, if the request may have it; else 405, 413, 404 or 401, in that order."""
        method = scope["method"]
        allowed = self.router.methods if route is None else route.methods
        if method not in allowed:
            raise HttpError(
                405,
                "method not allowed",
                f"{method} is not supported; every route answers GET",
                [(b"allow", ", ".join(allowed).encode())],
            )
        _check_body(scope)
        if route is None:
            raise HttpError(
                404, "not found", f"no route {quoted(scope['path'])}; see /openapi.json"
            )
        if route.guarded and self.credentials.tokens is not None:
            self._check_token(scope)
        return route

    def _check_token(self, scope: Scope) -> None:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, credential = value.partition(b" ")
                if scheme.lower() == b"bearer" and self.credentials.authorized(credential.strip()):
                    return
                break
        raise HttpError(
            401,
            "unauthorized",
            "send the server's token as 'Authorization: Bearer <token>'",
            [(b"www-authenticate", b'Bearer realm="idmint"')],
        )

    # -- routes -------------------------------------------------------------------------------
    async def one_id(self, scope: Scope) -> Response:
        # The first try of Issuer.one, here: an await costs as much as minting.
        text = self.issuer.next_ready() or await self.issuer.one()
        self.metrics.ids_served += 1
        return 200, _TEXT, f"{text}\n".encode()

    async def one_id_head(self, scope: Scope) -> Response:
        """What ``GET /v1/id`` would answer now, without issuing an ID."""
        self.issuer.check()
        return 200, _TEXT, b""

    async def many_ids(self, scope: Scope) -> Response:
        count = self._count(scope)
        ids = await self.issuer.many(count)
        self.metrics.ids_served += len(ids)
        # IDs are hex, decimal or base-64url: nothing to escape.
        body = '{"scheme":"%s","ids":["%s"]}' % (self.config.scheme, '","'.join(ids))  # noqa: UP031
        return 200, _JSON, body.encode()

    async def many_ids_head(self, scope: Scope) -> Response:
        self._count(scope)
        self.issuer.check()
        return 200, _JSON, b""

    def _count(self, scope: Scope) -> int:
        given = _query(scope).get("count", ["1"])[-1]
        raw = given.strip()
        limit = self.config.max_count
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
            raise HttpError(
                422,
                "invalid count",
                f"count must be a whole number 1..{limit}, got {quoted(given)}",
            )
        count = int(raw)
        if not 1 <= count <= limit:
            raise HttpError(
                422, "invalid count", f"count must be 1..{limit} (the server's limit), got {count}"
            )
        return count

    async def decode(self, scope: Scope) -> Response:
        value = _id_in_path(scope, _DECODE_PREFIX, minted=self._minted_type)
        return 200, _JSON, json.dumps(value.to_dict()).encode()

    async def whois(self, scope: Scope) -> Response:
        value = _id_in_path(
            scope, _WHOIS_PREFIX, minted=self._minted_type, default_scheme=self.config.scheme
        )
        where = self.config.coordinator
        try:
            async with self._whois_turn:
                holder = await asyncio.to_thread(who_minted, value, where)
        except ConfigurationError as error:
            raise HttpError(404, "not recorded", str(error)) from None
        except CoordinationError as error:
            raise HttpError(503, "unavailable", str(error)) from None
        if holder is None:
            raise HttpError(
                404,
                "not recorded",
                f"no holder of the identity of {value} is recorded at "
                f"{self.issuer.coordinator} for {value.to_dict()['time']}",
            )
        return 200, _JSON, json.dumps(holder.to_json()).encode()

    async def claims(self, scope: Scope) -> Response:
        body: dict[str, Any] = {
            "scheme": self.config.scheme,
            # The one the claims came from, named even when it is the default;
            # shown on the page too, so never with its password.
            "coordinator": self.issuer.coordinator,
            "time_runs_out_ms": round(SCHEMES[self.config.scheme].time_runs_out_s() * 1000),
        }
        if self.siblings is None:
            body["claims"] = self.issuer.claim_rows()
        else:
            body["claims"], body["workers"] = await self.siblings.claims()
        return 200, _JSON, json.dumps(body).encode()

    async def services(self, scope: Scope) -> Response:
        if self._discovery is None:
            body: dict[str, Any] = {"services": {}, "endpoints": {}, "configured": False}
        else:
            try:
                body = await asyncio.to_thread(self._discovery.snapshot)
            except IdmintError as error:
                raise HttpError(503, "discovery unavailable", str(error)) from None
            body["configured"] = True
        return 200, _JSON, json.dumps(body).encode()

    async def livez(self, scope: Scope) -> Response:
        # Answering at all is the proof: a lost claim makes the server unready, not dead.
        return 200, _JSON, self._ok

    @property
    def _ok(self) -> bytes:
        """A probe's 200 body; a worker names itself (probes describe the worker answering)."""
        if self.siblings is None:
            return b'{"status":"ok"}'
        return json.dumps({"status": "ok", "worker": self.siblings.index}).encode()

    async def readyz(self, scope: Scope) -> Response:
        if not self._started:
            try:
                await self.startup()
            except IdmintError as error:
                raise HttpError(503, "unavailable", str(error)) from None
        self.issuer.check()
        return 200, _JSON, self._ok

    async def metrics_text(self, scope: Scope) -> Response:
        headers = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
        if self.siblings is not None:
            return 200, headers, (await self.siblings.render_metrics()).encode()
        return 200, headers, self.metrics.render().encode()

    async def openapi_json(self, scope: Scope) -> Response:
        return 200, _JSON, self._openapi

    async def page(self, scope: Scope) -> Response:
        return self._page.answer(scope, "index.html")

    async def static(self, scope: Scope) -> Response:
        return self._page.answer(scope, scope["path"][len(_STATIC_PREFIX) :])


_DECODE_PREFIX = f"{GUARDED_PREFIX}decode/"
_WHOIS_PREFIX = f"{GUARDED_PREFIX}whois/"
_STATIC_PREFIX = "/static/"
_STATUS = openapi.json_answer
_PROBE = openapi.schema_ref("Status")
_PAGE_ANSWERS = openapi.NOT_MODIFIED

ROUTES: tuple[Route, ...] = (
    Route(
        "/v1/id",
        IdServer.one_id,
        "One ID",
        "getId",
        openapi.text_answer("The ID in its canonical text form", "text/plain"),
        openapi.UNAVAILABLE,
        head=IdServer.one_id_head,
    ),
    Route(
        "/v1/ids",
        IdServer.many_ids,
        "Several IDs",
        "getIds",
        openapi.json_answer("The IDs, in order", openapi.schema_ref("Ids")),
        {
            openapi.INVALID: openapi.error_answer("count is not a whole number within the limit"),
            **openapi.UNAVAILABLE,
        },
        parameters=openapi.count_parameters,
        head=IdServer.many_ids_head,
    ),
    Route(
        _DECODE_PREFIX + "{id}",
        IdServer.decode,
        "What an ID is made of (the JSON of `idmint decode`)",
        "decodeId",
        openapi.json_answer("The ID's fields", openapi.schema_ref("Decoded")),
        {
            openapi.INVALID: openapi.error_answer(
                "Not an ID of the scheme, or the scheme cannot be told"
            )
        },
        parameters=openapi.decode_parameters,
    ),
    Route(
        _WHOIS_PREFIX + "{id}",
        IdServer.whois,
        "Who minted an ID: the holder of its identity then, as the coordinator recorded it",
        "whoisId",
        openapi.json_answer("The holder", openapi.HOLDER),
        {
            "404": openapi.error_answer("No holder of its identity is recorded for its time"),
            openapi.INVALID: openapi.error_answer(
                "Not an ID of the scheme, or the scheme cannot be told"
            ),
            **openapi.UNAVAILABLE,
        },
        parameters=openapi.decode_parameters,
    ),
    Route(
        "/v1/claims",
        IdServer.claims,
        "The identities this server holds",
        "getClaims",
        openapi.json_answer("One row per generator", openapi.schema_ref("Claims")),
    ),
    Route(
        "/v1/services",
        IdServer.services,
        "The discovery tree (when the server is given one)",
        "getServices",
        openapi.json_answer("Services and endpoints", {"type": "object"}),
        {"503": openapi.error_answer("Discovery cannot be read now")},
    ),
    Route(
        "/livez",
        IdServer.livez,
        "200 while the process serves (liveness; a lost claim does not change it)",
        "live",
        openapi.json_answer("The process is up", _PROBE),
    ),
    Route(
        "/readyz",
        IdServer.readyz,
        "200 while the server can issue IDs (readiness)",
        "ready",
        openapi.json_answer("Can issue IDs", _PROBE),
        openapi.UNAVAILABLE,
    ),
    Route(
        "/healthz",
        IdServer.readyz,
        "The same as /readyz",
        "health",
        openapi.json_answer("Can issue IDs", _PROBE),
        openapi.UNAVAILABLE,
    ),
    Route(
        "/metrics",
        IdServer.metrics_text,
        "Prometheus metrics",
        "metrics",
        openapi.text_answer("Text exposition format 0.0.4", "text/plain"),
    ),
    Route(
        "/openapi.json",
        IdServer.openapi_json,
        "This document",
        "openapi",
        openapi.json_answer("OpenAPI 3.1", {"type": "object"}),
    ),
    Route(
        "/",
        IdServer.page,
        "The web page",
        "page",
        openapi.text_answer("The page (with ETag; 304 when If-None-Match names it)", "text/html"),
        openapi.NOT_MODIFIED,
    ),
    Route(
        _STATIC_PREFIX + "{name}",
        IdServer.static,
        "A file of the web page (with ETag; 304 when If-None-Match names it)",
        "staticFile",
        openapi.text_answer(
            "The file", "text/html", "text/javascript", "text/css", "image/svg+xml"
        ),
        {**openapi.NOT_MODIFIED, **openapi.NOT_FOUND},
        parameters=openapi.path_parameters("name"),
    ),
)
"""Every route of the server, in the order ``/openapi.json`` lists them."""


def _check_body(scope: Scope) -> None:
    for name, value in scope.get("headers", ()):
        if (
            name == b"content-length" and value.strip() not in (b"", b"0")
        ) or name == b"transfer-encoding":
            # Closing the connection spares reading a body nobody wants.
            raise HttpError(
                413,
                "request too large",
                "requests carry no body; send a plain GET",
                [(b"connection", b"close")],
            )


def _error(error: HttpError) -> Response:
    body = json.dumps({"error": error.error, "detail": error.detail}).encode()
    return error.status, [*_JSON, *error.headers], body


def _internal_error(scope: Scope, error: Exception) -> Response:
    """The last resort: a bug is a 500, logged with its traceback, answered in JSON."""
    log.error("unexpected error on %s %s", scope["method"], scope["path"], exc_info=error)
    return _error(HttpError(500, "internal error", f"{type(error).__name__}: {error}"))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("idmint")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _id_in_path(
    scope: Scope, prefix: str, *, minted: type[IdValue], default_scheme: str | None = None
) -> IdValue:
    """The ID a request's path gives after ``prefix``, read with its ``scheme`` and
    ``node_bits`` parameters (``default_scheme`` where none is given; the server's own
    scheme in the layout it mints, ``minted``); a 422 if it is none."""
    raw_path = scope.get("raw_path")
    text = (
        unquote(raw_path.decode("latin-1").split("?", 1)[0][len(prefix) :])
        if raw_path
        else scope["path"][len(prefix) :]
    )
    if not text or len(text) > MAX_ID_LENGTH:
        raise HttpError(
            422, "invalid ID", f"give an ID of 1 to {MAX_ID_LENGTH} characters after {prefix}"
        )
    query = _query(scope)
    # A parameter given empty or out of range is an error, not "absent":
    # the OpenAPI document allows only the scheme names and 8..16.
    scheme = query.get("scheme", [None])[-1]
    if scheme is not None and scheme not in SCHEMES:
        raise HttpError(
            422,
            "invalid scheme",
            f"scheme must be one of {', '.join(SCHEMES)}, got {quoted(scheme)}",
        )
    node_bits_text = query.get("node_bits", [None])[-1]
    node_bits = None
    if node_bits_text is not None:
        if not (
            node_bits_text.isascii()
            and node_bits_text.isdigit()
            and len(node_bits_text) <= 2
            and 8 <= int(node_bits_text) <= 16
        ):
            raise HttpError(
                422,
                "invalid node_bits",
                f"node_bits must be 8..16, got {quoted(node_bits_text)}",
            )
        node_bits = int(node_bits_text)
    scheme = scheme or default_scheme
    try:
        if scheme == minted.scheme and node_bits is None:
            return minted._read_text(text, None)
        return parse_id(text, scheme, node_bits=node_bits)
    except InvalidId as error:
        raise HttpError(422, "invalid ID", str(error)) from None


def _query(scope: Scope) -> dict[str, list[str]]:
    raw = scope.get("query_string", b"")
    try:
        return parse_qs(raw.decode("latin-1"), keep_blank_values=True, strict_parsing=False)
    except ValueError as error:
        raise HttpError(400, "bad query", str(error)) from None
