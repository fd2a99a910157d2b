"""pydantic v2 support (install ``idmint[pydantic]``): the value types are field types.

::

    from typing import Annotated
    from pydantic import BaseModel
    from idmint import Elastic64, Muid, Uid64
    from idmint.pydantic import NodeBits

    class Order(BaseModel):
        id: Uid64
        batch: Muid | None = None
        shard_key: Annotated[Elastic64, NodeBits(12)]

    Order.model_validate_json('{"id": "b2c6d5e9c5800000", "shard_key": "75735064375574528"}')

A field takes the value type itself, its text, its int or its bytes (text or a
number in JSON), read with the scheme's own parser; it serializes to the
canonical text in JSON (a string: no JavaScript client loses bits of a 64-bit
number) and stays the value object in Python mode. Its JSON schema is a string
with the scheme's pattern. A malformed ID is a ``ValidationError`` of type
``invalid_id`` whose message is the ``InvalidId`` message.

elastic64 IDs cannot be read without their node-ID width: give it with
:class:`NodeBits` in ``Annotated``. A bare ``Elastic64`` field accepts only
``Elastic64`` values.

The value types' pydantic hooks import the implementation
(:mod:`idmint.schemes._pydantic`) the first time pydantic builds a schema for
them: importing idmint never imports pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# First: it raises MissingExtra, naming the install line, without pydantic.
from idmint.schemes._pydantic import id_core_schema, id_json_schema
from idmint.schemes.elastic64 import Elastic64, check_node_bits

if TYPE_CHECKING:
    from pydantic_core import core_schema

__all__ = ["NodeBits", "id_core_schema", "id_json_schema"]


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
