"""Properties of the value types, checked with hypothesis against slow references."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import pickle
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idmint.errors import InvalidId
from idmint.schemes import (
    SCHEMES,
    Elastic64,
    IdValue,
    Mode,
    Muid,
    Short60,
    Uid64,
    Uid64V1,
    Uuid7,
    parse_id,
)

LAST_DATETIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
SHORT60_EPOCH_MS = 1_519_862_400_000  # 2018-03-01T00:00:00Z

TIMESTAMP_42 = st.integers(0, 2**42 - 1)
UID64_SEQUENCE = st.integers(0, 63)
UID64_CLUSTER = st.integers(0, 15)
UID64_GENERATOR = st.integers(0, 2047)
V1_GENERATOR = st.integers(0, 63)
MUID_TIMESTAMP = st.integers(0, 2**56 - 1)
MEDALLION = st.integers(0, 2**52 - 1)
OFFSET = st.integers(0, 2**20 - 1)
SHORT60_TIMESTAMP = st.integers(SHORT60_EPOCH_MS, SHORT60_EPOCH_MS + 2**42 - 1)
SHORT60_SEQUENCE = st.integers(0, 511)
SHORT60_RANDOM = st.integers(0, 511)
NODE_BITS = st.integers(8, 16)

BYTE_LENGTH = {
    "uid64": 8,
    "uid64-v1": 8,
    "elastic64": 8,
    "muid": 16,
    "short60": 8,
    "uuid7": 16,
    "snowflake": 8,
}
TWITTER_EPOCH_MS = 1_288_834_974_657


@st.composite
def elastic64_fields(draw: st.DrawFn, node_bits: int | None = None) -> dict[str, int]:
    width = draw(NODE_BITS) if node_bits is None else node_bits
    return {
        "timestamp_ms": draw(st.integers(0, LAST_DATETIME_MS)),
        "burst": draw(st.integers(0, 2 ** (16 - width) - 1)),
        "node": draw(st.integers(0, 2**width - 1)),
        "node_bits": width,
    }


FIELDS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "uid64": st.fixed_dictionaries(
        {
            "timestamp_ms": TIMESTAMP_42,
            "sequence": UID64_SEQUENCE,
            "generator": UID64_GENERATOR,
            "cluster": UID64_CLUSTER,
            "mode": st.sampled_from(Mode),
        }
    ),
    "uid64-v1": st.fixed_dictionaries(
        {
            "timestamp_ms": TIMESTAMP_42,
            "sequence": UID64_SEQUENCE,
            "generator": V1_GENERATOR,
            "cluster": UID64_CLUSTER,
        }
    ),
    "elastic64": elastic64_fields(),
    "muid": st.fixed_dictionaries(
        {"timestamp_us": MUID_TIMESTAMP, "medallion": MEDALLION, "offset": OFFSET}
    ),
    "short60": st.fixed_dictionaries(
        {"timestamp_ms": SHORT60_TIMESTAMP, "sequence": SHORT60_SEQUENCE, "random": SHORT60_RANDOM}
    ),
    "uuid7": st.fixed_dictionaries(
        {
            "timestamp_ms": st.integers(0, LAST_DATETIME_MS),
            "counter": st.integers(0, 2**18 - 1),
            "node": st.integers(0, 2**16 - 1),
            "random": st.integers(0, 2**40 - 1),
        }
    ),
    "snowflake": st.fixed_dictionaries(
        {
            "timestamp_ms": st.integers(TWITTER_EPOCH_MS, TWITTER_EPOCH_MS + 2**41 - 1),
            "worker": st.integers(0, 1023),
            "sequence": st.integers(0, 4095),
        }
    ),
}
assert set(FIELDS) == set(SCHEMES)


def build(scheme: str, fields: dict[str, Any]) -> IdValue:
    value: IdValue = SCHEMES[scheme].build(**fields)  # type: ignore[attr-defined]
    return value


def construct(scheme: str, raw: object, node_bits: int | None = None) -> IdValue:
    """Read ``raw`` (text, int or bytes) through the scheme's constructor."""
    if scheme == "elastic64":
        assert node_bits is not None
        return Elastic64(raw, node_bits)  # type: ignore[arg-type]
    value: IdValue = SCHEMES[scheme](raw)  # type: ignore[call-arg]
    return value


