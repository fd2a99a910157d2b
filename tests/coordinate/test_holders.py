"""Who held an identity: the history each claim's marks carry, kept bounded by count and
by age (the clock injected, not waited for), and what it makes of a store's garbage."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import pytest
from tests.cli_process import ps

from idmint.clock import ManualClock
from idmint.coordinate import connect
from idmint.coordinate.base import (
    HISTORY_KEPT,
    HISTORY_KEPT_MS,
    POD_NAME_VARIABLE,
    HighWaterMark,
    Holder,
    pod_name,
    process_started_ms,
)
from idmint.coordinate.spaces import GENERATOR
from idmint.factory import new_generator

MINUTE_MS = 60_000
IDENTITY = {"generator": 5, "cluster": 0}


def _claims_in_turn(url: str, clock: ManualClock, count: int, every_ms: int) -> HighWaterMark:
    """``count`` claims of the pool's one identity, one after another, ``every_ms`` apart;
    the mark they leave."""
    for _ in range(count):
        clock.advance_ms(every_ms)  # past the last holder's hold-off
        with new_generator("uid64", coordinator=url, clock=clock) as generator:
            minted = generator.generate()
            assert (minted.generator, minted.cluster) == (5, 0)
    with connect(url) as coordinator:
        mark = coordinator.read_mark(GENERATOR, IDENTITY)
    assert mark is not None
    return mark


def test_each_holder_is_recorded_newest_first_and_the_count_is_bounded() -> None:
    clock = ManualClock(start_ns=1_800_000_000_000 * 1_000_000)
    url = f"memory://holders-{uuid.uuid4().hex}?generators=5-5"
    mark = _claims_in_turn(url, clock, HISTORY_KEPT + 5, MINUTE_MS)
    assert len(mark.holders) == HISTORY_KEPT + 1
    firsts = [held.first_ms for held in mark.holders]
    assert firsts == sorted(firsts, reverse=True)
    newest = mark.holders[0]
    assert (newest.host, newest.pid) == (socket.gethostname(), os.getpid())
    assert newest.last_ms == mark.released_ms
    assert newest.ceiling_ms == mark.ceiling_ms
    # Each holder's IDs lie above the one before it: their spans do not overlap.
    for later, earlier in zip(mark.holders, mark.holders[1:], strict=False):
        assert later.floor_ms == earlier.ceiling_ms
        assert mark.holder_at(earlier.ceiling_ms) == earlier
        assert mark.holder_at(later.first_ms) == later
        assert mark.holder_at(earlier.ceiling_ms + 1) is None  # nobody held it in between


def test_holders_older_than_the_kept_age_are_dropped() -> None:
    clock = ManualClock(start_ns=1_800_000_000_000 * 1_000_000)
    url = f"memory://holders-{uuid.uuid4().hex}?generators=5-5"
    _claims_in_turn(url, clock, 3, MINUTE_MS)
    # Just within the age: the three are kept.
    kept = _claims_in_turn(url, clock, 1, HISTORY_KEPT_MS - 10 * MINUTE_MS)
    assert len(kept.holders) == 4
    # Past it: the three are dropped, the one just before is not.
    pruned = _claims_in_turn(url, clock, 1, 20 * MINUTE_MS)
    assert [held.first_ms for held in pruned.holders] == [
        pruned.holders[0].first_ms,
        kept.holders[0].first_ms,
    ]


def test_a_pod_is_named_by_pod_name_or_inside_kubernetes_by_hostname(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(POD_NAME_VARIABLE, raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert pod_name() is None
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("HOSTNAME", "idmint-7d9f-x2x")
    assert pod_name() == "idmint-7d9f-x2x"
    monkeypatch.setenv(POD_NAME_VARIABLE, "idmint-0")
    assert pod_name() == "idmint-0"
    clock = ManualClock(start_ns=1_800_000_000_000 * 1_000_000)
    mark = _claims_in_turn(
        f"memory://holders-{uuid.uuid4().hex}?generators=5-5", clock, 1, MINUTE_MS
    )
    assert mark.holders[0].pod == "idmint-0"


def test_the_process_start_is_this_process_s() -> None:
    elapsed_s = int(ps("-o", "etimes=", "-p", str(os.getpid())))
    assert process_started_ms() == pytest.approx((time.time() - elapsed_s) * 1000, abs=3_000)


def test_a_store_s_garbage_in_the_holders_spares_the_mark() -> None:
    """Anyone may write a store: unreadable holders are left out, the ceiling kept."""
    good = Holder("h", 1, 0, 10, 20, None, 5, 30).to_json()
    stored = {
        "ceiling_ms": 12345,
        "renewed_ms": 100,
        "holders": [
            good,
            "junk",
            {"host": "x"},
            {**good, "pid": "not a number"},
            {**good, "first_ms": 1e400},  # JSON's infinity: no int
            None,
        ],
    }
    mark = HighWaterMark.from_bytes(json.dumps(stored).encode())
    assert mark.ceiling_ms == 12345
    assert mark.holders == (Holder.from_json(good),)
    assert HighWaterMark.from_bytes(json.dumps({**stored, "holders": "x"}).encode()).holders == ()


def test_a_holder_covers_only_the_ids_above_its_floor_and_claim_up_to_its_ceiling() -> None:
    held = Holder("h", 1, 0, first_ms=1_000, last_ms=2_000, floor_ms=500, ceiling_ms=3_000)
    assert [held.covers(ms) for ms in (500, 999, 1_000, 3_000, 3_001)] == [
        False,
        False,
        True,
        True,
        False,
    ]
