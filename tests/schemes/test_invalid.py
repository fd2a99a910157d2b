"""Malformed input: every case raises InvalidId (a ValueError) naming the problem."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from idmint.errors import IdmintError, InvalidId
from idmint.schemes import (
    SCHEMES,
    Elastic64,
    Muid,
    Short60,
    Uid64,
    Uid64V1,
    guess_scheme,
    parse_id,
)

MUID = "05D5EAC793E61F17B9F5B9479DF94AC0"
MUID_DASHED = "05D5EAC793E61F-17B9F5B9479DF-94AC0"
UID64 = "ffffffffffeea1bf"  # generator 1307: a valid uid64, not a valid uid64-v1


def expect_invalid(
    call: Callable[[], object], problem: str, *fragments: str, scheme: str | None = None
) -> InvalidId:
    """Run ``call``; it must raise InvalidId with ``problem`` and every fragment in its message."""
    with pytest.raises(InvalidId) as caught:
        call()
    error = caught.value
    assert isinstance(error, ValueError)
    assert isinstance(error, IdmintError)
    assert error.problem == problem, str(error)
    message = str(error)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    if scheme is not None:
        assert error.scheme == scheme
        assert message.startswith(f"invalid {scheme} ID: ")
    return error


def case(label: str, call: Callable[[], object], scheme: str, problem: str, *fragments: str) -> Any:
    return pytest.param(call, scheme, problem, fragments, id=label)


# -- text, bytes and int forms ------------------------------------------------------

FORM_CASES = [
    # uid64 / uid64-v1: 16 hex digits, 8 bytes, 0 <= int < 2**64
    case("uid64-short", lambda: Uid64("ffffffffffeea1b"), "uid64", "length", "expected 16", "15"),
    case("uid64-long", lambda: Uid64("ffffffffffeea1bf0"), "uid64", "length", "expected 16", "17"),
    case("uid64-empty", lambda: Uid64(""), "uid64", "length", "expected 16", "got 0"),
    case("uid64-0x", lambda: Uid64("0x" + UID64), "uid64", "length", "expected 16", "18"),
    case(
        "uid64-bad-char",
        lambda: Uid64("ffffffffffeeg1bf"),
        "uid64",
        "character",
        "'g'",
        "position 12",
    ),
    case(
        "uid64-inner-space",
        lambda: Uid64("ffffffff ffeea1b"),
        "uid64",
        "character",
        "' '",
        "position 8",
    ),
    case(
        "uid64-sign",
        lambda: Uid64("-fffffffffeea1bf"),
        "uid64",
        "character",
        "'-'",
        "position 0",
    ),
    case(
        "uid64-fullwidth-digit",
        lambda: Uid64("\uff11" * 16),
        "uid64",
        "character",
        "position 0",
    ),
    case("uid64-7-bytes", lambda: Uid64(b"\0" * 7), "uid64", "length", "expected 8 bytes", "7"),
    case("uid64-9-bytes", lambda: Uid64(b"\0" * 9), "uid64", "length", "expected 8 bytes", "9"),
    case("uid64-negative", lambda: Uid64(-1), "uid64", "range", "-1", "0..18446744073709551615"),
    case("uid64-2**64", lambda: Uid64(2**64), "uid64", "range", "18446744073709551616"),
    case("uid64-from-int-2**64", lambda: Uid64.from_int(2**64), "uid64", "range", "0.."),
    case("v1-2**64", lambda: Uid64V1(2**64), "uid64-v1", "range", "18446744073709551616"),
    case("v1-short", lambda: Uid64V1("00"), "uid64-v1", "length", "expected 16"),
    # uid64-v1 reserved bits 10..15 (the generator's high bits and the mode flag of uid64)
    case(
        "v1-reserved-text",
        lambda: Uid64V1(UID64),
        "uid64-v1",
        "reserved",
        "reserved bits 10..15",
        UID64,
    ),
    case(
        "v1-reserved-bit10",
        lambda: Uid64V1("0000000000000400"),
        "uid64-v1",
        "reserved",
        "0x0400",
    ),
    case(
        "v1-reserved-mode-flag",
        lambda: Uid64V1(0x1000),
        "uid64-v1",
        "reserved",
        "0x1000",
    ),
    case(
        "v1-reserved-bytes",
        lambda: Uid64V1(bytes.fromhex("000000000000f000")),
        "uid64-v1",
        "reserved",
        "0xf000",
    ),
    case(
        "v1-reserved-from-uid64",
        lambda: Uid64V1(Uid64.build(timestamp_ms=1, generator=64)),
        "uid64-v1",
        "reserved",
        "reserved bits",
    ),
    case(
        "v1-reserved-time-sequential",
        lambda: Uid64V1(Uid64.build(timestamp_ms=1, mode="time-sequential")),
        "uid64-v1",
        "reserved",
        "0x1000",
    ),
    # muid: 32 hex digits or dashed 14-13-5, 16 bytes, 0 <= int < 2**128
    case("muid-31", lambda: Muid(MUID[:-1]), "muid", "length", "expected 32", "31"),
    case("muid-33", lambda: Muid(MUID + "0"), "muid", "length", "expected 32", "33"),
    case("muid-bad-char", lambda: Muid(MUID[:5] + "G" + MUID[6:]), "muid", "character", "'G'", "5"),
    case(
        "muid-dashed-14-13-4",
        lambda: Muid(MUID_DASHED[:-1]),
        "muid",
        "length",
        "14-13-5",
        "14-13-4",
    ),
    case(
        "muid-dashed-13-14-5",
        lambda: Muid("05D5EAC793E61-F17B9F5B9479DF-94AC0"),
        "muid",
        "length",
        "14-13-5",
        "13-14-5",
    ),
    case(
        "muid-dashed-two-groups",
        lambda: Muid("05D5EAC793E61F-17B9F5B9479DF94AC0"),
        "muid",
        "length",
        "14-13-5",
        "14-18",
    ),
    case(
        "muid-dashed-four-groups",
        lambda: Muid("05D5EAC793E61F-17B9F5B9479DF-94AC0-"),
        "muid",
        "length",
        "14-13-5",
        "14-13-5-0",
    ),
    case(
        "muid-dashed-bad-char",
        lambda: Muid("05D5EAC793E61F-17B9F5B9479DZ-94AC0"),
        "muid",
        "character",
        "'Z'",
    ),
    case("muid-15-bytes", lambda: Muid(b"\0" * 15), "muid", "length", "expected 16 bytes"),
    case("muid-negative", lambda: Muid(-1), "muid", "range", "-1"),
    case("muid-2**128", lambda: Muid(2**128), "muid", "range", str(2**128)),
    # short60: 1..10 base-64 characters, canonical, at most 60 bits
    case("s60-empty", lambda: Short60(""), "short60", "length", "1 to 10", "got 0"),
    case("s60-11", lambda: Short60("xinaS8QBhAA"), "short60", "length", "1 to 10", "got 11"),
    case("s60-dot", lambda: Short60("xin.S8QBh"), "short60", "character", "'.'", "position 3"),
    case("s60-plus", lambda: Short60("+inaS8QBh"), "short60", "character", "'+'", "position 0"),
    case("s60-slash", lambda: Short60("xinaS8QB/"), "short60", "character", "'/'", "position 8"),
    case(
        "s60-leading-zero-digit",
        lambda: Short60("AB"),
        "short60",
        "character",
        "not canonical",
        "'B'",
    ),
    case(
        "s60-leading-zero-digit-rotated",
        lambda: Short60("BAA"),  # digits "ABA" = 64, displayed as "BA"
        "short60",
        "character",
        "not canonical",
        "'BA'",
    ),
    case("s60-int-2**60", lambda: Short60(2**60), "short60", "range", "1152921504606846975"),
    case(
        "s60-bytes-2**60",
        lambda: Short60(b"\x10" + b"\0" * 7),
        "short60",
        "range",
        "1152921504606846976",
    ),
    case("s60-negative", lambda: Short60(-1), "short60", "range", "-1"),
    case("s60-7-bytes", lambda: Short60(b"\0" * 7), "short60", "length", "expected 8 bytes"),
    # elastic64: decimal digits, width 8..16, timestamp up to 9999-12-31
    case("e64-letter", lambda: Elastic64("12a4", 8), "elastic64", "character", "'a'", "position 2"),
    case("e64-minus", lambda: Elastic64("-1", 8), "elastic64", "character", "'-'", "position 0"),
    case("e64-plus", lambda: Elastic64("+1", 8), "elastic64", "character", "'+'", "position 0"),
    case("e64-point", lambda: Elastic64("1.0", 8), "elastic64", "character", "'.'", "position 1"),
    case("e64-hex", lambda: Elastic64("0x10", 8), "elastic64", "character", "'x'", "position 1"),
    case("e64-inner-space", lambda: Elastic64("12 34", 8), "elastic64", "character", "' '"),
    case(
        "e64-arabic-indic-digit",
        lambda: Elastic64("\u0661\u0662", 8),
        "elastic64",
        "character",
        "position 0",
    ),
    case("e64-empty", lambda: Elastic64("", 8), "elastic64", "length", "1 to 20"),
    case("e64-21-digits", lambda: Elastic64("1" * 21, 8), "elastic64", "length", "1 to 20", "21"),
    case(
        "e64-over-64-bits",
        lambda: Elastic64(str(2**64), 8),
        "elastic64",
        "range",
        "0..18446744073709551615",
    ),
    case(
        "e64-after-9999",
        lambda: Elastic64(str((253_402_300_800_000) << 16), 8),
        "elastic64",
        "range",
        "9999-12-31",
    ),
    case("e64-width-7", lambda: Elastic64("1", 7), "elastic64", "range", "node_bits", "8..16"),
    case("e64-width-17", lambda: Elastic64("1", 17), "elastic64", "range", "node_bits", "8..16"),
    case("e64-width-0", lambda: Elastic64(1, 0), "elastic64", "range", "node_bits", "8..16"),
    case("e64-width-bool", lambda: Elastic64(1, True), "elastic64", "type", "node_bits", "bool"),
    case(
        "e64-width-str",
        lambda: Elastic64(1, "8"),  # type: ignore[arg-type]
        "elastic64",
        "type",
        "node_bits",
        "str",
    ),
    case(
        "e64-width-none",
        lambda: Elastic64(1, None),
        "elastic64",
        "node_bits",
        "node_bits",
    ),
    case(
        "e64-parse-id-width",
        lambda: parse_id("1", "elastic64", node_bits=17),
        "elastic64",
        "range",
        "8..16",
    ),
    case("e64-7-bytes", lambda: Elastic64(b"\0" * 7, 8), "elastic64", "length", "expected 8"),
    case("e64-negative", lambda: Elastic64(-1, 8), "elastic64", "range", "-1"),
]


@pytest.mark.parametrize(("call", "scheme", "problem", "fragments"), FORM_CASES)
def test_malformed_forms(
    call: Callable[[], object], scheme: str, problem: str, fragments: tuple[str, ...]
) -> None:
    expect_invalid(call, problem, *fragments, scheme=scheme)


# -- wrong input types --------------------------------------------------------------

WRONG_TYPES: list[object] = [None, 1.5, 1.0, [1], {"id": 1}, True, object()]


@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("value", WRONG_TYPES, ids=lambda value: type(value).__name__)
def test_wrong_input_types(scheme: str, value: object) -> None:
    cls: Any = SCHEMES[scheme]
    if cls is Elastic64:
        calls: list[Callable[[], object]] = [
            lambda: Elastic64(value, 8),  # type: ignore[arg-type]
            lambda: Elastic64.parse(value, 8),
        ]
    else:
        calls = [lambda: cls(value), lambda: cls.parse(value)]
    for call in calls:
        error = expect_invalid(call, "type", type(value).__name__, scheme=scheme)
        assert "cannot read an ID from" in str(error)


@pytest.mark.parametrize("scheme", [None, "uid64", "short60"])
@pytest.mark.parametrize("value", [None, 12345, ["ffffffffffeea1bf"]], ids=repr)
def test_parse_id_rejects_non_text_with_invalid_id(scheme: str | None, value: object) -> None:
    expect_invalid(lambda: parse_id(value, scheme), "type")  # type: ignore[arg-type]


# -- fields given to build() --------------------------------------------------------

VALID_FIELDS: dict[str, dict[str, Any]] = {
    "uid64": {"timestamp_ms": 1, "sequence": 0, "generator": 0, "cluster": 0},
    "uid64-v1": {"timestamp_ms": 1, "sequence": 0, "generator": 0, "cluster": 0},
    "elastic64": {"timestamp_ms": 1, "burst": 0, "node": 0, "node_bits": 8},
    "muid": {"timestamp_us": 1, "medallion": 0, "offset": 0},
    "short60": {"timestamp_ms": 1_519_862_400_000, "sequence": 0, "random": 0},
    "uuid7": {"timestamp_ms": 1, "counter": 0, "node": 0, "random": 0},
    "snowflake": {"timestamp_ms": 1_288_834_974_657, "worker": 0, "sequence": 0},
}

# (scheme, field, lowest, highest) with the other fields at VALID_FIELDS
FIELD_RANGES: list[tuple[str, str, int, int]] = [
    ("uid64", "timestamp_ms", 0, 2**42 - 1),
    ("uid64", "sequence", 0, 63),
    ("uid64", "generator", 0, 2047),
    ("uid64", "cluster", 0, 15),
    ("uid64-v1", "timestamp_ms", 0, 2**42 - 1),
    ("uid64-v1", "sequence", 0, 63),
    ("uid64-v1", "generator", 0, 63),
    ("uid64-v1", "cluster", 0, 15),
    ("elastic64", "timestamp_ms", 0, 253_402_300_799_999),
    ("elastic64", "burst", 0, 255),
    ("elastic64", "node", 0, 255),
    ("elastic64", "node_bits", 8, 16),
    ("muid", "timestamp_us", 0, 2**56 - 1),
    ("muid", "medallion", 0, 2**52 - 1),
    ("muid", "offset", 0, 2**20 - 1),
    ("short60", "timestamp_ms", 1_519_862_400_000, 1_519_862_400_000 + 2**42 - 1),
    ("short60", "sequence", 0, 511),
    ("short60", "random", 0, 511),
    ("uuid7", "timestamp_ms", 0, 253_402_300_799_999),
    ("uuid7", "counter", 0, 2**18 - 1),
    ("uuid7", "node", 0, 2**16 - 1),
    ("uuid7", "random", 0, 2**40 - 1),
    ("snowflake", "timestamp_ms", 1_288_834_974_657, 1_288_834_974_657 + 2**41 - 1),
    ("snowflake", "worker", 0, 1023),
    ("snowflake", "sequence", 0, 4095),
]


def build_with(scheme: str, **changes: Any) -> object:
    cls: Any = SCHEMES[scheme]
    return cls.build(**(VALID_FIELDS[scheme] | changes))


def test_valid_fields_are_valid() -> None:
    # Every case below changes one field of these; they must build as they are.
    for scheme in SCHEMES:
        assert build_with(scheme).scheme == scheme  # type: ignore[attr-defined]


@pytest.mark.parametrize(("scheme", "field", "low", "high"), FIELD_RANGES)
def test_field_bounds_are_accepted(scheme: str, field: str, low: int, high: int) -> None:
    for edge in (low, high):
        assert getattr(build_with(scheme, **{field: edge}), field) == edge


@pytest.mark.parametrize(("scheme", "field", "low", "high"), FIELD_RANGES)
def test_field_out_of_range(scheme: str, field: str, low: int, high: int) -> None:
    for bad in (low - 1, high + 1):
        expect_invalid(
            lambda bad=bad: build_with(scheme, **{field: bad}),  # type: ignore[misc]
            "range",
            field,
            str(bad),
            f"{low}..{high}",
            scheme=scheme,
        )


@pytest.mark.parametrize(("scheme", "field", "low", "high"), FIELD_RANGES)
@pytest.mark.parametrize("bad", [True, False, 1.0, float(2**10), "1", None, b"\x01"], ids=repr)
def test_field_of_wrong_type(scheme: str, field: str, low: int, high: int, bad: object) -> None:
    expect_invalid(
        lambda: build_with(scheme, **{field: bad}),
        "type",
        field,
        "must be an integer",
        type(bad).__name__,
        scheme=scheme,
    )


@pytest.mark.parametrize(
    ("node_bits", "node_max", "burst_max"),
    [(8, 255, 255), (9, 511, 127), (11, 2047, 31), (15, 32767, 1), (16, 65535, 0)],
)
def test_elastic64_node_and_burst_ranges_follow_the_width(
    node_bits: int, node_max: int, burst_max: int
) -> None:
    fields = {"timestamp_ms": 1, "node_bits": node_bits}
    built = Elastic64.build(**fields, node=node_max, burst=burst_max)
    assert (built.node, built.burst) == (node_max, burst_max)
    expect_invalid(
        lambda: Elastic64.build(**fields, node=node_max + 1),
        "range",
        "node",
        f"0..{node_max}",
        scheme="elastic64",
    )
    expect_invalid(
        lambda: Elastic64.build(**fields, node=0, burst=burst_max + 1),
        "range",
        "burst",
        f"0..{burst_max}",
        scheme="elastic64",
    )


@pytest.mark.parametrize("scheme", ["uid64", "uid64-v1"])
@pytest.mark.parametrize("mode", ["sideways", "", 1, None, True], ids=repr)
def test_uid64_bad_mode(scheme: str, mode: object) -> None:
    expect_invalid(
        lambda: build_with(scheme, mode=mode), "range", "mode", "'spread'", scheme=scheme
    )


@pytest.mark.parametrize("mode", ["time-sequential", "TIME_SEQUENTIAL"])
def test_uid64_v1_is_always_spread(mode: str) -> None:
    expect_invalid(lambda: build_with("uid64-v1", mode=mode), "range", "spread", scheme="uid64-v1")


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_unknown_field_is_a_type_error(scheme: str) -> None:
    # build() takes keywords only; a misspelt field must not be silently dropped.
    with pytest.raises(TypeError):
        build_with(scheme, colour=1)


# -- guessing the scheme --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "node_bits", "scheme"),
    [
        (MUID, None, "muid"),
        (MUID.lower(), None, "muid"),
        (MUID_DASHED, None, "muid"),
        ("1" * 32, None, "muid"),  # 32 decimal digits: too long for anything but a muid
        (f" {MUID}\n", None, "muid"),
        (UID64, None, "uid64"),
        (UID64.upper(), None, "uid64"),
        ("000000000000000a", None, "uid64"),
        ("xiEAPepqBh", None, "short60"),
        ("g-p2sYZ5kM", None, "short60"),
        ("__________", None, "short60"),
        ("abcdefABCD", None, "short60"),  # hex letters, but not 16 of them
        ("12345", 8, "elastic64"),
        ("1234567890123456", 11, "elastic64"),
        ("16606973185228799999", 16, "elastic64"),  # the last ms of 9999
        (UID64, 8, "uid64"),  # a width does not turn hex into decimal
    ],
)
def test_guess_scheme_unambiguous(text: str, node_bits: int | None, scheme: str) -> None:
    assert guess_scheme(text, node_bits=node_bits) == scheme
    assert parse_id(text, node_bits=node_bits).scheme == scheme


@pytest.mark.parametrize(
    ("text", "readings"),
    [
        ("1234567890123456", ("uid64", "elastic64")),  # 16 decimal digits: hex or decimal
        ("0000000000000000", ("uid64", "elastic64")),
        ("12345", ("short60", "elastic64")),  # short decimal: base 64 or decimal
        ("7", ("short60", "elastic64")),
        ("1234567890", ("short60", "elastic64")),
        ("12345678901", ("elastic64", "snowflake")),  # too long for short60, no width given
        ("1212092628029698048", ("elastic64", "snowflake")),  # a tweet: never guessed
        # Base-64 text shorter than every short60 since 2020: a typo as likely as an ID.
        ("xinaS8QBh", ("short60", "9 characters")),
        ("zzzz", ("short60", "4 characters")),
        ("A", ("short60",)),
        ("abcdef", ("short60",)),
    ],
)
def test_guess_scheme_ambiguous(text: str, readings: tuple[str, ...]) -> None:
    for call in (lambda: guess_scheme(text), lambda: parse_id(text)):
        error = expect_invalid(call, "ambiguous", repr(text), *readings)
        assert error.scheme is None
        assert "scheme" in str(error).split(":", 1)[1]


@pytest.mark.parametrize("text", ["", "   ", "!!", "ffffffffffeea1bf0", "xinaS8QBh.", MUID + "0"])
def test_guess_scheme_shape_of_nothing(text: str) -> None:
    error = expect_invalid(lambda: guess_scheme(text), "format", "shape of no scheme")
    assert error.scheme is None


def test_parse_id_unknown_scheme() -> None:
    expect_invalid(lambda: parse_id(UID64, "uid65"), "scheme", "'uid65'", "uid64, uid64-v1")


def test_parse_id_elastic64_needs_a_width() -> None:
    expect_invalid(
        lambda: parse_id("12345", "elastic64"), "node_bits", "node_bits", scheme="elastic64"
    )
