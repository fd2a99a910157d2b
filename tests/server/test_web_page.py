"""The server's web page, driven in Debian's Chromium by Playwright against a real server.

Playwright never downloads a browser here: it launches the system Chromium
(``/usr/bin/chromium``, or ``$IDMINT_CHROMIUM``); without either the tests skip.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright import sync_api
from tests.server.server_helpers import IdmintServer

from idmint import parse_id
from idmint.errors import InvalidId
from idmint.schemes import Muid, Snowflake, Uid64

CHROMIUM = os.environ.get("IDMINT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SCREENSHOT = ROOT / "artifacts" / "web-page.png"
TIMEOUT_MS = 5_000


# -- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # scripts/test installs Debian's chromium; a missing browser is a failure, not a skip.
    assert Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}; set IDMINT_CHROMIUM"
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@contextlib.contextmanager
def opened_tab(browser: Any, width: int) -> Iterator[Any]:
    """A fresh tab ``width`` px wide (own sessionStorage); fails the test on any
    uncaught script error."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    script_errors: list[str] = []
    opened.on("pageerror", lambda error: script_errors.append(str(error)))
    try:
        yield opened
    finally:
        context.close()
    assert script_errors == []


WIDTHS = {"desktop": 1280, "phone": 390}


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    with opened_tab(browser, WIDTHS["desktop"]) as opened:
        yield opened