def read_fields(value: IdValue, fields: dict[str, Any]) -> dict[str, Any]:
    return {name: getattr(value, name) for name in fields}


# -- round trips -----------------------------------------------------------------


@pytest.mark.parametrize("scheme", list(SCHEMES))
@given(data=st.data())
def test_fields_build_text_parse_round_trip(scheme: str, data: st.DataObject) -> None:
    fields = data.draw(FIELDS[scheme])
    value = build(scheme, fields)
    assert read_fields(value, fields) == fields
    text = str(value)
    again = parse_id(text, scheme, node_bits=fields.get("node_bits"))
    assert type(again) is type(value)
    assert again == value
    assert hash(again) == hash(value)
    assert read_fields(again, fields) == fields
    assert str(again) == text
    assert construct(scheme, text, fields.get("node_bits")) == value


@pytest.mark.parametrize("scheme", list(SCHEMES))
@given(data=st.data())
def test_int_and_bytes_round_trip(scheme: str, data: st.DataObject) -> None:
    fields = data.draw(FIELDS[scheme])
    value = build(scheme, fields)
    node_bits = fields.get("node_bits")
    raw = value.bytes  # type: ignore[attr-defined]
    assert isinstance(raw, bytes)
    assert len(raw) == BYTE_LENGTH[scheme]
    assert int.from_bytes(raw, "big") == int(value) == value.int
    assert construct(scheme, int(value), node_bits) == value
    assert construct(scheme, raw, node_bits) == value
    assert construct(scheme, bytearray(raw), node_bits) == value
    assert read_fields(construct(scheme, raw, node_bits), fields) == fields


@given(fields=FIELDS["uuid7"])
def test_uuid7_is_a_version_7_uuid_in_every_form_uuid_uuid_reads(fields: dict[str, int]) -> None:
    value = Uuid7.build(**fields)
    as_uuid = uuid.UUID(str(value))
    assert (as_uuid.version, as_uuid.variant) == (7, uuid.RFC_4122)
    assert value.uuid == as_uuid == value.to_uuid()
    assert value.int == as_uuid.int
    assert str(value) == str(as_uuid)  # dashed, lowercase
    assert value.hex == as_uuid.hex
    for text in (
        str(as_uuid).upper(),
        "{" + str(as_uuid) + "}",
        "urn:uuid:" + str(as_uuid),
        as_uuid.hex,
    ):
        assert Uuid7(text) == value, text
        assert uuid.UUID(text) == as_uuid  # the same forms uuid.UUID takes
    assert Uuid7("URN:UUID:" + str(as_uuid).upper()) == value  # which takes only urn: in lower case
    assert Uuid7(as_uuid) == Uuid7.from_uuid(as_uuid) == value
    assert parse_id(str(value)) == value  # the dashed form is guessed as uuid7


@given(fields=FIELDS["uuid7"], later=st.integers(1, 2**18))
def test_uuid7_sorts_by_time_then_counter(fields: dict[str, int], later: int) -> None:
    value = Uuid7.build(**fields)
    step = fields["counter"] + later
    if step <= 2**18 - 1:
        after = Uuid7.build(**{**fields, "counter": step, "node": 0, "random": 0})
    else:
        after = Uuid7.build(timestamp_ms=fields["timestamp_ms"] + 1)
    assert value < after
    assert str(value) < str(after)


@given(fields=FIELDS["muid"])
def test_muid_dashed_form_round_trips(fields: dict[str, int]) -> None:
    value = Muid.build(**fields)
    assert Muid(value.dashed) == value
    assert value.dashed.replace("-", "") == str(value)
    assert str(value) == str(value).upper()
    assert len(str(value)) == 32


@given(fields=FIELDS["short60"])
def test_short60_display_is_canonical_base64(fields: dict[str, int]) -> None:
    value = Short60.build(**fields)
    text = str(value)
    assert 1 <= len(text) <= 10
    digits = text[2:] + text[:2]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    reference = 0
    for char in digits:
        reference = reference * 64 + alphabet.index(char)
    assert reference == value.int
    assert len(digits) == 1 or digits[0] != "A"


