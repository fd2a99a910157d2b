"""Identity spaces: each declared once, and every store's layout derived from it.

The layouts are stored (java-uniqueid reads the generator space; pools on disk
and in stores hold the others), so they are written here as literals, as they
stand in those stores: a change to a space's declaration that moved one fails
here. The integration tests read them in the real stores.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.claims_helpers import settled_local_directory

from idmint import ConfigurationError
from idmint.coordinate import Coordinator, connect
from idmint.coordinate.local import lock_key
from idmint.coordinate.redis import RedisStore
from idmint.coordinate.spaces import GENERATOR, NODE, SHORT60, SPACES, UUID7, Space
from idmint.coordinate.static import StaticOptions

SNOWFLAKE_WIDTHS = range(1, 17)


def test_the_spaces_and_their_stored_names() -> None:
    snowflake = [f"snowflake-w{width}" for width in SNOWFLAKE_WIDTHS]
    assert [space.name for space in SPACES] == ["generator", "node", "short60", "uuid7", *snowflake]
    assert [(space.size, space.clusters) for space in SPACES] == [
        (2048, 16),
        (256, 1),
        (512, 1),
        (65536, 1),
        *((1 << width, 1) for width in SNOWFLAKE_WIDTHS),
    ]
    assert {space.counted for space in SPACES[4:]} == {"worker"}


@pytest.mark.parametrize(
    ("space", "root"),
    [
        (GENERATOR, "/idmint"),
        (NODE, "/idmint/node"),
        (SHORT60, "/idmint/short60"),
        (UUID7, "/idmint/uuid7"),
        (Space.of("snowflake-w16"), "/idmint/snowflake-w16"),
    ],
    ids=str,
)
def test_a_tree_keeps_java_uniqueids_space_at_its_root_and_the_others_under_their_name(
    space: Space, root: str
) -> None:
    assert space.within("/idmint") == root


@pytest.mark.parametrize(
    ("space", "identity", "key"),
    [
        (GENERATOR, {"generator": 5, "cluster": 2}, "2-5"),
        (GENERATOR, {"generator": 2047}, "0-2047"),
        (NODE, {"node": 7}, "7"),
        (NODE, {"node": 300, "node_bits": 11}, "44"),  # held by its low 8 bits
        (SHORT60, {"node": 511}, "511"),
        (UUID7, {"node": 65535}, "65535"),
        (Space.of("snowflake-w10"), {"worker": 1023}, "1023"),
        (Space.of("snowflake-w16"), {"worker": 65535}, "65535"),
    ],
)
def test_this_hosts_lock_keys(space: Space, identity: dict[str, int], key: str) -> None:
    assert lock_key(space, identity) == key


def test_redis_keeps_a_hash_per_space() -> None:
    store = RedisStore(None, "orders", "redis://h/0", 2.0)  # type: ignore[arg-type]
    assert [store.key(space) for space in SPACES] == [
        "orders:generator",
        "orders:node",
        "orders:short60",
        "orders:uuid7",
        *(f"orders:snowflake-w{width}" for width in SNOWFLAKE_WIDTHS),
    ]


def test_what_a_claim_of_each_space_grants() -> None:
    assert GENERATOR.identity(5, 2) == {"generator": 5, "cluster": 2}
    assert NODE.identity(5) == {"node": 5}
    assert SHORT60.identity(5, 3) == {"node": 5}  # no clusters: none named
    for space in SPACES:
        assert space.numbered(space.identity(9, 1 if space.clustered else 0)) == (
            1 if space.clustered else 0,
            9,
        )
    assert (GENERATOR.fields, NODE.fields, SHORT60.fields) == (
        ("generator", "cluster"),
        ("node", "node_bits"),
        ("node",),
    )


def test_a_space_is_found_by_its_name_and_an_unknown_one_is_refused() -> None:
    assert Space.of("node") is NODE
    assert Space.of(SHORT60) is SHORT60
    with pytest.raises(ConfigurationError, match="no identity space is called 'nodes'"):
        Space.of("nodes")


def test_static_takes_every_field_of_every_space() -> None:
    # A configured identity of any space can be written in a static:// URL.
    fields = {name for space in SPACES for name in space.fields}
    assert fields <= set(StaticOptions.names())


TOY = Space("worker", "worker", 1 << 16, "a toy's worker IDs")
"""A space declared in a test: what a new one (snowflake's worker IDs) is."""


@pytest.fixture
def with_toy_space(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Coordinator, "spaces", (*SPACES, TOY))


@pytest.mark.usefixtures("with_toy_space")
def test_a_new_space_needs_nothing_but_its_declaration() -> None:
    directory = settled_local_directory()
    for url in ("memory://toy-space?ttl=1", f"local://{directory}"):
        with connect(url) as coordinator:
            first = coordinator.claim(space=TOY, pool=range(40, 42))
            second = coordinator.claim(space=TOY, pool=range(40, 42))
            try:
                granted = sorted(dict(claim.identity or {})["worker"] for claim in (first, second))
                assert granted == [40, 41], url
            finally:
                first.close()
                second.close()
    assert sorted(path.name for path in (Path(directory) / "worker").glob("*.mark")) == [
        "40.mark",
        "41.mark",
    ]
