"""snowflake: the tweet and Sonyflake vectors, layouts, round trips, refused layouts."""

from __future__ import annotations

import datetime as dt
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idmint.errors import ConfigurationError, InvalidId
from idmint.schemes import SCHEMES, Snowflake, parse_id
from idmint.schemes.snowflake import DISCORD, PRESETS, SONYFLAKE, TWITTER, Layout

TWEET = "1212092628029698048"
"""A tweet of 2019-12-31; its ID decodes to timestamp_ms 1577820376771."""


def test_the_tweet_vector() -> None:
    tweet = Snowflake(TWEET)
    assert tweet.timestamp_ms == 1577820376771
    assert tweet.time == dt.datetime(2019, 12, 31, 19, 26, 16, 771000, tzinfo=dt.timezone.utc)
    assert (tweet.worker, tweet.sequence) == (327, 0)
    assert str(tweet) == TWEET
    assert int(tweet) == 1212092628029698048
    assert parse_id(TWEET, "snowflake") == tweet
    assert Snowflake.build(timestamp_ms=1577820376771, worker=327) == tweet
    assert tweet.to_dict() == {
        "scheme": "snowflake",
        "id": TWEET,
        "time": "2019-12-31T19:26:16.771Z",
        "timestamp_ms": 1577820376771,
        "worker": 327,
        "sequence": 0,
    }


def test_the_sonyflake_vector() -> None:
    """Sonyflake's layout, from its documentation: 39 bits of 10 ms since
    2014-09-01T00:00:00Z, then 8 bits of sequence, then 16 of machine ID. Its
    decomposition of an ID, worked by hand: time 0x1_2345_6789 ticks, sequence 0xAB,
    machine 0xCDEF."""
    value = 0x1_2345_6789 << 24 | 0xAB << 16 | 0xCDEF
    sonyflake = Snowflake.of("sonyflake")(value)
    assert sonyflake.worker == 0xCDEF
    assert sonyflake.sequence == 0xAB
    # 2014-09-01 plus 4886718345 ticks of 10 ms: 48,867,183.45 s later.
    assert sonyflake.timestamp_ms == 1_409_529_600_000 + 48_867_183_450
    assert sonyflake.to_dict()["time"] == "2016-03-19T14:13:03.450Z"
    assert list(sonyflake.to_dict())[3:] == ["timestamp_ms", "sequence", "worker"]
    assert str(sonyflake) == str(value)
    built = Snowflake.of("sonyflake").build(
        timestamp_ms=1_409_529_600_000 + 48_867_183_450, sequence=0xAB, worker=0xCDEF
    )
    assert built == sonyflake


def test_presets() -> None:
    assert set(PRESETS) == {"twitter", "discord", "sonyflake"}
    assert Snowflake.layout == TWITTER == Layout.of() == Layout.of("Twitter")
    assert (DISCORD.epoch_ms, DISCORD.time_bits) == (1_420_070_400_000, 41)  # 2015-01-01
    assert SONYFLAKE.epoch_ms == 1_409_529_600_000  # 2014-09-01
    for layout in PRESETS.values():
        assert layout.time_bits + layout.worker_bits + layout.sequence_bits == 63
    assert TWITTER.end_ms == 1_288_834_974_657 + 2**41 - 1
    assert Snowflake.of("twitter") is Snowflake
    assert Snowflake.of(TWITTER) is Snowflake
    assert Snowflake.of("sonyflake") is Snowflake.of(SONYFLAKE)


def test_layouts_of_one_int_are_different_values() -> None:
    """The same int is another time and worker in another layout: never equal."""
    twitter = Snowflake(TWEET)
    discord = Snowflake.of("discord")(TWEET)
    assert twitter != discord
    assert discord.timestamp_ms - twitter.timestamp_ms == DISCORD.epoch_ms - TWITTER.epoch_ms
    with pytest.raises(InvalidId, match="layout"):
        Snowflake(discord)
    assert Snowflake.of("discord")(discord) == discord
    assert pickle.loads(pickle.dumps(discord)) == discord
    assert type(pickle.loads(pickle.dumps(discord))) is type(discord)


LAYOUTS = [
    TWITTER,
    DISCORD,
    SONYFLAKE,
    Layout(0, 1, 44, 8, 11),
    Layout(1_600_000_000_000, 100, 37, 16, 10, "time-sequence-worker"),
    Layout(1_700_000_000_000, 4, 42, 1, 20),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.describe())
