"""The ID server: a plain ASGI application (no framework), made by :func:`create_app`.

Routes (the OpenAPI document at ``/openapi.json`` is the reference):

==========================  ====================================================
``GET /v1/id``              one ID, ``text/plain``, ending in a newline
``GET /v1/ids?count=N``     ``{"scheme": ..., "ids": ["...", ...]}``; IDs always as
                            strings (JavaScript cannot hold 64-bit integers)
``GET /v1/decode/{id}``     the JSON of ``idmint decode`` (``?scheme=``, ``?node_bits=``)
``GET /v1/claims``          the identities this server holds (all its workers'), and
                            the coordinator they came from (``local://`` by default)
``GET /v1/services``        the discovery tree, when ``discovery`` is configured
``GET /livez``              200 while the process serves (liveness)
``GET /readyz``             200 while IDs can be issued, else 503 with the reason
``GET /healthz``            the same as ``/readyz``
``GET /metrics``            Prometheus text
``GET /openapi.json``       the API description
``GET /``                   the web page (``/static/...`` its files, with ETags)
==========================  ====================================================

Every route answers HEAD as GET without the body; ``HEAD /v1/id`` and
``HEAD /v1/ids`` say whether IDs could be issued without issuing any.

In a worker of ``idmint serve --workers N`` (:attr:`IdServer.siblings` set),
``/metrics`` and ``/v1/claims`` describe the whole server
(:mod:`idmint.server.siblings`); the probes describe the worker that answers.

Errors are JSON ``{"error": ..., "detail": ...}``: 400 malformed request, 401
missing or wrong bearer token (``/v1/*`` only, when a token is set), 404, 405,
408/413/431 a request too slow or too large (see :mod:`idmint.server.limits`),
422 an ID or count that is not valid, 503 IDs cannot be issued now. Nothing a
client sends can produce a 500.

The app is written against raw ASGI because the hot route, ``/v1/id``, must
cost little more than an empty response: a framework's routing and request
objects would be most of its budget.

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
import hashlib
import json
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from importlib import resources
from itertools import cycle
from typing import Any
from urllib.parse import parse_qs, unquote

from idmint.coordinate.base import Claim, ClaimState
from idmint.errors import (
    ClockMovedBackwards,
    GeneratorError,
    IdmintError,
    InvalidId,
)
from idmint.factory import coordinator_for, new_generators
from idmint.generate.core import TickGenerator
from idmint.schemes import SCHEMES, parse_id
from idmint.server.config import ServerConfig, given_config
from idmint.server.credentials import Credentials
from idmint.server.metrics import Family, Metrics, Samples
from idmint.server.openapi import openapi_document
from idmint.server.siblings import Siblings

__all__ = ["IdServer", "create_app"]

log = logging.getLogger("idmint.server")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Handler = Callable[[Scope], Awaitable[tuple[int, list[Any], bytes]]]

ISSUING_CHECK_S = 0.1
"""How often the server looks whether it can issue IDs, to log when that changes."""
MAX_ID_LENGTH = 64  # longer than any scheme's text form, dashed muids included
MAX_BODY_BYTES = 0  # every route is a GET: no body is ever needed

_TEXT = [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]
_JSON = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
# The page's files change only with the installed version, but their URLs do not:
# browsers keep them and ask each time whether they changed (ETag, 304).
_STATIC_CACHE = b"no-cache"
_STATIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
_STATIC_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}


class HttpError(Exception):
    """A request we answer with a JSON error."""

    def __init__(
        self, status: int, error: str, detail: str, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = list(headers)


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
        self.scheme = config.scheme
        self.coordinator = config.coordinator
        self.generator_count = config.generators
        self.max_count = config.max_count
        self.credentials = Credentials(config)
        """The tokens callers must show and the TLS certificate served; see :meth:`reload`."""
        self._token_required = self.credentials.tokens is not None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reload_wanted = False
        self._reloading: asyncio.Task[None] | None = None
        self._discovery_url = config.discovery
        self._advertise = advertise
        self._options = config.options
        self.identity_offset = identity_offset
        self.siblings: Siblings | None = None
        """Set in a worker of ``idmint serve --workers N``: the whole server's view."""
        self.generators: list[TickGenerator[Any]] = []
        self._cycle: Any = None
        self._discovery: Any = None
        self._registration: Any = None
        self._started = False
        self._start_lock = asyncio.Lock()
        self._issuing_watch: asyncio.Task[None] | None = None
        self.released: list[str] = []
        """What the last :meth:`shutdown` gave back, for people."""
        self.metrics = Metrics(version=_version())
        self.metrics.families.extend(self._generator_families())
        self.metrics.families.extend(self.credentials.families())
        self._openapi = json.dumps(
            openapi_document(self.max_count, token=self._token_required)
        ).encode()
        self._static_files: dict[str, tuple[bytes, bytes]] = {}
        self._routes: dict[str, Handler] = {
            "/v1/id": self._one_id,
            "/v1/ids": self._many_ids,
            "/v1/claims": self._claims,
            "/v1/services": self._services,
            "/livez": self._livez,
            "/readyz": self._readyz,
            "/healthz": self._readyz,
            "/metrics": self._metrics,
            "/openapi.json": self._openapi_json,
            "/": self._page,
        }
        # HEAD on the ID routes must not issue (or count) an ID.
        self._head_routes: dict[str, Handler] = {
            "/v1/id": self._one_id_head,
            "/v1/ids": self._many_ids_head,
        }

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
        made = self._make_generators()
        self.generators = made
        self._cycle = cycle(made)
        if self._discovery_url is not None:
            self._register()
        self._started = True

    def _make_generators(self) -> list[TickGenerator[Any]]:
        return new_generators(
            self.scheme,
            self.generator_count,
            coordinator=self.coordinator,
            offset=self.identity_offset,
            **self._options,
        )

    def _register(self) -> None:
        from idmint.discovery import Discovery

        assert self._discovery_url is not None
        self._discovery = Discovery(self._discovery_url)
        host, port = self._advertise or ("127.0.0.1", 0)
        if host in ("", "0.0.0.0", "::"):
            # Bound to every address: a client elsewhere needs one it can reach.
            host = socket.getfqdn()
        metadata = {
            "scheme": self.scheme,
            "generators": str(self.generator_count),
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
            endpoints=["ids", f"ids:{self.scheme}"],
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
        generators, self.generators = self.generators, []
        self.released = [_held(generator) for generator in generators]
        for generator in generators:
            await asyncio.to_thread(generator.close)
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

    # -- ASGI entry point ----------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if scope["path"] == "/v1/id" and scope["method"] == "GET" and self._started:
                await self._one_id_fast(scope, send)
            else:
                await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _one_id_fast(self, scope: Scope, send: Send) -> None:
        """``GET /v1/id``, the route load is made of, without the general dispatch.

        The same checks as :meth:`_http` (no body, the token) in the same order;
        anything but an issued ID goes back through :meth:`_http`'s error path.
        """
        started = time.perf_counter()
        try:
            self._check_body(scope)
            if self._token_required:
                self._check_token(scope)
            # The first try of _mint_one, inlined: an await costs as much as minting.
            value = next(self._cycle).generate_nowait()
            text = str(value) if value is not None else await self._mint_one()
        except HttpError as error:
            status, headers, body = self._error(error)
        except GeneratorError as error:
            status, headers, body = self._error(_unavailable(error))
        except Exception as error:
            status, headers, body = self._internal_error(scope, error)
        else:
            self.metrics.ids_served += 1
            status, headers, body = 200, _TEXT, f"{text}\n".encode()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self.metrics.observe("/v1/id", status, time.perf_counter() - started)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        path: str = scope["path"]
        route = "other"
        try:
            handler, route = self._resolve(scope)
            if scope["method"] == "HEAD":
                handler = self._head_routes.get(path, handler)
            if path.startswith("/v1/"):
                self._check_token(scope)
                if not self._started:
                    await self.startup()
            status, headers, body = await handler(scope)
        except HttpError as error:
            status, headers, body = self._error(error)
        except Exception as error:
            status, headers, body = self._internal_error(scope, error)
        if scope["method"] == "HEAD":
            body = b""
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        self.metrics.observe(route, status, time.perf_counter() - started)

    def _resolve(self, scope: Scope) -> tuple[Handler, str]:
        """The handler and metrics label for a request, or an ``HttpError``."""
        if scope["method"] not in ("GET", "HEAD"):
            raise HttpError(
                405,
                "method not allowed",
                f"{scope['method']} is not supported; every route answers GET",
                [(b"allow", b"GET, HEAD")],
            )
        self._check_body(scope)
        path: str = scope["path"]
        handler = self._routes.get(path)
        if handler is not None:
            return handler, path
        if path.startswith("/v1/decode/"):
            return self._decode, "/v1/decode"
        if path.startswith("/static/"):
            return self._static, "/static"
        raise HttpError(404, "not found", f"no route {path!r}; see /openapi.json")

    def _internal_error(self, scope: Scope, error: Exception) -> tuple[int, list[Any], bytes]:
        """The last resort: a bug is a 500, logged with its traceback, answered in JSON."""
        log.error("unexpected error on %s %s", scope["method"], scope["path"], exc_info=error)
        return self._error(HttpError(500, "internal error", f"{type(error).__name__}: {error}"))

    @staticmethod
    def _error(error: HttpError) -> tuple[int, list[Any], bytes]:
        body = json.dumps({"error": error.error, "detail": error.detail}).encode()
        return error.status, [*_JSON, *error.headers], body

    @staticmethod
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

    def _check_token(self, scope: Scope) -> None:
        if not self._token_required:
            return
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

    # -- minting ---------------------------------------------------------------------------------
    async def _mint_one(self) -> str:
        # The next generator in turn, or the first after it that can issue:
        # a generator whose claim is in doubt is passed over, not waited for.
        try:
            for _ in range(len(self.generators)):
                generator = next(self._cycle)
                value = generator.generate_nowait()
                if value is not None:
                    return str(value)
                if self._usable(generator):
                    return str(await generator.agenerate())
        except GeneratorError as error:
            raise _unavailable(error) from error
        raise HttpError(503, "unavailable", self._why_unavailable())

    async def _mint_many(self, count: int) -> list[str]:
        usable = [g for g in self.generators if self._usable(g)]
        if not usable:
            raise HttpError(503, "unavailable", self._why_unavailable())
        share, extra = divmod(count, len(usable))
        counts = [share + (1 if index < extra else 0) for index in range(len(usable))]
        try:
            batches = await asyncio.gather(
                *(g.abatch(n) for g, n in zip(usable, counts, strict=True) if n)
            )
        except GeneratorError as error:
            raise _unavailable(error) from error
        return [text for batch in batches for text in batch.texts()]

    @staticmethod
    def _usable(generator: TickGenerator[Any]) -> bool:
        claim = generator.claim
        return claim is None or claim.grant() is not None

    def _why_unavailable(self) -> str:
        """Why no ID can be issued: each reason once, with the identities it stops."""
        if not self.generators:
            return "the server holds no generator (it is starting or stopping)"
        stopped: dict[tuple[str, str, str], list[str]] = {}
        for generator in self.generators:
            claim = _claim_of(generator)
            if claim is not None and claim.grant() is None:
                state, problem = _claim_state(claim)
                stopped.setdefault((claim.description, state, problem), []).append(
                    _identity(generator)
                )
        if not stopped:
            return "no generator can issue"
        return "no usable claim: " + "; ".join(
            f"{where} ({', '.join(identities)}) {state}: {problem}"
            for (where, state, problem), identities in stopped.items()
        )

    def can_issue(self) -> bool:
        """Whether an ID could be issued now (some generator's claim lets it)."""
        return any(self._usable(g) for g in self.generators)

    async def _watch_issuing(self) -> None:
        """Log once when the server stops being able to issue IDs, and once when it can again.

        Also says when the certificate served comes near its expiry.
        """
        issuing = True
        while True:
            await asyncio.sleep(ISSUING_CHECK_S)
            self.credentials.check_expiry()
            if not self.generators:
                continue  # starting or stopping: not a claim's doing
            now = self.can_issue()
            if now == issuing:
                continue
            issuing = now
            if now:
                log.info("IDs are issued again: a claim is usable")
            else:
                log.warning("IDs cannot be issued (answering 503): %s", self._why_unavailable())

    # -- routes -------------------------------------------------------------------------------
    async def _one_id(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        text = await self._mint_one()
        self.metrics.ids_served += 1
        return 200, _TEXT, f"{text}\n".encode()

    async def _one_id_head(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        """What ``GET /v1/id`` would answer now, without issuing an ID."""
        self._check_can_issue()
        return 200, _TEXT, b""

    async def _many_ids_head(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        self._count(_query(scope).get("count", ["1"]))
        self._check_can_issue()
        return 200, _JSON, b""

    def _check_can_issue(self) -> None:
        if not self.can_issue():
            raise HttpError(503, "unavailable", self._why_unavailable())

    async def _many_ids(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        query = _query(scope)
        count = self._count(query.get("count", ["1"]))
        ids = await self._mint_many(count)
        self.metrics.ids_served += len(ids)
        # IDs are hex, decimal or base-64url: nothing to escape.
        body = '{"scheme":"%s","ids":["%s"]}' % (self.scheme, '","'.join(ids))  # noqa: UP031
        return 200, _JSON, body.encode()

    def _count(self, values: list[str]) -> int:
        raw = values[-1].strip()
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
            raise HttpError(
                422,
                "invalid count",
                f"count must be a whole number 1..{self.max_count}, got {values[-1]!r}",
            )
        count = int(raw)
        if not 1 <= count <= self.max_count:
            raise HttpError(
                422,
                "invalid count",
                f"count must be 1..{self.max_count} (the server's limit), got {count}",
            )
        return count

    async def _decode(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        raw_path = scope.get("raw_path")
        text = (
            unquote(raw_path.decode("latin-1").split("?", 1)[0][len("/v1/decode/") :])
            if raw_path
            else scope["path"][len("/v1/decode/") :]
        )
        if not text or len(text) > MAX_ID_LENGTH:
            raise HttpError(
                422,
                "invalid ID",
                f"give an ID of 1 to {MAX_ID_LENGTH} characters after /v1/decode/",
            )
        query = _query(scope)
        # A parameter given empty or out of range is an error, not "absent":
        # the OpenAPI document allows only the scheme names and 8..16.
        scheme = query.get("scheme", [None])[-1]
        if scheme is not None and scheme not in SCHEMES:
            raise HttpError(
                422, "invalid scheme", f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}"
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
                    422, "invalid node_bits", f"node_bits must be 8..16, got {node_bits_text!r}"
                )
            node_bits = int(node_bits_text)
        try:
            value = parse_id(text, scheme, node_bits=node_bits)
        except InvalidId as error:
            raise HttpError(422, "invalid ID", str(error)) from None
        return 200, _JSON, json.dumps(value.to_dict()).encode()

    async def _claims(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        body: dict[str, Any] = {
            "scheme": self.scheme,
            # The one the claims came from, named even when it is the default;
            # shown on the page too, so never with its password.
            "coordinator": coordinator_for(self.scheme, self.coordinator, **self._options),
        }
        if self.siblings is None:
            body["claims"] = self.claim_rows()
        else:
            body["claims"], body["workers"] = await self.siblings.claims()
        return 200, _JSON, json.dumps(body).encode()

    def claim_rows(self) -> list[dict[str, Any]]:
        """``/v1/claims`` rows of this process's generators."""
        rows = []
        for generator in self.generators:
            claim = _claim_of(generator)
            row: dict[str, Any] = {"identity": _identity(generator)}
            node_bits = getattr(generator, "node_bits", None)
            if node_bits is not None:
                row["node_bits"] = node_bits  # needed to decode elastic64 IDs
            if claim is None:
                row.update(state="static", usable=True)
            else:
                grant = claim.last_grant
                usable = claim.grant() is not None
                state, problem = _claim_state(claim)
                row.update(
                    state=state,
                    usable=usable,
                    high_water_mark_ms=grant.ceiling_ms if grant else None,
                    coordinator=claim.description,
                    problem=None if usable else problem,
                )
            rows.append(row)
        return rows

    async def _services(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        if self._discovery is None:
            body: dict[str, Any] = {"services": {}, "endpoints": {}, "configured": False}
        else:
            try:
                body = await asyncio.to_thread(self._discovery.snapshot)
            except IdmintError as error:
                raise HttpError(503, "discovery unavailable", str(error)) from None
            body["configured"] = True
        return 200, _JSON, json.dumps(body).encode()

    async def _livez(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        # Answering at all is the proof: a lost claim makes the server unready, not dead.
        return 200, _JSON, self._ok

    @property
    def _ok(self) -> bytes:
        """A probe's 200 body; a worker names itself (probes describe the worker answering)."""
        if self.siblings is None:
            return b'{"status":"ok"}'
        return json.dumps({"status": "ok", "worker": self.siblings.index}).encode()

    async def _readyz(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        if not self._started:
            try:
                await self.startup()
            except IdmintError as error:
                raise HttpError(503, "unavailable", str(error)) from None
        if self.can_issue():
            return 200, _JSON, self._ok
        raise HttpError(503, "unavailable", self._why_unavailable())

    async def _metrics(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        headers = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
        if self.siblings is not None:
            return 200, headers, (await self.siblings.render_metrics()).encode()
        return 200, headers, self.metrics.render().encode()

    async def _openapi_json(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        return 200, _JSON, self._openapi

    async def _page(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        return self._static_file(scope, "index.html")

    async def _static(self, scope: Scope) -> tuple[int, list[Any], bytes]:
        return self._static_file(scope, scope["path"][len("/static/") :])

    def _static_file(self, scope: Scope, name: str) -> tuple[int, list[Any], bytes]:
        """A file of the page, with its ETag; 304 when the browser's copy is current."""
        suffix = name[name.rfind(".") :] if "." in name else ""
        if not _STATIC_NAME.fullmatch(name) or suffix not in _STATIC_TYPES:
            raise HttpError(404, "not found", f"no static file {name!r}")
        cached = self._static_files.get(name)
        if cached is None:
            try:
                data = (
                    resources.files("idmint.server").joinpath("static").joinpath(name).read_bytes()
                )
            except (FileNotFoundError, IsADirectoryError):
                raise HttpError(404, "not found", f"no static file {name!r}") from None
            etag = b'"' + hashlib.sha256(data).hexdigest()[:32].encode() + b'"'
            cached = self._static_files[name] = (data, etag)
        data, etag = cached
        headers = [(b"etag", etag), (b"cache-control", _STATIC_CACHE)]
        if _etag_matches(scope, etag):
            return 304, headers, b""
        return 200, [(b"content-type", _STATIC_TYPES[suffix]), *headers], data

    # -- metrics read on scrape -------------------------------------------------------------------
    def _generator_families(self) -> list[Family]:
        """The generators' and claims' counts, read from them on each scrape."""

        def per_generator(read: Callable[[TickGenerator[Any]], float]) -> Callable[[], Samples]:
            return lambda: [
                (_generator_labels(slot, g), read(g)) for slot, g in enumerate(self.generators)
            ]

        def per_claim(read: Callable[[Claim], float]) -> Callable[[], Samples]:
            # Only the slot: a re-claim may change the identity, and a loss counted
            # under the old identity's series would vanish with it.
            def samples() -> Samples:
                return [
                    ({"slot": str(slot)}, read(claim))
                    for slot, g in enumerate(self.generators)
                    if (claim := _claim_of(g)) is not None
                ]

            return samples

        return [
            Family(
                "idmint_ids_issued_total",
                "counter",
                "IDs issued by the server's generators.",
                per_generator(lambda g: g.issued),
            ),
            Family(
                "idmint_clock_waits_total",
                "counter",
                "Waits for the clock (tick used up or clock behind).",
                per_generator(lambda g: g.clock_waits),
            ),
            Family(
                "idmint_clock_steps_back_total",
                "counter",
                "Times the clock was seen behind the newest tick.",
                per_generator(lambda g: g.clock_steps_back),
            ),
            Family(
                "idmint_claim_usable",
                "gauge",
                "1 while the generator's claim lets it issue IDs.",
                per_generator(lambda g: int(self._usable(g))),
            ),
            Family(
                "idmint_claim_renewals_total",
                "counter",
                "Successful claim renewals (each records a new high-water mark).",
                per_claim(lambda claim: claim.renewals),
            ),
            Family(
                "idmint_claim_renewal_failures_total",
                "counter",
                "Claim renewals that failed (coordinator unreachable or slow).",
                per_claim(lambda claim: claim.renewal_failures),
            ),
            Family(
                "idmint_claim_losses_total",
                "counter",
                "Claims found gone while held (session expired, lease revoked).",
                per_claim(lambda claim: claim.losses),
            ),
        ]


def _claim_of(generator: TickGenerator[Any]) -> Claim | None:
    claim = generator.claim
    return claim if isinstance(claim, Claim) else None


_IDENTITY_FIELDS = ("generator", "cluster", "node", "medallion")


def _held(generator: TickGenerator[Any]) -> str:
    """``generator 3 cluster 0 (generator ID claim at local://...)``: what a generator holds."""
    claim = _claim_of(generator)
    identity = _identity(generator)
    return identity if claim is None else f"{identity} ({claim.description})"


def _identity(generator: TickGenerator[Any]) -> str:
    """``generator 0 cluster 0``, ``node 9``, ``medallion 123``: for people (claims JSON)."""
    fields = _identity_fields(generator)
    if not fields:
        return type(generator).__name__
    return " ".join(f"{name} {value}" for name, value in fields.items())


def _identity_fields(generator: TickGenerator[Any]) -> dict[str, str]:
    fields = {}
    for name in _IDENTITY_FIELDS:
        value = getattr(generator, name, None)
        if value is not None:
            fields[name] = str(value)
    return fields


def _generator_labels(slot: int, generator: TickGenerator[Any]) -> dict[str, str]:
    """Metric labels: the generator's place in the server, then its identity's fields."""
    return {"slot": str(slot), **_identity_fields(generator)}


def _claim_state(claim: Claim) -> tuple[str, str]:
    """The state to show and why IDs cannot be issued, agreeing with ``claim.grant()``.

    A claim whose deadline passed with no renewal is still ``active`` in the
    library: nothing has told it otherwise yet. It may still be ours (the
    coordinator may only be slow), and nothing is issued until a round trip
    says so, which is what ``suspended`` means: so it is shown as suspended.
    """
    state = claim.state
    if state is ClaimState.ACTIVE and claim.grant() is None:
        last = claim.problem or "the coordinator has not answered"
        return "suspended", f"no renewal before the claim's deadline; last try: {last}"
    return state.value, claim.problem


def _etag_matches(scope: Scope, etag: bytes) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (weak or strong) or is ``*``."""
    for name, value in scope.get("headers", ()):
        if name == b"if-none-match":
            for listed in value.split(b","):
                candidate = listed.strip()
                if candidate in (b"*", etag) or candidate.removeprefix(b"W/") == etag:
                    return True
    return False


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("idmint")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


def _query(scope: Scope) -> dict[str, list[str]]:
    raw = scope.get("query_string", b"")
    try:
        return parse_qs(raw.decode("latin-1"), keep_blank_values=True, strict_parsing=False)
    except ValueError as error:
        raise HttpError(400, "bad query", str(error)) from None


def _unavailable(error: GeneratorError) -> HttpError:
    if isinstance(error, ClockMovedBackwards):
        return HttpError(503, "clock moved backwards", str(error))
    return HttpError(503, "unavailable", str(error))
