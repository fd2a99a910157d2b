"""The OpenAPI 3.1 document served at ``/openapi.json``, made from the server's route list.

Each :class:`~idmint.server.routes.Route` says what it answers; this module
adds what every route shares (the answers any request may get, the token) and
the components. The document describes the server that serves it: ``/v1/*``
require the bearer token (``security``, 401) only when the server has one, and
``count``'s maximum is the server's ``max_count``. The helpers here
(:func:`json_answer`, :func:`count_parameters`, ...) are what a route's
description is written with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from idmint.schemes import SCHEMES, Field, IdValue, variant_of
from idmint.server.config import ServerConfig
from idmint.server.routes import Route

__all__ = [
    "INVALID",
    "NOT_FOUND",
    "NOT_MODIFIED",
    "UNAVAILABLE",
    "count_parameters",
    "decode_parameters",
    "error_answer",
    "json_answer",
    "openapi_document",
    "path_parameters",
    "schema_ref",
    "text_answer",
]

_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def error_answer(description: str) -> dict[str, Any]:
    """A JSON error answer (``{"error": ..., "detail": ...}``)."""
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/responses/{name}"}


# Answers any request can get, whatever the route: made before or instead of routing.
_ANY_REQUEST = {
    "400": _ref("BadRequest"),
    "408": _ref("RequestTimeout"),
    "413": _ref("ContentTooLarge"),
    "431": _ref("HeaderTooLarge"),
}

_COMMON_RESPONSES = {
    "BadRequest": error_answer(
        "The request is not well-formed HTTP, or its query string is malformed"
    ),
    "Unauthorized": {
        **error_answer("Missing or wrong bearer token"),
        "headers": {
            "WWW-Authenticate": {
                "description": 'Bearer realm="idmint"',
                "schema": {"type": "string"},
            }
        },
    },
    "NotFound": error_answer("No such route or file"),
    "MethodNotAllowed": {
        **error_answer("A method other than GET or HEAD (every route answers both)"),
        "headers": {"Allow": {"description": "GET, HEAD", "schema": {"type": "string"}}},
    },
    "RequestTimeout": error_answer(
        "The request did not arrive in full within the server's request timeout"
    ),
    "ContentTooLarge": error_answer("The request has a body (no route takes one) or is too large"),
    "HeaderTooLarge": error_answer(
        "The request line and headers exceed the server's limit (16 KiB)"
    ),
    "Unavailable": error_answer(
        "IDs cannot be issued now (claim lost, coordinator down, clock behind)"
    ),
}

_STATUS = {
    "type": "object",
    "required": ["status"],
    "properties": {"status": {"type": "string", "const": "ok"}},
}


def _integer(minimum: int, maximum: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def _field_schema(field: Field, wider: list[Field]) -> dict[str, Any]:
    """A decoded field's schema: its choices, or the range that covers it in every scheme."""
    if field.choices:
        return {"type": "string", "enum": list(field.choices)}
    return _integer(min(each.low for each in wider), max(each.high for each in wider))


def _decoded_schemas(config: ServerConfig) -> dict[str, Any]:
    """One schema per family of schemes (uid64 and uid64-v1 share one): every field
    ``idmint decode`` prints for it, and only those, with the value types' ranges
    (in the layout this server mints and reads its scheme's IDs in); a scheme with
    layouts says which (``x-layout``: its parts, which the page draws)."""
    time_field = {
        "type": "string",
        "format": "date-time",
        "description": "When the ID was minted, ISO 8601 UTC",
    }
    families: dict[type[IdValue], list[type[IdValue]]] = {}
    for name, own_type in SCHEMES.items():
        read_as = variant_of(name, config.options) if name == config.scheme else own_type
        families.setdefault(read_as._family, []).append(read_as)
    schemas: dict[str, Any] = {}
    for members in families.values():
        fields = {
            field.name: _field_schema(field, [member.field(field.name) for member in members])
            for field in members[0].fields
            if field.decoded
        }
        properties = {
            "scheme": {"type": "string", "enum": [member.scheme for member in members]},
            "id": {"type": "string", "description": "The canonical text form"},
            "time": time_field,
            **fields,
        }
        schemas[f"Decoded{members[0]._family.__name__}"] = {
            "type": "object",
            "required": list(properties),
            "properties": properties,
            "additionalProperties": False,
            **_layout_of(members[0]),
        }
    return {
        **schemas,
        "Decoded": {
            "description": "What an ID is made of; the fields depend on its scheme",
            "oneOf": [{"$ref": f"#/components/schemas/{name}"} for name in schemas],
        },
    }


def _layout_of(id_type: type[IdValue]) -> dict[str, Any]:
    """``x-layout``: the parts of the layout a scheme with layouts reads IDs in."""
    parts = id_type.variant_parts()
    return {"x-layout": parts} if parts else {}


def _node_bits_schema() -> dict[str, Any]:
    """The widths the schemes that need one (elastic64) are read with."""
    widths = [id_type.field("node_bits") for id_type in SCHEMES.values() if id_type.needs_node_bits]
    return _field_schema(widths[0], widths)


