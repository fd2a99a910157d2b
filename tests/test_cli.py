"""The ``idmint`` command, in-process through ``idmint.cli.main`` and as installed.

The installed forms are ``python -m idmint`` and the ``idmint`` console script
next to the interpreter running the tests.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import itertools
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.cli_process import run_idmint

from idmint import cli
from idmint.schemes import SCHEMES, Mode, Muid, Uid64, parse_id

DATA = Path(__file__).resolve().parent / "data"
SCRIPT = Path(sys.executable).with_name("idmint")
LAUNCHERS = {
    "python-m": [sys.executable, "-m", "idmint"],
    "script": [str(SCRIPT)],
}
SHORT60_EPOCH_MS = 1_519_862_400_000
UID64 = "ffffffffffeea1bf"
MUID = "05D5EAC793E61F17B9F5B9479DF94AC0"

UID64_KEYS = {"scheme", "id", "time", "timestamp_ms", "sequence", "generator", "cluster", "mode"}
DECODE_KEYS = {
    "uid64": UID64_KEYS,
    "uid64-v1": UID64_KEYS,
    "elastic64": {"scheme", "id", "time", "timestamp_ms", "burst", "node", "node_bits"},
    "muid": {"scheme", "id", "time", "timestamp_us", "medallion", "offset"},
    "short60": {"scheme", "id", "time", "timestamp_ms", "sequence", "node", "int"},
    "uuid7": {"scheme", "id", "time", "timestamp_ms", "counter", "node", "random"},
    "snowflake": {"scheme", "id", "time", "timestamp_ms", "worker", "sequence"},
}
# What `generate` needs besides --scheme; elastic64 has no default node ID.
GENERATE_OPTIONS: dict[str, list[str]] = {
    "uid64": [],
    "uid64-v1": [],
    "elastic64": ["--node", "5"],
    "muid": [],
    "short60": [],
    "uuid7": [],
    "snowflake": [],
}
NODE_BITS = {"elastic64": 8}  # generate's default width


@dataclass
class Result:
    status: int
    out: str
    err: str

    def lines(self) -> list[str]:
        return self.out.splitlines()


def run_main(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch | None = None,
    stdin: str | None = None,
) -> Result:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    status = cli.main(argv)
    captured = capsys.readouterr()
    return Result(status, captured.out, captured.err)


def run_installed(launcher: str, argv: list[str], stdin: str | None = None) -> Result:
    done = subprocess.run(
        [*LAUNCHERS[launcher], *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def assert_usage_error(result: Result, *fragments: str) -> None:
    """Exit status 2, nothing on stdout, exactly one line on stderr, no traceback.

    Every error line starts the same way, whichever command or layer found the error.
    """
    assert result.status == 2, result
    assert result.out == ""
    assert "Traceback" not in result.err
    assert result.err.endswith("\n")
    assert len(result.err.splitlines()) == 1, result.err
    assert result.err.startswith("idmint: error: "), result.err
    for fragment in fragments:
        assert fragment in result.err, f"{fragment!r} not in {result.err!r}"


def load_rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


def assert_recent(when: dt.datetime) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    assert abs(now - when) < dt.timedelta(minutes=1), (when, now)


def parse_generated(scheme: str, lines: list[str]) -> list[Any]:
    values = [parse_id(line, scheme, node_bits=NODE_BITS.get(scheme)) for line in lines]
    assert [str(value) for value in values] == lines  # canonical text
    return values


# -- generate --------------------------------------------------------------------


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_generate_in_process(capsys: pytest.CaptureFixture[str], scheme: str) -> None:
    result = run_main(
        capsys, ["generate", "--scheme", scheme, "--count", "700", *GENERATE_OPTIONS[scheme]]
    )
    assert (result.status, result.err) == (0, "")
    lines = result.lines()
    assert len(lines) == 700
    assert len(set(lines)) == 700
    for value in parse_generated(scheme, lines):
        assert value.scheme == scheme
        assert_recent(value.time)


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_generate_installed(launcher: str, scheme: str) -> None:
    result = run_installed(
        launcher, ["generate", "--scheme", scheme, "--count", "3", *GENERATE_OPTIONS[scheme]]
    )
    assert (result.status, result.err) == (0, "")
    lines = result.lines()
    assert len(lines) == len(set(lines)) == 3
    parse_generated(scheme, lines)


def test_generate_defaults_to_one_uid64(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_main(capsys, ["generate"])
    assert result.status == 0
    [line] = result.lines()
    assert_recent(Uid64(line).time)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_generate_json_lines(capsys: pytest.CaptureFixture[str], scheme: str) -> None:
    argv = ["generate", "--scheme", scheme, "--count", "40", "--format", "json"]
    result = run_main(capsys, argv + GENERATE_OPTIONS[scheme])
    assert result.status == 0
    records = [json.loads(line) for line in result.lines()]
    assert len(records) == 40
    assert len({record["id"] for record in records}) == 40
    for record in records:
        assert set(record) == DECODE_KEYS[scheme]
        assert record["scheme"] == scheme
        value = parse_id(record["id"], scheme, node_bits=record.get("node_bits"))
        assert value.to_dict() == record


@pytest.mark.parametrize(
    ("scheme", "options", "expected"),
    [
        (
            "uid64",
            ["--generator", "1307", "--cluster", "15", "--mode", "time-sequential"],
            {"generator": 1307, "cluster": 15, "mode": "time-sequential"},
        ),
        (
            "uid64",
            ["--generator", "0x7ff", "--cluster", "3", "--mode", "spread"],
            {"generator": 2047, "cluster": 3, "mode": "spread"},
        ),
        (
            "uid64-v1",
            ["--generator", "63", "--cluster", "9"],
            {"generator": 63, "cluster": 9, "mode": "spread"},
        ),
        ("elastic64", ["--node", "513", "--node-bits", "11"], {"node": 513, "node_bits": 11}),
        (
            "elastic64",
            ["--node", "65535", "--node-bits", "16"],
            {"node": 65535, "node_bits": 16, "burst": 0},
        ),
        ("elastic64", ["--node", "255"], {"node": 255, "node_bits": 8}),
        ("short60", ["--node", "511"], {"node": 511}),
        ("muid", ["--medallion", "0x17B9F5B9479DF"], {"medallion": 417399343184351, "offset": 0}),
    ],
)
def test_generate_identity_options_show_in_the_ids(
    capsys: pytest.CaptureFixture[str], scheme: str, options: list[str], expected: dict[str, Any]
) -> None:
    argv = ["generate", "--scheme", scheme, "--count", "200", "--format", "json", *options]
    result = run_main(capsys, argv)
    assert result.status == 0, result.err
    records = [json.loads(line) for line in result.lines()]
    assert len(records) == 200
    for record in records:
        assert {key: record[key] for key in expected} == expected
    if expected.get("mode") == "time-sequential":
        ids = [record["id"] for record in records]
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)


def test_generate_muid_picks_a_medallion_in_the_spec_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_main(capsys, ["generate", "--scheme", "muid", "--count", "20"])
    medallions = {Muid(line).medallion for line in result.lines()}
    assert len(medallions) == 1  # one generator, one node
    assert 2**48 <= medallions.pop() < 2**49


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--scheme", "short60", "--generator", "3"], ("generator", "uid64")),
        (["--scheme", "short60", "--medallion", "3"], ("medallion", "muid")),
        (["--scheme", "short60", "--node", "3", "--random"], ("random", "node")),
        (["--scheme", "short60", "--node", "512"], ("node", "511")),
        (["--scheme", "uid64", "--random"], ("random", "short60")),
        (["--scheme", "uid64", "--node", "3"], ("node", "elastic64")),
        (["--scheme", "uid64", "--node-bits", "11"], ("node-bits",)),
        (["--scheme", "uid64-v1", "--medallion", "3"], ("medallion",)),
        (["--scheme", "muid", "--mode", "spread"], ("mode", "uid64")),
        (["--scheme", "muid", "--cluster", "1"], ("cluster",)),
        (["--scheme", "elastic64", "--node", "1", "--generator", "2"], ("generator",)),
        (["--scheme", "elastic64", "--node", "1", "--mode", "spread"], ("mode",)),
        (["--scheme", "elastic64", "--node-bits", "11"], ("node",)),
    ],
)
def test_generate_rejects_options_of_other_schemes(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragments: tuple[str, ...]
) -> None:
    assert_usage_error(run_main(capsys, ["generate", *argv]), *fragments)


def test_generate_rejects_options_of_other_schemes_installed() -> None:
    result = run_installed("script", ["generate", "--scheme", "short60", "--generator", "3"])
    assert_usage_error(result, "generator")


# -- decode ----------------------------------------------------------------------

# A few golden rows per scheme: (scheme, id, node_bits, fields other than scheme/id/time)
DECODE_VECTORS: list[tuple[str, str, int | None, dict[str, Any]]] = []
for _scheme, _file, _taken in (("uid64", "uid64.csv", 6), ("uid64-v1", "uid64_v1.csv", 4)):
    for _row in load_rows(_file)[:_taken]:
        DECODE_VECTORS.append(
            (
                _scheme,
                _row["hex"],
                None,
                {
                    **{
                        key: int(_row[key])
                        for key in ("timestamp_ms", "sequence", "generator", "cluster")
                    },
                    # uid64-v1 IDs are always spread: its vectors have no mode column.
                    "mode": _row.get("mode", "SPREAD").lower().replace("_", "-"),
                },
            )
        )
for _row in load_rows("muid.csv")[:4]:
    DECODE_VECTORS.append(
        (
            "muid",
            _row["hex"],
            None,
            {key: int(_row[key]) for key in ("timestamp_us", "medallion", "offset")},
        )
    )
for _row in load_rows("short60.csv")[:4]:
    DECODE_VECTORS.append(
        (
            "short60",
            _row["display"],
            None,
            {
                "timestamp_ms": int(_row["timestamp_ms_since_2018_03_01"]) + SHORT60_EPOCH_MS,
                "sequence": int(_row["sequence"]),
                "node": int(_row["random"]),
                "int": int(_row["int"]),
            },
        )
    )
for _row in load_rows("elastic64.csv")[::3]:
    DECODE_VECTORS.append(
        (
            "elastic64",
            _row["id"],
            int(_row["node_bits"]),
            {key: int(_row[key]) for key in ("timestamp_ms", "burst", "node", "node_bits")},
        )
    )


@pytest.mark.parametrize(
    ("scheme", "text", "node_bits", "fields"),
    [pytest.param(*vector, id=f"{vector[0]}-{vector[1]}") for vector in DECODE_VECTORS],
)
def test_decode_golden_vectors(
    capsys: pytest.CaptureFixture[str],
    scheme: str,
    text: str,
    node_bits: int | None,
    fields: dict[str, Any],
) -> None:
    argv = ["decode", "--scheme", scheme, text]
    if node_bits is not None:
        argv[1:1] = ["--node-bits", str(node_bits)]
    result = run_main(capsys, argv)
    assert (result.status, result.err) == (0, "")
    [line] = result.lines()
    record = json.loads(line)
    assert set(record) == DECODE_KEYS[scheme]
    assert record.pop("scheme") == scheme
    assert record.pop("id") == text
    record_time = record.pop("time")
    assert record == fields
    epoch = dt.datetime(1970, 1, 1)
    if scheme == "muid":
        when = epoch + dt.timedelta(microseconds=fields["timestamp_us"])
        assert record_time == when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    else:
        when = epoch + dt.timedelta(milliseconds=fields["timestamp_ms"])
        assert record_time == when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:23] + "Z"


def test_decode_guesses_the_scheme_from_the_shape(capsys: pytest.CaptureFixture[str]) -> None:
    inputs = {
        MUID: "muid",
        MUID.lower(): "muid",
        f"{MUID[:14]}-{MUID[14:27]}-{MUID[27:]}": "muid",
        UID64: "uid64",
        UID64.upper(): "uid64",
        "xiEAPepqBh": "short60",
        "g-p2sYZ5kM": "short60",
    }
    result = run_main(capsys, ["decode", *inputs])
    assert (result.status, result.err) == (0, "")
    records = [json.loads(line) for line in result.lines()]
    assert [record["scheme"] for record in records] == list(inputs.values())
    assert [record["id"] for record in records] == [
        MUID,
        MUID,
        MUID,
        UID64,
        UID64,
        "xiEAPepqBh",
        "g-p2sYZ5kM",
    ]


def test_decode_decimal_with_a_width_is_elastic64(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_main(capsys, ["decode", "--node-bits", "11", "115816896921665535"])
    assert result.status == 0
    record = json.loads(result.out)
    assert (record["scheme"], record["node"], record["burst"]) == ("elastic64", 2047, 31)


def test_decode_reads_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_main(
        capsys,
        ["decode", "xiEAPepqBh", "-", MUID],
        monkeypatch,
        stdin=f"{UID64}\n\n   \n  {MUID.lower()}  \n",
    )
    assert (result.status, result.err) == (0, "")
    ids = [json.loads(line)["id"] for line in result.lines()]
    assert ids == ["xiEAPepqBh", UID64, MUID, MUID]


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_decode_reads_stdin_installed(launcher: str) -> None:
    result = run_installed(
        launcher, ["decode", "--format", "text", "-"], stdin=f"{UID64}\nxiEAPepqBh\n"
    )
    assert (result.status, result.err) == (0, "")
    assert [line.split()[:2] for line in result.lines()] == [
        [UID64, "uid64"],
        ["xiEAPepqBh", "short60"],
    ]


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["decode", "--format", "text", UID64], UID64),
        (["decode", "--format", "text", MUID], MUID),
        (["decode", "--format", "text", "--scheme", "short60", "xinaS8QBh"], "xinaS8QBh"),
        (
            ["decode", "--format", "text", "--node-bits", "11", "116981760008096257"],
            "116981760008096257",
        ),
    ],
)
def test_decode_text_format(capsys: pytest.CaptureFixture[str], argv: list[str], text: str) -> None:
    result = run_main(capsys, argv)
    assert result.status == 0
    [line] = result.lines()
    head = line.split()[:3]
    pairs = dict(token.split("=", 1) for token in line.split()[3:])
    fields = json.loads(
        run_main(capsys, [part for part in argv if part not in ("--format", "text")]).out
    )
    assert head == [fields.pop("id"), fields.pop("scheme"), fields.pop("time")]
    assert head[0] == text
    assert pairs == {key: str(value) for key, value in fields.items()}


@pytest.mark.parametrize("text", ["1234567890123456", "12345", "0000000000000000"])
def test_decode_ambiguous_input_asks_for_the_scheme(
    capsys: pytest.CaptureFixture[str], text: str
) -> None:
    assert_usage_error(run_main(capsys, ["decode", text]), "cannot tell the scheme", "scheme")
    # Naming the scheme resolves it, one way or the other.
    as_elastic64 = run_main(capsys, ["decode", "--scheme", "elastic64", "--node-bits", "8", text])
    assert json.loads(as_elastic64.out)["id"] == str(int(text))
    if len(text) == 16:
        as_uid64 = run_main(capsys, ["decode", "--scheme", "uid64", text])
        assert json.loads(as_uid64.out)["id"] == text


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["decode", "1234567890123456"], "--scheme"),
        (["decode", "12345"], "--scheme"),
        (["decode", "--scheme", "elastic64", "12345"], "--node-bits"),
    ],
)
def test_decode_errors_name_the_option_to_use(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str
) -> None:
    assert_usage_error(run_main(capsys, argv), option)


def test_decode_reports_bad_ids_and_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_main(capsys, ["decode", UID64, "not-an-id!", MUID])
    assert result.status == 2
    assert [json.loads(line)["id"] for line in result.lines()] == [UID64, MUID]
    assert len(result.err.splitlines()) == 1
    assert "not-an-id!" in result.err
    assert result.err.startswith("idmint: error: ")


def test_decode_names_the_stdin_line_that_failed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blank lines are skipped but counted, as an editor numbers them."""
    stdin = f"{UID64}\n\n  zz!\n{MUID}\nffff\n"
    result = run_main(capsys, ["decode", "-"], monkeypatch, stdin=stdin)
    assert result.status == 2
    assert [json.loads(line)["id"] for line in result.lines()] == [UID64, MUID]
    first, second = result.err.splitlines()
    assert first.startswith("idmint: error: stdin line 3: invalid ID: "), first
    assert second.startswith("idmint: error: stdin line 5: "), second


