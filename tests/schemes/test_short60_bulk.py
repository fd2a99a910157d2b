"""short60's fast display paths against the definition, digit by digit.

``to_display`` (a table of digit pairs) and ``to_displays`` (the C base-64 codec
over pairs of rotated ints) must give exactly the display string the module
docstring defines: the int's base-64 digits, most significant first, no leading
zero digit, the last two moved to the front. The reference here computes it
the slow way, by repeated division.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from idmint import Short60Generator
from idmint.schemes.short60 import ALPHABET, MAX_VALUE, to_display, to_displays


def reference(value: int) -> str:
    digits = ""
    while True:
        value, digit = divmod(value, 64)
        digits = ALPHABET[digit] + digits
        if not value:
            break
    return digits[-2:] + digits[:-2]


# Where the number of digits changes (leading zero digits), and the ends.
BOUNDARIES = sorted(
    {0, 1, MAX_VALUE, MAX_VALUE - 1}
    | {edge + delta for k in range(1, 11) for edge in [64**k] for delta in (-1, 0, 1)}
    | {(1 << bit) + delta for bit in range(60) for delta in (-1, 0, 1)}
)
BOUNDARIES = [value for value in BOUNDARIES if 0 <= value <= MAX_VALUE]


def test_boundaries_one_by_one_and_in_bulk() -> None:
    expected = [reference(value) for value in BOUNDARIES]
    assert [to_display(value) for value in BOUNDARIES] == expected
    assert to_displays(BOUNDARIES) == expected
    assert to_displays(BOUNDARIES[:-1]) == expected[:-1]  # odd and even counts
    assert to_displays([]) == []


@settings(max_examples=300)
@given(st.lists(st.integers(0, MAX_VALUE), max_size=40))
def test_any_values_in_bulk(values: list[int]) -> None:
    assert to_displays(values) == [reference(value) for value in values]


@settings(max_examples=500)
@given(st.integers(0, MAX_VALUE))
def test_any_value_alone(value: int) -> None:
    assert to_display(value) == reference(value)


def test_batch_texts_are_the_str_of_each_id() -> None:
    batch = Short60Generator(17).batch(1_001)
    assert batch.texts() == [str(value) for value in batch]
