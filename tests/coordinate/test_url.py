"""Coordinator URLs: every malformed part or option is a ConfigurationError that names it.

URLs are split by the standard library (``urllib.parse``), hosts checked with
``ipaddress``; what used to get through as a 40-line traceback from deep in a
driver now stops here with one sentence.
"""

from __future__ import annotations

import pytest

from idmint import ConfigurationError, new_generator
from idmint.coordinate import CoordinatorUrl, connect, driver, parse_url

MALFORMED = [
    ("zk://127.0.0.1:99999/x", "port '99999' of 127.0.0.1"),
    ("etcd://127.0.0.1:99999/x", "port '99999' of 127.0.0.1"),
    ("zk://[::1/x", "'[::1' have a '[' or ']' without its partner"),
    ("etcd://[::1/x", "'[::1' have a '[' or ']' without its partner"),
    ("zk://127.0.0.1:0/x", "port '0'"),
    ("zk://127.0.0.1:http/x", "port 'http'"),
    ("zk://999.1.1.1:2181/x", "999.1.1.1 is not an IPv4 address"),
    ("zk://[::zz]:2181/x", "[::zz] is not an IPv6 address"),
    ("zk://::1:2181/x", "write an IPv6 address in brackets"),
    ("zk://a b:2181/x", "'a b' is not a host name"),
    ("zk://h1:2181,,h2:2181/x", "an empty host"),
    ("etcd://[::1]x/p", "is not [host]:port"),
    ("zk://h:2181/x#top", "unexpected fragment"),
    ("zk://h:2181/x?a=1&a=2", "option a twice"),
    ("zk://h:2181/x?queue", "the query 'queue' is not name=value"),
    ("127.0.0.1:2181", "is not a URL"),
    ("://h:2181", "has no scheme"),
    ("nosuch://h:6379/x", "unknown coordinator scheme 'nosuch'"),
    # Options, as each driver's declaration reads them (coordinate/options.py).
    (
        "memory://m?bogus=1",
        "memory:// does not take option(s) bogus; it takes claim_timeout, cluster, "
        "connect_timeout, generators, margin, skew, ttl, wait_timeout",
    ),
    (
        "static://?generators=0-3",
        "static:// does not take option(s) generators; it takes block, cluster, first, "
        "generator, node, node_bits, ordinal",
    ),
    ("memory://m?ttl=0.1", "memory:// option ttl must be at least 0.5, got 0.1"),
    ("local:///srv/ids?ttl=x", "local:// option ttl must be a number, got 'x'"),
    ("memory://m?generators=0-65536", "generators=0-65536 must satisfy 0 <= LO <= HI <= 65535"),
    ("memory://m?generators=a-b", "generators must look like LO-HI (e.g. 0-63), got 'a-b'"),
    ("memory://m?cluster=16", "memory:// option cluster 16 is out of range; expected 0..15"),
    ("memory://m?skew=-1", "memory:// option skew must be at least 0, got -1"),
    ("zk://h:2181/r?session_timeout=0.5", "zk:// option session_timeout must be at least 1"),
    ("zk://h:2181/r?queue=maybe", "zk:// option queue must be true or false, got 'maybe'"),
    (
        "zk://h:2181/r?group_size=300",
        "zk:// option group_size 300 is out of range; expected 9..256",
    ),
    ("etcd://h:2379/p?ttl=2.5", "etcd:// option ttl must be whole seconds, got 2.5"),
    ("etcd://h:2379/p?tls=maybe", "etcd:// option tls must be true or false, got 'maybe'"),
    ("postgresql://u@h/db?table=a-b", "postgresql:// option table must be a plain identifier"),
    ("postgresql://u@h/db?max_ttl=0.5", "postgresql:// option max_ttl must be at least 1"),
    (
        "redis://h/0?ttl=20",
        "redis://h/0?ttl=20: ttl=20 is longer than max_ttl=10, the longest lease the pool "
        "allows; give every claimant of the pool max_ttl=20 (or more), the same for all",
    ),
    ("redis://h/0?prefix=", "redis://h/0?prefix=: option prefix must be non-empty"),
    ("static://?ordinal=node", "static:// option ordinal must be pod, got 'node'"),
    ("static://?first=2", "static:// option first goes with ordinal=pod"),
    ("static://?ordinal=pod&node=3", "static://?ordinal=pod takes the node from the pod's index"),
]


