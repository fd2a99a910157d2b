"""pydantic v2 schemas of the value types: the implementation behind :mod:`idmint.pydantic`.

Imported by the value types' pydantic hooks the first time pydantic builds a
schema for them, so it lives beside them and imports nothing above the schemes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idmint.errors import InvalidId, needs_extra
from idmint.schemes import Elastic64, IdValue, Muid, Short60, Uid64, Uid64V1, coerce_id
from idmint.schemes.elastic64 import check_node_bits

with needs_extra("pydantic", "pydantic_core", needed_by="idmint.pydantic"):
    from pydantic_core import PydanticCustomError, core_schema

__all__ = ["NodeBits", "id_core_schema", "id_json_schema"]

_HEX16 = "^[0-9a-fA-F]{16}$"

_JSON_FORMS: dict[type[IdValue], tuple[str, str, str]] = {
    # (pattern, description, example)
    Uid64: (_HEX16, "A uid64 ID: 16 hex digits", "b2c6d5e9c5800000"),
    Uid64V1: (_HEX16, "A uid64-v1 ID: 16 hex digits", "b2c6d5e9c5800000"),
    Elastic64: ("^[0-9]{1,20}$", "An elastic64 ID: decimal digits", "75735064375574528"),
    Muid: (
        "^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{14}-[0-9A-Fa-f]{13}-[0-9A-Fa-f]{5})$",
        "A muid: 32 hex digits (also read: the dashed 14-13-5 form)",
        "05D5EAC793E61F17B9F5B9479DF94AC0",
    ),
    Short60: ("^[A-Za-z0-9_-]{1,10}$", "A short60 ID: 1 to 10 base-64 characters", "xinaS8QBh"),
}


def _validation_error(error: InvalidId) -> PydanticCustomError:
    # The message goes in as context, not as the template: pydantic formats
    # templates, and an ID's text may hold braces.
    return PydanticCustomError(
        "invalid_id",
        "{message}",
        {"message": str(error), "scheme": error.scheme, "problem": error.problem},
    )


def _validator(id_type: type[IdValue], node_bits: int | None) -> Callable[[Any], Any]:
    if id_type is Elastic64 and node_bits is None:

        def validate_bare_elastic64(value: Any) -> Any:
            if isinstance(value, Elastic64):
                return value
            raise _validation_error(
                InvalidId(
                    "elastic64",
                    "decoding needs the node-ID width (node_bits, 8..16) the ID was made "
                    "with; annotate the field as Annotated[Elastic64, NodeBits(width)]",
                    problem="node_bits",
                )
            )

        return validate_bare_elastic64

    where = f"a field of Annotated[Elastic64, NodeBits({node_bits})]"

    def validate(value: Any) -> Any:
        if type(value) is id_type and node_bits is None:
            return value
        try:
            return coerce_id(id_type, value, node_bits, where=where)
        except InvalidId as error:
            raise _validation_error(error) from None

    return validate


def id_core_schema(id_type: type[IdValue], node_bits: int | None = None) -> core_schema.CoreSchema:
    """The pydantic core schema of ``id_type`` (elastic64: of width ``node_bits``)."""
    return core_schema.no_info_plain_validator_function(
        _validator(id_type, node_bits),
        serialization=core_schema.plain_serializer_function_ser_schema(
            str, when_used="json-unless-none", return_schema=core_schema.str_schema()
        ),
    )


def id_json_schema(id_type: type[IdValue], node_bits: int | None = None) -> dict[str, Any]:
    """The JSON schema of ``id_type`` values: a string with the scheme's pattern."""
    pattern, description, example = _JSON_FORMS[id_type]
    if node_bits is not None:
        description += f", node IDs of {node_bits} bits"
    return {"type": "string", "pattern": pattern, "description": description, "examples": [example]}


@dataclass(frozen=True)
class NodeBits:
    """The node-ID width of an elastic64 field: ``Annotated[Elastic64, NodeBits(12)]``.

    Values of another width are refused rather than re-read: the same 64 bits
    name another node under another width.
    """

    width: int

    def __post_init__(self) -> None:
        check_node_bits(self.width)

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        if source is not Elastic64:
            raise TypeError(f"NodeBits applies to Elastic64 fields, not {source!r}")
        return id_core_schema(Elastic64, self.width)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return id_json_schema(Elastic64, self.width)
