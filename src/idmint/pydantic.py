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

from idmint.schemes._pydantic import NodeBits, id_core_schema, id_json_schema

__all__ = ["NodeBits", "id_core_schema", "id_json_schema"]