@given(data=st.data())
def test_every_field_round_trips(layout: Layout, data: st.DataObject) -> None:
    kind = Snowflake.of(layout)
    ticks = data.draw(st.integers(0, layout.max_time))
    fields = {
        "timestamp_ms": layout.epoch_ms + ticks * layout.tick_ms,
        "worker": data.draw(st.integers(0, (1 << layout.worker_bits) - 1)),
        "sequence": data.draw(st.integers(0, (1 << layout.sequence_bits) - 1)),
    }
    value = kind.build(**fields)
    assert {name: getattr(value, name) for name in fields} == fields
    assert 0 <= int(value) < 2**63
    for form in (str(value), int(value), value.bytes):
        again = kind(form)
        assert again == value
        assert {name: getattr(again, name) for name in fields} == fields
    assert str(value) == str(int(value))
    decoded = value.to_dict()
    assert {name: decoded[name] for name in fields} == fields
    # The int orders as the time does, then by the bits below it.
    assert int(value) >> layout.time_shift == ticks


def value_type(name: str) -> Any:
    return Snowflake.of(name)


@pytest.mark.parametrize(
    ("parts", "fragment"),
    [
        ({"time_bits": 42}, "make 64"),
        ({"time_bits": 40}, "make 62"),
        ({"worker_bits": 17, "sequence_bits": 5}, "worker_bits must be 1..16"),
        ({"worker_bits": 0, "sequence_bits": 22}, "worker_bits must be 1..16"),
        ({"tick_ms": 0}, "tick_ms must be 1..1000"),
        ({"tick_ms": 10}, "whole number of 10 ms ticks"),  # Twitter's epoch ends in 7 ms
        ({"epoch_ms": -1}, "epoch_ms"),
        ({"order": "sequence-first"}, "order 'sequence-first'"),
        ({"time_bits": 51, "sequence_bits": 2}, "past the year 9999"),
        ({"until_year": 2100}, "runs out at 2080-07-10T17:30:30.209Z, before 2100"),
        ({"until_year": 10_000}, "until_year must be a year"),
        ({"time_bits": "41"}, "whole number"),
    ],
)
def test_refused_layouts_say_why_in_one_line(parts: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Snowflake.of("twitter", **parts)
    message = str(caught.value)
    assert fragment in message
    assert "\n" not in message


def test_an_unknown_preset_names_the_presets() -> None:
    with pytest.raises(ConfigurationError, match="twitter, discord, sonyflake"):
        Snowflake.of("instagram")
    with pytest.raises(ConfigurationError, match="no colour"):
        Snowflake.variant(colour=1)
    assert Snowflake.variant(layout="sonyflake") is Snowflake.of("sonyflake")
    assert SCHEMES["uid64"].variant() is SCHEMES["uid64"]
    with pytest.raises(ConfigurationError, match="one layout"):
        SCHEMES["uid64"].variant(layout="sonyflake")


def test_a_layout_that_lasts_until_its_stated_year_is_taken() -> None:
    assert Layout.of("sonyflake", until_year=2180) == SONYFLAKE
    assert Layout.of("twitter", until_year=2080) == TWITTER


def test_times_between_ticks_are_refused_not_rounded() -> None:
    kind = Snowflake.of("sonyflake")
    with pytest.raises(InvalidId, match="3 ms into a 10 ms tick"):
        kind.build(timestamp_ms=SONYFLAKE.epoch_ms + 13)


@pytest.mark.parametrize(
    "text",
    ["", "-1", "+5", "12a", "1" * 20, str(2**63), "9223372036854775808", "1.0"],
)
def test_bad_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidId):
        Snowflake(text)


@pytest.mark.parametrize("name", sorted(PRESETS))
@given(data=st.data())
def test_every_layout_bounds_the_ids_of_a_tick_and_a_span(name: str, data: st.DataObject) -> None:
    kind = Snowflake.of(name)
    layout = kind.layout
    tick = data.draw(st.integers(1, min(layout.max_time, 2**35) - 1))
    at = layout.epoch_ms + tick * layout.tick_ms
    worker = data.draw(st.integers(0, (1 << layout.worker_bits) - 1))
    sequence = data.draw(st.integers(0, (1 << layout.sequence_bits) - 1))
    minted = kind.build(timestamp_ms=at, worker=worker, sequence=sequence)
    # Any ms of the tick names it: a tick's IDs carry its start.
    within = at + data.draw(st.integers(0, layout.tick_ms - 1))
    assert kind.first_at(within) <= minted <= kind.last_at(within)
    assert kind.last_at(at - layout.tick_ms) < kind.first_at(at)
    assert kind.last_at(at) < kind.first_at(at + layout.tick_ms)
    low, high = kind.between(at, at + layout.tick_ms)
    assert (low, high) == (kind.first_at(at), kind.last_at(at))
    assert kind.orders_by_time()