@pytest.fixture(params=list(WIDTHS.values()), ids=list(WIDTHS))
def tab(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh tab, once 1280 and once 390 px wide."""
    with opened_tab(browser, request.param) as opened:
        yield opened


def golden(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def expected_fields(text: str, scheme: str | None = None, **options: Any) -> dict[str, str]:
    """What ``idmint decode`` prints for ``text``, as the page shows it (text)."""
    return {k: str(v) for k, v in parse_id(text, scheme, **options).to_dict().items()}


def shown_fields(tab: Any) -> dict[str, str]:
    rows = tab.locator("#fields tbody tr")
    return {
        row.get_attribute("data-field"): row.locator("td.value").inner_text() for row in rows.all()
    }


def bit_cells(tab: Any, field: str | None = None) -> list[tuple[int, str]]:
    """(bit number, shown digit) of the picture's cells, optionally of one field."""
    selector = "#bits .bit" + (f'[data-field="{field}"]' if field else "")
    cells = tab.eval_on_selector_all(
        selector, "cells => cells.map(c => [Number(c.dataset.bit), c.textContent])"
    )
    return [(int(bit), str(digit)) for bit, digit in cells]


def field_bits(tab: Any, field: str) -> str:
    return "".join(digit for _, digit in bit_cells(tab, field))


def decode_text(tab: Any, text: str, scheme: str = "", node_bits: int | None = None) -> None:
    """Type an ID and press Enter (the form is keyboard-driven)."""
    tab.fill("#id-input", text)
    tab.select_option("#scheme-select", scheme)
    if node_bits is not None:
        tab.fill("#node-bits", str(node_bits))
    tab.press("#id-input", "Enter")


def wait_for_result(tab: Any, canonical: str) -> None:
    sync_api.expect(tab.locator("#result-title")).to_have_text(canonical)
    sync_api.expect(tab.locator("#decode-result")).to_be_visible()


def mint(tab: Any, count: int) -> list[str]:
    tab.fill("#mint-count", str(count))
    tab.click("#mint-button")
    sync_api.expect(tab.locator("#minted button")).to_have_count(count)
    return [str(text) for text in tab.locator("#minted button").all_inner_texts()]


def answer_with(body: dict[str, Any]) -> Callable[[Any], None]:
    """A Playwright route handler answering 200 with ``body`` as JSON."""

    def handle(route: Any) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    return handle


# -- tests -------------------------------------------------------------------------------------
def test_page_and_its_files_are_served_without_external_resources(server_url: str) -> None:
    kinds = {
        "": "text/html",
        "static/index.html": "text/html",
        "static/app.js": "text/javascript",
        "static/style.css": "text/css",
    }
    for path, kind in kinds.items():
        with urllib.request.urlopen(server_url + path, timeout=5) as response:
            assert response.headers["content-type"].startswith(kind)
            body = response.read().decode()
        # No CDN, web font or absolute API URL: the page works offline and behind a prefix.
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", body), path
        assert not re.search(r"""url\(\s*["']?(?:https?:)?//|@import|fetch\(\s*["'`]/""", body)


def test_mint_then_decode_a_minted_id(page: Any, server_url: str) -> None:
    page.goto(server_url)
    sync_api.expect(page.locator("#server-scheme")).to_have_text("uid64")
    ids = mint(page, 4)
    assert len(set(ids)) == 4
    assert all(re.fullmatch(r"[0-9a-f]{16}", text) for text in ids)

    chosen = ids[2]
    button = page.locator(f'#minted button[data-id="{chosen}"]')
    button.focus()
    page.keyboard.press("Enter")  # a real button: works from the keyboard
    wait_for_result(page, chosen)
    sync_api.expect(button).to_have_attribute("aria-current", "true")
    assert page.input_value("#scheme-select") == "uid64"
    assert page.input_value("#id-input") == chosen

    expected = expected_fields(chosen, "uid64")
    assert shown_fields(page) == expected
    assert page.locator("#decode-warning").is_hidden()

    # The picture: 64 cells, bit 63 first, spelling the ID's bits.
    value = Uid64(chosen)
    cells = bit_cells(page)
    assert [bit for bit, _ in cells] == list(range(63, -1, -1))
    assert "".join(digit for _, digit in cells) == f"{int(value):064b}"
    # Each field where the layout puts it; the 11-bit generator is split by the mode bit.
    layout = {
        "timestamp": (63, 22),
        "sequence": (21, 16),
        "generator-high": (15, 13),
        "mode": (12, 12),
        "generator-low": (11, 4),
        "cluster": (3, 0),
    }
    for field, (high, low) in layout.items():
        assert [bit for bit, _ in bit_cells(page, field)] == list(range(high, low - 1, -1))
    assert field_bits(page, "sequence") == f"{value.sequence:06b}"
    assert field_bits(page, "generator-high") + field_bits(page, "generator-low") == (
        f"{value.generator:011b}"
    )
    assert field_bits(page, "mode") == "0"  # spread, the server's default
    assert field_bits(page, "cluster") == f"{value.cluster:04b}"
    legend = page.locator('#legend tr[data-field="sequence"] td.value')
    sync_api.expect(legend).to_have_text(str(value.sequence))


def test_the_decoder_names_who_minted_an_id(page: Any, server_url: str) -> None:
    page.goto(server_url)
    [minted] = mint(page, 1)
    page.locator(f'#minted button[data-id="{minted}"]').click()
    wait_for_result(page, minted)
    with urllib.request.urlopen(f"{server_url}v1/whois/{minted}") as answer:
        holder = json.load(answer)
    shown = page.locator("#result-holder")
    sync_api.expect(shown).to_contain_text(f"Minted by {holder['host']} pid {holder['pid']}")
    # An ID of a time before this server held its identity: nobody is recorded.
    decode_text(page, "aa83952c79bf88d5", "uid64")
    wait_for_result(page, "aa83952c79bf88d5")
    sync_api.expect(shown).to_contain_text("no holder of the identity")


def test_the_server_card_shows_lifetime_and_pool(page: Any, server_url: str) -> None:
    page.goto(server_url)
    sync_api.expect(page.locator("#lifetime")).to_contain_text(
        "uid64 IDs can hold times up to 2109-05-15"
    )
    # The pool as the claim last saw it (its view may be refreshed at any minute).
    sync_api.expect(page.locator("#claims tbody tr .pool")).to_have_text(
        re.compile(r"pool: \d+ of 2048 free")
    )


def test_decode_a_pasted_muid(page: Any, server_url: str) -> None:
    row = golden("muid.csv")[0]
    dashed = Muid(row["hex"]).dashed
    page.goto(server_url)
    decode_text(page, dashed)  # scheme guessed from the dashed 14-13-5 shape
    wait_for_result(page, row["hex"])

    shown = shown_fields(page)
    assert shown == expected_fields(dashed)
    for name in ("timestamp_us", "medallion", "offset"):
        assert shown[name] == row[name]
    assert len(bit_cells(page)) == 128
    assert field_bits(page, "timestamp") == f"{int(row['timestamp_us']):056b}"
    assert field_bits(page, "medallion") == f"{int(row['medallion']):052b}"
    assert field_bits(page, "offset") == f"{int(row['offset']):020b}"


def test_decode_a_pasted_short60_beyond_javascript_numbers(page: Any, server_url: str) -> None:
    # An odd int above 2**53: JSON.parse alone would round it.
    row = next(r for r in golden("short60.csv") if int(r["int"]) > 2**53 and int(r["int"]) % 2)
    page.goto(server_url)
    decode_text(page, row["display"], "short60")
    wait_for_result(page, row["display"])

    shown = shown_fields(page)
    assert shown == expected_fields(row["display"], "short60")
    assert shown["int"] == row["int"]
    assert (shown["sequence"], shown["node"]) == (row["sequence"], row["random"])
    cells = bit_cells(page)
    assert len(cells) == 60
    assert cells[0][0] == 59
    assert "".join(digit for _, digit in cells) == f"{int(row['int']):060b}"
    assert field_bits(page, "sequence") == f"{int(row['sequence']):09b}"
    assert field_bits(page, "node") == f"{int(row['random']):09b}"


def test_decode_elastic64_with_its_node_bits(page: Any, server_url: str) -> None:
    row = next(
        r
        for r in golden("elastic64.csv")
        if r["node_bits"] == "11" and r["burst"] != "0" and r["timestamp_ms"] != "0"
    )
    page.goto(server_url)
    decode_text(page, row["id"], "elastic64", node_bits=11)
    wait_for_result(page, row["id"])
    assert shown_fields(page) == expected_fields(row["id"], "elastic64", node_bits=11)
    assert field_bits(page, "burst") == f"{int(row['burst']):05b}"
    assert field_bits(page, "node") == f"{int(row['node']):011b}"

    # Another width re-decodes at once and moves the burst/node boundary.
    page.fill("#node-bits", "13")
    page.press("#node-bits", "Tab")
    sync_api.expect(page.locator('#fields tr[data-field="node_bits"] td.value')).to_have_text("13")
    assert shown_fields(page) == expected_fields(row["id"], "elastic64", node_bits=13)
    assert len(bit_cells(page, "burst")) == 3
    assert len(bit_cells(page, "node")) == 13


def test_decode_a_tweet_draws_twitters_layout(page: Any, server_url: str) -> None:
    text = "1212092628029698048"
    page.goto(server_url)
    decode_text(page, text, "snowflake")
    wait_for_result(page, text)
    assert shown_fields(page) == expected_fields(text, "snowflake")
    assert shown_fields(page)["timestamp_ms"] == "1577820376771"
    assert page.locator("#decode-warning").is_hidden()
    assert field_bits(page, "sign") == "0"
    assert len(bit_cells(page, "timestamp")) == 41
    assert field_bits(page, "worker") == f"{327:010b}"
    assert field_bits(page, "sequence") == "0" * 12


def test_a_sonyflake_servers_page_draws_sonyflakes_layout(
    page: Any, start_idmint_server: Callable[..., str], tmp_path: Path
) -> None:
    """The server reads its scheme's IDs in the layout it mints (``--layout``), and
    its API description tells the page which, so the picture is Sonyflake's: the
    sequence above a 16-bit worker, 39 bits of 10 ms ticks."""
    url = start_idmint_server(
        "--scheme", "snowflake", "--layout", "sonyflake", "--coordinator", f"local://{tmp_path}"
    )
    page.goto(url)
    minted = mint(page, 2)
    page.locator("#minted button").first.click()
    wait_for_result(page, minted[0])
    expected = {k: str(v) for k, v in Snowflake.of("sonyflake")(minted[0]).to_dict().items()}
    assert shown_fields(page) == expected
    assert page.locator("#decode-warning").is_hidden()
    value = int(minted[0])
    assert [len(bit_cells(page, f)) for f in ("sign", "timestamp", "sequence", "worker")] == [
        1,
        39,
        8,
        16,
    ]
    assert field_bits(page, "worker") == f"{value & 0xFFFF:016b}"
    assert field_bits(page, "sequence") == f"{value >> 16 & 0xFF:08b}"
    # A deep link is drawn in the server's layout too, not Twitter's.
    page.goto(f"{url}?id={minted[1]}&scheme=snowflake")
    wait_for_result(page, minted[1])
    assert len(bit_cells(page, "worker")) == 16
    assert page.locator("#decode-warning").is_hidden()


@pytest.mark.parametrize(
    ("text", "scheme"),
    [("not*an*id", ""), ("1234567890123456", ""), ("ffffffffffffffff", "uid64-v1")],
    ids=["shape", "ambiguous", "reserved-bits"],
)
def test_invalid_id_shows_the_servers_error(
    page: Any, server_url: str, text: str, scheme: str
) -> None:
    with pytest.raises(InvalidId) as raised:
        parse_id(text, scheme or None)
    page.goto(server_url)
    decode_text(page, text, scheme)
    error = page.locator("#decode-error")
    sync_api.expect(error).to_be_visible()
    sync_api.expect(error.locator(".error-title")).to_have_text("invalid ID")
    sync_api.expect(error).to_contain_text("HTTP 422")
    sync_api.expect(error.locator(".error-detail")).to_have_text(str(raised.value))
    assert page.locator("#decode-result").is_hidden()


def test_empty_input_asks_for_an_id(page: Any, server_url: str) -> None:
    page.goto(server_url)
    page.click("#decode-button")
    sync_api.expect(page.locator("#decode-error")).to_contain_text("Paste or type an ID")
    assert page.evaluate("document.activeElement.id") == "id-input"


def test_server_panel_shows_health_claims_and_services(page: Any, server_url: str) -> None:
    page.goto(server_url)
    sync_api.expect(page.locator("#health")).to_have_text("healthy")
    sync_api.expect(page.locator("#claims tbody tr")).to_have_count(1)
    # No coordinator given: a generator ID claimed from this host's pool, whichever
    # was free when the server started (other test servers may hold the first ones).
    with urllib.request.urlopen(server_url + "v1/claims") as answer:
        [row] = json.load(answer)["claims"]
    assert re.fullmatch(r"generator \d+ cluster 0", row["identity"]), row
    sync_api.expect(page.locator("#claims tbody th")).to_have_text(row["identity"])
    sync_api.expect(page.locator("#coordinator")).to_contain_text("pool, the default")
    sync_api.expect(page.locator("#coordinator")).to_contain_text("local://")
    sync_api.expect(page.locator("#services")).to_contain_text("No discovery tree configured")

    # A server with a coordinator and discovery: the same page, answers stubbed.
    claims = {
        "scheme": "uid64",
        "coordinator": "zk://zk1:2181/idmint",
        "claims": [
            {
                "identity": "generator 7 cluster 2",
                "state": "held",
                "usable": True,
                "high_water_mark_ms": 1767225600000,
                "coordinator": "zk://zk1:2181/idmint",
                "problem": None,
            },
            {
                "identity": "generator 8 cluster 2",
                "state": "suspended",
                "usable": False,
                "high_water_mark_ms": None,
                "coordinator": "zk://zk1:2181/idmint",
                "problem": "connection lost",
            },
        ],
    }
    services = {
        "services": {
            "idmint": [
                {
                    "node": 3,
                    "host": "10.0.0.5",
                    "port": 8000,
                    "endpoints": ["ids", "ids:uid64"],
                    "metadata": {"scheme": "uid64"},
                }
            ]
        },
        "endpoints": {"ids": {"_": [3]}},
        "configured": True,
    }
    page.route("**/v1/claims", answer_with(claims))
    page.route("**/v1/services", answer_with(services))
    page.click("#refresh")
    rows = page.locator("#claims tbody tr")
    sync_api.expect(rows).to_have_count(2)
    sync_api.expect(rows.nth(0)).to_contain_text("2026-01-01T00:00:00Z")
    sync_api.expect(rows.nth(1)).to_contain_text("connection lost")
    sync_api.expect(rows.nth(1)).to_have_class(re.compile("unusable"))
    sync_api.expect(page.locator("#coordinator")).to_contain_text("zk://zk1:2181/idmint")
    service = page.locator("#services table")
    sync_api.expect(service).to_contain_text("idmint")
    sync_api.expect(service).to_contain_text("10.0.0.5:8000")
    sync_api.expect(service).to_contain_text("ids:uid64")


def test_bearer_token_is_asked_for_kept_and_sent(
    page: Any, start_idmint_server: Callable[..., str], tmp_path: Path
) -> None:
    token = "s3cret-token"
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    url = start_idmint_server("--scheme", "muid", "--token-file", str(token_file))

    page.goto(url)
    sync_api.expect(page.locator("#server-error")).to_contain_text("unauthorized")
    sync_api.expect(page.locator("#health")).to_have_text("healthy")  # /readyz is open
    # What could not be loaded says so, rather than "…" for ever.
    for box in ("#services", "#coordinator"):
        sync_api.expect(page.locator(box)).to_have_text("Not loaded: unauthorized (HTTP 401).")
    page.click("#mint-button")
    sync_api.expect(page.locator("#mint-error")).to_contain_text("HTTP 401")
    assert page.locator("#token-panel").get_attribute("open") is not None

    page.fill("#token-input", token)
    with page.expect_request("**/v1/claims") as request:
        page.press("#token-input", "Enter")
    assert request.value.headers["authorization"] == f"Bearer {token}"
    sync_api.expect(page.locator("#server-error")).to_be_hidden()
    sync_api.expect(page.locator("#token-state")).to_have_text("(set)")
    assert page.evaluate("sessionStorage.getItem('idmint.token')") == token

    ids = mint(page, 2)
    page.locator("#minted button").first.click()
    wait_for_result(page, ids[0])
    assert shown_fields(page) == expected_fields(ids[0], "muid")
    assert len(bit_cells(page)) == 128

    page.click("#token-panel summary")  # saving closed the panel
    page.click("#token-clear")
    assert page.evaluate("sessionStorage.getItem('idmint.token')") is None
    sync_api.expect(page.locator("#server-error")).to_contain_text("unauthorized")


def test_screenshot(page: Any, server_url: str) -> None:
    page.goto(server_url)
    ids = mint(page, 6)
    page.locator("#minted button").nth(1).click()
    wait_for_result(page, ids[1])
    sync_api.expect(page.locator("#health")).to_have_text("healthy")
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    data = SCREENSHOT.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 10_000


def test_a_slow_answer_does_not_overwrite_a_newer_one(page: Any, server_url: str) -> None:
    """Changing the scheme re-decodes; an older request's late answer is dropped.

    The answer to the first re-decode (as uid64-v1: an error for this ID) is held back
    by the test until the second one (as uid64) has been shown, then let through. The
    page must still show the uid64 result, not the stale error.
    """
    text = "ffffffffffffffff"  # uid64; not uid64-v1 (its reserved bits are set)
    page.goto(server_url)
    decode_text(page, text)
    wait_for_result(page, text)

    held: list[Any] = []

    def hold_the_first_v1(route: Any) -> None:
        if "scheme=uid64-v1" in route.request.url and not held:
            held.append(route)  # answered below, after the newer request
        else:
            route.continue_()

    page.route("**/v1/decode/**", hold_the_first_v1)
    page.select_option("#scheme-select", "uid64-v1")
    pump_until(page, lambda: len(held) == 1, "the uid64-v1 request to be held")
    page.select_option("#scheme-select", "uid64")
    form = page.locator("#decode-form")
    sync_api.expect(form).not_to_have_attribute("aria-busy", "true")  # the newer one is shown
    sync_api.expect(page.locator("#decode-status")).to_have_text(f"Decoded {text} as uid64.")

    stale = held[0]
    with contextlib.suppress(sync_api.Error):  # the page may have aborted it already
        stale.continue_()
    late = stale.request.response()  # None when the page aborted the request
    if late is not None:
        late.finished()  # its body has reached the page
    # A round trip through the page: whatever the late answer queued has run by now.
    page.evaluate("async () => { await fetch('livez', {cache: 'no-store'}); }")

    assert page.input_value("#scheme-select") == "uid64"
    sync_api.expect(page.locator("#decode-result")).to_be_visible()
    sync_api.expect(page.locator("#decode-error")).to_be_hidden()
    assert shown_fields(page) == expected_fields(text, "uid64")


def test_deep_link_decodes_and_decoding_updates_the_address(page: Any, server_url: str) -> None:
    """``/?id=...`` opens with that ID decoded; decoding another puts it in the address."""
    row = next(r for r in golden("elastic64.csv") if r["node_bits"] == "11")
    page.goto(f"{server_url}?id={row['id']}&scheme=elastic64&node_bits=11")
    wait_for_result(page, row["id"])
    assert shown_fields(page) == expected_fields(row["id"], "elastic64", node_bits=11)
    assert page.input_value("#id-input") == row["id"]
    assert page.input_value("#scheme-select") == "elastic64"

    other = golden("muid.csv")[0]["hex"]
    decode_text(page, other)  # guessed: no scheme in the address
    wait_for_result(page, other)
    query = parse_qs(urlsplit(page.url).query)
    assert query == {"id": [other]}

    # The address now opens the same result in a new tab.
    second = page.context.new_page()
    second.goto(page.url)
    wait_for_result(second, other)
    assert shown_fields(second) == expected_fields(other)
    second.close()


# -- every scheme, wide and narrow -------------------------------------------------------------

SCHEMES = ["uid64", "uid64-v1", "elastic64", "muid", "short60", "uuid7", "snowflake"]

LAYOUT_PROBLEMS = (Path(__file__).with_name("layout_problems.js")).read_text()


def assert_page_is_whole(tab: Any, ids: list[str]) -> None:
    """No card overflows and nothing reads ``undefined`` or ``NaN`` (IDs themselves aside)."""
    found = tab.evaluate(LAYOUT_PROBLEMS)
    assert found["problems"] == []
    text = found["text"]
    for known in ids:
        text = text.replace(known, " ")  # a short60 ID may spell NaN
    assert not re.search(r"\b(undefined|NaN|null)\b", text), re.findall(
        r".{40}\b(?:undefined|NaN|null)\b.{20}", text
    )


@pytest.fixture(scope="module")
def scheme_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A server of each scheme (two generators each: the claims table's rows).

    Their pool is their own: identities the session's other tests configure stay free.
    """
    pool = {"IDMINT_LOCAL_DIR": str(tmp_path_factory.mktemp("web-page-pool"))}
    with contextlib.ExitStack() as stack:
        servers = {
            scheme: stack.enter_context(
                IdmintServer("--scheme", scheme, "--generators", "2", env=pool)
            )
            for scheme in SCHEMES
        }
        for server in servers.values():
            server.start()
        yield {scheme: f"{server.url}/" for scheme, server in servers.items()}


@pytest.mark.parametrize("width", list(WIDTHS.values()), ids=list(WIDTHS))
@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_fits_and_reads_whole(
    browser: Any, scheme_servers: dict[str, str], scheme: str, width: int
) -> None:
    """Served, minted and decoded (and, on one server, every example): 1280 and 390 px wide."""
    with opened_tab(browser, width) as tab:
        tab.goto(scheme_servers[scheme])
        sync_api.expect(tab.locator("#health")).to_have_text("healthy")
        sync_api.expect(tab.locator("#claims tbody tr")).to_have_count(2)
        # Each row names its identity's fields (worker 3), not the generator's class.
        assert "Generator" not in tab.locator("#claims tbody").inner_text()
        examples = {
            str(button.get_attribute("data-id")): str(button.get_attribute("data-scheme"))
            for button in tab.locator("#examples button").all()
        }
        assert sorted(examples.values()) == sorted(SCHEMES), "one example per scheme"
        assert_page_is_whole(tab, list(examples))

        minted = mint(tab, 3)
        tab.locator("#minted button").first.click()
        wait_for_result(tab, minted[0])
        assert tab.locator("#decode-error").is_hidden()
        shown = [*minted, *examples]
        assert_page_is_whole(tab, shown)

        # The examples decode alike on any server: one server's page tries them all.
        for text, example_scheme in examples.items() if scheme == "uid64" else ():
            tab.click(f'#examples button[data-scheme="{example_scheme}"]')
            canonical = str(parse_id(text, example_scheme, **node_bits_of(tab)))
            wait_for_result(tab, canonical)
            assert tab.locator("#decode-error").is_hidden()
            assert tab.input_value("#scheme-select") == example_scheme
            assert_page_is_whole(tab, [*shown, canonical])


def test_the_page_draws_uuid7s_128_bits_in_their_fields(tab: Any, server_url: str) -> None:
    """RFC 9562's example: time, version and variant where the RFC puts them, the rest as
    idmint's counter (split around the variant), node and random bits."""
    text = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f"
    tab.goto(f"{server_url}?id={text.upper()}&scheme=uuid7")
    wait_for_result(tab, text)
    cells = tab.locator("#bits [data-bit]")
    sync_api.expect(cells).to_have_count(128)
    drawn = "".join(cells.all_inner_texts())
    assert drawn == format(int(text.replace("-", ""), 16), "0128b")
    edges = {
        "timestamp": (127, 80),
        "version": (79, 76),
        "counter-high": (75, 64),
        "variant": (63, 62),
        "counter-low": (61, 56),
        "node": (55, 40),
        "random": (39, 0),
    }
    for field, bits in edges.items():
        for bit in bits:
            assert cells.nth(127 - bit).get_attribute("data-field") == field, (field, bit)
    sync_api.expect(tab.locator("#decode-warning")).to_be_hidden()  # the bits agree
    sync_api.expect(tab.locator('#fields tr[data-field="timestamp_ms"] td.value')).to_have_text(
        "1645557742000"
    )
    assert_page_is_whole(tab, [text])


def node_bits_of(tab: Any) -> dict[str, int]:
    value = tab.input_value("#node-bits")
    return (
        {"node_bits": int(value)}
        if value and tab.input_value("#scheme-select") == "elastic64"
        else {}
    )


def test_the_footer_and_the_health_pill_use_readyz(page: Any, server_url: str) -> None:
    """Readiness (claims usable) is what the page shows, not only liveness."""
    with page.expect_request("**/readyz") as asked:
        page.goto(server_url)
    assert asked.value.method == "GET"
    sync_api.expect(page.locator("#health")).to_have_text("healthy")
    assert page.locator("footer a", has_text="readyz").get_attribute("href") == "readyz"
    assert page.locator('footer a[href="healthz"]').count() == 0


def pump_until(page: Any, predicate: Callable[[], bool], description: str) -> None:
    """Wait for ``predicate`` (made true by a Playwright event handler), with a deadline.

    Playwright's sync API runs event handlers (routes included) only while one of its
    calls is under way, so the wait is made of short Playwright waits.
    """
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {description}")
        page.wait_for_timeout(10)


# -- what a newcomer tripped on (issue 35), wide and narrow ---------------------------------------


def test_each_bit_field_says_what_it_means_at_every_width(tab: Any, server_url: str) -> None:
    """The legend's Meaning column stays at 390 px: without it uid64's bit-reversed
    timestamp field seemed to contradict timestamp_ms. (Once hidden below 560 px.)"""
    text = "aa83952c79bf88d5"  # spread: the timestamp's bits are reversed
    value = Uid64(text)
    tab.goto(f"{server_url}?id={text}&scheme=uid64")
    wait_for_result(tab, text)
    sync_api.expect(tab.locator("#legend thead th").nth(3)).to_be_visible()
    for row in tab.locator("#legend tbody tr").all():
        sync_api.expect(row.locator("td.about")).to_be_visible()
    timestamp = tab.locator('#legend tr[data-field="timestamp"] td.about')
    sync_api.expect(timestamp).to_have_text(f"bit-reversed: {value.timestamp_ms} ms")
    sync_api.expect(tab.locator('#fields tr[data-field="mode"] td.about')).to_be_visible()
    assert_page_is_whole(tab, [text])


def test_saving_a_token_asks_again_for_what_it_was_refused(
    tab: Any, start_idmint_server: Callable[..., str], tmp_path: Path
) -> None:
    """A decode refused for want of the token is decoded once the token is saved.
    (Once the 401 stayed under the decoder.)"""
    token_file = tmp_path / "token"
    token_file.write_text("t0ken\n")
    url = start_idmint_server("--token-file", str(token_file))
    text = "aa83952c79bf88d5"
    tab.goto(f"{url}?id={text}")
    sync_api.expect(tab.locator("#decode-error")).to_contain_text("HTTP 401")
    tab.click("#mint-button")
    sync_api.expect(tab.locator("#mint-error")).to_contain_text("HTTP 401")
    tab.fill("#token-input", "t0ken")
    tab.press("#token-input", "Enter")
    wait_for_result(tab, text)
    sync_api.expect(tab.locator("#decode-error")).to_be_hidden()
    sync_api.expect(tab.locator("#mint-error")).to_be_hidden()
    assert shown_fields(tab) == expected_fields(text)


def test_a_failed_mint_leaves_no_earlier_ids_under_its_error(tab: Any, server_url: str) -> None:
    """(Once the IDs of the mint before stayed listed under the error.)"""
    tab.goto(server_url)
    mint(tab, 3)
    tab.fill("#mint-count", "0")
    tab.click("#mint-button")
    sync_api.expect(tab.locator("#mint-error")).to_contain_text("HTTP 422")
    sync_api.expect(tab.locator("#minted button")).to_have_count(0)
    sync_api.expect(tab.locator("#mint-summary")).to_have_text("")
    assert_page_is_whole(tab, [])


def test_an_empty_count_asks_how_many_and_mints_nothing(tab: Any, server_url: str) -> None:
    """(Once it minted 1.)"""
    tab.goto(server_url)
    sync_api.expect(tab.locator("#mint-count")).to_have_attribute("max", "10000")
    asked: list[str] = []
    tab.on("request", lambda request: asked.append(request.url))
    tab.fill("#mint-count", "")
    tab.click("#mint-button")
    sync_api.expect(tab.locator("#mint-error")).to_contain_text(
        "Give how many IDs to mint: 1 to 10000."
    )
    sync_api.expect(tab.locator("#minted button")).to_have_count(0)
    assert tab.evaluate("document.activeElement.id") == "mint-count"
    assert not [url for url in asked if "/v1/ids" in url]


def test_the_count_box_takes_the_servers_own_limit(
    tab: Any, server_url: str, start_idmint_server: Callable[..., str]
) -> None:
    """The server's --max-count, read from /openapi.json: 10,000 by default, where the
    box stopped at 1,000; and a server's smaller limit."""
    tab.goto(server_url)
    sync_api.expect(tab.locator("#mint-count")).to_have_attribute("max", "10000")
    mint(tab, 1000)  # the old box's limit: fine
    tab.fill("#mint-count", "10000")
    assert tab.evaluate("document.getElementById('mint-count').checkValidity()")
    small = start_idmint_server("--max-count", "50")
    tab.goto(small)
    sync_api.expect(tab.locator("#mint-count")).to_have_attribute("max", "50")
    tab.fill("#mint-count", "51")
    assert not tab.evaluate("document.getElementById('mint-count').checkValidity()")


def test_an_unknown_scheme_in_the_address_is_said(tab: Any, server_url: str) -> None:
    """``?scheme=bogus`` is an error, not a guess. (Once it was ignored and the ID
    decoded as whatever it looked like.)"""
    asked: list[str] = []
    tab.on("request", lambda request: asked.append(request.url))
    tab.goto(f"{server_url}?id=aa83952c79bf88d5&scheme=bogus")
    error = tab.locator("#decode-error")
    sync_api.expect(error).to_contain_text("unknown scheme")
    sync_api.expect(error).to_contain_text("“bogus”; choose one of uid64, uid64-v1, elastic64")
    assert tab.locator("#decode-result").is_hidden()
    assert not [url for url in asked if "/v1/decode" in url]
    assert_page_is_whole(tab, [])
