"""Generators that claim nothing (muid; short60 with random bits) are still one node each.

A muid generator given a medallion is that medallion's only minter by the user's
word alone: nothing claims or locks it. Several generators made from the one
option (``new_generators``, a server's ``--generators`` or its workers) would
each mint the same IDs, so the factory refuses to make more than one.
"""

from __future__ import annotations

import pytest

from idmint.clock import ManualClock
from idmint.errors import ConfigurationError
from idmint.factory import new_generators

NOW_NS = 1_700_000_000_000_000_000


@pytest.mark.parametrize(("count", "offset"), [(2, 0), (1, 1)])
def test_a_medallion_given_makes_one_generator_only(count: int, offset: int) -> None:
    with pytest.raises(ConfigurationError, match="medallion given is one muid generator's alone"):
        new_generators("muid", count, offset=offset, medallion=5)


def test_one_generator_takes_the_medallion_given() -> None:
    (generator,) = new_generators("muid", 1, medallion=5)
    assert generator.generate().medallion == 5


def test_generators_with_no_medallion_given_mint_apart_at_the_same_instant() -> None:
    clock = ManualClock(NOW_NS)
    made = new_generators("muid", 4, clock=clock)
    assert len({generator.medallion for generator in made}) == 4
    assert len({generator.generate() for generator in made}) == 4


def test_short60_generators_with_random_bits_take_no_node() -> None:
    with pytest.raises(ConfigurationError, match="random bits or a node ID"):
        new_generators("short60", 1, random=True, node=3)
    assert len(new_generators("short60", 3, random=True)) == 3
