"""short60: a 60-bit int shown as a 10-character string (uexky's layout).

::

     59                                         18 17          9 8            0
    +---------------------------------------------+-------------+--------------+
    | timestamp (42 bits, ms since                | sequence    | node         |
    | 2018-03-01T00:00:00Z)                       | (9 bits)    | (9 bits)     |
    +---------------------------------------------+-------------+--------------+

uexky fills the low 9 bits at random per ID; idmint's generators put a node
ID there that no other process holds at the same time (random bits only when
asked for), so the field is called ``node`` (``random`` is the same bits).

The timestamp has 42 bits (60 - 9 - 9), whatever prose elsewhere says of 48;
the bit diagram and the worked example in the tests agree with 42. It lasts until 2157-07-13.

Display form: the int's base-64 digits (alphabet ``A-Z a-z 0-9 - _``), most
significant first, no padding, then the last two characters moved to the
front. The last digits hold the sequence and random bits, so the string looks
random at both ends: ``11093174944930914 -> naS8QBhxi -> xinaS8QBh``.
"""

from __future__ import annotations

from base64 import urlsafe_b64encode
from collections.abc import Sequence
from typing import Final

from idmint.errors import InvalidId, quoted
from idmint.schemes._base import Field, IdValue, check_characters

EPOCH_MS: Final = 1_519_862_400_000  # 2018-03-01T00:00:00Z, uexky's epoch
TIMESTAMP_BITS: Final = 42
SEQUENCE_BITS: Final = 9  # 512 IDs per ms per generator
RANDOM_BITS: Final = 9  # a node ID, or random bits (uexky) that make collisions unlikely
NODE_BITS: Final = RANDOM_BITS

MAX_ELAPSED_MS: Final = (1 << TIMESTAMP_BITS) - 1
MAX_SEQUENCE: Final = (1 << SEQUENCE_BITS) - 1
MAX_RANDOM: Final = (1 << RANDOM_BITS) - 1
MAX_NODE: Final = MAX_RANDOM
TIMESTAMP_SHIFT: Final = SEQUENCE_BITS + RANDOM_BITS
SEQUENCE_SHIFT: Final = RANDOM_BITS
ID_BITS: Final = TIMESTAMP_BITS + SEQUENCE_BITS + RANDOM_BITS
MAX_VALUE: Final = (1 << ID_BITS) - 1
MAX_DISPLAY_LENGTH: Final = 10  # ceil(60 / 6)

ALPHABET: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_DIGIT_VALUES: Final = {char: index for index, char in enumerate(ALPHABET)}


_PAIRS: Final = [first + second for first in ALPHABET for second in ALPHABET]
"""Two display digits for every 12-bit value."""
_TWELVE: Final = (1 << 12) - 1


def to_display(value: int) -> str:
    """The display string of a short60 int (see the module docs)."""
    pairs = _PAIRS
    if value >> 54:  # ten digits, the first not zero: the usual case since 2020
        return (
            pairs[value & _TWELVE]
            + pairs[value >> 48]
            + pairs[value >> 36 & _TWELVE]
            + pairs[value >> 24 & _TWELVE]
            + pairs[value >> 12 & _TWELVE]
        )
    base64 = (
        pairs[value >> 48]
        + pairs[value >> 36 & _TWELVE]
        + pairs[value >> 24 & _TWELVE]
        + pairs[value >> 12 & _TWELVE]
        + pairs[value & _TWELVE]
    ).lstrip("A") or "A"
    return base64[-2:] + base64[:-2]


def to_displays(values: Sequence[int]) -> list[str]:
    """The display strings of many short60 ints, encoded by the C base-64 codec at once.

    The alphabet is base64's URL-safe one, so moving the last two digits to the
    front is a 12-bit rotation of the int, and two rotated 60-bit ints make 15
    bytes that encode to exactly their 20 digits. Ints whose first digit is zero
    (minted before 2020) are shorter and go one by one.
    """
    rotated = [(value & _TWELVE) << 48 | value >> 12 for value in values]
    if len(rotated) & 1:
        rotated.append(1 << 54)  # a filler, dropped below
    taken = iter(rotated)
    raw = b"".join(
        [
            (first << 60 | second).to_bytes(15, "big")
            for first, second in zip(taken, taken, strict=True)
        ]
    )
    text = urlsafe_b64encode(raw).decode("ascii")
    out = [text[start : start + 10] for start in range(0, len(values) * 10, 10)]
    for index, value in enumerate(values):
        if not value >> 54:
            out[index] = to_display(value)
    return out


