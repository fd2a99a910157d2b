"""The idmint CLI in a child process, for tests that run it as users do.

* :func:`run_idmint`: run ``python -m idmint ARGS`` to completion.
* :class:`CliProcess`: a long-running ``idmint`` (or another command) whose stdout
  lines are collected as they arrive (with their arrival times), for tests that
  signal or kill it.
* :func:`assert_one_error_line`: the CLI's error contract (one line, no traceback).
* :func:`run_python_json`: a Python snippet in a child, for what it prints as JSON.
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
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from tests.servers import wait_until

__all__ = [
    "ERROR_PREFIX",
    "CliProcess",
    "ClosedOnExit",
    "DrainedChild",
    "assert_one_error_line",
    "end_child",
    "now_ms",
    "ps",
    "run_idmint",
    "run_python_json",
]

C = TypeVar("C", bound="ClosedOnExit")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _idmint_argv(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "idmint", *args]


def run_idmint(
    *args: str, timeout: float = 60.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``idmint ARGS`` to completion (``env`` added to the test's environment) and
    return what it printed."""
    return subprocess.run(
        _idmint_argv(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
    )


def run_python_json(code: str, env: Mapping[str, str]) -> dict[str, Any]:
    """Run ``code`` (dedented) in a child Python with exactly ``env`` as its
    environment; it must succeed. The JSON object on the last line it printed."""
    shown = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout.splitlines()[-1]))


def ps(*options: str) -> str:
    """What ``ps OPTIONS`` prints (``ps -o etimes= -p PID``: how long PID has run)."""
    return subprocess.run(["ps", *options], capture_output=True, text=True, check=True).stdout


ERROR_PREFIX = "idmint: error: "
"""How the CLI starts every error line, whatever the command."""


def assert_one_error_line(stderr: str) -> str:
    """Check ``stderr`` is exactly one line from idmint, no traceback; return it."""
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    return lines[0]


class ClosedOnExit:
    """A context manager whose block ends with its :meth:`close`."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def end_child(popen: subprocess.Popen[str], drains: Sequence[threading.Thread]) -> None:
    """Kill ``popen`` if it still runs, wait for it, join the threads that drain its
    pipes and close them."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGCONT)  # a stopped process cannot die
            popen.kill()
        popen.wait(10)
    for thread in drains:
        thread.join(timeout=10)
    for stream in (popen.stdout, popen.stderr):
        if stream is not None:
            stream.close()


class DrainedChild(ClosedOnExit):
    """A child process whose stdout a subclass reads as it comes (:meth:`_drain_stdout`,
    in a thread) and whose stderr is kept (:attr:`stderr`) for the failures. A context
    manager: leaving the block kills the child if it still runs.

    A subclass sets up what :meth:`_drain_stdout` fills before calling this
    constructor: the threads start at once.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        session: bool = False,
    ) -> None:
        self._stderr: list[str] = []
        self.popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
            start_new_session=session,
        )
        assert self.popen.stdout is not None
        assert self.popen.stderr is not None
        self._threads = [
            threading.Thread(target=self._drain_stdout, args=(self.popen.stdout,), daemon=True),
            threading.Thread(target=self._drain_stderr, args=(self.popen.stderr,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _drain_stdout(self, stream: IO[str]) -> None:
        raise NotImplementedError

    def _drain_stderr(self, stream: IO[str]) -> None:
        for line in stream:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def close(self) -> None:
        end_child(self.popen, self._threads)


class CliProcess(DrainedChild):
    """``python -m idmint ARGS`` running, its stdout and stderr drained by threads.

    ``lines`` holds stdout's lines as they arrive and ``arrivals`` the monotonic time
    each arrived (stamped with ``stamp=True``). A context manager: leaving the block
    kills the process if it still runs.

    ``command`` runs another command line instead (a shell running ``idmint``, a
    script); ``session=True`` starts it in a session (and process group) of its own,
    so that :meth:`interrupt` can send SIGINT to its group as a terminal's Ctrl-C does.
    """

    def __init__(
        self,
        *args: str,
        stamp: bool = True,
        command: Sequence[str] | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        session: bool = False,
    ) -> None:
        self.args = tuple(command[1:]) if command else args
        self.lines: list[str] = []
        self.arrivals: list[float] = []
        self._stamp = stamp
        self._session = session
        self.started_at = time.monotonic()
        self.started_ms = now_ms()
        super().__init__(
            command if command else _idmint_argv(args), cwd=cwd, env=env, session=session
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _drain_stdout(self, stream: IO[str]) -> None:
        lines = self.lines
        if self._stamp:
            arrivals = self.arrivals
            clock = time.monotonic
            for line in stream:
                arrivals.append(clock())
                lines.append(line.rstrip("\n"))
        else:
            for line in stream:
                lines.append(line.rstrip("\n"))

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def wait_for_lines(self, count: int, *, timeout: float, what: str = "") -> None:
        """Wait until stdout has ``count`` lines (fail early if the process exits)."""

        def check() -> None:
            if self.popen.poll() is not None and len(self.lines) < count:
                self._join()
                if len(self.lines) < count:
                    raise AssertionError(
                        f"idmint {' '.join(self.args)} exited with {self.popen.returncode} "
                        f"after {len(self.lines)} lines, before {what or count}; "
                        f"stderr:\n{self.stderr}"
                    )

        wait_until(
            lambda: len(self.lines) >= count,
            timeout=timeout,
            description=what or f"{count} lines from idmint {' '.join(self.args)}",
            interval=0.01,
            check=check,
        )

    def send(self, signum: signal.Signals) -> None:
        self.popen.send_signal(signum)

    def interrupt(self) -> None:
        """SIGINT to its process group (``session=True``), as Ctrl-C in its terminal."""
        assert self._session, "only a process started with session=True leads a group"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGINT)

    def wait(self, timeout: float) -> int:
        """Wait for the process to exit and its output to be drained; its status."""
        code = self.popen.wait(timeout)
        self._join()
        return code

    def _join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=10)

    def close(self) -> None:
        if self._session:  # whatever it started in its group goes with it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        super().close()