# -- encode ----------------------------------------------------------------------


def encode_cases() -> list[Any]:
    cases: list[Any] = []
    for row in load_rows("uid64.csv"):
        mode = row["mode"].lower().replace("_", "-")
        argv = ["--scheme", "uid64", "--timestamp-ms", row["timestamp_ms"]]
        argv += ["--sequence", row["sequence"], "--generator", row["generator"]]
        argv += ["--cluster", row["cluster"], "--mode", mode]
        cases.append(pytest.param(argv, row["hex"], id=f"uid64-{row['hex']}"))
    for row in load_rows("uid64_v1.csv"):
        argv = ["--scheme", "uid64-v1", "--timestamp-ms", row["timestamp_ms"]]
        argv += ["--sequence", row["sequence"], "--generator", row["generator"]]
        argv += ["--cluster", row["cluster"], "--mode", "spread"]
        cases.append(pytest.param(argv, row["hex"], id=f"uid64-v1-{row['hex']}"))
    for row in load_rows("muid.csv"):
        argv = ["--scheme", "muid", "--timestamp-us", row["timestamp_us"]]
        argv += ["--medallion", hex(int(row["medallion"])), "--offset", row["offset"]]
        cases.append(pytest.param(argv, row["hex"], id=f"muid-{row['hex']}"))
    for row in load_rows("short60.csv"):
        stamp = int(row["timestamp_ms_since_2018_03_01"]) + SHORT60_EPOCH_MS
        argv = ["--scheme", "short60", "--timestamp-ms", str(stamp)]
        argv += ["--sequence", row["sequence"], "--random", row["random"]]
        cases.append(pytest.param(argv, row["display"], id=f"short60-{row['display']}"))
    for row in load_rows("elastic64.csv"):
        argv = ["--scheme", "elastic64", "--timestamp-ms", row["timestamp_ms"]]
        argv += ["--node", row["node"], "--node-bits", row["node_bits"], "--burst", row["burst"]]
        cases.append(pytest.param(argv, row["id"], id=f"elastic64-{row['node_bits']}-{row['id']}"))
    return cases