class Short60(IdValue):
    """A short60 ID; ``str()`` gives the display form.

    >>> str(Short60(11093174944930914))
    'xinaS8QBh'
    """

    __slots__ = ()
    scheme = "short60"
    bits = ID_BITS
    _forms = "a display string, 8 bytes or an int"
    summary = (
        f"60 bits shown as {MAX_DISPLAY_LENGTH} characters: ms, sequence, {NODE_BITS}-bit node; "
        f"{MAX_SEQUENCE + 1} IDs/ms"
    )
    fields = (
        Field.unix_time(low=EPOCH_MS, shift=TIMESTAMP_SHIFT, bits=TIMESTAMP_BITS),
        Field.at("sequence", "position within the ms", SEQUENCE_SHIFT, SEQUENCE_BITS),
        Field.at("node", "node ID", 0, NODE_BITS),
        Field.at(
            "random",
            f"the low {RANDOM_BITS} bits under uexky's name (same as node)",
            0,
            RANDOM_BITS,
            decoded=False,
        ),
        Field("int", "the ID as an int", 0, MAX_VALUE),
    )
    # The fields with a place, as properties (made from the fields above).
    timestamp_ms: int
    sequence: int
    node: int
    random: int
    text_pattern = f"[A-Za-z0-9_-]{{1,{MAX_DISPLAY_LENGTH}}}"
    text_length = MAX_DISPLAY_LENGTH
    json_description = f"A short60 ID: 1 to {MAX_DISPLAY_LENGTH} base-64 characters"
    json_example = "xinaS8QBh"

    @classmethod
    def from_text(cls, text: str) -> Short60:
        """Read the display string (case matters: it is base 64)."""
        stripped = text.strip()
        if not 1 <= len(stripped) <= MAX_DISPLAY_LENGTH:
            raise InvalidId(
                cls.scheme,
                f"expected 1 to {MAX_DISPLAY_LENGTH} characters, got {len(stripped)}: "
                f"{quoted(text)}",
                problem="length",
            )
        check_characters(cls.scheme, stripped, _DIGIT_VALUES, "A-Z, a-z, 0-9, '-' or '_'")
        base64 = stripped[2:] + stripped[:2]
        if len(base64) > 1 and base64[0] == "A":
            # 'A' is the zero digit: the display form never has a leading one, so
            # accepting it would give one ID two spellings.
            raise InvalidId(
                cls.scheme,
                f"{stripped!r} is not canonical: its digits {base64!r} start with the "
                f"zero digit 'A'; the display form of that value is "
                f"{to_display(cls._digits_value(base64))!r}",
                problem="character",
            )
        value = cls._digits_value(base64)
        if value > MAX_VALUE:
            raise InvalidId(
                cls.scheme,
                f"{stripped!r} is {value}, more than 60 bits (largest is {MAX_VALUE})",
                problem="range",
            )
        return cls._trusted(value)

    @staticmethod
    def _digits_value(base64: str) -> int:
        value = 0
        for char in base64:
            value = value * 64 + _DIGIT_VALUES[char]
        return value

    @classmethod
    def build(
        cls, *, timestamp_ms: int, sequence: int = 0, node: int | None = None, random: int = 0
    ) -> Short60:
        """Make the ID; ``timestamp_ms`` counts from the Unix epoch like everywhere else.

        ``node`` and ``random`` name the same low 9 bits; give one of them.
        """
        if node is not None:
            if random:
                raise InvalidId(
                    cls.scheme,
                    "node and random are the same 9 bits; give one of them",
                    problem="range",
                )
            cls._check_fields(node=node)
            random = node
        return cls._trusted(
            cls._packed(timestamp_ms=timestamp_ms, sequence=sequence, random=random)
        )

    @property
    def display(self) -> str:
        return to_display(self._int)

    @classmethod
    def text_of_int(cls, value: int) -> str:
        return to_display(value)

    @classmethod
    def texts_of_ints(cls, values: Sequence[int]) -> list[str]:
        return to_displays(values)
