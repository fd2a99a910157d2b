"""uid64 and uid64-v1: the eight-byte IDs of java-uniqueid, bit for bit.

uid64 is java-uniqueid's ``IDBuilder`` layout since 3.2 (a mode flag and an
11-bit generator ID)::

     63                                            22 21    16 15 13 12 11      4 3  0
    +------------------------------------------------+--------+-----+--+---------+----+
    |  timestamp (42 bits, ms since the Unix epoch)  |sequence| gen |M | gen     |clu |
    |  SPREAD: bit-reversed   TIME_SEQUENTIAL: as is | 6 bits |10..8|  | 7..0    |ster|
    +------------------------------------------------+--------+-----+--+---------+----+
     byte 0 ... byte 4, top 2 bits of byte 5          byte 5    byte 6            byte 7

uid64-v1 is the layout before the mode flag: the same timestamp and
sequence, always SPREAD, a 6-bit generator in bits 4..9 and bits 10..15 reserved
(zero). For generators 0..63 in SPREAD mode the two layouts give the same bytes,
which is how java-uniqueid kept old IDs valid.

SPREAD mode stores the timestamp *bit-reversed* (Java's ``Long.reverse`` of the
timestamp, whose top 42 bits are then the field). Some descriptions call it
"reverse byte-order"; java-uniqueid reverses bits, and its IDs are what we must match.
Reversal puts the fastest-changing bit of the clock at the top, so consecutive
IDs land far apart in a sorted key space (no hot region in HBase-like stores).
TIME_SEQUENTIAL stores the timestamp as is, so IDs sort by creation time.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from idmint.errors import InvalidId
from idmint.schemes._base import Field, IdValue, int_from_hex

TIMESTAMP_BITS: Final = 42  # ms since 1970 fit until 2109-05-15
SEQUENCE_BITS: Final = 6  # 64 IDs per ms per generator
GENERATOR_BITS: Final = 11  # 2,048 generators per cluster (uid64)
GENERATOR_BITS_V1: Final = 6  # 64 generators per cluster (uid64-v1)
CLUSTER_BITS: Final = 4  # 16 clusters

MAX_TIMESTAMP_MS: Final = (1 << TIMESTAMP_BITS) - 1
MAX_SEQUENCE: Final = (1 << SEQUENCE_BITS) - 1
MAX_GENERATOR: Final = (1 << GENERATOR_BITS) - 1
MAX_GENERATOR_V1: Final = (1 << GENERATOR_BITS_V1) - 1
MAX_CLUSTER: Final = (1 << CLUSTER_BITS) - 1

TIMESTAMP_SHIFT: Final = 22
SEQUENCE_SHIFT: Final = 16
MODE_BIT: Final = 1 << 12
# uid64-v1 kept bits 10..15 at zero; uid64 later used them for the generator's
# high bits and the mode flag.
V1_RESERVED_MASK: Final = 0xFC00


class Mode(str, enum.Enum):
    """How the timestamp is stored: bit-reversed (spread) or as is (time-sequential)."""

    SPREAD = "spread"
    TIME_SEQUENTIAL = "time-sequential"

    @classmethod
    def parse(cls, value: object, scheme: str = "uid64") -> Mode:
        if isinstance(value, Mode):
            return value
        if isinstance(value, str):
            normalised = value.strip().lower().replace("_", "-")
            for mode in cls:
                if mode.value == normalised:
                    return mode
        raise InvalidId(
            scheme,
            f"mode {value!r} is not one of 'spread', 'time-sequential'",
            problem="range",
        )

    def __str__(self) -> str:
        return self.value


def _reverse_table(bits: int) -> list[int]:
    """table[i] is i with its low ``bits`` bits in reverse order."""
    table = [0] * (1 << bits)
    top = 1 << (bits - 1)
    for i in range(1, 1 << bits):
        # i's reversal is its upper part's reversal shifted down, plus its
        # lowest bit moved to the top.
        table[i] = (table[i >> 1] >> 1) | (top if i & 1 else 0)
    return table


REVERSE_14_BITS: Final = _reverse_table(14)


def reverse42(value: int) -> int:
    """Reverse the low 42 bits of ``value`` (bit 0 <-> bit 41): Java's
    ``Long.reverse(value) >>> 22`` for a 42-bit timestamp."""
    rev = REVERSE_14_BITS
    return rev[value & 0x3FFF] << 28 | rev[(value >> 14) & 0x3FFF] << 14 | rev[value >> 28]


def timestamp_field(timestamp_ms: int, mode: Mode) -> int:
    """The top 42 bits of an ID for ``timestamp_ms``, already shifted into place."""
    if mode is Mode.SPREAD:
        return reverse42(timestamp_ms) << TIMESTAMP_SHIFT
    return timestamp_ms << TIMESTAMP_SHIFT


def identity_bits(generator: int, cluster: int, mode: Mode) -> int:
    """The low 16 bits (generator, mode, cluster) as java-uniqueid's IDBuilder packs them."""
    return (
        ((generator << 5) & 0xE000)
        + ((generator & 0xFF) << 4)
        + (MODE_BIT if mode is Mode.TIME_SEQUENTIAL else 0)
        + cluster
    )


def _fields(max_generator: int) -> tuple[Field, ...]:
    return (
        Field.unix_time(high=MAX_TIMESTAMP_MS),
        Field.at("sequence", "position within the ms", SEQUENCE_SHIFT, SEQUENCE_BITS),
        Field("generator", "generator ID", 0, max_generator),
        Field.at("cluster", "cluster ID", 0, CLUSTER_BITS),
        Field("mode", "bit layout", choices=tuple(mode.value for mode in Mode)),
    )


