"""Property-based tests of the ID server over real HTTP: nothing a client sends gives a 5xx.

* schemathesis generates requests from the server's own ``/openapi.json`` (valid and
  invalid parameters, per operation) and checks every answer: no server error, a
  documented status and content type, a body that matches the documented schema.
* Hypothesis throws arbitrary path segments (raw and percent-encoded bytes, broken
  escapes) and query strings at ``/v1/decode/`` and ``/v1/ids``: every answer is below
  500 and is JSON, an error being ``{"error", "detail"}``.

Both are bounded (examples per operation, no deadline) to run in well under a minute.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from idmint.server.app import ROUTES
from idmint.server.config import ServerConfig
from idmint.server.openapi import openapi_document

if TYPE_CHECKING:
    import requests
    import schemathesis

EXAMPLES_PER_OPERATION = 100
FUZZ_EXAMPLES = 600


@pytest.fixture(scope="module")
def base_url(server_url: str) -> str:
    """The session's default server (``server_url`` from conftest.py), without the '/'."""
    return server_url.rstrip("/")


@pytest.fixture(scope="module")
def api_schema(base_url: str) -> schemathesis.BaseSchema:
    """The server's own /openapi.json, loaded by schemathesis."""
    import schemathesis

    schema: schemathesis.BaseSchema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    return schema


@pytest.fixture(scope="module")
def session(api_schema: schemathesis.BaseSchema) -> Iterator[requests.Session]:
    """A requests session (schemathesis's transport) that ignores proxy settings."""
    import requests

    with requests.Session() as http:
        http.trust_env = False
        yield http


# The operations, as the server describes them (the served document is this one: see
# test_api.py's OpenAPI test); the negative mode only where a parameter can be invalid
# (any string is a valid /static/{name}).
_DOCUMENT = openapi_document(ServerConfig(max_count=10_000), ROUTES)
OPERATIONS = [
    pytest.param(path, method.upper(), mode, id=f"{method.upper()} {path} {mode}")
    for path, methods in _DOCUMENT["paths"].items()
    for method, spec in methods.items()
    for mode in ("positive", "negative")
    if mode == "positive"
    or any(p["schema"] != {"type": "string"} for p in spec.get("parameters", []))
]


@pytest.mark.parametrize(("path", "method", "mode"), OPERATIONS)
def test_openapi_operations_never_fail(
    api_schema: schemathesis.BaseSchema,
    session: requests.Session,
    base_url: str,
    path: str,
    method: str,
    mode: str,
) -> None:
    """schemathesis cases for one operation: every check passes (no 5xx first of all)."""
    from schemathesis import GenerationMode
    from schemathesis.specs.openapi.checks import (
        negative_data_rejection,
        positive_data_acceptance,
    )

    operation = api_schema[path][method]
    # Any string is a schema-valid {id}, but only IDs of a scheme decode: a 422 for a
    # well-typed string is the documented answer, not a rejected valid request.
    excluded: list[schemathesis.CheckFunction] = (
        [positive_data_acceptance] if path in ID_PATHS else []
    )

    @given(case=operation.as_strategy(generation_mode=GenerationMode(mode)))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case[Any]) -> None:
        # The client (urllib3) removes dot segments: /v1/decode/.. would be sent as /v1/.
        assume((case.path_parameters or {}).get("id") not in (".", ".."))
        skip: list[schemathesis.CheckFunction] = list(excluded)
        if lenient(case):
            skip.append(negative_data_rejection)  # see test_decode_query_values_match_...
        case.call_and_validate(base_url=base_url, session=session, excluded_checks=skip)

    run()


ID_PATHS = ("/v1/decode/{id}", "/v1/whois/{id}")
"""The routes that read an ID from their path, with ``scheme`` and ``node_bits``."""


def lenient(case: schemathesis.Case[Any]) -> bool:
    """A schema-violating request the server accepts on purpose or by a known mismatch.

    * ``/v1/decode`` with ``scheme=`` empty, or ``node_bits`` without ``scheme``: the
      mismatch of test_decode_query_values_match_the_openapi_document (a bug);
    * an integer parameter sent as a string of ASCII digits in range, perhaps with
      spaces around or leading zeros (``" 5"``, ``"08"``): the server reads the number
      as written, which is deliberate leniency.
    """
    query = case.query or {}
    if case.path in ID_PATHS and (
        query.get("scheme") == "" or (query.get("scheme") is None and "node_bits" in query)
    ):
        return True
    for name, low, high in (("count", 1, 10_000), ("node_bits", 8, 16)):
        value = query.get(name)
        if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
            return low <= int(value.strip()) <= high
    return False