@pytest.mark.parametrize(("argv", "expected"), encode_cases())
def test_encode_golden_vectors(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    result = run_main(capsys, ["encode", *argv])
    assert (result.status, result.out, result.err) == (0, f"{expected}\n", "")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--scheme", "uid64", "--timestamp-ms", "4398046511103"], "ffffffffffc00000"),
        (["--scheme", "uid64-v1", "--timestamp-ms", "1", "--generator", "1"], "8000000000000010"),
        (["--scheme", "muid", "--timestamp-us", "0", "--medallion", "1"], "0" * 26 + "100000"),
        (["--scheme", "short60", "--timestamp-ms", str(SHORT60_EPOCH_MS)], "A"),
        (
            ["--scheme", "elastic64", "--timestamp-ms", "1", "--node", "1", "--node-bits", "16"],
            "65537",
        ),
    ],
)
def test_encode_optional_fields_default_to_zero(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    assert run_main(capsys, ["encode", *argv]).out == f"{expected}\n"


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_encode_json(capsys: pytest.CaptureFixture[str], scheme: str) -> None:
    argv = {
        "uid64": ["--timestamp-ms", "4398046511103", "--sequence", "46", "--generator", "1307"],
        "uid64-v1": ["--timestamp-ms", "1767225600000", "--sequence", "7", "--generator", "33"],
        "elastic64": ["--timestamp-ms", "1785000000123", "--node", "513", "--node-bits", "11"],
        "muid": ["--timestamp-us", "1642579230975519", "--medallion", "417399343184351"],
        "short60": ["--timestamp-ms", "1562179504129", "--sequence", "270", "--node", "98"],
        "uuid7": ["--timestamp-ms", "1645557742000", "--counter", "209112", "--node", "50396"],
        "snowflake": ["--timestamp-ms", "1577820376771", "--worker", "327", "--sequence", "9"],
    }[scheme]
    result = run_main(capsys, ["encode", "--scheme", scheme, "--format", "json", *argv])
    assert result.status == 0
    record = json.loads(result.out)
    assert set(record) == DECODE_KEYS[scheme]
    assert parse_id(record["id"], scheme, node_bits=record.get("node_bits")).to_dict() == record
    given = dict(zip(argv[::2], argv[1::2], strict=True))
    for option, text in given.items():
        assert record[option[2:].replace("-", "_")] == int(text, 0)


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_encode_installed(launcher: str) -> None:
    argv = ["encode", "--scheme", "muid", "--timestamp-us", "1642579230975519"]
    argv += ["--medallion", "0x17B9F5B9479DF", "--offset", "608960"]
    assert run_installed(launcher, argv) == Result(0, f"{MUID}\n", "")


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--scheme", "uid64"], ("uid64 needs --timestamp-ms",)),
        (["--scheme", "short60"], ("needs --timestamp-ms",)),
        (["--scheme", "muid", "--timestamp-us", "1"], ("needs --medallion",)),
        (["--scheme", "muid", "--medallion", "1"], ("needs --timestamp-us",)),
        (
            ["--scheme", "elastic64", "--timestamp-ms", "1", "--node", "1"],
            ("needs --node-bits",),
        ),
        (["--scheme", "elastic64", "--timestamp-ms", "1"], ("--node", "--node-bits")),
        (["--scheme", "uid64", "--timestamp-ms", "1", "--node", "3"], ("no --node",)),
        (
            ["--scheme", "short60", "--timestamp-ms", str(SHORT60_EPOCH_MS), "--generator", "1"],
            ("no --generator",),
        ),
        (
            ["--scheme", "muid", "--timestamp-us", "1", "--medallion", "1", "--sequence", "1"],
            ("no --sequence",),
        ),
        (
            ["--scheme", "muid", "--timestamp-ms", "1", "--medallion", "1"],
            ("no --timestamp-ms",),
        ),
        (
            [
                *("--scheme", "elastic64", "--timestamp-ms", "1"),
                *("--node", "1", "--node-bits", "8", "--mode", "spread"),
            ],
            ("no --mode",),
        ),
        (["--scheme", "uid64-v1", "--timestamp-ms", "1", "--random", "1"], ("no --random",)),
        (["--scheme", "uid64", "--timestamp-ms", "1", "--offset", "0"], ("no --offset",)),
    ],
)
def test_encode_missing_and_stray_fields(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragments: tuple[str, ...]
) -> None:
    assert_usage_error(run_main(capsys, ["encode", *argv]), *fragments)