EightByteT = TypeVar("EightByteT", bound="_EightByteId")


class _EightByteId(IdValue):
    """Fields and codec shared by uid64 and uid64-v1."""

    __slots__ = ()

    bits = 64
    _forms = "16 hex digits, 8 bytes or an int"
    text_length = 16
    text_pattern = "[0-9a-fA-F]{16}"
    json_example = "b2c6d5e9c5800000"

    @classmethod
    def from_text(cls, text: str) -> Any:
        """Read the 16-hex-digit text form (either case)."""
        return cls._checked(int_from_hex(cls.scheme, text.strip(), cls.text_length))

    @classmethod
    def text_of_int(cls, value: int) -> str:
        return f"{value:016x}"

    @classmethod
    def build(
        cls: type[EightByteT],
        *,
        timestamp_ms: int,
        sequence: int = 0,
        generator: int = 0,
        cluster: int = 0,
        mode: Mode | str = Mode.SPREAD,
    ) -> EightByteT:
        """Make the ID with these fields; every field is range-checked."""
        cls._check_fields(
            timestamp_ms=timestamp_ms, sequence=sequence, generator=generator, cluster=cluster
        )
        parsed_mode = cls._mode(mode)
        value = (
            timestamp_field(timestamp_ms, parsed_mode)
            | sequence << SEQUENCE_SHIFT
            | identity_bits(generator, cluster, parsed_mode)
        )
        return cls._checked(value)

    @classmethod
    def _mode(cls, mode: object) -> Mode:
        """``mode`` read, where the layout has it (uid64-v1 has spread only)."""
        return Mode.parse(mode, cls.scheme)

    # -- bounds of an instant: the timestamp is reversed in spread mode, so the IDs
    # of one ms still share their top 42 bits, but a span of ms is spread out.
    bound_options = ("mode",)
    _low_bits_mask = (1 << TIMESTAMP_SHIFT) - 1

    @classmethod
    def _tick_bounds(cls, count: int, options: Mapping[str, Any]) -> tuple[int, int]:
        mode = cls._mode(options.get("mode", Mode.SPREAD))
        top = timestamp_field(count, mode)
        if mode is Mode.TIME_SEQUENTIAL:
            return top | MODE_BIT, top | cls._low_bits_mask
        return top, top | cls._low_bits_mask & ~cls._spread_zero_bits

    _spread_zero_bits = MODE_BIT
    """The low bits a spread-mode ID of the layout always has at zero."""

    @classmethod
    def orders_by_time(cls, **options: Any) -> bool:
        """Only time-sequential IDs sort by time (``mode="time-sequential"``)."""
        cls._check_bound_options(options)
        return cls._mode(options.get("mode", Mode.SPREAD)) is Mode.TIME_SEQUENTIAL

    @classmethod
    def _layout_name(cls, options: Mapping[str, Any]) -> str:
        return "spread-mode IDs (their time bit-reversed)"

    # -- fields (sequence and cluster, which stand as they are, are made from theirs) ---
    sequence: int
    cluster: int

    @property
    def mode(self) -> Mode:
        return Mode.TIME_SEQUENTIAL if self._int & MODE_BIT else Mode.SPREAD

    @property
    def timestamp_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        field = self._int >> TIMESTAMP_SHIFT
        return field if self._int & MODE_BIT else reverse42(field)

    @property
    def generator(self) -> int:
        low = self._int & 0xFFFF
        return ((low & 0xE000) >> 5) | ((low >> 4) & 0xFF)

    @property
    def hex(self) -> str:
        return f"{self._int:016x}"


class Uid64(_EightByteId):
    """An eight-byte java-uniqueid ID (layout of 3.2 and later).

    >>> uid = Uid64.build(timestamp_ms=1_700_000_000_000, sequence=3, generator=5)
    >>> Uid64(str(uid)) == uid
    True
    """

    __slots__ = ()
    scheme = "uid64"
    summary = (
        "8 bytes, java-uniqueid's layout: ms, sequence, generator, cluster; "
        f"{MAX_SEQUENCE + 1} IDs/ms"
    )
    fields = _fields(MAX_GENERATOR)
    json_description = "A uid64 ID: 16 hex digits"


class Uid64V1(_EightByteId):
    """An eight-byte ID in java-uniqueid's original layout (generators 0..63, always SPREAD)."""

    __slots__ = ()
    scheme = "uid64-v1"
    summary = f"8 bytes, java-uniqueid's original layout: generators 0..{MAX_GENERATOR_V1} only"
    fields = _fields(MAX_GENERATOR_V1)
    json_description = "A uid64-v1 ID: 16 hex digits"

    @classmethod
    def _checked(cls, value: int) -> Any:
        reserved = value & V1_RESERVED_MASK
        if reserved:
            raise InvalidId(
                cls.scheme,
                f"reserved bits 10..15 are set (0x{reserved:04x} in {value:016x}); "
                "uid64-v1 keeps them zero. A java-uniqueid 3.2+ ID? Decode it as uid64",
                problem="reserved",
            )
        return super()._checked(value)

    _spread_zero_bits = V1_RESERVED_MASK

    @classmethod
    def _mode(cls, mode: object) -> Mode:
        if Mode.parse(mode, cls.scheme) is not Mode.SPREAD:
            raise InvalidId(
                cls.scheme,
                "uid64-v1 IDs are always in spread mode; use uid64 for time-sequential",
                problem="range",
            )
        return Mode.SPREAD
