"""elastic64: 64-bit IDs whose node-ID width grows with the fleet.

::

     63                                        16 15          w w-1          0
    +--------------------------------------------+-------------+--------------+
    |   timestamp (48 bits, ms since Unix epoch)  | burst       | node ID      |
    |                                             | 16 - w bits | w bits       |
    +--------------------------------------------+-------------+--------------+

The low 16 bits are shared between the node ID and a per-millisecond burst
counter. ``w`` (``node_bits``, 8..16) is as wide as the node IDs in use need:
a fleet of 1,000 nodes needs 11 bits and leaves 5 bits, 32 IDs per ms, for
bursts. The width is not stored in the ID, so decoding needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from idmint.errors import InvalidId
from idmint.schemes._base import (
    LAST_DATETIME_MS,
    Field,
    IdValue,
    check_field,
    check_representable,
    int_from_bytes,
    int_from_decimal,
    reject_type,
)

TIMESTAMP_SHIFT: Final = 16
LOW_BITS: Final = 16  # node ID plus burst counter
MIN_NODE_BITS: Final = 8  # 256 node IDs: one ZooKeeper group
MAX_NODE_BITS: Final = 16  # 65,536 node IDs: all 256 groups
# 48 bits of ms would reach year 10889, but datetime stops at 9999, and an ID
# we cannot show the time of is of no use to anyone.
MAX_TIMESTAMP_MS: Final = LAST_DATETIME_MS
MAX_VALUE: Final = (MAX_TIMESTAMP_MS << TIMESTAMP_SHIFT) | 0xFFFF


def check_node_bits(node_bits: object, scheme: str = "elastic64") -> int:
    return check_field(scheme, "node_bits", node_bits, MIN_NODE_BITS, MAX_NODE_BITS)


class Elastic64(IdValue):
    """An elastic64 ID together with the node-ID width it was minted under.

    Two values are equal only if both the 64 bits and the width agree: the same
    bits read with another width name another node.
    """

    __slots__ = ("_node_bits",)
    _node_bits: int
    scheme = "elastic64"

    bits = 64
    _forms = "decimal digits, 8 bytes or an int, with node_bits"
    needs_node_bits = True
    bound_options = ("node_bits",)
    summary = (
        f"8 bytes: ms, burst, node ID of {MIN_NODE_BITS}..{MAX_NODE_BITS} bits; "
        f"2**({LOW_BITS}-bits) IDs/ms"
    )
    fields = (
        Field.unix_time(high=MAX_TIMESTAMP_MS, shift=TIMESTAMP_SHIFT, bits=64 - TIMESTAMP_SHIFT),
        Field("burst", "position within the ms", 0, (1 << (LOW_BITS - MIN_NODE_BITS)) - 1),
        Field("node", "node ID", 0, (1 << MAX_NODE_BITS) - 1),
        Field("node_bits", "node-ID width", MIN_NODE_BITS, MAX_NODE_BITS),
    )
    text_length = len(str((1 << bits) - 1))
    text_pattern = f"[0-9]{{1,{text_length}}}"
    json_description = "An elastic64 ID: decimal digits"
    json_example = "75735064375574528"

    def __new__(cls, value: object, node_bits: int | None = None) -> Elastic64:
        return cls.parse(value, node_bits)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._int, self._node_bits))

    def _key(self) -> tuple[int, int]:
        return (self._int, self._node_bits)

    # -- parsing ----------------------------------------------------------
    # Every reader takes the width: the same 64 bits name different nodes
    # under different widths. It is optional only in the signature (so the
    # readers match IdValue's); leaving it out is an InvalidId.
    @classmethod
    def parse(cls, value: object, node_bits: int | None = None) -> Elastic64:
        """Read an ID from its decimal text, its 8 bytes, its int, or an ID value."""
        if isinstance(value, Elastic64):
            return cls.from_int(value._int, node_bits)
        if isinstance(value, str):
            return cls.from_text(value, node_bits)
        if isinstance(value, (bytes, bytearray, memoryview)):
            return cls.from_bytes(value, node_bits)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls.from_int(value, node_bits)
        raise reject_type(cls.scheme, value, cls._forms)

    @classmethod
    def _read(cls, value: object, node_bits: int | None) -> Elastic64:
        return cls.parse(value, node_bits)

    @classmethod
    def _read_text(cls, text: str, node_bits: int | None) -> Elastic64:
        return cls.from_text(text, node_bits)

    @classmethod
    def _tick_bounds(cls, count: int, options: Mapping[str, Any]) -> tuple[int, int]:
        if options.get("node_bits") is None:
            raise InvalidId(
                cls.scheme,
                "the bounds of a time need the node-ID width (node_bits, 8..16) of the IDs",
                problem="node_bits",
            )
        return super()._tick_bounds(count, options)

    @classmethod
    def _coerce(cls, value: object, node_bits: int | None, where: str) -> Elastic64:
        if isinstance(value, Elastic64) and value.node_bits != node_bits:
            raise InvalidId(
                cls.scheme,
                f"{where} holds IDs of node_bits={node_bits}, got {value!r}; "
                "its bits would name another node when read back",
                problem="node_bits",
            )
        return cls.parse(value, node_bits)

    @classmethod
    def from_text(cls, text: str, node_bits: int | None = None) -> Elastic64:
        return cls.from_int(int_from_decimal(cls.scheme, text, cls.text_length), node_bits)

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, node_bits: int | None = None
    ) -> Elastic64:
        return cls.from_int(int_from_bytes(cls.scheme, data, cls._byte_length), node_bits)

    @classmethod
    def from_int(cls, value: int, node_bits: int | None = None) -> Elastic64:
        if node_bits is None:
            raise InvalidId(
                cls.scheme,
                "decoding needs the node-ID width (node_bits, 8..16) the ID was made with",
                problem="node_bits",
            )
        check_node_bits(node_bits)
        check_field(cls.scheme, "value", value, 0, cls._max_int)
        check_representable(cls.scheme, value >> TIMESTAMP_SHIFT)
        obj = object.__new__(cls)
        obj._int = value
        obj._node_bits = node_bits
        return obj

    @classmethod
    def build(cls, *, timestamp_ms: int, node: int, node_bits: int, burst: int = 0) -> Elastic64:
        """Make the ID with these fields; every field is range-checked."""
        check_node_bits(node_bits)
        cls._check_fields(timestamp_ms=timestamp_ms)
        check_field(cls.scheme, "node", node, 0, (1 << node_bits) - 1)
        check_field(cls.scheme, "burst", burst, 0, (1 << (LOW_BITS - node_bits)) - 1)
        return cls.from_int(
            (timestamp_ms << TIMESTAMP_SHIFT) | (burst << node_bits) | node, node_bits
        )

    # -- fields (timestamp_ms, which stands as it is, is made from its) -------------
    timestamp_ms: int

    @property
    def node_bits(self) -> int:
        return self._node_bits

    @property
    def burst(self) -> int:
        return (self._int & 0xFFFF) >> self._node_bits

    @property
    def node(self) -> int:
        return self._int & ((1 << self._node_bits) - 1)

    @classmethod
    def text_of_int(cls, value: int) -> str:
        return str(value)

    def __repr__(self) -> str:
        return f"Elastic64({self._int}, node_bits={self._node_bits})"