def test_integer_options_accept_leading_zeros(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["encode", "--scheme", "uid64", "--timestamp-ms", "1767225600000"]
    result = run_main(capsys, [*argv, "--generator", "007", "--cluster", "01"])
    assert result.status == 0, result.err
    value = Uid64(result.out.strip())
    assert (value.generator, value.cluster) == (7, 1)


# -- bad input everywhere --------------------------------------------------------

BAD_INVOCATIONS: list[tuple[list[str], str]] = [
    (["claims"], "required"),
    (["bogus"], "invalid choice"),
    (["generate", "--count", "-1"], "--count"),
    (["generate", "--count", "many"], "not an integer"),
    (["generate", "--scheme", "uid128"], "invalid choice"),
    (["generate", "--format", "xml"], "invalid choice"),
    (["generate", "--unknown-option"], "unrecognized"),
    (["generate", "--generator", "2048"], "2047"),
    (["generate", "--generator", "-1"], "generator"),
    (["generate", "--cluster", "16"], "15"),
    (["generate", "--mode", "sideways"], "invalid choice"),
    (["generate", "--scheme", "uid64-v1", "--generator", "64"], "63"),
    (["generate", "--scheme", "uid64-v1", "--mode", "time-sequential"], "spread"),
    (["generate", "--scheme", "elastic64", "--node", "256"], "255"),
    (["generate", "--scheme", "elastic64", "--node", "1", "--node-bits", "17"], "16"),
    (["generate", "--scheme", "muid", "--medallion", str(2**52)], "medallion"),
    (["generate", "--scheme", "short60", "--cluster", "1"], "cluster"),
    (["decode"], "stdin"),
    (["decode", "zz!"], "shape of no scheme"),
    (["decode", "1234567890123456"], "cannot tell the scheme"),
    (["decode", "--scheme", "elastic64", "12345"], "node"),
    (["decode", "--scheme", "elastic64", "--node-bits", "7", "12345"], "8..16"),
    (["decode", "--scheme", "elastic64", "--node-bits", "8", "12a45"], "'a'"),
    (["decode", "--scheme", "uid64-v1", UID64], "reserved"),
    (["decode", "--scheme", "muid", UID64], "expected 32 hex digits"),
    (["decode", "--scheme", "muid", "05D5EAC793E61F-17B9F5B9479DF-94AC"], "14-13-5"),
    (["decode", "--scheme", "short60", "AB"], "canonical"),
    (["decode", "--scheme", "uid64", "ffffffffffeeg1bf"], "position 12"),
    (["decode", "--scheme", "uid64", "ffff"], "expected 16 hex digits"),
    (["decode", "--format", "xml", UID64], "invalid choice"),
    (["encode"], "--scheme"),
    (["encode", "--scheme", "uid64"], "--timestamp-ms"),
    (["encode", "--scheme", "uid64", "--timestamp-ms", "-1"], "timestamp_ms"),
    (["encode", "--scheme", "uid64", "--timestamp-ms", str(2**42)], "timestamp_ms"),
    (["encode", "--scheme", "uid64", "--timestamp-ms", "1", "--sequence", "64"], "sequence"),
    (["encode", "--scheme", "uid64", "--timestamp-ms", "1", "--mode", "sideways"], "mode"),
    (["encode", "--scheme", "uid64", "--timestamp-ms", "soon"], "not an integer"),
    (["encode", "--scheme", "uid64-v1", "--timestamp-ms", "1", "--generator", "64"], "63"),
    (
        ["encode", "--scheme", "uid64-v1", "--timestamp-ms", "1", "--mode", "time-sequential"],
        "spread",
    ),
    (["encode", "--scheme", "short60", "--timestamp-ms", "0"], "timestamp_ms"),
    (["encode", "--scheme", "muid", "--timestamp-us", "1", "--medallion", str(2**52)], "medallion"),
    (
        [
            *("encode", "--scheme", "elastic64", "--timestamp-ms", "1"),
            *("--node", "1", "--node-bits", "8", "--burst", "256"),
        ],
        "burst",
    ),
    (
        [
            *("encode", "--scheme", "elastic64", "--timestamp-ms", "1"),
            *("--node", "256", "--node-bits", "8"),
        ],
        "node",
    ),
]


@pytest.mark.parametrize(
    ("argv", "fragment"), [pytest.param(*bad, id=" ".join(bad[0])) for bad in BAD_INVOCATIONS]
)
def test_bad_invocation_in_process(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert_usage_error(run_main(capsys, argv), fragment)


def test_bare_idmint_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """As ``idmint --help`` does, with status 0. (Once an error: COMMAND required.)"""
    result = run_main(capsys, [])
    assert (result.status, result.err) == (0, "")
    assert result.out.startswith("usage: idmint")
    listed = re.findall(r"^    (\w+)", result.out, re.MULTILINE)
    assert listed == [
        *("generate", "decode", "encode", "bounds", "schemes", "completion", "serve"),
        *("claims", "whois", "discovery", "fetch"),
    ]


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["generate", "--cnt", "3"], "idmint generate"),
        (["claims", "list", "--bogus"], "idmint claims list"),
        (["decode", "--scheme", "uid64", UID64, "--nodebits", "8"], "idmint decode"),
    ],
)
def test_an_unknown_option_points_to_its_commands_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], command: str
) -> None:
    """The help that lists the options the command takes. (Once ``idmint --help``.)"""
    result = run_main(capsys, argv)
    assert_usage_error(result, "unrecognized arguments: ", f"(see {command} --help)")


