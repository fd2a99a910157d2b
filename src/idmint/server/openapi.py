"""The OpenAPI 3.1 document served at ``/openapi.json``.

The document describes the server that serves it: ``/v1/*`` require the bearer
token (``security``, 401) only when the server has one, and ``count``'s maximum
is the server's ``max_count``.
"""

from __future__ import annotations

from typing import Any

from idmint.schemes import SCHEMES, Field, IdValue

__all__ = ["openapi_document"]

_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _error(description: str) -> dict[str, Any]:
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
    "BadRequest": _error("The request is not well-formed HTTP, or its query string is malformed"),
    "Unauthorized": {
        **_error("Missing or wrong bearer token"),
        "headers": {
            "WWW-Authenticate": {
                "description": 'Bearer realm="idmint"',
                "schema": {"type": "string"},
            }
        },
    },
    "NotFound": _error("No such route or file"),
    "MethodNotAllowed": {
        **_error("A method other than GET or HEAD (every route answers both)"),
        "headers": {"Allow": {"description": "GET, HEAD", "schema": {"type": "string"}}},
    },
    "RequestTimeout": _error(
        "The request did not arrive in full within the server's request timeout"
    ),
    "ContentTooLarge": _error("The request has a body (no route takes one) or is too large"),
    "HeaderTooLarge": _error("The request line and headers exceed the server's limit (16 KiB)"),
    "Unavailable": _error("IDs cannot be issued now (claim lost, coordinator down, clock behind)"),
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


def _decoded_schemas() -> dict[str, Any]:
    """One schema per family of schemes (uid64 and uid64-v1 share one): every field
    ``idmint decode`` prints for it, and only those, with the value types' ranges."""
    time_field = {
        "type": "string",
        "format": "date-time",
        "description": "When the ID was minted, ISO 8601 UTC",
    }
    families: dict[type[IdValue], list[type[IdValue]]] = {}
    for id_type in SCHEMES.values():
        families.setdefault(id_type._family, []).append(id_type)
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
        schemas[f"Decoded{members[0].__name__}"] = {
            "type": "object",
            "required": list(properties),
            "properties": properties,
            "additionalProperties": False,
        }
    return {
        **schemas,
        "Decoded": {
            "description": "What an ID is made of; the fields depend on its scheme",
            "oneOf": [{"$ref": f"#/components/schemas/{name}"} for name in schemas],
        },
    }


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
        },
    }
    return {
        "type": "object",
        "required": ["scheme", "coordinator", "claims"],
        "properties": {
            "scheme": {"type": "string", "enum": list(SCHEMES)},
            "coordinator": {"type": ["string", "null"]},
            "claims": {"type": "array", "items": claim},
        },
    }


def openapi_document(max_count: int, *, token: bool = False) -> dict[str, Any]:
    """The document for a server with this ``count`` limit, with or without a token."""
    guarded: dict[str, Any] = (
        {"security": [{"bearerToken": []}]} if token else {}
    )  # on /v1/* operations
    unauthorized = {"401": _ref("Unauthorized")} if token else {}
    unavailable = {"503": _ref("Unavailable")}

    def get(
        summary: str,
        operation_id: str,
        ok: dict[str, Any],
        *,
        v1: bool,
        extra: dict[str, Any] | None = None,
        parameters: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        operation: dict[str, Any] = {"summary": summary, "operationId": operation_id}
        if parameters:
            operation["parameters"] = parameters
        operation["responses"] = {
            "200": ok,
            **(unauthorized if v1 else {}),
            **_ANY_REQUEST,
            **(extra or {}),
        }
        if v1:
            operation.update(guarded)
        return {"get": operation}

    def json_ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {"description": description, "content": {"application/json": {"schema": schema}}}

    def schema_ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{name}"}

    invalid = "422"
    paths = {
        "/v1/id": get(
            "One ID",
            "getId",
            {
                "description": "The ID in its canonical text form",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            v1=True,
            extra=unavailable,
        ),
        "/v1/ids": get(
            "Several IDs",
            "getIds",
            json_ok("The IDs, in order", schema_ref("Ids")),
            v1=True,
            parameters=[
                {
                    "name": "count",
                    "in": "query",
                    "required": False,
                    "schema": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": max_count,
                        "default": 1,
                    },
                }
            ],
            extra={
                invalid: _error("count is not a whole number within the limit"),
                **unavailable,
            },
        ),
        "/v1/decode/{id}": get(
            "What an ID is made of (the JSON of `idmint decode`)",
            "decodeId",
            json_ok("The ID's fields", schema_ref("Decoded")),
            v1=True,
            parameters=[
                {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                {
                    "name": "scheme",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "enum": list(SCHEMES)},
                },
                {
                    "name": "node_bits",
                    "in": "query",
                    "required": False,
                    "schema": _node_bits_schema(),
                },
            ],
            extra={invalid: _error("Not an ID of the scheme, or the scheme cannot be told")},
        ),
        "/v1/claims": get(
            "The identities this server holds",
            "getClaims",
            json_ok("One row per generator", schema_ref("Claims")),
            v1=True,
        ),
        "/v1/services": get(
            "The discovery tree (when the server is given one)",
            "getServices",
            json_ok("Services and endpoints", {"type": "object"}),
            v1=True,
            extra={"503": _error("Discovery cannot be read now")},
        ),
        "/livez": get(
            "200 while the process serves (liveness; a lost claim does not change it)",
            "live",
            json_ok("The process is up", schema_ref("Status")),
            v1=False,
        ),
        "/readyz": get(
            "200 while the server can issue IDs (readiness)",
            "ready",
            json_ok("Can issue IDs", schema_ref("Status")),
            v1=False,
            extra=unavailable,
        ),
        "/healthz": get(
            "The same as /readyz",
            "health",
            json_ok("Can issue IDs", schema_ref("Status")),
            v1=False,
            extra=unavailable,
        ),
        "/metrics": get(
            "Prometheus metrics",
            "metrics",
            {
                "description": "Text exposition format 0.0.4",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            v1=False,
        ),
        "/openapi.json": get(
            "This document",
            "openapi",
            json_ok("OpenAPI 3.1", {"type": "object"}),
            v1=False,
        ),
        "/": get(
            "The web page",
            "page",
            {
                "description": "The page (with ETag; 304 when If-None-Match names it)",
                "content": {"text/html": {"schema": {"type": "string"}}},
            },
            v1=False,
            extra={"304": {"description": "Not modified: the browser's copy is current"}},
        ),
        "/static/{name}": get(
            "A file of the web page (with ETag; 304 when If-None-Match names it)",
            "staticFile",
            {
                "description": "The file",
                "content": {
                    media: {"schema": {"type": "string"}}
                    for media in ("text/html", "text/javascript", "text/css", "image/svg+xml")
                },
            },
            v1=False,
            parameters=[
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            extra={
                "304": {"description": "Not modified: the browser's copy is current"},
                "404": _ref("NotFound"),
            },
        ),
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
                **_decoded_schemas(),
            },
        },
    }
