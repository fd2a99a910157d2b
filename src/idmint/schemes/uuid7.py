"""uuid7: RFC 9562 version-7 UUIDs whose uniqueness is claimed, not left to chance.

::

     127                       80 79  76 75     64 63 62 61  56 55       40 39          0
    +---------------------------+------+---------+-----+------+-----------+-------------+
    | unix_ts_ms (48 bits, ms   | ver  | counter | var | cntr | node      | random      |
    | since the Unix epoch)     | 0111 | 17..6   | 10  | 5..0 | (16 bits) | (40 bits)   |
    +---------------------------+------+---------+-----+------+-----------+-------------+
      RFC 9562: unix_ts_ms        ver    rand_a    var   rand_b (62 bits) ----------------

RFC 9562 fixes the time, the version and the variant; the 74 other bits
(``rand_a`` and ``rand_b``) are the generator's to fill. idmint fills them as:

* **counter** (18 bits: all of ``rand_a`` and the top 6 bits of ``rand_b``):
  RFC 9562 section 6.2 *Method 1*, a fixed-length dedicated counter, reset to
  0 at each new millisecond and incremented by one for each UUID. 2**18 =
  262,144 UUIDs per ms per generator; a generator that uses them up waits for
  the next millisecond (it never rolls the time forward nor reuses a value),
  so one generator's UUIDs strictly increase.
* **node** (16 bits): the generator's identity, claimed like every idmint
  identity (host pool, ZooKeeper, etcd, PostgreSQL, Redis, static) in its own
  space, so no two running generators hold the same one. (ms, node, counter)
  is then distinct for every UUID minted anywhere: two generators never mint
  the same UUID, by construction, whatever the random bits are.
* **random** (40 bits): fresh from the operating system's CSPRNG for every
  UUID, so that UUIDs are not guessable from their neighbours (RFC 9562
  section 6.9 asks for that); they never carry uniqueness.

Decoding reads the time from any version-7 UUID. The counter, node and random
fields are idmint's layout: in a UUIDv7 minted elsewhere (Python 3.14's
``uuid.uuid7()``, PostgreSQL 18's ``uuidv7()``, uuid-utils) those bits are
that generator's own (mostly random) and mean nothing as fields.

Text: the canonical dashed lowercase form (``uuid.UUID``'s ``str()``); parsing
also takes upper case, braces, a ``urn:uuid:`` prefix and 32 hex digits without
dashes, as ``uuid.UUID`` does. ``Uuid7(uuid.UUID(...))``, ``Uuid7.from_uuid``
and ``.uuid`` convert to and from ``uuid.UUID``; ``.int`` is the same int.
"""

from __future__ import annotations

import uuid as _uuid
from typing import Final

from idmint.errors import InvalidId, quoted
from idmint.schemes._base import (
    LAST_DATETIME_MS,
    Field,
    IdValue,
    check_representable,
    int_from_hex,
)

TIMESTAMP_BITS: Final = 48  # RFC 9562's unix_ts_ms
TIMESTAMP_SHIFT: Final = 80
VERSION: Final = 7
VERSION_SHIFT: Final = 76
VARIANT: Final = 0b10  # RFC 9562's variant (the "10xx" of the 17th hex digit)
VARIANT_SHIFT: Final = 62
# The counter takes rand_a (12 bits), as RFC 9562 section 6.2 Method 1 says it
# should, and 6 of rand_b's top bits, as it allows: 2**12 = 4,096 per ms would
# make a Python loop wait for the clock every ms; 2**18 is beyond any rate one
# process reaches, and still leaves room for a 16-bit node and 40 random bits.
COUNTER_BITS: Final = 18
COUNTER_HIGH_BITS: Final = 12  # rand_a
COUNTER_HIGH_SHIFT: Final = 64
COUNTER_LOW_BITS: Final = COUNTER_BITS - COUNTER_HIGH_BITS  # top of rand_b
COUNTER_LOW_SHIFT: Final = 56
# 65,536 nodes: as many as elastic64's widest fleet; a claimed identity needs no
# more, since only generators alive at the same time must differ.
NODE_BITS: Final = 16
NODE_SHIFT: Final = 40
# What is left: 40 bits, about a trillion guesses per (ms, node, counter).
RANDOM_BITS: Final = 40

MAX_COUNTER: Final = (1 << COUNTER_BITS) - 1
MAX_NODE: Final = (1 << NODE_BITS) - 1
MAX_RANDOM: Final = (1 << RANDOM_BITS) - 1
# 48 bits of ms would reach year 10889, but datetime stops at 9999.
MAX_TIMESTAMP_MS: Final = LAST_DATETIME_MS

VERSION_VARIANT_BITS: Final = VERSION << VERSION_SHIFT | VARIANT << VARIANT_SHIFT
"""The bits every version-7 UUID has set, and the only ones."""
VERSION_VARIANT_MASK: Final = 0xF << VERSION_SHIFT | 0b11 << VARIANT_SHIFT
_COUNTER_LOW_MASK: Final = (1 << COUNTER_LOW_BITS) - 1
_COUNTER_HIGH_MASK: Final = (1 << COUNTER_HIGH_BITS) - 1

_URN_PREFIX: Final = "urn:uuid:"
_DASHED_GROUPS: Final = (8, 4, 4, 4, 12)
_DASHED_LENGTH: Final = sum(_DASHED_GROUPS) + len(_DASHED_GROUPS) - 1


def counter_bits(counter: int) -> int:
    """``counter`` where it lies in a UUID: its high 12 bits in rand_a, its low 6 atop rand_b."""
    return (counter >> COUNTER_LOW_BITS) << COUNTER_HIGH_SHIFT | (
        counter & _COUNTER_LOW_MASK
    ) << COUNTER_LOW_SHIFT


