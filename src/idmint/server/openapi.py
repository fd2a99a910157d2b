"""The OpenAPI 3.1 document served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from idmint.schemes import SCHEMES

__all__ = ["openapi_document"]


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def openapi_document(max_count: int) -> dict[str, Any]:
    unavailable = _error("IDs cannot be issued now (claim lost, coordinator down, clock behind)")
    unauthorized = _error("Missing or wrong bearer token (only when the server has a token)")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "idmint ID server",
            "version": "1",
            "description": "Mint and decode compact unique IDs over HTTP. IDs are always "
            "strings: JavaScript numbers cannot hold 64-bit integers.",
        },
        "paths": {
            "/v1/id": {
                "get": {
                    "summary": "One ID",
                    "operationId": "getId",
                    "responses": {
                        "200": {
                            "description": "The ID in its canonical text form",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": unauthorized,
                        "503": unavailable,
                    },
                }
            },
            "/v1/ids": {
                "get": {
                    "summary": "Several IDs",
                    "operationId": "getIds",
                    "parameters": [
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
                    "responses": {
                        "200": {
                            "description": "The IDs, in order",
                            "content": {
                                "application/json": {"schema": {"$ref": "#/components/schemas/Ids"}}
                            },
                        },
                        "401": unauthorized,
                        "422": _error("count is not a whole number within the limit"),
                        "503": unavailable,
                    },
                }
            },
            "/v1/decode/{id}": {
                "get": {
                    "summary": "What an ID is made of (the JSON of `idmint decode`)",
                    "operationId": "decodeId",
                    "parameters": [
                        {
                            "name": "id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
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
                            "schema": {"type": "integer", "minimum": 8, "maximum": 16},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "The ID's fields",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Decoded"}
                                }
                            },
                        },
                        "401": unauthorized,
                        "422": _error("Not an ID of the scheme, or the scheme cannot be told"),
                    },
                }
            },
            "/v1/claims": {
                "get": {
                    "summary": "The identities this server holds",
                    "operationId": "getClaims",
                    "responses": {
                        "200": {
                            "description": "One row per generator",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "401": unauthorized,
                    },
                }
            },
            "/v1/services": {
                "get": {
                    "summary": "The discovery tree (when the server is given one)",
                    "operationId": "getServices",
                    "responses": {
                        "200": {
                            "description": "Services and endpoints",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "401": unauthorized,
                        "503": _error("Discovery cannot be read now"),
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": "200 while the server can issue IDs",
                    "operationId": "health",
                    "responses": {
                        "200": {
                            "description": "Can issue IDs",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                        "503": unavailable,
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "operationId": "metrics",
                    "responses": {
                        "200": {
                            "description": "Text exposition format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error", "detail"],
                    "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
                },
                "Ids": {
                    "type": "object",
                    "required": ["scheme", "ids"],
                    "properties": {
                        "scheme": {"type": "string", "enum": list(SCHEMES)},
                        "ids": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "Decoded": {
                    "type": "object",
                    "required": ["scheme", "id", "time"],
                    "properties": {
                        "scheme": {"type": "string", "enum": list(SCHEMES)},
                        "id": {"type": "string"},
                        "time": {"type": "string"},
                    },
                    "additionalProperties": True,
                },
            }
        },
    }