@pytest.mark.parametrize(("url", "says"), MALFORMED, ids=[url for url, _ in MALFORMED])
def test_malformed_urls_name_the_part_that_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        connect(url)
    assert says in str(refused.value)
    with pytest.raises(ConfigurationError):
        new_generator("uid64", coordinator=url)


def test_passwords_never_appear_in_errors() -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse_url("zk://admin:hunter2@[::1/x")
    assert "hunter2" not in str(refused.value)
    assert "admin:***@" in str(refused.value)


@pytest.mark.parametrize(
    ("url", "hosts", "path"),
    [
        ("zk://h1:2181,h2:2182/root", (("h1", 2181), ("h2", 2182)), "/root"),
        ("zk://[::1]:2181,10.0.0.5/r", (("::1", 2181), ("10.0.0.5", 0)), "/r"),
        ("etcd://u:p%40ss@etcd-1.example:2379", (("etcd-1.example", 2379),), ""),
        ("local:///run/idmint", (), "/run/idmint"),
        ("memory://pool_1", (("pool_1", 0),), ""),
        ("static://?generator=5", (), ""),
    ],
)
def test_well_formed_urls_split_as_written(
    url: str, hosts: tuple[tuple[str, int], ...], path: str
) -> None:
    parsed = parse_url(url)
    assert (parsed.hosts, parsed.path) == (hosts, path)


def test_credentials_are_percent_decoded() -> None:
    parsed = parse_url("etcd://u%3Ax:p%40ss@h:2379/p")
    assert (parsed.username, parsed.password) == ("u:x", "p@ss")
    assert "p@ss" not in parsed.redacted()


@pytest.mark.parametrize(
    ("url", "within"),
    [
        (
            "zk://u:p%40ss@[::1]:2181,h2/idmint?queue=false",
            "zk://u:p%40ss@[::1]:2181,h2/idmint/kit_1?queue=false",
        ),
        ("zk://h:2181", "zk://h:2181/idmint/kit_1"),
        ("etcd://h:2379/ids/?ttl=2", "etcd://h:2379/ids/kit_1?ttl=2"),
        (
            "postgresql://u@h/db?sslmode=disable",
            "postgresql://u@h/db?sslmode=disable&table=idmint_claims_kit_1",
        ),
        ("redis://h/0?prefix=app", "redis://h/0?prefix=app:kit_1"),
        ("memory://pool", "memory://pool-kit_1"),
        ("local:///srv/ids?ttl=2", "local:///srv/ids/kit_1?ttl=2"),
    ],
)
def test_a_pool_within_a_url_is_the_drivers_own_kind_of_root(url: str, within: str) -> None:
    """Where the contract kit claims: under the URL's root, beside its table; the rest kept."""
    parsed = parse_url(url)
    found = driver(parsed.scheme).pool_within(parsed, "kit_1")
    assert found is not None
    expected = parse_url(within)
    assert (found.hosts, found.path, found.options) == (
        expected.hosts,
        expected.path,
        expected.options,
    )
    assert (found.scheme, found.username, found.password) == (
        parsed.scheme,
        parsed.username,
        parsed.password,
    )


@pytest.mark.parametrize("url", ["static://?generator=5", "local://"])
def test_a_url_that_names_one_pool_has_none_within(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("IDMINT_LOCAL_DIR", raising=False)
    parsed = parse_url(url)
    assert driver(parsed.scheme).pool_within(parsed, "kit_1") is None


def test_a_url_is_parsed_once_and_keeps_its_parts_when_changed() -> None:
    parsed = CoordinatorUrl.parse("zk://admin:s3cret@h1:2181/root?session_timeout=2")
    assert CoordinatorUrl.parse(parsed) is parsed
    moved = parsed.replace(hosts=[("127.0.0.1", 1)], options={"connect_timeout": 1})
    assert moved.hosts == (("127.0.0.1", 1),)
    assert (moved.path, moved.username, moved.password) == ("/root", "admin", "s3cret")
    assert moved.options == {"connect_timeout": "1"}
    assert "s3cret" not in moved.redacted()
