"""Coordinator URLs: every malformed part is a ConfigurationError that names it.

URLs are split by the standard library (``urllib.parse``), hosts checked with
``ipaddress``; what used to get through as a 40-line traceback from deep in a
driver now stops here with one sentence.
"""

from __future__ import annotations

import pytest

from idmint import ConfigurationError, new_generator
from idmint.coordinate import connect, parse_url

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
    ("consul://h:8500/x", "unknown coordinator scheme 'consul'"),
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