# -- uid64 layout against slow string-based references ---------------------------


def reference_reverse42(timestamp_ms: int) -> int:
    return int(format(timestamp_ms, "042b")[::-1], 2)


def reference_uid64(
    timestamp_ms: int, sequence: int, generator: int, cluster: int, mode: Mode
) -> int:
    """uid64's layout, spelled out bit by bit: T*42 S*6 GGG M GGGGGGGG CCCC."""
    stamp = reference_reverse42(timestamp_ms) if mode is Mode.SPREAD else timestamp_ms
    gen = format(generator, "011b")
    flag = "1" if mode is Mode.TIME_SEQUENTIAL else "0"
    bits = format(stamp, "042b") + format(sequence, "06b") + gen[:3] + flag + gen[3:]
    bits += format(cluster, "04b")
    assert len(bits) == 64
    return int(bits, 2)


@given(fields=FIELDS["uid64"])
def test_uid64_matches_reference_layout(fields: dict[str, Any]) -> None:
    value = Uid64.build(**fields)
    assert value.int == reference_uid64(**fields)


@given(timestamp_ms=TIMESTAMP_42, sequence=UID64_SEQUENCE)
def test_uid64_spread_stores_the_bit_reversed_timestamp(timestamp_ms: int, sequence: int) -> None:
    spread = Uid64.build(timestamp_ms=timestamp_ms, sequence=sequence, mode=Mode.SPREAD)
    assert spread.int >> 22 == reference_reverse42(timestamp_ms)
    assert spread.timestamp_ms == timestamp_ms
    plain = Uid64.build(timestamp_ms=timestamp_ms, sequence=sequence, mode="time-sequential")
    assert plain.int >> 22 == timestamp_ms
    assert plain.timestamp_ms == timestamp_ms


@given(fields=FIELDS["uid64-v1"])
def test_uid64_with_small_generator_in_spread_mode_is_a_uid64_v1(fields: dict[str, Any]) -> None:
    newer = Uid64.build(**fields, mode=Mode.SPREAD)
    older = Uid64V1.build(**fields)
    assert newer.bytes == older.bytes
    assert str(newer) == str(older)
    assert read_fields(Uid64V1(newer.bytes), fields) == fields
    assert read_fields(Uid64(older.bytes), fields) == fields
    assert int(older) & 0xFC00 == 0  # reserved bits 10..15
    assert older.mode is Mode.SPREAD


# -- ordering --------------------------------------------------------------------


@settings(max_examples=50)
@given(
    generator=UID64_GENERATOR,
    cluster=UID64_CLUSTER,
    stamps=st.lists(st.tuples(TIMESTAMP_42, UID64_SEQUENCE), min_size=2, max_size=20, unique=True),
)
def test_uid64_time_sequential_sorts_by_timestamp_then_sequence(
    generator: int, cluster: int, stamps: list[tuple[int, int]]
) -> None:
    def make(stamp: tuple[int, int]) -> Uid64:
        return Uid64.build(
            timestamp_ms=stamp[0],
            sequence=stamp[1],
            generator=generator,
            cluster=cluster,
            mode=Mode.TIME_SEQUENTIAL,
        )

    values = [make(stamp) for stamp in stamps]
    expected = [make(stamp) for stamp in sorted(stamps)]
    assert sorted(values) == expected
    assert sorted(values, key=str) == expected


@settings(max_examples=50)
def check_order_follows_fields(
    id_type: Any, names: tuple[str, ...], values: list[tuple[int, ...]]
) -> list[Any]:
    """IDs built from ``values`` (of the fields ``names``) sort as the values do; the
    IDs, in that order."""
    built = [id_type.build(**dict(zip(names, each, strict=True))) for each in values]
    expected = [id_type.build(**dict(zip(names, each, strict=True))) for each in sorted(values)]
    assert sorted(built) == expected
    return expected