LONG = "y" * 100_000
"""An input no message should repeat whole."""


@pytest.mark.parametrize(
    ("argv", "variables"),
    [
        (["decode", LONG], {}),
        (["decode", "--scheme", "muid", LONG], {}),
        (["decode", "--node-bits", LONG, UID64], {}),
        (["generate", "--count", LONG], {}),
        (["generate", "--scheme", LONG], {}),
        (["generate", LONG], {}),
        (["generate", "--coordinator", f"{LONG}://h/x"], {}),
        (["generate", "--coordinator", f"static://?generator={LONG}"], {}),
        (["fetch", "--server", LONG], {}),
        (["fetch", "--server", "http://h:1", "--timeout", LONG], {}),
        (["discovery", "register", "--coordinator", "zk://h:1/d", "--service", LONG], {}),
        (
            [
                "discovery",
                "register",
                *("--coordinator", "zk://h:1/d", "--service", "s"),
                "--metadata",
                LONG,
            ],
            {},
        ),
        ([LONG], {}),
        (["serve"], {"IDMINT_PORT": LONG}),
        (["serve"], {"IDMINT_SCHEME": LONG}),
    ],
    ids=lambda value: "" if isinstance(value, dict) else " ".join(value)[:40],
)
def test_an_error_quotes_at_most_300_characters_of_its_input(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    variables: dict[str, str],
) -> None:
    """Whichever layer echoes it. (Once: the 100,000 characters, whole.)"""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    result = run_main(capsys, argv)
    assert_usage_error(result, "y" * 300 + "' (the first 300 of 100,00")
    assert "y" * 301 not in result.err
    assert len(result.err) < 1000, result.err


