"""Golden vectors, both directions, for every scheme.

uid64.csv was made by java-uniqueid itself; muid.csv and short60.csv carry the
worked examples of the muid specification and of uexky; uid64_v1.csv and
elastic64.csv were derived by hand from the layouts in the scheme modules (their
header comments show the arithmetic). Lines starting
with '#' are comments.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from idmint.errors import InvalidId
from idmint.schemes import Elastic64, Mode, Muid, Short60, Uid64, Uid64V1, Uuid7, parse_id

DATA = Path(__file__).resolve().parent.parent / "data"
UTC = dt.timezone.utc
UNIX_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
# short60 counts from uexky's epoch; the library's timestamp_ms counts from 1970.
SHORT60_EPOCH_MS = 1_519_862_400_000

ISO_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
ISO_US = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")

UID64_KEYS = {"scheme", "id", "time", "timestamp_ms", "sequence", "generator", "cluster", "mode"}
MUID_KEYS = {"scheme", "id", "time", "timestamp_us", "medallion", "offset"}
SHORT60_KEYS = {"scheme", "id", "time", "timestamp_ms", "sequence", "node", "int"}
ELASTIC64_KEYS = {"scheme", "id", "time", "timestamp_ms", "burst", "node", "node_bits"}


def load_rows(name: str) -> list[dict[str, str]]:
    """The rows of tests/data/<name>, skipping '#' comment lines."""
    with (DATA / name).open(newline="") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return list(csv.DictReader(lines))


def params(name: str, key: str) -> list[Any]:
    rows = load_rows(name)
    return [pytest.param(row, id=f"{index}-{row[key]}") for index, row in enumerate(rows)]


def at_ms(ms: int) -> dt.datetime:
    return UNIX_EPOCH + dt.timedelta(milliseconds=ms)


def at_us(us: int) -> dt.datetime:
    return UNIX_EPOCH + dt.timedelta(microseconds=us)


def iso_ms(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def check_time_fields(value: Any, expected: dt.datetime, pattern: re.Pattern[str]) -> None:
    assert value.time == expected
    assert value.time.utcoffset() == dt.timedelta(0)
    text = value.to_dict()["time"]
    assert pattern.fullmatch(text), text
    assert dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC) == expected


def check_int_and_bytes(value: Any, as_int: int, length: int, *width: int) -> None:
    """``value`` is ``as_int``, as its int and its ``length`` big-endian bytes, and is read
    back from either (with the node-ID ``width`` where the scheme needs one)."""
    cls = type(value)
    assert int(value) == value.int == as_int
    assert value.bytes == as_int.to_bytes(length, "big")
    assert cls(as_int, *width) == cls.from_int(as_int, *width) == value
    assert cls(value.bytes, *width) == cls(bytearray(value.bytes), *width) == value
    assert cls.from_bytes(memoryview(value.bytes), *width) == value


def test_vector_files_are_not_empty() -> None:
    # A loader that silently skipped everything would make every test below vacuous.
    assert len(load_rows("uid64.csv")) == 120
    assert len(load_rows("uid64_v1.csv")) >= 10
    assert len(load_rows("muid.csv")) == 42
    assert len(load_rows("short60.csv")) == 43
    assert {int(row["node_bits"]) for row in load_rows("elastic64.csv")} == {8, 11, 16}


# -- uid64 -----------------------------------------------------------------------


def uid64_mode(row: dict[str, str]) -> Mode:
    return {"SPREAD": Mode.SPREAD, "TIME_SEQUENTIAL": Mode.TIME_SEQUENTIAL}[row["mode"]]


@pytest.mark.parametrize("row", params("uid64.csv", "hex"))
def test_uid64_parse(row: dict[str, str]) -> None:
    for text in (row["hex"], row["hex"].upper(), f"  {row['hex']}\n"):
        value = Uid64(text)
        assert value.timestamp_ms == int(row["timestamp_ms"])
        assert value.sequence == int(row["sequence"])
        assert value.generator == int(row["generator"])
        assert value.cluster == int(row["cluster"])
        assert value.mode is uid64_mode(row)
        assert str(value) == value.hex == row["hex"]
    assert parse_id(row["hex"], "uid64") == Uid64(row["hex"])


@pytest.mark.parametrize("row", params("uid64.csv", "hex"))
def test_uid64_build(row: dict[str, str]) -> None:
    fields = {
        "timestamp_ms": int(row["timestamp_ms"]),
        "sequence": int(row["sequence"]),
        "generator": int(row["generator"]),
        "cluster": int(row["cluster"]),
    }
    mode = uid64_mode(row)
    for spelling in (mode, mode.value, row["mode"]):
        assert str(Uid64.build(**fields, mode=spelling)) == row["hex"]


@pytest.mark.parametrize("row", params("uid64.csv", "hex"))
def test_uid64_forms_and_time(row: dict[str, str]) -> None:
    value = Uid64(row["hex"])
    check_int_and_bytes(value, int(row["hex"], 16), 8)
    check_time_fields(value, at_ms(int(row["timestamp_ms"])), ISO_MS)


@pytest.mark.parametrize("row", params("uid64.csv", "hex"))
def test_uid64_to_dict(row: dict[str, str]) -> None:
    fields = Uid64(row["hex"]).to_dict()
    assert set(fields) == UID64_KEYS
    assert fields == {
        "scheme": "uid64",
        "id": row["hex"],
        "time": iso_ms(at_ms(int(row["timestamp_ms"]))),
        "timestamp_ms": int(row["timestamp_ms"]),
        "sequence": int(row["sequence"]),
        "generator": int(row["generator"]),
        "cluster": int(row["cluster"]),
        "mode": {"SPREAD": "spread", "TIME_SEQUENTIAL": "time-sequential"}[row["mode"]],
    }
    assert type(fields["mode"]) is str  # plain JSON, not the enum
    assert json.loads(json.dumps(fields)) == fields


# -- uid64-v1 --------------------------------------------------------------------


def v1_fields(row: dict[str, str]) -> dict[str, Any]:
    return {name: int(row[name]) for name in ("timestamp_ms", "sequence", "generator", "cluster")}


@pytest.mark.parametrize("row", params("uid64_v1.csv", "hex"))
def test_uid64_v1_parse(row: dict[str, str]) -> None:
    value = Uid64V1(row["hex"])
    assert {name: getattr(value, name) for name in v1_fields(row)} == v1_fields(row)
    assert value.mode is Mode.SPREAD
    assert str(value) == row["hex"]
    assert Uid64V1(row["hex"].upper()) == value
    assert parse_id(row["hex"], "uid64-v1") == value


@pytest.mark.parametrize("row", params("uid64_v1.csv", "hex"))
def test_uid64_v1_build(row: dict[str, str]) -> None:
    assert str(Uid64V1.build(**v1_fields(row))) == row["hex"]
    assert str(Uid64V1.build(**v1_fields(row), mode="spread")) == row["hex"]
    # java-uniqueid kept old IDs valid: the 3.2 layout gives the same bytes for these.
    assert str(Uid64.build(**v1_fields(row), mode=Mode.SPREAD)) == row["hex"]
    newer = Uid64(row["hex"])
    assert {name: getattr(newer, name) for name in v1_fields(row)} == v1_fields(row)


@pytest.mark.parametrize("row", params("uid64_v1.csv", "hex"))
def test_uid64_v1_forms_time_and_dict(row: dict[str, str]) -> None:
    value = Uid64V1(row["hex"])
    check_int_and_bytes(value, int(row["hex"], 16), 8)
    check_time_fields(value, at_ms(int(row["timestamp_ms"])), ISO_MS)
    fields = value.to_dict()
    assert set(fields) == UID64_KEYS
    assert fields == {
        "scheme": "uid64-v1",
        "id": row["hex"],
        "time": iso_ms(at_ms(int(row["timestamp_ms"]))),
        **v1_fields(row),
        "mode": "spread",
    }


# -- muid ------------------------------------------------------------------------


def muid_fields(row: dict[str, str]) -> dict[str, int]:
    return {name: int(row[name]) for name in ("timestamp_us", "medallion", "offset")}


def test_muid_seed_example() -> None:
    # The muid specification's worked example, in the canonical and the (non-canonical) dashed form.
    value = Muid("05D5EAC793E61F-17B9F5B9479DF-94AC0")
    assert str(value) == "05D5EAC793E61F17B9F5B9479DF94AC0"
    assert (value.timestamp_us, value.medallion, value.offset) == (
        1642579230975519,
        417399343184351,
        608960,
    )
    assert value.time == dt.datetime(2022, 1, 19, 8, 0, 30, 975519, tzinfo=UTC)


@pytest.mark.parametrize("row", params("muid.csv", "hex"))
def test_muid_parse(row: dict[str, str]) -> None:
    text = row["hex"]
    dashed = f"{text[:14]}-{text[14:27]}-{text[27:]}"
    for spelling in (text, text.lower(), dashed, dashed.lower(), f" {text} "):
        value = Muid(spelling)
        assert {name: getattr(value, name) for name in muid_fields(row)} == muid_fields(row)
        assert str(value) == text
        assert value.dashed == dashed
    assert parse_id(text, "muid") == parse_id(text) == Muid(text)


@pytest.mark.parametrize("row", params("muid.csv", "hex"))
def test_muid_build(row: dict[str, str]) -> None:
    assert str(Muid.build(**muid_fields(row))) == row["hex"]


@pytest.mark.parametrize("row", params("muid.csv", "hex"))
def test_muid_forms_time_and_dict(row: dict[str, str]) -> None:
    value = Muid(row["hex"])
    check_int_and_bytes(value, int(row["hex"], 16), 16)
    check_time_fields(value, at_us(int(row["timestamp_us"])), ISO_US)
    fields = value.to_dict()
    assert set(fields) == MUID_KEYS
    expected_time = at_us(int(row["timestamp_us"])).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert fields == {"scheme": "muid", "id": row["hex"], "time": expected_time} | muid_fields(row)


# -- short60 ---------------------------------------------------------------------


def short60_unix_ms(row: dict[str, str]) -> int:
    return int(row["timestamp_ms_since_2018_03_01"]) + SHORT60_EPOCH_MS


def short60_time(row: dict[str, str]) -> dt.datetime:
    return dt.datetime.strptime(row["time_utc"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def test_short60_seed_example() -> None:
    # uexky's worked example: 11093174944930914 -> base64 naS8QBhxi -> display xinaS8QBh.
    assert at_ms(SHORT60_EPOCH_MS) == dt.datetime(2018, 3, 1, tzinfo=UTC)
    value = Short60("xinaS8QBh")
    assert value.int == 11093174944930914
    assert str(Short60(11093174944930914)) == value.display == "xinaS8QBh"


@pytest.mark.parametrize("row", params("short60.csv", "display"))
def test_short60_parse(row: dict[str, str]) -> None:
    value = Short60(row["display"])
    assert value.int == int(row["int"])
    assert value.timestamp_ms == short60_unix_ms(row)
    assert value.sequence == int(row["sequence"])
    # uexky's random bits are where idmint's generators put their node ID.
    assert value.random == value.node == int(row["random"])
    assert str(value) == value.display == row["display"]
    # The display form is the base-64 digits with the last two moved to the front.
    assert row["display"][2:] + row["display"][:2] == row["base64"]
    assert parse_id(row["display"], "short60") == value


@pytest.mark.parametrize("row", params("short60.csv", "display"))
def test_short60_build(row: dict[str, str]) -> None:
    value = Short60.build(
        timestamp_ms=short60_unix_ms(row),
        sequence=int(row["sequence"]),
        random=int(row["random"]),
    )
    assert str(value) == row["display"]
    assert value.int == int(row["int"])
    by_node = Short60.build(
        timestamp_ms=short60_unix_ms(row), sequence=int(row["sequence"]), node=int(row["random"])
    )
    assert by_node == value


@pytest.mark.parametrize("row", params("short60.csv", "display"))
def test_short60_forms_time_and_dict(row: dict[str, str]) -> None:
    value = Short60(row["display"])
    check_int_and_bytes(value, int(row["int"]), 8)
    check_time_fields(value, short60_time(row), ISO_MS)
    fields = value.to_dict()
    assert set(fields) == SHORT60_KEYS
    assert fields == {
        "scheme": "short60",
        "id": row["display"],
        "time": iso_ms(short60_time(row)),
        "timestamp_ms": short60_unix_ms(row),
        "sequence": int(row["sequence"]),
        "node": int(row["random"]),
        "int": int(row["int"]),
    }


# -- elastic64 -------------------------------------------------------------------


def elastic64_fields(row: dict[str, str]) -> dict[str, int]:
    return {name: int(row[name]) for name in ("timestamp_ms", "burst", "node", "node_bits")}


@pytest.mark.parametrize("row", params("elastic64.csv", "id"))
def test_elastic64_parse(row: dict[str, str]) -> None:
    width = int(row["node_bits"])
    for text in (row["id"], f" {row['id']}\n"):
        value = Elastic64(text, width)
        assert {name: getattr(value, name) for name in elastic64_fields(row)} == (
            elastic64_fields(row)
        )
        assert str(value) == row["id"]
    assert parse_id(row["id"], "elastic64", node_bits=width) == Elastic64(row["id"], width)
    assert parse_id(row["id"], node_bits=width) == Elastic64(row["id"], width)


@pytest.mark.parametrize("row", params("elastic64.csv", "id"))
def test_elastic64_build(row: dict[str, str]) -> None:
    assert str(Elastic64.build(**elastic64_fields(row))) == row["id"]
    assert Elastic64.build(**elastic64_fields(row)) == Elastic64(row["id"], int(row["node_bits"]))


@pytest.mark.parametrize("row", params("elastic64.csv", "id"))
def test_elastic64_forms_time_and_dict(row: dict[str, str]) -> None:
    width = int(row["node_bits"])
    value = Elastic64(row["id"], width)
    check_int_and_bytes(value, int(row["id"]), 8, width)
    expected_time = at_ms(int(row["timestamp_ms"]))
    assert iso_ms(expected_time) == row["time_utc"]
    check_time_fields(value, expected_time, ISO_MS)
    fields = value.to_dict()
    assert set(fields) == ELASTIC64_KEYS
    assert fields == {"scheme": "elastic64", "id": row["id"], "time": row["time_utc"]} | (
        elastic64_fields(row)
    )


def test_elastic64_same_bits_other_width_is_another_id() -> None:
    rows = [row for row in load_rows("elastic64.csv") if row["id"] == "65535"]
    assert {row["node_bits"] for row in rows} == {"8", "16"}
    narrow, wide = Elastic64("65535", 8), Elastic64("65535", 16)
    assert (narrow.node, narrow.burst) == (255, 255)
    assert (wide.node, wide.burst) == (65535, 0)
    assert narrow != wide
    assert narrow.int == wide.int


# -- uuid7 -----------------------------------------------------------------------------

# RFC 9562 appendix A.6's example UUIDv7: only its time is RFC 9562's to define; the
# other fields are what idmint's layout reads from its (random) bits.
RFC9562_UUIDV7 = "017F22E2-79B0-7CC3-98C4-DC0C0C07398F"


def test_uuid7_reads_rfc_9562s_example() -> None:
    value = Uuid7(RFC9562_UUIDV7)
    assert value.timestamp_ms == 1645557742000
    assert value.time == at_ms(1645557742000)
    assert str(value) == RFC9562_UUIDV7.lower()
    assert value.uuid == uuid.UUID(RFC9562_UUIDV7)
    check_int_and_bytes(value, 0x017F22E279B07CC398C4DC0C0C07398F, 16)
    assert value.to_dict() == {
        "scheme": "uuid7",
        "id": "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
        "time": "2022-02-22T19:22:22.000Z",
        "timestamp_ms": 1645557742000,
        # rand_a 0xCC3 and rand_b's top 6 bits 0b011000, read as idmint's counter;
        "counter": 0xCC3 << 6 | 0b011000,
        # rand_b's next 16 bits, read as the node; its last 40 as the random bits.
        "node": 0xC4DC,
        "random": 0x0C0C07398F,
    }


def test_uuid7_places_its_fields_as_the_module_draws_them() -> None:
    # Worked by hand: ms 0x0123456789AB; version 7; counter 0x2A5F3 = 0xA97 << 6 | 0x33;
    # variant 10; node 0xBEEF; random 0x0102030405.
    value = Uuid7.build(
        timestamp_ms=0x0123456789AB, counter=0x2A5F3, node=0xBEEF, random=0x0102030405
    )
    assert str(value) == "01234567-89ab-7a97-b3be-ef0102030405"
    assert Uuid7("01234567-89ab-7a97-b3be-ef0102030405").to_dict()["counter"] == 0x2A5F3


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("017F22E2-79B0-4CC3-98C4-DC0C0C07398F", "version"),  # version 4
        ("017F22E2-79B0-7CC3-C8C4-DC0C0C07398F", "variant"),  # variant 110 (Microsoft)
        ("017F22E2-79B0-7CC3-98C4-DC0C0C07398", "length"),
        ("017F22E279B0-7CC3-98C4-DC0C0C07398F", "length"),
        ("017F22E2-79B0-7CC3-98C4-DC0C0C07398G", "character"),
        ("ffffffff-ffff-7fff-bfff-ffffffffffff", "range"),  # after 9999-12-31
    ],
)
def test_uuid7_refuses_what_is_not_a_version_7_uuid(text: str, problem: str) -> None:
    with pytest.raises(InvalidId) as caught:
        Uuid7(text)
    assert caught.value.problem == problem
    assert caught.value.scheme == "uuid7"