@given(
    triples=st.lists(
        st.tuples(MUID_TIMESTAMP, MEDALLION, OFFSET), min_size=2, max_size=20, unique=True
    )
)
def test_muid_sorts_by_time_medallion_offset_in_value_and_text(
    triples: list[tuple[int, int, int]],
) -> None:
    expected = check_order_follows_fields(Muid, ("timestamp_us", "medallion", "offset"), triples)
    assert sorted(expected, key=str) == expected


@settings(max_examples=50)
@given(
    data=st.data(),
    node_bits=NODE_BITS,
)
def test_elastic64_sorts_by_timestamp_for_a_fixed_width(
    data: st.DataObject, node_bits: int
) -> None:
    fields = data.draw(st.lists(elastic64_fields(node_bits), min_size=2, max_size=20))
    values = sorted(Elastic64.build(**item) for item in fields)
    stamps = [value.timestamp_ms for value in values]
    assert stamps == sorted(stamps)
    for first, second in itertools.combinations(values, 2):
        if first.timestamp_ms != second.timestamp_ms:
            assert (first < second) == (first.timestamp_ms < second.timestamp_ms)


@settings(max_examples=50)
@given(
    triples=st.lists(
        st.tuples(SHORT60_TIMESTAMP, SHORT60_SEQUENCE, SHORT60_RANDOM),
        min_size=2,
        max_size=20,
        unique=True,
    )
)
def test_short60_int_order_follows_timestamp_sequence_random(
    triples: list[tuple[int, int, int]],
) -> None:
    expected = check_order_follows_fields(Short60, ("timestamp_ms", "sequence", "random"), triples)
    assert sorted(expected, key=int) == expected


# -- equality, hashing, comparisons across schemes -------------------------------


@pytest.mark.parametrize("scheme", list(SCHEMES))
@given(data=st.data())
def test_equal_values_hash_equal_and_never_equal_their_forms(
    scheme: str, data: st.DataObject
) -> None:
    fields = data.draw(FIELDS[scheme])
    value = build(scheme, fields)
    twin = build(scheme, fields)
    assert value == twin
    assert not value != twin  # noqa: SIM202 - __ne__ is implemented separately
    assert hash(value) == hash(twin)
    assert len({value, twin}) == 1
    for form in (int(value), str(value), value.bytes, float(int(value))):  # type: ignore[attr-defined]
        assert value != form
        assert form != value
        assert not value == form  # noqa: SIM201 - __eq__ is implemented separately
    with pytest.raises(TypeError):
        _ = value < int(value)


def same_bits_in_every_scheme(bits: int) -> list[IdValue]:
    return [
        Uid64(bits),
        Uid64V1(bits),
        Elastic64(bits, 8),
        Muid(bits),
        Short60(bits),
    ]


# Fits every scheme: 60 bits (short60) with uid64-v1's reserved bits 10..15 clear.
SHARED_BITS = st.integers(0, 2**60 - 1).map(lambda bits: bits & ~0xFC00)


@given(bits=SHARED_BITS)
def test_values_of_different_schemes_are_never_equal(bits: int) -> None:
    values = same_bits_in_every_scheme(bits)
    assert len({int(value) for value in values}) == 1
    for first, second in itertools.permutations(values, 2):
        assert first != second
        assert not first == second  # noqa: SIM201
    assert len(set(values)) == len(values)
    # Uid64 and Uid64V1 of the same bits decode to the same fields but stay distinct.
    newer, older = values[0], values[1]
    assert str(newer) == str(older)
    assert newer != older


@given(bits=SHARED_BITS)
def test_ordering_across_schemes_raises_type_error(bits: int) -> None:
    for first, second in itertools.permutations(same_bits_in_every_scheme(bits), 2):
        with pytest.raises(TypeError):
            _ = first < second
        with pytest.raises(TypeError):
            _ = first <= second
        with pytest.raises(TypeError):
            _ = first > second
        with pytest.raises(TypeError):
            _ = first >= second


