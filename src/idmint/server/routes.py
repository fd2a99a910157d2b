"""A route, declared once: its path, methods, handler and what ``/openapi.json`` says of it.

The server's list of :class:`Route` (``idmint.server.app.ROUTES``; Starlette's
route list is the model) is all there is of its routes: :class:`Router`
dispatches on it, and :func:`idmint.server.openapi.openapi_document` describes
it. A path ending in a parameter (``/v1/decode/{id}``) takes every path that
starts as it does; ``/v1/*`` routes want the bearer token when the server has
one. A route's metrics label is its path without the parameter
(``/v1/decode``), so a request is counted under its route whatever it is
answered, 405 included; one that names no route is counted as ``other``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from idmint.server.config import ServerConfig

__all__ = ["GUARDED_PREFIX", "UNMATCHED", "HttpError", "Response", "Route", "Router", "Scope"]

Scope = MutableMapping[str, Any]
Headers = list[tuple[bytes, bytes]]
Response = tuple[int, Headers, bytes]
Handler = Callable[[Any, Scope], Awaitable[Response]]
"""``handler(server, scope)``: the server's method, unbound, as the route list names it."""

GUARDED_PREFIX = "/v1/"
"""The routes that want the bearer token (when the server has one), and a started server."""
UNMATCHED = "other"
"""The metrics label of a request that names no route."""


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


@dataclass(frozen=True)
class Route:
    """One route: how it is served, and how ``/openapi.json`` describes it.

    ``head``: the handler for HEAD where it must differ from GET's without the
    body (an ID route, which must issue nothing). ``answers``: what it may
    answer besides 200, 401 and what any request may get. ``parameters``: its
    OpenAPI parameters for a server of this configuration.
    """

    path: str
    handler: Handler
    summary: str
    operation_id: str
    ok: Mapping[str, Any]
    answers: Mapping[str, Any] = field(default_factory=dict)
    parameters: Callable[[ServerConfig], list[dict[str, Any]]] | None = None
    head: Handler | None = None
    methods: tuple[str, ...] = ("GET", "HEAD")
    # Worked out once, from the path: each request reads them.
    prefix: str | None = field(init=False)
    """What a path starts with to be this route's, where its path ends in a parameter."""
    label: str = field(init=False)
    """Its name in the metrics: the path, without its parameter."""
    guarded: bool = field(init=False)
    """Whether it wants the bearer token (when the server has one) and a started server."""

    def __post_init__(self) -> None:
        start = self.path.find("{")
        prefix = None if start < 0 else self.path[:start]
        object.__setattr__(self, "prefix", prefix)
        object.__setattr__(self, "label", self.path if prefix is None else prefix.rstrip("/"))
        object.__setattr__(self, "guarded", self.path.startswith(GUARDED_PREFIX))


class Router:
    """Finds a request's route: its exact path by a dict lookup, else the longest
    parameter route whose start it has."""

    def __init__(self, routes: Sequence[Route]) -> None:
        self.routes = tuple(routes)
        self._exact = {route.path: route for route in self.routes if route.prefix is None}
        self._prefixed = sorted(
            ((route.prefix, route) for route in self.routes if route.prefix is not None),
            key=lambda pair: -len(pair[0]),
        )
        self.methods = tuple(dict.fromkeys(m for route in self.routes for m in route.methods))
        """Every method some route answers: what a request naming no route may use."""
        paths = [route.path for route in self.routes]
        if len(set(paths)) != len(paths):
            raise ValueError(f"a path is declared twice: {sorted(paths)}")

    def match(self, path: str) -> Route | None:
        route = self._exact.get(path)
        if route is not None:
            return route
        for prefix, candidate in self._prefixed:
            if path.startswith(prefix):
                return candidate
        return None
