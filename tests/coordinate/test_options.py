"""URL options: each declared once, and what is made from the declaration.

A driver's options are the fields of one class (:mod:`idmint.coordinate.options`).
Here: reading a URL refuses what is not declared and checks each value with the
messages it always had; the driver module's table and docs/coordination.md's
tables are the declarations; a URL written from values reads back as them.
"""

from __future__ import annotations

import dataclasses
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from idmint.coordinate import Coordinator, driver, parse_url
from idmint.coordinate.leases import LeaseOptions
from idmint.coordinate.options import (
    ClaimOptions,
    TlsOptions,
    UrlOptions,
    markdown_rows,
    options_table,
)
from idmint.coordinate.static import StaticOptions
from idmint.errors import ConfigurationError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "coordination.md"
MARK = "<!-- options: "

DRIVERS: dict[type[Coordinator], list[str]] = {}
"""idmint's drivers, each with the URL schemes it is registered for."""
for _entry in entry_points(group="idmint.coordinators"):
    if _entry.dist is not None and _entry.dist.name == "idmint":
        DRIVERS.setdefault(driver(_entry.name), []).append(_entry.name)


def _docs_tables() -> dict[str, list[str]]:
    """The rows of each options table in docs/coordination.md, by its marker's name."""
    tables: dict[str, list[str]] = {}
    lines = DOCS.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.startswith(MARK):
            name = line.removeprefix(MARK).removesuffix(" -->")
            assert lines[index + 1 : index + 3] == [
                "| option | default | meaning |",
                "|---|---|---|",
            ]
            rows = tables[name] = []
            for row in lines[index + 3 :]:
                if not row.startswith("|"):
                    break
                rows.append(row)
    return tables


def test_the_docs_tables_are_the_declarations() -> None:
    tables = _docs_tables()
    assert tables.pop("claiming") == list(markdown_rows(ClaimOptions))
    for coordinator, schemes in DRIVERS.items():
        named = [scheme for scheme in schemes if scheme in tables]
        assert len(named) == 1, f"{coordinator.__name__}: one table, under one of {schemes}"
        assert tables.pop(named[0]) == list(markdown_rows(coordinator.options_type, own=True))
    assert tables == {}, "tables of options no driver declares"


def test_each_drivers_docstring_shows_the_options_it_declares() -> None:
    for coordinator in DRIVERS:
        doc = sys.modules[coordinator.__module__].__doc__ or ""
        assert options_table(coordinator.options_type) in doc, coordinator.__module__
        assert "{options}" not in doc


SAMPLES = {
    "pool": range(3, 8),
    "cluster": 2,
    "claim_timeout_s": 1.5,
    "connect_timeout_s": 0.5,
    "wait_timeout_s": 2.25,
    "margin_s": 0.3,
    "skew_ms": 250,
    "ttl_s": 4.0,
    "max_ttl_s": 12.0,
    "timeout_s": 0.75,
    "session_timeout_s": 3.0,
    "queue": False,
    "group_size": 16,
    "tls": True,
    "ca": "/etc/ca.pem",
    "cert": "/etc/cert.pem",
    "key": "/etc/key.pem",
    "schema": "ids",
    "table": "claims_2",
    "prefix": "orders:eu",
    "generator": 7,
    "node": 9,
    "node_bits": 10,
    "worker": 11,
    "ordinal": "pod",
    "block": 4,
    "first": 100,
}
"""A value other than the default for every option idmint declares (by attribute)."""


def _options_classes() -> list[type[UrlOptions]]:
    drivers = sorted({c.options_type for c in DRIVERS}, key=lambda options: options.__name__)
    return [ClaimOptions, LeaseOptions, TlsOptions, *drivers]


@pytest.mark.parametrize("options", _options_classes(), ids=lambda options: options.__name__)
def test_a_url_written_from_values_reads_back_as_them(options: type[UrlOptions]) -> None:
    base = parse_url("scheme://host:1/root")
    assert options.from_url(base) == options(), "the defaults are the fields' own"
    for declared in options.declared():
        value = SAMPLES[declared.attribute]
        url = base.replace(options=options.query(**{declared.attribute: value}))
        # Read by its kind alone: some options go only with others (static's block).
        assert declared.kind.read(url, declared.name) == value, declared.name
        assert value != declared.default


def test_static_ordinal_gives_each_counted_field_the_pods_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IDMINT_POD_INDEX", "3")
    url = parse_url("static://?ordinal=pod&block=4&first=100&cluster=2&node_bits=10")
    fields = StaticOptions.from_url(url).fields()
    assert fields == {
        "generator": 112,
        "cluster": 2,
        "node": 112,
        "node_bits": 10,
        "worker": 112,
    }


def test_postgresql_gives_every_other_option_to_libpq() -> None:
    url = parse_url("postgresql://u@h/db?sslmode=require&table=t&application_name=x")
    from idmint.coordinate.postgres import PostgresOptions

    assert PostgresOptions.others(url) == {"sslmode": "require", "application_name": "x"}
    assert PostgresOptions.from_url(url).table == "t"


def test_tls_follows_the_scheme_unless_the_url_says_otherwise() -> None:
    def tls(text: str) -> bool:
        url = parse_url(text)
        return TlsOptions.from_url(url).uses_tls(url, "etcds")

    assert (tls("etcd://h"), tls("etcds://h")) == (False, True)
    assert (tls("etcds://h?tls=false"), tls("etcd://h?tls=true")) == (False, True)
    assert tls("etcd://h?ca=/etc/ca.pem")


@pytest.mark.parametrize("scheme", ["etcds", "mysql"])
def test_a_client_certificate_that_cannot_be_loaded_is_the_urls_mistake(
    scheme: str, tmp_path: Path
) -> None:
    """Every driver that makes its own TLS context loads ``cert=`` the same way: an
    unusable file is a ConfigurationError naming it, before anything is sent."""
    cert = tmp_path / "client.pem"
    cert.write_text("not a certificate\n")
    url = parse_url(f"{scheme}://127.0.0.1:1/db?tls=true&cert={cert}&connect_timeout=0.1")
    with pytest.raises(ConfigurationError, match=f"cannot load the client certificate cert={cert}"):
        driver(scheme)(url)


def test_an_option_is_a_field_and_the_field_the_option() -> None:
    # The declaration is the dataclass: a driver's class adds fields, nothing else.
    for options in _options_classes():
        attributes = {field.name for field in dataclasses.fields(options)}
        assert attributes == {declared.attribute for declared in options.declared()}