def documented_value(schema: dict[str, Any], value: str) -> bool:
    """Whether the query value ``value`` is allowed by the parameter ``schema``."""
    if "enum" in schema:
        return value in schema["enum"]
    if schema.get("type") == "integer":
        if not (value.isascii() and value.lstrip("-").isdigit()):
            return False
        number = int(value)
        low: int = schema.get("minimum", number)
        high: int = schema.get("maximum", number)
        return low <= number <= high
    return True


@pytest.mark.parametrize("query", ["scheme=", "node_bits=", "node_bits=0", "node_bits=99"])
def test_decode_query_values_match_the_openapi_document(base_url: str, query: str) -> None:
    with httpx.Client(base_url=base_url, trust_env=False) as http:
        document = http.get("/openapi.json").json()
        response = http.get(f"/v1/decode/0000000000004c97?{query}")
    parameters = document["paths"]["/v1/decode/{id}"]["get"]["parameters"]
    for name, values in parse_qs(query, keep_blank_values=True).items():
        schema = next(p["schema"] for p in parameters if p["name"] == name)
        if not documented_value(schema, values[-1]):
            assert response.status_code == 422, (query, response.text)


# -- hypothesis: arbitrary targets -------------------------------------------------------------

SAFE = "ABCDEFabcdefz0123456789-_.~!$&'()*+,;=:@"
"""Characters a request target may carry as they are (RFC 3986 pchar), '/' excepted."""


def raw_segment() -> st.SearchStrategy[str]:
    """A path segment: pchars as they are, '%XX' escapes of any byte, broken escapes."""
    piece = st.one_of(
        st.text(alphabet=SAFE, min_size=1, max_size=8),
        st.binary(min_size=1, max_size=6).map(lambda data: quote(data, safe="")),
        st.text(min_size=1, max_size=4).map(lambda text: quote(text, safe="")),
        st.sampled_from(["%", "%2", "%zz", "%2F", "/", "//", "%00", "%C0%AF", "..", "?"]),
    )
    return st.lists(piece, max_size=6).map("".join)


def raw_query() -> st.SearchStrategy[str]:
    """A query string: keys the routes know and others, values of any shape."""
    key = st.sampled_from(["count", "scheme", "node_bits", "x", "", "count[]", "%63ount"])
    value = st.one_of(
        st.integers(min_value=-(10**25), max_value=10**25).map(str),
        st.text(alphabet=SAFE + "%", max_size=12),
        st.text(max_size=6).map(lambda text: quote(text, safe="")),
        # Digits of every script (Nd) and other numerals ('²', '½': No), for the
        # number parsing of count and node_bits.
        st.text(alphabet=st.characters(categories=["Nd", "No"]), min_size=1, max_size=3).map(
            lambda text: quote(text, safe="")
        ),
        st.sampled_from(["uid64", "uid64-v1", "elastic64", "muid", "short60", "8", "16"]),
    )
    pair = st.one_of(
        st.tuples(key, value).map(lambda kv: f"{kv[0]}={kv[1]}"),
        key,
        st.sampled_from(["=", "&", ";", "==", "count==1"]),
    )
    return st.lists(pair, max_size=4).map("&".join)


def get(connection: http.client.HTTPConnection, target: str) -> tuple[int, dict[str, str], bytes]:
    connection.request("GET", target)
    response = connection.getresponse()
    body = response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


@pytest.fixture(scope="module")
def connection(base_url: str) -> Iterator[http.client.HTTPConnection]:
    address = urlsplit(base_url)
    assert address.hostname is not None
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    yield connection
    connection.close()


FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
"""How the raw-target tests run their examples."""


def checked_answer(connection: http.client.HTTPConnection, target: str) -> tuple[int, Any]:
    """``GET target``: its status and JSON, checked to be JSON below 500 (an error's
    JSON has ``error`` and ``detail`` and nothing else)."""
    status, headers, body = get(connection, target)
    assert status < 500, (target, status, body)
    assert headers.get("content-type") == "application/json", (target, status, headers)
    document = json.loads(body)
    if status != 200:
        assert set(document) == {"error", "detail"}, (target, document)
    return status, document


@given(segment=raw_segment(), query=raw_query())
@FUZZ
def test_decode_any_target_is_json_below_500(
    connection: http.client.HTTPConnection, segment: str, query: str
) -> None:
    target = f"/v1/decode/{segment}" + (f"?{query}" if query else "")
    status, document = checked_answer(connection, target)
    if status == 200:
        assert {"scheme", "id", "time"} <= set(document), document


@given(query=raw_query(), tail=st.sampled_from(["", "/", "%2F", "/x"]))
@FUZZ
def test_ids_any_query_is_json_below_500(
    connection: http.client.HTTPConnection, query: str, tail: str
) -> None:
    target = f"/v1/ids{tail}" + (f"?{query}" if query else "")
    status, document = checked_answer(connection, target)
    if status == 200:
        assert document["scheme"] == "uid64"
        assert 1 <= len(document["ids"]) <= 10_000
