"""The server's one configuration (:class:`idmint.server.config.ServerConfig`).

Everything here loops over its table (``SETTINGS``): a setting added to the
table without a bad value, a good value, a flag in ``idmint serve --help`` or a
row in docs/server.md fails a test here. Each bad value must be refused once,
in one line that names where it came from: the flag (the CLI then exits 2),
the ``IDMINT_*`` variable, or the keyword of ``create_app``/``serve``. Nothing
here starts a server: ``idmint serve`` runs in process with its ``serve``
replaced by one that fails the test, so a value wrongly accepted is a failure,
not a server that runs on.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from idmint import cli
from idmint.errors import ConfigurationError
from idmint.server import create_app
from idmint.server.config import SERVE_SETTINGS, SETTINGS, ServerConfig, Setting
from idmint.server.run import serve

DOCS = Path(__file__).resolve().parents[2] / "docs" / "server.md"

BAD_TEXT: dict[str, list[str]] = {
    "port": ["http", "70000", "-1"],
    "scheme": ["uuid"],
    "generators": ["0", "65", "four"],
    "workers": ["0", "1025", "many"],
    "max_count": ["0", "1000001", "1e3"],
    "log_level": ["loud"],
    "log_format": ["yaml"],
    "access_log": ["maybe"],
    "request_timeout": ["0", "-1", "soon", "inf"],
    "worker_timeout": ["0.5", "-1", "later"],
}
"""Text refused from a flag or a variable, for every setting that can refuse text."""

ANY_TEXT = {
    "host",
    "coordinator",
    "token_file",
    "discovery",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
}
"""Settings any text is a value of (what it names is checked when the server starts)."""

GOOD_TEXT: dict[str, tuple[str, Any]] = {
    "host": ("::1", "::1"),
    "port": ("8_080", 8080),
    "scheme": ("muid", "muid"),
    "coordinator": ("static://?generator=3", "static://?generator=3"),
    "generators": ("64", 64),
    "workers": ("3", 3),
    "token_file": ("/etc/idmint/token", "/etc/idmint/token"),
    "tls_cert": ("/etc/idmint/server.pem", "/etc/idmint/server.pem"),
    "tls_key": ("/etc/idmint/server.key", "/etc/idmint/server.key"),
    "tls_client_ca": ("/etc/idmint/fleet-ca.pem", "/etc/idmint/fleet-ca.pem"),
    "max_count": ("1000000", 1_000_000),
    "discovery": ("zk://zk1:2181/d", "zk://zk1:2181/d"),
    "log_level": ("debug", "debug"),
    "log_format": ("json", "json"),
    "access_log": ("yes", True),
    "request_timeout": ("2.5", 2.5),
    "worker_timeout": ("0", 0.0),
}
"""A text each setting takes, and the value it becomes."""

NEEDS = {
    "tls_key": {"IDMINT_TLS_CERT": "/etc/idmint/server.pem"},
    "tls_client_ca": {"IDMINT_TLS_CERT": "/etc/idmint/server.pem"},
}
"""The settings that are set only with another (a key needs its certificate)."""

BAD_VALUES: dict[str, list[Any]] = {
    "host": [None, 8000],
    "port": [65536, "8000", True],
    "scheme": ["uuid", None],
    "coordinator": [5],
    "generators": [0, 65, 2.0, "4"],
    "workers": [0, 1025, None],
    "token_file": [b"/etc/token"],
    "tls_cert": [Path("/etc/idmint/server.pem")],
    "tls_key": [3],
    "tls_client_ca": [True],
    "max_count": [0, 1_000_001],
    "discovery": [["zk://a/b"]],
    "log_level": ["INFO", "loud"],
    "log_format": ["yaml"],
    "access_log": ["yes", 1],
    "request_timeout": [0, -1.0, float("inf"), float("nan"), "10"],
    "worker_timeout": [0.5, -1, None],
    "token": ["", "   ", 5],
    "options": [[("mode", "spread")], None],
}
"""Python values refused as keywords, for every setting."""


def test_the_samples_cover_every_setting() -> None:
    names = {setting.name for setting in SERVE_SETTINGS}
    assert set(BAD_TEXT) | ANY_TEXT == names
    assert not set(BAD_TEXT) & ANY_TEXT
    assert set(GOOD_TEXT) == names
    assert set(BAD_VALUES) == {setting.name for setting in SETTINGS}


def _bad_text() -> list[tuple[Setting, str]]:
    return [
        (setting, text) for setting in SERVE_SETTINGS for text in BAD_TEXT.get(setting.name, [])
    ]


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert text, error
    assert "\n" not in text, text
    return text


def _case_id(value: object) -> str:
    """A test ID that is the same in every process (pytest-xdist compares them)."""
    return value.name if isinstance(value, Setting) else repr(value)


@pytest.mark.parametrize(("setting", "text"), _bad_text(), ids=_case_id)
def test_a_bad_variable_is_refused_naming_it(setting: Setting, text: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        ServerConfig.from_sources({}, {str(setting.variable): text})
    line = _one_line(refused.value)
    assert line.startswith(f"environment variable {setting.variable}"), line
    assert repr(text) in line or text in line, line


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``idmint serve`` in process, never serving: reaching ``serve`` fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> int:
        raise AssertionError(f"idmint serve accepted its settings: {args} {kwargs}")

    monkeypatch.setattr("idmint.server.run.serve", refuse)
    for setting in SERVE_SETTINGS:
        monkeypatch.delenv(str(setting.variable), raising=False)


def _bad_flags() -> list[tuple[Setting, str]]:
    # A switch (--access-log / --no-access-log) takes no text: only its variable does.
    return [(setting, text) for setting, text in _bad_text() if not setting.switch]


@pytest.mark.parametrize(("setting", "text"), _bad_flags(), ids=_case_id)
@pytest.mark.usefixtures("no_server")
def test_a_bad_flag_is_one_line_and_status_2(
    setting: Setting, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", f"{setting.flag}={text}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("idmint: error: "), line
    assert setting.flag in line, line


@pytest.mark.parametrize(("setting", "text"), _bad_text(), ids=_case_id)
@pytest.mark.usefixtures("no_server")
def test_a_bad_variable_stops_the_cli_with_status_2(
    setting: Setting,
    text: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(str(setting.variable), text)
    assert cli.main(["serve"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"idmint: error: environment variable {setting.variable}"), line


def _bad_values() -> list[tuple[str, Any]]:
    return [(name, value) for name, values in BAD_VALUES.items() for value in values]


@pytest.mark.parametrize(("name", "value"), _bad_values(), ids=_case_id)
def test_a_bad_keyword_is_refused_naming_it(name: str, value: Any) -> None:
    for make in (ServerConfig, create_app, serve):
        with pytest.raises(ConfigurationError) as refused:
            make(**{name: value})
        line = _one_line(refused.value)
        assert line.startswith((f"{name} ", f"{name}:")), line


@pytest.mark.parametrize("setting", SERVE_SETTINGS, ids=lambda setting: setting.name)
def test_a_variable_sets_its_field_and_the_flag_wins(setting: Setting) -> None:
    text, value = GOOD_TEXT[setting.name]
    variable = str(setting.variable)
    companions = NEEDS.get(setting.name, {})
    from_variable = ServerConfig.from_sources({}, {variable: text, **companions})
    assert getattr(from_variable, setting.name) == value
    assert from_variable.source(setting.name) == f"environment variable {variable}"
    others = {
        s.name: getattr(ServerConfig(), s.name)
        for s in SETTINGS
        if s is not setting and s.variable not in companions
    }
    assert {s: getattr(from_variable, s) for s in others} == others  # nothing else changed
    flagged = setting.default if setting.default is not None else "given by its flag"
    from_flag = ServerConfig.from_sources({setting.name: flagged}, {variable: text, **companions})
    assert getattr(from_flag, setting.name) == flagged
    assert from_flag.source(setting.name) == setting.flag
    # An empty variable is unset.
    assert ServerConfig.from_sources({}, {variable: "  "}) == ServerConfig()


def _serve_parser() -> argparse.ArgumentParser:
    parser = cli._build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    serve_parser: argparse.ArgumentParser = commands.choices["serve"]
    return serve_parser


def test_every_flag_of_serve_is_a_setting() -> None:
    flags = {
        option
        for action in _serve_parser()._actions
        for option in action.option_strings
        if option.startswith("--")
    }
    expected = {setting.flag for setting in SERVE_SETTINGS}
    expected |= {"--no-" + s.flag[2:] for s in SERVE_SETTINGS if s.switch}
    # The generators' options (--mode, ...) are as for generate; --help is argparse's.
    generator_options = next(
        group for group in _serve_parser()._action_groups if group.title == "scheme options"
    )
    assert flags == expected | {"--help"} | {
        action.option_strings[0] for action in generator_options._group_actions
    }


@pytest.mark.parametrize("setting", SERVE_SETTINGS, ids=lambda setting: setting.name)
def test_the_help_gives_each_flag_its_variable_and_default(setting: Setting) -> None:
    [action] = [a for a in _serve_parser()._actions if setting.flag in a.option_strings]
    assert action.default is None  # "not given": the default is the config's
    help_text = str(action.help)
    assert help_text == setting.help_text()
    assert help_text.endswith((f"; {setting.variable})", f"({setting.variable})"))
    if setting.default is not None and setting.default_text is None:
        shown = re.search(r"default (\S+?)[;)]", help_text)
        assert shown is not None, help_text
        assert setting.parse(shown.group(1)) == setting.default, help_text


@pytest.mark.parametrize("setting", SERVE_SETTINGS, ids=lambda setting: setting.name)
def test_docs_table_row_names_flag_and_variable(setting: Setting) -> None:
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith("| `--")]
    [row] = [line for line in rows if f"`{setting.variable}`" in line]
    flag_cell = row.split("|")[1]
    assert f"`{setting.flag}" in flag_cell, row


def test_a_worker_gets_the_config_whole() -> None:
    """What the supervisor sends each worker (JSON) makes the same config back."""
    config = ServerConfig.from_sources(
        {"generators": 3}, {"IDMINT_SCHEME": "muid"}, options={"mode": "spread"}
    )
    sent = json.loads(json.dumps(config.to_json()))
    received = ServerConfig.from_json(sent)
    assert received == config
    assert (
        received.sources
        == config.sources
        == {
            "generators": "--generators",
            "scheme": "environment variable IDMINT_SCHEME",
        }
    )


def test_options_must_be_plain_values_with_workers() -> None:
    with pytest.raises(ConfigurationError, match="plain values"):
        ServerConfig(workers=2, options={"clock": object()})
    ServerConfig(workers=1, options={"clock": object()})  # one process: sent nowhere


@pytest.mark.parametrize("name", ["tls_key", "tls_client_ca"])
def test_tls_files_need_a_certificate(name: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        ServerConfig.from_sources({}, {f"IDMINT_{name.upper()}": "/etc/idmint/file.pem"})
    assert str(refused.value) == (
        f"environment variable IDMINT_{name.upper()} needs a certificate (--tls-cert)"
    )


def test_a_token_and_a_token_file_are_not_both_given() -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        ServerConfig(token="t", token_file="/etc/token")


def test_create_app_refuses_an_unknown_keyword_in_one_line() -> None:
    with pytest.raises(ConfigurationError) as refused:
        create_app(generator=4)
    assert _one_line(refused.value).startswith("unknown server setting generator;")


def test_create_app_takes_a_config_or_keywords_not_both() -> None:
    assert create_app(ServerConfig(generators=2)).config.generators == 2
    assert create_app(generators=3).config.generators == 3
    with pytest.raises(ConfigurationError, match="not both"):
        create_app(ServerConfig(), generators=2)