def dashed(value: int) -> str:
    """The canonical 8-4-4-4-12 lowercase text of a 128-bit int."""
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


class Uuid7(IdValue):
    """A version-7 UUID (RFC 9562) in idmint's layout.

    >>> Uuid7("017F22E2-79B0-7CC3-98C4-DC0C0C07398F").timestamp_ms
    1645557742000
    """

    __slots__ = ()
    scheme = "uuid7"
    bits = 128
    _forms = "a UUID (dashed, 32 hex digits, braces or urn:uuid:), 16 bytes, an int or a uuid.UUID"
    summary = (
        f"16 bytes, RFC 9562 version 7: ms, counter, claimed node, random; {MAX_COUNTER + 1} IDs/ms"
    )
    fields = (
        Field.unix_time(high=MAX_TIMESTAMP_MS, shift=TIMESTAMP_SHIFT, bits=TIMESTAMP_BITS),
        Field(
            "counter",
            "position within the ms (idmint's layout)",
            0,
            MAX_COUNTER,
        ),
        Field.at(
            "node",
            "node ID (idmint's layout)",
            NODE_SHIFT,
            NODE_BITS,
        ),
        Field.at("random", "random bits", 0, RANDOM_BITS),
    )
    fixed_bits = (VERSION_VARIANT_MASK, VERSION_VARIANT_BITS)
    # The fields that stand as they are, as properties (made from the fields above).
    timestamp_ms: int
    node: int
    random: int
    text_length = len(_URN_PREFIX) + _DASHED_LENGTH
    # Written for JSON Schema too (ECMA 262 has no inline flags).
    text_pattern = (
        "(?:[uU][rR][nN]:[uU][uU][iI][dD]:)?[{]?(?:[0-9a-fA-F]{32}|"
        + "-".join(f"[0-9a-fA-F]{{{n}}}" for n in _DASHED_GROUPS)
        + ")[}]?"
    )
    json_description = "A version-7 UUID (RFC 9562): 8-4-4-4-12 hex digits"
    json_example = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"

    @classmethod
    def parse(cls, value: object) -> Uuid7:
        """Read a UUID from its text, its 16 bytes, its int, a ``uuid.UUID`` or a ``Uuid7``."""
        if isinstance(value, _uuid.UUID):
            return cls.from_uuid(value)
        result: Uuid7 = super().parse(value)
        return result

    @classmethod
    def from_uuid(cls, value: _uuid.UUID) -> Uuid7:
        """The ``uuid.UUID`` ``value``, which must be of version 7."""
        return cls.from_int(value.int)

    @classmethod
    def from_text(cls, text: str) -> Uuid7:
        """Read the dashed form, 32 hex digits, ``{...}`` or ``urn:uuid:...`` (either case)."""
        stripped = text.strip()
        digits = stripped
        if digits[: len(_URN_PREFIX)].lower() == _URN_PREFIX:
            digits = digits[len(_URN_PREFIX) :]
        elif digits.startswith("{") and digits.endswith("}"):
            digits = digits[1:-1]
        if "-" in digits:
            lengths = tuple(len(group) for group in digits.split("-"))
            if lengths != _DASHED_GROUPS:
                raise InvalidId(
                    cls.scheme,
                    "a dashed UUID has groups of 8-4-4-4-12 hex digits, got "
                    f"{'-'.join(str(n) for n in lengths)} in {quoted(stripped)}",
                    problem="length",
                )
            digits = digits.replace("-", "")
        return cls._checked(int_from_hex(cls.scheme, digits, 32))

    @classmethod
    def _checked(cls, value: int) -> Uuid7:
        version = value >> VERSION_SHIFT & 0xF
        if version != VERSION:
            raise InvalidId(
                cls.scheme,
                f"{dashed(value)} is a version-{version} UUID, not version 7",
                problem="version",
            )
        variant = value >> VARIANT_SHIFT & 0b11
        if variant != VARIANT:
            raise InvalidId(
                cls.scheme,
                f"{dashed(value)} has variant bits {variant:02b}, not RFC 9562's 10",
                problem="variant",
            )
        check_representable(cls.scheme, value >> TIMESTAMP_SHIFT)
        return cls._trusted(value)

    @classmethod
    def build(cls, *, timestamp_ms: int, counter: int = 0, node: int = 0, random: int = 0) -> Uuid7:
        """Make the UUID with these fields; every field is range-checked."""
        cls._check_fields(counter=counter)
        packed = cls._packed(timestamp_ms=timestamp_ms, node=node, random=random)
        return cls._checked(packed | counter_bits(counter) | VERSION_VARIANT_BITS)

    @property
    def counter(self) -> int:
        """idmint's counter: the UUID's position within its ms on its generator."""
        value = self._int
        return (value >> COUNTER_HIGH_SHIFT & _COUNTER_HIGH_MASK) << COUNTER_LOW_BITS | (
            value >> COUNTER_LOW_SHIFT & _COUNTER_LOW_MASK
        )

    @property
    def uuid(self) -> _uuid.UUID:
        """The same UUID as a ``uuid.UUID``."""
        return _uuid.UUID(int=self._int)

    def to_uuid(self) -> _uuid.UUID:
        """The same UUID as a ``uuid.UUID`` (as :attr:`uuid`)."""
        return self.uuid

    @property
    def hex(self) -> str:
        """32 lowercase hex digits, as ``uuid.UUID.hex``."""
        return f"{self._int:032x}"

    @classmethod
    def text_of_int(cls, value: int) -> str:
        return dashed(value)
