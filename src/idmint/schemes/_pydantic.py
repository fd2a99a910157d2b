"""pydantic v2 schemas of the value types: the implementation behind :mod:`idmint.pydantic`.

Imported by the value types' pydantic hooks the first time pydantic builds a
schema for them. It reads everything it needs from the value type it is given
(its pattern, example, fields, readers), so it imports nothing of the schemes:
the hooks in ``_base`` import it, and nothing here imports them back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from idmint.errors import InvalidId, needs_extra

with needs_extra("pydantic", "pydantic_core", needed_by="idmint.pydantic"):
    from pydantic_core import PydanticCustomError, core_schema

__all__ = ["id_core_schema", "id_json_schema"]


IdType = type[Any]
"""An ``idmint.schemes.IdValue`` class; not imported, so that its hooks can import this."""


def _validation_error(error: InvalidId) -> PydanticCustomError:
    # The message goes in as context, not as the template: pydantic formats
    # templates, and an ID's text may hold braces.
    return PydanticCustomError(
        "invalid_id",
        "{message}",
        {"message": str(error), "scheme": error.scheme, "problem": error.problem},
    )


def _validator(id_type: IdType, node_bits: int | None) -> Callable[[Any], Any]:
    annotated = f"Annotated[{id_type.__name__}, NodeBits({{}})]"
    if id_type.needs_node_bits and node_bits is None:
        widths = id_type.field("node_bits")

        def validate_bare_value(value: Any) -> Any:
            if isinstance(value, id_type):
                return value
            raise _validation_error(
                InvalidId(
                    id_type.scheme,
                    f"decoding needs the node-ID width (node_bits, {widths.low}..{widths.high}) "
                    "the ID was made with; annotate the field as " + annotated.format("width"),
                    problem="node_bits",
                )
            )

        return validate_bare_value

    where = "a field of " + annotated.format(node_bits)

    def validate(value: Any) -> Any:
        if type(value) is id_type and node_bits is None:
            return value
        try:
            return id_type._coerce(value, node_bits, where)
        except InvalidId as error:
            raise _validation_error(error) from None

    return validate


def id_core_schema(id_type: IdType, node_bits: int | None = None) -> core_schema.CoreSchema:
    """The pydantic core schema of ``id_type`` (elastic64: of width ``node_bits``)."""
    return core_schema.no_info_plain_validator_function(
        _validator(id_type, node_bits),
        serialization=core_schema.plain_serializer_function_ser_schema(
            str, when_used="json-unless-none", return_schema=core_schema.str_schema()
        ),
    )


def id_json_schema(id_type: IdType, node_bits: int | None = None) -> dict[str, Any]:
    """The JSON schema of ``id_type`` values: a string with the scheme's pattern."""
    pattern = id_type.text_pattern
    anchored = f"^({pattern})$" if "|" in pattern else f"^{pattern}$"
    description = id_type.json_description
    if node_bits is not None:
        description += f", node IDs of {node_bits} bits"
    return {
        "type": "string",
        "pattern": anchored,
        "description": description,
        "examples": [id_type.json_example],
    }
