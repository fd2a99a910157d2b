"""pydantic v2 support on the value types: validation, JSON round trips, schema, errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

from idmint import Elastic64, IdValue, Muid, Short60, Snowflake, Uid64, Uid64V1, Uuid7
from idmint.pydantic import NodeBits
from idmint.schemes import elastic64 as e64
from idmint.schemes import uid64 as u64
from idmint.schemes import uuid7 as uu


class Order(BaseModel):
    id: Uid64
    legacy: Uid64V1 | None = None
    shard: Annotated[Elastic64, NodeBits(12)]
    batch: Muid | None = None
    short: Short60 | None = None


ORDER = Order(
    id=Uid64("ab6278961f7f88d5"),
    legacy=Uid64V1(0x3F0),
    shard=Elastic64(75735064375574528, node_bits=12),
    batch=Muid("05D5EAC793E61F17B9F5B9479DF94AC0"),
    short=Short60("xinaS8QBh"),
)


def test_json_holds_the_text_forms_and_reads_back() -> None:
    text = ORDER.model_dump_json()
    assert json.loads(text) == {
        "id": "ab6278961f7f88d5",
        "legacy": "00000000000003f0",
        "shard": "75735064375574528",
        "batch": "05D5EAC793E61F17B9F5B9479DF94AC0",
        "short": "xinaS8QBh",
    }
    assert Order.model_validate_json(text) == ORDER
    # Python mode keeps the value objects.
    assert ORDER.model_dump()["id"] is ORDER.id
    assert Order.model_validate(ORDER.model_dump()) == ORDER


def test_fields_take_text_ints_bytes_and_values() -> None:
    from_ints = Order.model_validate_json(
        json.dumps({"id": ORDER.id.int, "shard": ORDER.shard.int, "short": ORDER.short.int})  # type: ignore[union-attr]
    )
    assert (from_ints.id, from_ints.shard, from_ints.short) == (ORDER.id, ORDER.shard, ORDER.short)
    from_bytes = Order(id=ORDER.id.bytes, shard=ORDER.shard.bytes, batch=ORDER.batch.bytes)  # type: ignore[arg-type,union-attr]
    assert (from_bytes.id, from_bytes.shard, from_bytes.batch) == (
        ORDER.id,
        ORDER.shard,
        ORDER.batch,
    )
    dashed = Order(id=" AB6278961F7F88D5 ", shard="17", batch="05D5EAC793E61F-17B9F5B9479DF-94AC0")  # type: ignore[arg-type]
    assert dashed.id == ORDER.id
    assert dashed.batch == ORDER.batch
    # An ID of the same family converts; the result has the field's type.
    assert type(Order(id=Uid64V1(0x3F0), shard=0).id) is Uid64  # type: ignore[arg-type]
    assert type(Order(id=0, shard=0, legacy=Uid64(0x3F0)).legacy) is Uid64V1  # type: ignore[arg-type]


ID_VALUES: st.SearchStrategy[IdValue] = st.one_of(
    st.integers(0, (1 << 64) - 1).map(Uid64),
    st.integers(0, (1 << 64) - 1).map(lambda v: Uid64V1(v & ~u64.V1_RESERVED_MASK)),
    st.integers(0, e64.MAX_VALUE).map(lambda v: Elastic64(v, node_bits=12)),
    st.integers(0, (1 << 128) - 1).map(Muid),
    st.integers(0, (1 << 60) - 1).map(Short60),
    st.integers(0, ((uu.MAX_TIMESTAMP_MS + 1) << 80) - 1).map(
        lambda v: Uuid7(v & ~uu.VERSION_VARIANT_MASK | uu.VERSION_VARIANT_BITS)
    ),
)


@settings(max_examples=300)
@given(value=ID_VALUES)
def test_every_value_survives_a_json_round_trip_as_its_text(value: IdValue) -> None:
    annotation: Any = (
        Annotated[Elastic64, NodeBits(12)] if type(value) is Elastic64 else type(value)
    )
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    text = adapter.dump_json(value)
    assert json.loads(text) == str(value)
    back = adapter.validate_json(text)
    assert back == value
    assert type(back) is type(value)


def test_json_schema_gives_each_scheme_its_pattern() -> None:
    properties = Order.model_json_schema()["properties"]
    assert properties["id"]["type"] == "string"
    assert properties["id"]["pattern"] == "^[0-9a-fA-F]{16}$"
    assert properties["shard"]["pattern"] == "^[0-9]{1,20}$"
    assert "12 bits" in properties["shard"]["description"]
    patterns = {
        name: next(s for s in properties[name]["anyOf"] if s.get("type") == "string")["pattern"]
        for name in ("legacy", "batch", "short")
    }
    assert patterns == {
        "legacy": "^[0-9a-fA-F]{16}$",
        "batch": "^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{14}-[0-9A-Fa-f]{13}-[0-9A-Fa-f]{5})$",
        "short": "^[A-Za-z0-9_-]{1,10}$",
    }
    assert Order.model_json_schema(mode="serialization")["properties"]["id"]["type"] == "string"
    # The example each schema gives is valid, and serializes to itself.
    for name, field in properties.items():
        schema = field if "examples" in field else field["anyOf"][0]
        (example,) = schema["examples"]
        value = Order.model_validate({"id": 0, "shard": 0, name: example})
        assert json.loads(value.model_dump_json())[name] == example


UID64_FORMS = "expected 16 hex digits, 8 bytes or an int"
MALFORMED = [
    ("id", "ab6278961f7f88d", "expected 16 hex digits, got 15 characters: 'ab6278961f7f88d'"),
    ("id", "ab6278961f7f88dx", "bad character 'x' at position 15 of 'ab6278961f7f88dx'"),
    ("id", 1 << 64, f"value {1 << 64} is out of range; expected 0..{(1 << 64) - 1}"),
    ("id", 1.0, f"cannot read an ID from float; {UID64_FORMS}"),
    ("id", Short60(5), f"cannot read an ID from Short60; {UID64_FORMS}"),
    ("legacy", "000000000000fc00", "reserved bits 10..15 are set"),
    ("shard", Elastic64(1, node_bits=8), "a field of Annotated[Elastic64, NodeBits(12)] holds"),
    ("batch", "{}" * 16, "bad character '{'"),
    ("short", "AAAA", "'AAAA' is not canonical"),
]
PROBLEMS = ["length", "character", "range", "type", "type", "reserved", "node_bits"]
PROBLEMS += ["character", "character"]
SCHEMES = {"id": "uid64", "legacy": "uid64-v1", "shard": "elastic64", "batch": "muid"}


@pytest.mark.parametrize(
    ("field", "value", "message", "problem"),
    [(*case, problem) for case, problem in zip(MALFORMED, PROBLEMS, strict=True)],
)
def test_a_malformed_id_is_a_validation_error_with_the_invalid_id_message(
    field: str, value: object, message: str, problem: str
) -> None:
    data: dict[str, object] = {"id": 0, "shard": 0, field: value}
    with pytest.raises(ValidationError) as caught:
        Order.model_validate(data)
    (error,) = caught.value.errors()
    assert error["type"] == "invalid_id"
    assert error["loc"] == (field,)
    assert error["msg"].startswith(f"invalid {SCHEMES.get(field, 'short60')} ID: {message}")
    assert error["ctx"]["problem"] == problem
    assert error["msg"] in str(caught.value)


def test_a_bare_elastic64_field_asks_for_its_width() -> None:
    class Bare(BaseModel):
        value: Elastic64

    assert Bare(value=Elastic64(5, node_bits=9)).value.node_bits == 9
    with pytest.raises(
        ValidationError, match=r"annotate the field as Annotated\[Elastic64, NodeBits\(width\)\]"
    ):
        Bare.model_validate_json('{"value": "5"}')
    with pytest.raises(TypeError, match="NodeBits applies to Elastic64 fields"):
        TypeAdapter(Annotated[Uid64, NodeBits(12)])
    with pytest.raises(ValueError, match="node_bits 17 is out of range"):
        NodeBits(17)


def test_importing_idmint_does_not_import_pydantic() -> None:
    code = (
        "import sys, idmint, idmint.schemes, idmint.sqlalchemy, idmint.django\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


class Event(BaseModel):
    id: Uuid7


def test_a_uuid7_field_takes_what_uuid_uuid_takes_and_gives_the_dashed_form() -> None:
    rfc = Uuid7("017f22e2-79b0-7cc3-98c4-dc0c0c07398f")
    for form in (
        rfc,
        rfc.uuid,
        str(rfc).upper(),
        "{" + str(rfc) + "}",
        "urn:uuid:" + str(rfc),
        rfc.hex,
        rfc.int,
        rfc.bytes,
    ):
        assert Event(id=form).id == rfc  # type: ignore[arg-type]
    assert json.loads(Event(id=rfc).model_dump_json()) == {"id": str(rfc)}
    pattern = re.compile(Event.model_json_schema()["properties"]["id"]["pattern"])
    assert pattern.fullmatch("URN:UUID:" + str(rfc).upper())
    with pytest.raises(ValidationError, match="version-4 UUID"):
        Event(id="017f22e2-79b0-4cc3-98c4-dc0c0c07398f")  # type: ignore[arg-type]


Sonyflake = Snowflake.of("sonyflake")


class Tweet(BaseModel):
    id: Snowflake
    mirror: Sonyflake | None = None  # type: ignore[valid-type]


def test_snowflakes_of_a_layout_read_and_write_their_decimal_text() -> None:
    tweet = Tweet(id="1212092628029698048", mirror=648196499762577408)  # type: ignore[arg-type]
    assert tweet.id.timestamp_ms == 1577820376771
    assert type(tweet.mirror) is Sonyflake
    text = tweet.model_dump_json()
    assert json.loads(text) == {"id": "1212092628029698048", "mirror": "648196499762577408"}
    assert Tweet.model_validate_json(text) == tweet
    with pytest.raises(ValidationError, match="not sonyflake"):
        Tweet(id=tweet.id, mirror=tweet.id)  # Twitter's layout where Sonyflake's goes
    schema = Tweet.model_json_schema()["properties"]["id"]
    assert schema["pattern"] == "^[0-9]{1,19}$"
