"""A second process on the same host, started with the defaults, mints IDs of its own.

Before the host-local default every process without a coordinator was generator 0
(and short60's random bits collided every few ms between busy processes), so two
``idmint generate`` at once shared about half their IDs. Now each process claims
its own identity from this host's pool (``local://``), and a configured identity
held by one process is refused to the next. Every command reads the coordinator
from the same place: its flag, else ``IDMINT_COORDINATOR``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from tests.cli_process import CliProcess, assert_one_error_line, run_idmint

from idmint import Short60, Snowflake, Uid64, Uuid7
from idmint.coordinate import COORDINATOR_VARIABLE
from idmint.server.config import SETTINGS


def _run_together(count: int, processes: int, *options: str) -> list[CliProcess]:
    with contextlib.ExitStack() as stack:
        started = [
            stack.enter_context(
                CliProcess("generate", "--count", str(count), *options, stamp=False)
            )
            for _ in range(processes)
        ]
        for process in started:
            assert process.wait(timeout=120) == 0, process.stderr
        return started


def _assert_distinct(values: list[str]) -> None:
    twice = [value for value, seen in Counter(values).items() if seen > 1]
    assert not twice, f"{len(twice)} IDs minted by more than one process, e.g. {twice[:3]}"


def test_two_cli_processes_with_no_options_share_no_id() -> None:
    processes = _run_together(150_000, 2)
    everything = [line for process in processes for line in process.lines]
    assert len(everything) == 300_000
    _assert_distinct(everything)
    generators = [{Uid64(line).generator for line in p.lines} for p in processes]
    assert all(len(used) == 1 for used in generators)
    assert generators[0] != generators[1]


@pytest.mark.parametrize(("processes", "count"), [(2, 400_000), (8, 100_000)])
def test_short60_processes_never_collide(processes: int, count: int) -> None:
    """uexky's 9 random bits collided between two busy processes every few ms."""
    started = _run_together(count, processes, "--scheme", "short60")
    everything = [line for process in started for line in process.lines]
    assert len(everything) == processes * count
    _assert_distinct(everything)
    nodes = [{Short60(line).node for line in p.lines} for p in started]
    assert all(len(used) == 1 for used in nodes)
    assert len({used.pop() for used in nodes}) == processes


@pytest.mark.parametrize(
    ("layout", "count"), [("twitter", 100_000), ("sonyflake", 20_000)], ids=["twitter", "sonyflake"]
)
def test_eight_snowflake_processes_on_the_host_pool_never_collide(layout: str, count: int) -> None:
    """Each claims a worker of its own from this host's pool (``snowflake-w10``,
    ``snowflake-w16``): 8 processes at once, no ID twice."""
    started = _run_together(count, 8, "--scheme", "snowflake", "--layout", layout)
    everything = [line for process in started for line in process.lines]
    assert len(everything) == 8 * count
    _assert_distinct(everything)
    kind = Snowflake.of(layout)
    workers = [{kind(line).worker for line in p.lines} for p in started]
    assert all(len(used) == 1 for used in workers)
    assert len({used.pop() for used in workers}) == 8


@pytest.mark.parametrize(
    ("identity", "named"),
    [
        (("--generator", "7"), "generator 7"),
        (("--coordinator", "static://?generator=7"), "generator 7"),
        (("--scheme", "uuid7", "--node", "7"), "node 7"),
        (("--scheme", "uuid7", "--coordinator", "static://?node=7"), "node 7"),
    ],
    ids=["option", "url", "uuid7-option", "uuid7-url"],
)
def test_the_same_static_identity_twice_is_refused_with_one_line(
    identity: tuple[str, ...], named: str, tmp_path: Path
) -> None:
    # A pool of the test's own: no other test's process may hold generator 7 in it.
    pool = {"IDMINT_LOCAL_DIR": str(tmp_path)}
    environment = {**os.environ, **pool}
    # The holder names its identity as an option; the second process, either way.
    held = ("--scheme", "uuid7", "--node", "7") if "uuid7" in identity else ("--generator", "7")
    with CliProcess("generate", "--count", "0", *held, stamp=False, env=environment) as holder:
        holder.wait_for_lines(1, timeout=30, what="the first process to mint")
        second = run_idmint("generate", "--count", "5", *identity, env=pool)
        assert second.returncode == 1, "no ID can be issued: a runtime error, not usage"
        assert second.stdout == ""
        line = assert_one_error_line(second.stderr)
        assert named in line
        assert f":{holder.pid}" in line, "the message should name the process that holds it"
        holder.send(signal.SIGTERM)
        assert holder.wait(timeout=30) == 128 + signal.SIGTERM
    # Released on exit: the identity is free again.
    again = run_idmint("generate", "--count", "1", *identity, env=pool)
    assert again.returncode == 0, again.stderr
    minted = again.stdout.strip()
    identity_of = Uuid7(minted).node if "uuid7" in identity else Uid64(minted).generator
    assert identity_of == 7


def test_the_cli_takes_the_coordinator_from_the_environment_as_serve_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment's IDMINT_COORDINATOR (an env file shared by its commands): ``serve``
    honoured it, ``generate`` claimed from this host's pool instead, beside the
    deployment's pool, where another process could hold the same ID."""
    monkeypatch.setenv(COORDINATOR_VARIABLE, f"local://{tmp_path}?generators=40-40")
    with CliProcess("generate", "--count", "0", stamp=False) as holder:
        holder.wait_for_lines(1, timeout=30, what="the first process to mint")
        assert Uid64(holder.lines[0]).generator == 40
        listed = run_idmint("claims", "list", "--format", "json")
        assert [json.loads(row)["generator"] for row in listed.stdout.splitlines()] == [40]
        monkeypatch.setenv(
            COORDINATOR_VARIABLE, f"local://{tmp_path}?generators=40-40&claim_timeout=0.5"
        )
        second = run_idmint("generate", "--count", "1")
        assert second.returncode == 1, second.stdout
        assert "are held or held off" in assert_one_error_line(second.stderr)
        # The flag wins over the variable; an empty variable is unset.
        flagged = run_idmint("generate", "--coordinator", "static://?generator=41")
        assert Uid64(flagged.stdout.strip()).generator == 41, flagged.stderr
        monkeypatch.setenv(COORDINATOR_VARIABLE, "")
        unset = run_idmint("generate")
        assert unset.returncode == 0, unset.stderr
        holder.send(signal.SIGTERM)
        assert holder.wait(timeout=30) == 128 + signal.SIGTERM
    serve_reads = {setting.name: setting.variable for setting in SETTINGS}["coordinator"]
    assert serve_reads == COORDINATOR_VARIABLE, "one variable for every command"
