"""fork() and claims: a child inherits its parent's claim objects, but none of what they hold.

A child of ``os.fork()`` gets copies of the parent's claims, their sockets and
their lock files. Every process-level hook that could act on them in the child
(``atexit``, ``close()``, ``release_all_claims()``) must leave them alone: the
claim, its session or lease, its lock and its high-water mark are the parent's,
and the parent goes on minting. Run against every claiming driver, the parent on
the compiled core, and on ``local://`` on the pure core too: what a generator
does in a child is its core's, what a claim does its driver's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest
from tests.cores import core_env
from tests.integration.claims_helpers import (
    DEFAULT_TTL_S,
    SHARED_BACKENDS,
    Backend,
    held_generators,
    holder_of_this_process,
    wait_for,
)

from idmint import Uid64, new_generator
from idmint.clock import OffsetClock

# The parent claims, forks, and reports once its child has exited; then it mints
# until killed. The child leaves the way the test asks, as programs do.
_PARENT = textwrap.dedent(
    """
    import json, os, sys
    from idmint import new_generator
    from idmint.coordinate import release_all_claims

    url, leave = sys.argv[1], sys.argv[2]
    generator = new_generator("uid64", coordinator=url)
    for value in generator.batch(2_000).ints():
        print(value)
    pid = os.fork()
    if pid == 0:
        if leave == "close":
            generator.close()
        elif leave == "release_all_claims":
            release_all_claims()
        sys.exit(0)  # atexit handlers run, as at the end of any program
    _, status = os.waitpid(pid, 0)
    report = {
        "child": os.waitstatus_to_exitcode(status),
        "generator": generator.generator,
        "core": generator.core,
    }
    print(json.dumps(report), flush=True)
    while True:
        for value in generator.batch(64).ints():
            print(value)
    """
)

CHILD_EXIT_TIMEOUT_S = 20

on_each_driver_and_core = pytest.mark.parametrize(
    ("backend", "parent_core"),
    [
        *(pytest.param(name, "c", id=f"{name}-c") for name in SHARED_BACKENDS),
        pytest.param("local", "python", id="local-python"),
    ],
    indirect=["backend"],
)


class Parent:
    """The parent process: its report, then every ID it printed."""

    def __init__(self, url: str, leave: str, core: str) -> None:
        # Its own process group, so a child stuck on the parent's connection
        # can be killed with it.
        self.process = subprocess.Popen(
            [sys.executable, "-c", _PARENT, url, leave],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env=core_env(core),
        )
        self.ids: list[int] = []
        self.report = self._read_report()
        assert self.report["core"] == core

    def _read_report(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        # A child stuck on its parent's connection never exits, and the parent
        # never reports: that is the failure this guards against.
        timer = threading.Timer(CHILD_EXIT_TIMEOUT_S, self.kill_group)
        timer.start()
        try:
            for line in self.process.stdout:
                if line.startswith("{"):
                    report: dict[str, Any] = json.loads(line)
                    return report
                self.ids.append(int(line))
        finally:
            timer.cancel()
        pytest.fail(f"the parent gave no report within {CHILD_EXIT_TIMEOUT_S} s: its child hung")

    def read(self, count: int) -> None:
        assert self.process.stdout is not None
        for _ in range(count):
            self.ids.append(int(self.process.stdout.readline()))

    def kill(self) -> None:
        """SIGKILL the parent (a crash) and collect what it printed."""
        self.process.send_signal(signal.SIGKILL)
        out, _ = self.process.communicate(timeout=30)
        # The kill may cut the last line short: only whole lines are IDs (a cut
        # one read as a number is another ID, with a time from nowhere).
        self.ids.extend(int(line) for line in out.split("\n")[:-1] if line)

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@pytest.mark.parametrize("leave", ["exit", "close", "release_all_claims"])
@on_each_driver_and_core
def test_a_forked_child_leaves_its_parents_claim_alone(
    backend: Backend, parent_core: str, leave: str, exit_stack: contextlib.ExitStack
) -> None:
    """The child exits (having closed or released, or not): the parent's claim is untouched."""
    root = backend.new_root()
    url = backend.url(root)
    parent = Parent(url, leave, parent_core)
    exit_stack.callback(parent.kill_group)
    assert parent.report["child"] == 0
    generator = parent.report["generator"]

    # The claim is still the parent's, on the coordinator's own record ...
    held = held_generators(backend, url)
    assert set(held) == {generator}
    assert held[generator].holder == holder_of_this_process(parent.process.pid)
    mark = backend.read_mark(root, generator)
    assert mark is not None
    assert mark["released_ms"] is None, f"the child released the parent's claim: {mark}"
    assert mark["holder"] == holder_of_this_process(parent.process.pid)
    # ... and stays so past a whole TTL of renewals, while the parent mints on.
    renewed = int(mark["renewed_ms"])
    wait_for(
        lambda: (
            int((backend.read_mark(root, generator) or {}).get("renewed_ms", 0))
            > renewed + DEFAULT_TTL_S * 1000
        ),
        timeout=DEFAULT_TTL_S * 5,
        what="the parent to renew its claim for a TTL after the fork",
    )
    parent.read(5_000)
    assert {Uid64(v).generator for v in parent.ids} == {generator}
    assert set(held_generators(backend, url)) == {generator}


@on_each_driver_and_core
def test_fork_exit_then_parent_crash_then_skewed_successor_mints_no_duplicate(
    backend: Backend, parent_core: str, exit_stack: contextlib.ExitStack
) -> None:
    """The sequence that once gave 26,816 duplicates on etcd.

    The child's exit lowered the high-water mark and ended the lease; the parent
    minted on, crashed, and a successor whose clock ran behind started inside
    the parent's range. Now the mark stays the parent's, so the successor waits
    for its clock to pass it.
    """
    root = backend.new_root()
    url = backend.url(root, generators="0-0")
    parent = Parent(url, "exit", parent_core)
    exit_stack.callback(parent.kill_group)
    parent.read(20_000)
    parent.kill()

    successor_url = backend.url(root, generators="0-0", wait_timeout=10, claim_timeout=20)
    clock = OffsetClock(-3_000)
    with new_generator("uid64", coordinator=successor_url, clock=clock) as successor:
        theirs = successor.batch(30_000).ints()
    shared = set(parent.ids) & set(theirs)
    assert not shared, f"{len(shared)} IDs minted by both the crashed parent and its successor"
    assert min(Uid64(v).timestamp_ms for v in theirs) > max(
        Uid64(v).timestamp_ms for v in parent.ids
    )