def _claims_schema() -> dict[str, Any]:
    claim = {
        "type": "object",
        "required": ["identity", "state", "usable"],
        "properties": {
            "identity": {"type": "string", "description": "e.g. 'generator 0 cluster 0'"},
            "state": {
                "type": "string",
                "enum": ["static", "claiming", "active", "suspended", "lost", "released"],
                "description": "active exactly when usable; a claim past its deadline "
                "without a renewal is shown as suspended",
            },
            "usable": {"type": "boolean"},
            "node_bits": {"type": "integer"},
            "high_water_mark_ms": {"type": ["integer", "null"]},
            "coordinator": {"type": "string"},
            "problem": {"type": ["string", "null"]},
            "pool": {
                "type": "object",
                "description": "the pool the claim is in, at its last look",
                "properties": {
                    "space": {"type": "string"},
                    "cluster": {"type": "integer"},
                    "size": {"type": "integer"},
                    "free": {"type": "integer"},
                    "seen_ms": {"type": "integer"},
                },
            },
        },
    }
    return {
        "type": "object",
        "required": ["scheme", "coordinator", "claims"],
        "properties": {
            "scheme": {"type": "string", "enum": list(SCHEMES)},
            "coordinator": {"type": ["string", "null"]},
            "time_runs_out_ms": {
                "type": "integer",
                "description": "when the scheme's time field runs out (ms since 1970)",
            },
            "claims": {"type": "array", "items": claim},
        },
    }


def json_answer(description: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """A 200 answer in JSON."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def text_answer(description: str, *media: str) -> dict[str, Any]:
    """A 200 answer of text in these media types."""
    return {
        "description": description,
        "content": {each: {"schema": {"type": "string"}} for each in media},
    }


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


UNAVAILABLE = {"503": _ref("Unavailable")}
NOT_MODIFIED = {"304": {"description": "Not modified: the browser's copy is current"}}
NOT_FOUND = {"404": _ref("NotFound")}
INVALID = "422"


def count_parameters(config: ServerConfig) -> list[dict[str, Any]]:
    """``/v1/ids``'s ``count``, up to the server's ``max_count``."""
    return [
        {
            "name": "count",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1, "maximum": config.max_count, "default": 1},
        }
    ]


def decode_parameters(config: ServerConfig) -> list[dict[str, Any]]:
    """``/v1/decode/{id}``'s: the ID, and the scheme and width to read it with."""
    return [
        *path_parameters("id")(config),
        {
            "name": "scheme",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "enum": list(SCHEMES)},
        },
        {"name": "node_bits", "in": "query", "required": False, "schema": _node_bits_schema()},
    ]


HOLDER = {
    "type": "object",
    "description": "Who held the ID's identity when it was minted (idmint whois)",
    "properties": {
        "host": {"type": "string"},
        "pid": {"type": "integer"},
        "started": {"type": "integer", "description": "process start, ms since 1970 (0: unknown)"},
        "first_ms": {"type": "integer", "description": "when the claim was made"},
        "last_ms": {"type": "integer", "description": "its last renewal or its release"},
        "pod": {"type": ["string", "null"], "description": "the Kubernetes pod"},
        "floor_ms": {"type": "integer"},
        "ceiling_ms": {"type": "integer"},
    },
    "required": ["host", "pid", "started", "first_ms", "last_ms", "pod"],
}


def path_parameters(name: str) -> Callable[[ServerConfig], list[dict[str, Any]]]:
    """A path's one parameter, a string."""
    return lambda config: [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
    ]


def openapi_document(config: ServerConfig, routes: Iterable[Route]) -> dict[str, Any]:
    """The document of ``routes`` as a server of ``config`` serves them: ``count``'s
    maximum is its ``max_count``; ``/v1/*`` want the token (401) if it has one."""
    paths: dict[str, Any] = {}
    for route in routes:
        guarded = route.guarded and config.requires_token
        operation: dict[str, Any] = {"summary": route.summary, "operationId": route.operation_id}
        if route.parameters is not None:
            operation["parameters"] = route.parameters(config)
        operation["responses"] = {
            "200": route.ok,
            **({"401": _ref("Unauthorized")} if guarded else {}),
            **_ANY_REQUEST,
            **route.answers,
        }
        if guarded:
            operation["security"] = [{"bearerToken": []}]
        # HEAD is GET without the body, for every route: the info says so once.
        paths[route.path] = {
            method.lower(): operation for method in route.methods if method != "HEAD"
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "idmint ID server",
            "version": "1",
            "description": "Mint and decode compact unique IDs over HTTP. IDs are always "
            "strings: JavaScript numbers cannot hold 64-bit integers. Every route answers "
            "HEAD as GET without the body (HEAD /v1/id and /v1/ids issue no ID); any other "
            "method gets 405 (components/responses/MethodNotAllowed), an unknown path 404.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "One of the server's tokens (idmint serve --token-file, "
                    "one a line); required on /v1/* only when the server has one",
                }
            },
            "responses": _COMMON_RESPONSES,
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error", "detail"],
                    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
                },
                "Status": _STATUS,
                "Ids": {
                    "type": "object",
                    "required": ["scheme", "ids"],
                    "properties": {
                        "scheme": {"type": "string", "enum": list(SCHEMES)},
                        "ids": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "Claims": _claims_schema(),
                **_decoded_schemas(config),
            },
        },
    }