@pytest.mark.parametrize("scheme", list(SCHEMES))
@given(data=st.data())
def test_pickle_and_copy_round_trip(scheme: str, data: st.DataObject) -> None:
    value = build(scheme, data.draw(FIELDS[scheme]))
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(value, protocol=protocol))
        assert type(again) is type(value)
        assert again == value
        assert str(again) == str(value)
        assert again.to_dict() == value.to_dict()
    for clone in (copy.copy(value), copy.deepcopy(value), copy.deepcopy([value])[0]):
        assert type(clone) is type(value)
        assert clone == value
        assert clone.to_dict() == value.to_dict()


# -- immutability ----------------------------------------------------------------

COMMON_ATTRIBUTES = ("int", "scheme", "time", "bytes")
PUBLIC_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "uid64": ("timestamp_ms", "sequence", "generator", "cluster", "mode", "hex"),
    "uid64-v1": ("timestamp_ms", "sequence", "generator", "cluster", "mode", "hex"),
    "elastic64": ("timestamp_ms", "burst", "node", "node_bits"),
    "muid": ("timestamp_us", "medallion", "offset", "dashed"),
    "short60": ("timestamp_ms", "sequence", "random", "display"),
    "uuid7": ("timestamp_ms", "counter", "node", "random", "hex", "uuid"),
}
SAMPLES: dict[str, IdValue] = {
    "uid64": Uid64("ffffffffffeea1bf"),
    "uid64-v1": Uid64V1("edc9c8d4fd460291"),
    "elastic64": Elastic64("115816896921601023", 8),
    "muid": Muid("05D5EAC793E61F17B9F5B9479DF94AC0"),
    "short60": Short60("xinaS8QBh"),
    "uuid7": Uuid7("017f22e2-79b0-7cc3-98c4-dc0c0c07398f"),
    "snowflake": SCHEMES["snowflake"]("1212092628029698048"),
}


@pytest.mark.parametrize(
    ("scheme", "attribute"),
    [
        (scheme, attribute)
        for scheme, names in PUBLIC_ATTRIBUTES.items()
        for attribute in COMMON_ATTRIBUTES + names
    ],
)
def test_public_attributes_are_read_only(scheme: str, attribute: str) -> None:
    value = SAMPLES[scheme]
    before = value.to_dict()
    assert hasattr(value, attribute)
    with pytest.raises(AttributeError):
        setattr(value, attribute, 1)
    with pytest.raises(AttributeError):
        delattr(value, attribute)
    assert value.to_dict() == before


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_no_new_attributes(scheme: str) -> None:
    value = SAMPLES[scheme]
    with pytest.raises(AttributeError):
        value.note = "mine"  # type: ignore[attr-defined]
    assert not hasattr(value, "note")
    assert not hasattr(value, "__dict__")


def test_samples_are_valid() -> None:
    # The samples above are golden vectors; a broken parser would fail here first.
    assert SAMPLES["uid64"].to_dict()["generator"] == 1307
    assert SAMPLES["elastic64"].to_dict()["burst"] == 3
    with pytest.raises(InvalidId):
        Uid64V1("ffffffffffeea1bf")


# -- the IDs bounding an instant -----------------------------------------------------

BOUND_OPTIONS: dict[str, list[dict[str, Any]]] = {
    "uid64": [{"mode": "spread"}, {"mode": "time-sequential"}],
    "uid64-v1": [{}],
    "elastic64": [{"node_bits": 8}, {"node_bits": 13}],
    "muid": [{}],
    "short60": [{}],
    "uuid7": [{}],
    "snowflake": [{}],
}
assert set(BOUND_OPTIONS) == set(SCHEMES)


def time_of(fields: dict[str, Any]) -> tuple[str, int]:
    name = "timestamp_us" if "timestamp_us" in fields else "timestamp_ms"
    return name, fields[name]


def bound_options_of(scheme: str, fields: dict[str, Any]) -> dict[str, Any]:
    """What first_at() needs to bound IDs of ``fields``."""
    if scheme == "uid64":
        return {"mode": Mode.parse(fields["mode"]).value}
    if scheme == "elastic64":
        return {"node_bits": fields["node_bits"]}
    return {}


