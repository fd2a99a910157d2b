"""muid: 128-bit IDs of microsecond time, a node's medallion and an offset.

::

     127                              72 71                         20 19           0
    +----------------------------------+-----------------------------+--------------+
    | timestamp (56 bits, microseconds | medallion (52 bits)         | offset       |
    | since the Unix epoch, big-endian)| which node made it          | (20 bits)    |
    +----------------------------------+-----------------------------+--------------+
      14 hex digits                      13 hex digits                 5 hex digits

Sorting muids sorts by time, then by node, then by position in a transaction:
a transaction is offset 0 and the objects made in it are offsets 1, 2, ...
Canonical text is 32 upper-case hex digits with no separators (dashes
are left out because many systems that parse hex choke on them); parsing
also takes lower case and the dashed 14-13-5 form people write for reading.
"""

from __future__ import annotations

from typing import Final

from idmint.errors import InvalidId, quoted
from idmint.schemes._base import Field, IdValue, int_from_hex

TIMESTAMP_BITS: Final = 56  # microseconds until the year 4253
MEDALLION_BITS: Final = 52
OFFSET_BITS: Final = 20  # about a million objects per transaction

MAX_TIMESTAMP_US: Final = (1 << TIMESTAMP_BITS) - 1
MAX_MEDALLION: Final = (1 << MEDALLION_BITS) - 1
MAX_OFFSET: Final = (1 << OFFSET_BITS) - 1
TIMESTAMP_SHIFT: Final = MEDALLION_BITS + OFFSET_BITS
MEDALLION_SHIFT: Final = OFFSET_BITS

# Version 1 of the spec has nodes pick medallions at random in this range, so a
# medallion always has exactly 13 hex digits.
RANDOM_MEDALLION_LOW: Final = 1 << 48
RANDOM_MEDALLION_HIGH: Final = (1 << 49) - 1

_DASHED_GROUPS: Final = (14, 13, 5)


class Muid(IdValue):
    """A 128-bit muid.

    >>> Muid("05D5EAC793E61F-17B9F5B9479DF-94AC0").offset
    608960
    """

    __slots__ = ()
    scheme = "muid"
    bits = 128
    _forms = "32 hex digits (or 14-13-5 dashed), 16 bytes or an int"
    summary = "16 bytes: us, random medallion, offset in a transaction"
    fields = (
        Field.unix_time("us", shift=TIMESTAMP_SHIFT, bits=TIMESTAMP_BITS),
        Field.at("medallion", "medallion", MEDALLION_SHIFT, MEDALLION_BITS),
        Field.at("offset", "offset within a transaction", 0, OFFSET_BITS),
    )
    # The fields, as properties (made from the fields above).
    timestamp_us: int
    medallion: int
    offset: int
    text_pattern = "[0-9A-Fa-f]{32}|" + "-".join(f"[0-9A-Fa-f]{{{n}}}" for n in _DASHED_GROUPS)
    text_length = sum(_DASHED_GROUPS) + len(_DASHED_GROUPS) - 1  # the dashed form
    json_description = "A muid: 32 hex digits (also read: the dashed 14-13-5 form)"
    json_example = "05D5EAC793E61F17B9F5B9479DF94AC0"

    @classmethod
    def from_text(cls, text: str) -> Muid:
        stripped = text.strip()
        if "-" in stripped:
            groups = stripped.split("-")
            lengths = tuple(len(group) for group in groups)
            if lengths != _DASHED_GROUPS:
                raise InvalidId(
                    cls.scheme,
                    f"dashed form must have groups of 14-13-5 hex digits, got "
                    f"{'-'.join(str(n) for n in lengths)} in {quoted(stripped)}",
                    problem="length",
                )
            # Check characters where the user typed them, dashes included.
            int_from_hex(cls.scheme, stripped.replace("-", "0"), cls.text_length)
            stripped = "".join(groups)
        return cls._trusted(int_from_hex(cls.scheme, stripped, 32))

    @classmethod
    def build(cls, *, timestamp_us: int, medallion: int, offset: int = 0) -> Muid:
        """Make the muid with these fields; every field is range-checked."""
        return cls._trusted(
            cls._packed(timestamp_us=timestamp_us, medallion=medallion, offset=offset)
        )

    @property
    def dashed(self) -> str:
        """The 14-13-5 form for people to read; not canonical."""
        text = str(self)
        return f"{text[:14]}-{text[14:27]}-{text[27:]}"

    @classmethod
    def text_of_int(cls, value: int) -> str:
        return f"{value:032X}"
