"""The wall clock steps back while a generator waits for it: counted, then waited out or refused.

A generator that has used up a millisecond (or whose clock is a little behind)
sleeps until the wall clock reaches the next one. If the clock is stepped back
during that sleep (an NTP step, a VM restore), sleeping until the old target
would stall the caller for as long as the step: 8 s for ``batch(64)``, ten
minutes for ``idmint generate``, deaf to SIGTERM meanwhile. The sleep now goes
in slices measured on the monotonic clock and hands back as soon as the wall
clock falls behind it, so the generator counts the step and refuses
(``ClockMovedBackwards``) or waits within its tolerance, as documented.

The real system clock is stepped with an LD_PRELOAD shim (shim/realtime_offset.c,
compiled here with gcc) that shifts only CLOCK_REALTIME of the process it is
loaded into, by an offset the test writes to a file.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli_process import assert_one_error_line

from idmint import ClockMovedBackwards, ManualClock, Uid64Generator

SHIM_SOURCE = Path(__file__).with_name("shim") / "realtime_offset.c"
PROMPT_S = 4.0
"""How long a refusal may take here: well under the 8 s step it must not wait out."""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    library = tmp_path_factory.mktemp("shim") / "realtime_offset.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(SHIM_SOURCE), "-ldl"],
        check=True,
    )
    return library


class SteppedClockProcess:
    """A Python child whose wall clock the test can step, talking in lines."""

    def __init__(self, shim: Path, offset_file: Path, code: str, *args: str) -> None:
        self.offset_file = offset_file
        self.step_to_ns(0)
        self.process = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "LD_PRELOAD": str(shim),
                "IDMINT_TEST_REALTIME_OFFSET_FILE": str(offset_file),
            },
        )

    def step_to_ns(self, offset_ns: int) -> None:
        """Shift the child's wall clock to ``offset_ns`` from the real one."""
        temporary = self.offset_file.with_suffix(".new")
        temporary.write_text(str(offset_ns))
        temporary.replace(self.offset_file)

    def line(self, timeout: float) -> str:
        """The child's next line, or a test failure if it has none within ``timeout``."""
        assert self.process.stdout is not None
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(self.process.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(timeout)
        if not got:
            self.process.kill()
            pytest.fail(f"the child said nothing within {timeout:g} s")
        return got[0].strip()

    def report(self, timeout: float) -> dict[str, object]:
        """The child's JSON report, past any further "sleeping" lines."""
        while True:
            line = self.line(timeout)
            if line != "sleeping":
                report: dict[str, object] = json.loads(line)
                return report

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=30)


@pytest.fixture
def stepped(shim: Path, tmp_path: Path) -> Iterator[list[SteppedClockProcess]]:
    started: list[SteppedClockProcess] = []
    yield started
    for child in started:
        child.close()


WAITING_CHILD = """
    import json, sys, time
    from idmint import ClockMovedBackwards, Uid64Generator
    from idmint.generate.clock import SystemClock

    class Announcing(SystemClock):
        # The real sleep, announced: the test steps the clock once we are in it.
        def sleep_until_ns(self, wall_ns, longest_ns=None):
            print("sleeping", flush=True)
            super().sleep_until_ns(wall_ns, longest_ns)

    generator = Uid64Generator(1, max_clock_wait_ms=float(sys.argv[1]), clock=Announcing())
    generator.generate()
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    try:
        ids = generator.batch(64).ints()
        outcome = {"outcome": "minted", "count": len(ids)}
    except ClockMovedBackwards as error:
        outcome = {"outcome": "refused", "message": str(error)}
    outcome.update(took=time.monotonic() - started, steps=generator.clock_steps_back)
    print(json.dumps(outcome), flush=True)
"""


def test_a_step_back_during_the_wait_is_refused_at_once(
    shim: Path, tmp_path: Path, stepped: list[SteppedClockProcess]
) -> None:
    """batch(64) waits out a 1 s step (its tolerance is 2 s); 8 s more during that wait: refused."""
    child = SteppedClockProcess(shim, tmp_path / "offset", WAITING_CHILD, "2000")
    stepped.append(child)
    assert child.line(30) == "ready"
    child.step_to_ns(-1_000_000_000)
    child.send("go")
    assert child.line(PROMPT_S) == "sleeping"
    child.step_to_ns(-9_000_000_000)
    report = child.report(PROMPT_S)
    assert report["outcome"] == "refused", report
    assert "moved backwards" in report["message"]
    assert report["took"] < PROMPT_S
    assert report["steps"] >= 1, "the step must be counted (clock_steps_back)"


def test_a_step_back_within_tolerance_during_the_wait_is_waited_out(
    shim: Path, tmp_path: Path, stepped: list[SteppedClockProcess]
) -> None:
    child = SteppedClockProcess(shim, tmp_path / "offset", WAITING_CHILD, "2000")
    stepped.append(child)
    assert child.line(30) == "ready"
    child.step_to_ns(-300_000_000)
    child.send("go")
    assert child.line(PROMPT_S) == "sleeping"
    child.step_to_ns(-600_000_000)  # 0.6 s behind in all: within the 2 s tolerance
    report = child.report(PROMPT_S)
    assert report["outcome"] == "minted", report
    assert report["count"] == 64
    assert report["steps"] >= 2, "both steps are counted"


def test_idmint_generate_under_a_ten_minute_step_stops_promptly(shim: Path, tmp_path: Path) -> None:
    """It once slept through the step, deaf to SIGTERM; now it refuses with one line."""
    offset = tmp_path / "offset"
    offset.write_text("0")
    process = subprocess.Popen(
        [sys.executable, "-m", "idmint", "generate", "--count", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "LD_PRELOAD": str(shim),
            "IDMINT_TEST_REALTIME_OFFSET_FILE": str(offset),
        },
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.strip(), "the CLI minted nothing"
        offset.write_text(str(-600 * 1_000_000_000))
        try:
            process.wait(timeout=PROMPT_S)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=PROMPT_S)  # raises if SIGTERM is not heard either
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode in (1, 128 + signal.SIGTERM), err
    if process.returncode == 1:
        assert "moved backwards" in assert_one_error_line(err)
    lines = [first.strip(), *out.split()]
    assert len(set(lines)) == len(lines), "an ID was printed twice"


class SteppingClock(ManualClock):
    """A manual clock whose first wait is cut short by a step back of ``step_ms``."""

    def __init__(self, step_ms: float) -> None:
        super().__init__()
        self.step_ms = step_ms
        self.stepped = False

    def sleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        if not self.stepped:
            self.stepped = True
            self.step_back_ms(self.step_ms)
            return
        super().sleep_until_ns(wall_ns, longest_ns)

    async def asleep_until_ns(self, wall_ns: int, longest_ns: int | None = None) -> None:
        self.sleep_until_ns(wall_ns, longest_ns)
        await asyncio.sleep(0)


@pytest.mark.parametrize("waits", ["sync", "async"])
def test_a_wait_cut_short_by_a_step_is_counted_and_refused(waits: str) -> None:
    """The generator's side, on any clock: a wait that ends early is looked at again."""
    clock = SteppingClock(step_ms=8_000)
    generator = Uid64Generator(3, clock=clock, max_clock_wait_ms=10)
    generator.batch(64)  # the whole millisecond

    def one_more() -> object:
        if waits == "sync":
            return generator.batch(1)
        return asyncio.run(generator.abatch(1))

    with pytest.raises(ClockMovedBackwards):
        one_more()
    assert generator.clock_steps_back == 1
    assert clock.sleeps == [], "nothing may sleep the step out"
