"""Child processes whose wall clock the test steps: the LD_PRELOAD shim and its driver.

* :func:`build_shim`: compile ``wallclock_shim.c`` with the machine's gcc.
* :class:`WallClockOffset`: the file the shim reads; ``set_s(-8)`` steps every
  child started with :meth:`WallClockOffset.env` 8 s back (its monotonic clock
  does not move) from its next reading of the wall clock on.
* :class:`ReportingChild`: a child that prints one JSON report per line; the
  test waits for a report with a deadline and fails, naming what was awaited,
  if the deadline passes first.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tests.cli_process import DrainedChild

SHIM_SOURCE = Path(__file__).with_name("wallclock_shim.c")
GCC_FLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Werror")


def build_shim(directory: Path) -> Path:
    """Compile the shim into ``directory``; fail (not skip) when gcc is missing."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise AssertionError(
            "gcc is needed to build the wall-clock shim of the fault tests; "
            "run scripts/install-test-deps.sh"
        )
    library = directory / "wallclock_shim.so"
    built = subprocess.run(
        [gcc, *GCC_FLAGS, "-o", str(library), str(SHIM_SOURCE), "-ldl"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, f"building the wall-clock shim failed:\n{built.stderr}"
    return library


class WallClockOffset:
    """How far the shimmed children's wall clock is from the real one."""

    def __init__(self, shim: Path, path: Path) -> None:
        self.shim = shim
        self.path = path
        self.offset_ns = 0
        self.set_s(0)

    def set_s(self, seconds: float) -> None:
        """Put the children's wall clock ``seconds`` from the real one (negative: behind)."""
        self.offset_ns = round(seconds * 1e9)
        scratch = self.path.with_name(self.path.name + ".new")
        scratch.write_text(f"{self.offset_ns}\n")
        os.replace(scratch, self.path)  # whole, so the shim never reads half a number

    def env(self) -> dict[str, str]:
        """This process's environment plus what puts a child under the shim."""
        preload = os.environ.get("LD_PRELOAD", "")
        return {
            **os.environ,
            "LD_PRELOAD": f"{self.shim} {preload}".strip(),
            "IDMINT_WALLCLOCK_OFFSET_FILE": str(self.path),
        }


class ReportingChild(DrainedChild):
    """A child process that reports as JSON lines on stdout; stderr is kept for failures."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.argv = list(argv)
        self._reports: queue.Queue[dict[str, Any] | None] = queue.Queue()
        super().__init__(self.argv, env=env)

    def _drain_stdout(self, stream: IO[str]) -> None:
        for line in stream:
            self._reports.put(json.loads(line))
        self._reports.put(None)  # end of output

    def expect(self, event: str, *, within_s: float, why: str) -> dict[str, Any]:
        """The next report of ``event`` (others are passed over), if it comes in time.

        ``why`` says what it means that the report did not come, for the failure.
        """
        deadline = time.monotonic() + within_s
        while True:
            try:
                report = self._reports.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {event!r} report within {within_s:g} s: {why}\nstderr:\n{self.stderr}"
                ) from None
            if report is None:
                self.popen.wait(10)
                for thread in self._threads:
                    thread.join(10)
                raise AssertionError(
                    f"the child exited with {self.popen.returncode} before reporting "
                    f"{event!r}\nstderr:\n{self.stderr}"
                )
            if report["event"] == event:
                return report