@pytest.mark.parametrize("scheme", list(SCHEMES))
@settings(deadline=None)  # a dozen values made per example: a loaded machine took 200 ms
@given(data=st.data())
def test_an_id_lies_within_the_bounds_of_its_time(scheme: str, data: st.DataObject) -> None:
    fields = data.draw(FIELDS[scheme])
    value = build(scheme, fields)
    cls = SCHEMES[scheme]
    options = bound_options_of(scheme, fields)
    when = value.time  # the time in the scheme's unit, as a datetime
    first, last = cls.first_at(when, **options), cls.last_at(when, **options)
    assert first <= value <= last
    assert first.time == last.time == when
    name, count = time_of(fields)
    if name == "timestamp_ms":
        assert cls.first_at(count, **options) == first  # ms since 1970 say the same
    sortable = cls.orders_by_time(**options)
    assert sortable == (scheme not in {"uid64-v1"} and options.get("mode") != "spread")
    if not sortable:
        return
    unit = dt.timedelta(microseconds=1) if name == "timestamp_us" else dt.timedelta(milliseconds=1)
    field = cls.field(name)
    if count > field.low:
        assert cls.last_at(when - unit, **options) < value
    if count < field.high:
        assert cls.first_at(when + unit, **options) > value
        assert cls.between(when, when + unit, **options) == (first, last)


@pytest.mark.parametrize(
    ("scheme", "options"),
    [(scheme, options) for scheme, every in BOUND_OPTIONS.items() for options in every],
)
def test_the_bounds_of_a_time_are_ids_of_that_time_with_every_other_bit_at_an_end(
    scheme: str, options: dict[str, Any]
) -> None:
    cls = SCHEMES[scheme]
    when = dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=dt.timezone.utc)
    first, last = cls.first_at(when, **options), cls.last_at(when, **options)
    unit = 1_000_000 // cls._time_field.per_second
    expected = when.replace(microsecond=when.microsecond // unit * unit)
    assert first.time == last.time == expected
    for name, value in first.to_dict().items():
        field = next((f for f in cls.fields if f.name == name), None)
        if field and not (field.per_second or field.choices) and name not in {*options, "int"}:
            assert value == field.low, name
    shown = last.to_dict()
    if scheme in {"uid64", "uid64-v1", "muid", "uuid7", "short60"}:
        for name in ("sequence", "generator", "cluster", "medallion", "offset", "counter", "node"):
            if name in shown:
                assert shown[name] == cls.field(name).high, name


def test_a_span_of_time_is_refused_where_ids_do_not_sort_by_time() -> None:
    start = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
    end = start + dt.timedelta(days=1)
    for cls, options in ((Uid64, {}), (Uid64, {"mode": "spread"}), (Uid64V1, {})):
        with pytest.raises(InvalidId, match="do not sort by time") as caught:
            cls.between(start, end, **options)
        assert caught.value.problem == "order"
    low, high = Uid64.between(start, end, mode="time-sequential")
    assert low.time == start
    assert high.time == end - dt.timedelta(milliseconds=1)
    assert Uuid7.between(start, end) == (
        Uuid7.first_at(start),
        Uuid7.last_at(end - dt.timedelta(milliseconds=1)),
    )


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (lambda: Uuid7.first_at(dt.datetime(2024, 5, 1)), "time"),  # naive
        (lambda: Uuid7.first_at("2024-05-01"), "type"),
        (lambda: Uuid7.first_at(True), "type"),
        (lambda: Uuid7.first_at(-1), "range"),
        (lambda: Short60.first_at(0), "range"),  # before short60's epoch
        (lambda: Uid64.first_at(2**42), "range"),
        (lambda: Elastic64.first_at(0), "node_bits"),
        (lambda: Uid64V1.first_at(0, mode="time-sequential"), "range"),
        (lambda: Uuid7.between(5, 5), "time"),
    ],
)
def test_bad_times_and_options_are_invalid_id(call: Any, problem: str) -> None:
    with pytest.raises(InvalidId) as caught:
        call()
    assert caught.value.problem == problem


def test_options_a_scheme_does_not_take_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="muid bounds take nothing but the time, not mode"):
        Muid.first_at(0, mode="spread")