def test_binary_on_stdin_is_quoted_escaped_whatever_the_locale() -> None:
    """Bytes that are not UTF-8 and a terminal's escape sequences, under a locale that
    decodes strictly: one line, what a terminal would act on escaped, at most 300
    characters. (Once a UnicodeDecodeError's traceback, or all of it echoed back.)"""
    every_byte = bytes(byte for byte in range(256) if byte not in b"\n\r")
    line = b"\x7fELF\x02\x01\xff\xfe\x1b[2J\x1b]0;owned\x07" + every_byte * 40
    done = subprocess.run(
        [sys.executable, "-m", "idmint", "decode", "-"],
        input=line + b"\n",
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    [shown] = done.stderr.decode().splitlines()
    assert shown.isprintable(), shown
    assert shown.startswith(
        "idmint: error: stdin line 1: invalid ID: '\\x7fELF\\x02\\x01\\xff\\xfe"
        "\\x1b[2J\\x1b]0;owned\\x07\\x00\\x01"
    ), shown
    read = line.decode("utf-8", "surrogateescape").strip()
    assert f"' (the first 300 of {len(read):,} characters) has the shape of no scheme" in shown
    assert len(shown) < 1500


def test_bad_invocations_installed() -> None:
    # One process per invocation, started together to keep the suite quick.
    launchers = list(LAUNCHERS.values())
    processes = [
        (
            argv,
            fragment,
            subprocess.Popen(
                [*launchers[index % len(launchers)], *argv],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for index, (argv, fragment) in enumerate(BAD_INVOCATIONS)
    ]
    for argv, fragment, process in processes:
        out, err = process.communicate(timeout=60)
        result = Result(process.returncode, out, err)
        assert result.status == 2, (argv, result)
        assert_usage_error(result, fragment)


def test_every_option_of_every_command_says_what_it_is_for() -> None:
    """``claims list``, ``discovery register`` and ``discovery list`` once had bare options."""
    bare: list[str] = []

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}")
            elif action.option_strings and not (action.help or "").strip():
                bare.append(f"{path} {action.option_strings[-1]}")

    walk(cli._build_parser(), "idmint")
    assert bare == []


@pytest.mark.parametrize("output", ["text", "json"])
def test_claims_list_of_a_pool_nobody_holds_says_which_pool_it_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    """A misspelt root reads as an empty pool: the list says which pool it read, on
    stderr, and still exits 0. (Once an empty table and nothing else.)"""
    from idmint import new_generator

    with new_generator("uid64", coordinator=f"local://{tmp_path}/ids"):
        held = run_main(capsys, ["claims", "list", "--coordinator", f"local://{tmp_path}/ids"])
        assert (held.status, held.err) == (0, "")
        misspelt = f"local://{tmp_path}/idz"
        empty = run_main(capsys, ["claims", "list", "--coordinator", misspelt, "--format", output])
    assert empty.status == 0
    assert len(empty.lines()) == (1 if output == "text" else 0)  # the header alone
    assert empty.err == (
        f"idmint: nothing holds an identity in {misspelt}: no process claims there now, or "
        "the URL names another pool than your generators' (its root, table or prefix)\n"
    )


def test_claims_list_shows_this_hosts_pool_by_default(
    capsys: pytest.CaptureFixture[str], host_lock_directory: Path
) -> None:
    """With no --coordinator it lists ``local://``, the pool a plain ``generate`` claims from."""
    from idmint import new_generator

    with new_generator("uid64") as uid64, new_generator("short60") as short60:
        result = run_main(capsys, ["claims", "list", "--format", "json"])
        assert result.status == 0, result.err
        rows = [json.loads(line) for line in result.lines()]
        mine = {
            (row["space"], row["generator"])
            for row in rows
            if row["holder"].endswith(f":{os.getpid()}")
        }
        assert mine == {("generator", uid64.generator), ("short60", short60.node)}
        table = run_main(capsys, ["claims", "list"])
        assert table.status == 0, table.err
        header, *lines = table.lines()
        assert header.split()[:3] == ["SPACE", "CLUSTER", "ID"]
        held = [line for line in lines if not line.startswith("#")]
        ours = [line.split() for line in held if line.split()[3].endswith(f":{os.getpid()}")]
        assert sorted((line[0], int(line[2])) for line in ours) == sorted(mine)
        # Each pool listed, with how full it is.
        generators = sum(line.split()[:2] == ["generator", "0"] for line in held)
        assert (
            f"# generator cluster 0: {generators} of 2048 held, {2048 - generators} free"
            in "\n".join(lines)
        )


def test_schemes_lists_every_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_main(capsys, ["schemes"])
    assert result.status == 0
    assert [line.split()[0] for line in result.lines()] == list(SCHEMES)
    # uid64's 42 bits of ms since 1970 run out in 2109.
    years = (2**42 / 1000 - time.time()) / (365.25 * 86_400)
    assert f"time runs out in {years:.0f} years" in result.lines()[0]


# -- endless generation: pipes and signals ---------------------------------------


def read_first_line(fd: int, timeout: float) -> bytes:
    """Read from ``fd`` until a newline arrives; fail if none comes within ``timeout``."""
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        assert ready, f"no complete line within {timeout} s (got {data!r})"
        chunk = os.read(fd, 65536)
        assert chunk, f"output ended before a complete line: {data!r}"
        data += chunk
    return data


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_endless_generate_stops_quietly_when_the_reader_goes_away(launcher: str) -> None:
    process = subprocess.Popen(
        [*LAUNCHERS[launcher], "generate", "--count", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        first = read_first_line(process.stdout.fileno(), timeout=20)
        Uid64(first.split(b"\n")[0].decode())
        process.stdout.close()  # what `| head -1` does after its line
        status = process.wait(timeout=20)
        err = process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Traceback" not in err
    assert err == ""
    assert status == 0


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_endless_generate_flushes_as_it_goes_and_ends_on_sigterm(launcher: str) -> None:
    process = subprocess.Popen(
        [*LAUNCHERS[launcher], "generate", "--scheme", "uid64", "--count", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    chunks: list[bytes] = []
    got_line = threading.Event()

    def pump(fd: int) -> None:
        # Drain continuously so the child never blocks on a full pipe.
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            if b"\n" in chunk:
                got_line.set()

    reader = threading.Thread(target=pump, args=(process.stdout.fileno(),), daemon=True)
    reader.start()
    try:
        assert got_line.wait(timeout=20), "no ID reached the pipe within 20 s"
        # The line came while the process was still generating: output is flushed as it goes.
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        status = process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(timeout=20)
    assert not reader.is_alive()
    err = process.stderr.read().decode()
    assert "Traceback" not in err
    assert err == ""
    assert status == 128 + signal.SIGTERM
    data = b"".join(chunks).decode()
    assert data.endswith("\n"), data[-100:]
    lines = data.splitlines()
    assert lines
    assert len(set(lines)) == len(lines)
    for line in lines:
        assert str(Uid64(line)) == line
    assert_recent(Uid64(lines[-1]).time)


class FlushLog(io.StringIO):
    """A stdout that notes when each flush happens and how many lines it had by then."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes: list[tuple[float, int]] = []

    def flush(self) -> None:
        self.flushes.append((time.monotonic(), self.getvalue().count("\n")))
        super().flush()


def test_generate_flushes_at_least_every_tenth_of_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 40,000 uid64 IDs take over 0.6 s at 64 per ms; a reader must see them as they come.
    stdout = FlushLog()
    monkeypatch.setattr(sys, "stdout", stdout)
    started = time.monotonic()
    assert cli.main(["generate", "--scheme", "uid64", "--count", "40000"]) == 0
    finished = time.monotonic()
    assert stdout.getvalue().count("\n") == 40000
    moments = [started] + [moment for moment, _ in stdout.flushes] + [finished]
    gaps = [later - earlier for earlier, later in itertools.pairwise(moments)]
    assert max(gaps) < 0.35, gaps
    # Flushed while generating, with IDs still to come, not only once at the end.
    assert len([lines for _, lines in stdout.flushes if 0 < lines < 40000]) >= 3


class InterruptedStdout(io.TextIOBase):
    """A stdout whose third write is cut short by SIGTERM, as write(2) to a full pipe is.

    When a signal interrupts a blocked write(2) that has moved some bytes, the
    kernel returns the short count and Python runs the handler before writing
    the rest; an exception from the handler throws the rest away. Here the first
    part of the text (ending inside an ID) is taken, SIGTERM arrives, then the rest is taken.
    """

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.writes = 0
        self.signalled_at: int | None = None

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.writes += 1
        if self.signalled_at is not None and self.writes > self.signalled_at + 20:
            raise RuntimeError("still generating long after SIGTERM")
        if self.writes == 3:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN, None):
                raise RuntimeError("the CLI did not install a SIGTERM handler")
            cut = text.index("\n", len(text) // 2) - 2  # inside an ID
            self.parts.append(text[:cut])
            self.signalled_at = self.writes
            os.kill(os.getpid(), signal.SIGTERM)
            self.parts.append(text[cut:])
        else:
            self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_sigterm_never_cuts_an_id_in_half(monkeypatch: pytest.MonkeyPatch) -> None:
    assert threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM)
    stdout = InterruptedStdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        status = cli.main(["generate", "--scheme", "short60", "--count", "0"])
    except SystemExit as stop:
        status = stop.code  # type: ignore[assignment]
    assert signal.getsignal(signal.SIGTERM) == previous  # main() put the old handler back
    assert stdout.signalled_at is not None
    assert status == 128 + signal.SIGTERM
    text = "".join(stdout.parts)
    assert text.endswith("\n"), f"output ends mid-ID: {text[-30:]!r}"
    lines = text.splitlines()
    assert len(set(lines)) == len(lines)
    parse_generated("short60", lines)


def test_decode_does_not_guess_a_short_string(capsys: pytest.CaptureFixture[str]) -> None:
    """``zzzz`` was once decoded as a short60 from 2018; now it needs --scheme."""
    result = run_main(capsys, ["decode", "zzzz"])
    assert result.status == 2
    assert result.out == ""
    assert "4 characters" in result.err
    assert "--scheme" in result.err
    named = run_main(capsys, ["decode", "--scheme", "short60", "zzzz"])
    assert named.status == 0
    assert json.loads(named.out)["scheme"] == "short60"


def test_version_is_the_installed_one_and_read_only_when_asked() -> None:
    from importlib.metadata import version

    from idmint.generate import CORE

    shown = run_idmint("--version")
    assert shown.returncode == 0, shown.stderr
    core = "compiled core" if CORE == "c" else "pure-Python core"
    assert shown.stdout == f"idmint {version('idmint')} ({core})\n"


def test_a_command_that_claims_nothing_imports_no_coordination() -> None:
    # `idmint decode` in a shell loop pays its imports every time: package
    # metadata, the coordinators and the server (whose settings describe
    # `serve`'s options) are for the commands that use them.
    code = (
        "import sys; from idmint.cli import main; "
        "status = main(['decode', '--scheme', 'uid64', '0123456789abcdef']); "
        "heavy = ('importlib.metadata', 'idmint.coordinate', 'idmint.server', 'asyncio'); "
        "print(status, [m for m in heavy if m in sys.modules], file=sys.stderr)"
    )
    decoded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert decoded.stderr.strip() == "0 []", decoded.stderr


# -- bounds ------------------------------------------------------------------------


def test_bounds_of_a_time_and_of_a_span(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_main(capsys, ["bounds", "--scheme", "uuid7", "2022-02-22T19:22:22Z"])
    assert (result.status, result.err) == (0, "")
    assert result.lines() == [
        "017f22e2-79b0-7000-8000-000000000000",
        "017f22e2-79b0-7fff-bfff-ffffffffffff",
    ]
    # The RFC's example lies between them; ms since 1970 say the same as ISO 8601.
    assert run_main(capsys, ["bounds", "--scheme", "uuid7", "1645557742000"]).out == result.out
    span = run_main(
        capsys,
        [
            *("bounds", "--scheme", "uid64", "--mode", "time-sequential", "--format", "json"),
            *("2024-05-01T00:00:00+02:00", "2024-05-02T00:00:00+02:00"),
        ],
    )
    record = json.loads(span.out)
    first, last = Uid64(record["first"]), Uid64(record["last"])
    assert (first.int, last.int) == (record["first_int"], record["last_int"])
    assert first.time == dt.datetime(2024, 4, 30, 22, tzinfo=dt.timezone.utc)
    assert last.time == dt.datetime(2024, 5, 1, 21, 59, 59, 999000, tzinfo=dt.timezone.utc)
    assert first.mode is last.mode is Mode.TIME_SEQUENTIAL


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--scheme", "uid64", "1", "2"], "do not sort by time"),
        (["--scheme", "elastic64", "1000"], "node_bits"),
        (["--scheme", "muid", "--mode", "spread", "1000"], "muid bounds take no --mode"),
        (["--scheme", "uuid7", "2024-05-01T00:00:00"], "has no time zone"),
        (["--scheme", "uuid7", "yesterday"], "is not a time"),
        (["--scheme", "short60", "1000"], "outside the times short60 IDs can hold"),
        (["--scheme", "uuid7", "5", "5"], "ends"),
        (["--scheme", "uuid7"], "TIME"),
    ],
)
def test_bounds_errors_are_one_usage_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert_usage_error(run_main(capsys, ["bounds", *argv]), fragment)
