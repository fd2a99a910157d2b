"""The wall clock steps back while a generator waits for it.

A generator whose tick is used up waits for a wall-clock time. If the clock
steps back during that wait, the target moves away by the size of the step; a
wait that slept the whole gap in one call blocked for that long (8 s for
``batch(64)`` after an 8 s step), counted nothing and refused nothing. The
promise (docs/generators.md): a step back is counted in ``clock_steps_back``,
waited out when it is within ``max_clock_wait_ms`` and refused with
``ClockMovedBackwards`` when it is not, whether it comes before or during a wait.

Two ways in: an injectable clock that steps back at a chosen reading inside a
wait (the system clock's own waiting code, on real time), and child processes
whose real ``CLOCK_REALTIME`` is stepped through an LD_PRELOAD shim while they
run unmodified code (``SystemClock``, the CLI). Every test runs on both
generator cores (tests/cores.py): the children with ``IDMINT_PURE`` set or not,
so the compiled core's own clock reads and sleeps meet the shim's steps.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import pytest
from tests.cli_process import CliProcess, assert_one_error_line
from tests.cores import MS, core_env
from tests.faults.wallclock import ReportingChild, WallClockOffset
from tests.server.server_helpers import IdmintServer, parse_metrics
from tests.servers import wait_until

from idmint.cli import EXIT_RUNTIME
from idmint.errors import ClockMovedBackwards
from idmint.generate import ManualClock, OffsetClock, Uid64Generator
from idmint.schemes import Uuid7

CHILD = Path(__file__).with_name("clock_step_child.py")

pytestmark = pytest.mark.usefixtures("core")  # both cores: tests/cores.py


class StepsBackInWait(OffsetClock):
    """The system clock, which steps back by ``step_ms`` inside the next wait once armed.

    The step comes at the ``at_reading``-th wall-clock reading of that wait:
    1 is before the wait has taken its bearings (as if the clock stepped
    between the generator's decision to wait and the wait), 2 is after the
    wait's first pause (the clock steps while the caller sleeps).
    """

    def __init__(self) -> None:
        super().__init__(0)
        self._step_ns = 0
        self._at_reading = 0
        self._armed = False
        self._readings: int | None = None  # counting while inside an armed wait
        self.stepped_in_wait = False

    def step_back_ms(self, ms: float) -> None:
        """Step back now, as a plain step between two calls."""
        self.offset_ns -= round(ms * MS)

    def arm(self, step_ms: float, at_reading: int) -> None:
        self._step_ns = round(step_ms * MS)
        self._at_reading = at_reading
        self._armed = True

    def time_ns(self) -> int:
        if self._readings is not None:
            self._readings += 1
            if self._readings == self._at_reading:
                self.offset_ns -= self._step_ns
                self.stepped_in_wait = True
                self._readings = None
        return time.time_ns() + self.offset_ns

    def _enter_wait(self) -> None:
        if self._armed:
            self._armed = False
            self._readings = 0

    def sleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        self._enter_wait()
        try:
            super().sleep_until_ns(wall_ns, since_ns)
        finally:
            self._readings = None

    async def asleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        self._enter_wait()
        try:
            await super().asleep_until_ns(wall_ns, since_ns)
        finally:
            self._readings = None


def _run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


# Each takes 64 IDs (a whole uid64 tick), so the call after it must wait for the clock.
CALLS: dict[str, Callable[[Uid64Generator], Sequence[Any]]] = {
    "batch": lambda generator: generator.batch(64),
    "generate": lambda generator: [generator.generate() for _ in range(64)],
    "abatch": lambda generator: _run(generator.abatch(64)),
    "agenerate": lambda generator: _run(_agenerate_64(generator)),
}


async def _agenerate_64(generator: Uid64Generator) -> list[Any]:
    return [await generator.agenerate() for _ in range(64)]


def _use_up_the_tick(generator: Uid64Generator) -> list[Any]:
    """Take IDs until the next one needs a wait, so no call after a step can be
    served from the current tick (every ID through the lock would count the step
    once per leftover ID)."""
    taken = []
    while (value := generator.generate_nowait()) is not None:
        taken.append(value)
    return taken


@pytest.mark.parametrize("at_reading", [1, 2], ids=["before-the-wait-looks", "mid-sleep"])
@pytest.mark.parametrize("call", list(CALLS), ids=list(CALLS))
def test_a_step_beyond_the_tolerance_during_a_wait_is_counted_and_refused(
    call: str, at_reading: int
) -> None:
    """A 2 s step during a wait raises ClockMovedBackwards (tolerance 1 s) and is counted.

    A plain 200 ms step first makes the next call wait about 200 ms, which is
    allowed; the second step comes inside that wait. A wait that did not hand
    back would sleep out the 2.2 s and the call would then succeed.
    """
    mint = CALLS[call]
    clock = StepsBackInWait()
    generator = Uid64Generator(1, mode="time-sequential", clock=clock, max_clock_wait_ms=1000)
    mint(generator)
    _use_up_the_tick(generator)
    clock.step_back_ms(200)
    clock.arm(step_ms=2000, at_reading=at_reading)
    with pytest.raises(ClockMovedBackwards) as refused:
        mint(generator)
    assert clock.stepped_in_wait, "the scenario did not happen: no wait met the second step"
    assert generator.clock_steps_back == 2  # the plain step, then the one inside the wait
    assert refused.value.behind_ms > 2000


@pytest.mark.parametrize("call", list(CALLS), ids=list(CALLS))
def test_a_step_within_the_tolerance_during_a_wait_is_counted_and_waited_out(call: str) -> None:
    """A 30 ms step inside a 20 ms wait (tolerance 1 s) is counted, then waited out.

    The IDs after it are all in later milliseconds than every ID before it:
    nothing is reissued, whatever the clock said meanwhile.
    """
    mint = CALLS[call]
    clock = StepsBackInWait()
    generator = Uid64Generator(2, mode="time-sequential", clock=clock, max_clock_wait_ms=1000)
    before = [*mint(generator), *_use_up_the_tick(generator)]
    clock.step_back_ms(20)
    clock.arm(step_ms=30, at_reading=2)
    after = list(mint(generator))
    assert clock.stepped_in_wait
    assert generator.clock_steps_back == 2
    assert min(i.timestamp_ms for i in after) > max(i.timestamp_ms for i in before)
    assert len({i.int for i in before + after}) == len(before) + len(after)


def test_the_event_loop_runs_while_abatch_waits_out_a_step() -> None:
    """abatch() waits out a 30 ms step on the event loop: other tasks run meanwhile."""
    clock = StepsBackInWait()
    generator = Uid64Generator(3, mode="time-sequential", clock=clock, max_clock_wait_ms=1000)

    async def scenario() -> tuple[int, int]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        await generator.abatch(64)
        _use_up_the_tick(generator)
        clock.step_back_ms(30)
        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        before = ticks
        await generator.abatch(64)
        during = ticks - before
        stop.set()
        await task
        return during, generator.clock_steps_back

    ticks_during_wait, steps = asyncio.run(scenario())
    assert steps == 1
    assert ticks_during_wait > 1


class StepsBackAsTheWaitStarts(ManualClock):
    """A ManualClock that steps back 50 ms as the next wait starts, once armed."""

    armed = False

    def sleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        if self.armed:
            self.armed = False
            self.step_back_ms(50)
        super().sleep_until_ns(wall_ns, since_ns)


def test_manual_clock_hands_a_step_back_to_the_generator_too() -> None:
    """ManualClock keeps the same contract: a wait that finds the clock earlier
    than the generator's decision returns without moving time, and the
    generator refuses the 50 ms step (tolerance 10 ms) instead of sleeping it."""
    clock = StepsBackAsTheWaitStarts()
    generator = Uid64Generator(4, clock=clock, max_clock_wait_ms=10)
    generator.batch(64)
    clock.armed = True
    with pytest.raises(ClockMovedBackwards):
        generator.batch(64)
    assert clock.sleeps == []
    assert generator.clock_steps_back == 1


# -- the real system clock, stepped under an LD_PRELOAD shim ------------------------------

CHILD_STARTUP_S = 60.0
"""Generous: a child imports idmint on a loaded CI machine."""
FIRST_STEP_S = 4.0
"""Within the child's tolerance: its generator waits this long (and is stepped meanwhile)."""
CHILD_TOLERANCE_MS = 6_000
SECOND_STEP_S = 8.0
"""Beyond the tolerance: the step a wait must not sleep through."""
PROMPT_S = 6.0
"""How long the test waits for the outcome after the second step: less than the 8 s a
wait that slept through the step would still take, far more than noticing it takes."""


def test_the_shim_steps_only_the_wall_clock(wallclock: WallClockOffset, core: str) -> None:
    """The harness itself: under the shim, time.time_ns() and the generators' clock
    (the compiled core reads it in C) are stepped, time.monotonic_ns() is not."""
    wallclock.set_s(-SECOND_STEP_S)
    probe = (
        "import time; from idmint.generate import Uid64Generator; "
        "g = Uid64Generator(1, mode='time-sequential'); "
        "print(time.time_ns(), time.monotonic_ns(), g.generate().timestamp_ms, g.core)"
    )
    before_wall, before_mono = time.time_ns(), time.monotonic_ns()
    shown = subprocess.run(
        [sys.executable, "-c", probe],
        env=core_env(core, wallclock.env()),
        capture_output=True,
        text=True,
        check=True,
        timeout=CHILD_STARTUP_S,
    ).stdout.split()
    after_wall, after_mono = time.time_ns(), time.monotonic_ns()
    child_wall, child_mono, minted_ms = int(shown[0]), int(shown[1]), int(shown[2])
    step_ns = round(SECOND_STEP_S * 1e9)
    assert before_wall - step_ns <= child_wall <= after_wall - step_ns
    assert before_mono <= child_mono <= after_mono
    assert (before_wall - step_ns) // MS <= minted_ms <= (after_wall - step_ns) // MS
    assert shown[3] == core


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_8s_step_during_a_real_wait_is_refused_promptly(
    wallclock: WallClockOffset, mode: str, core: str
) -> None:
    """batch(64)/abatch(64) on the real SystemClock, stepped back 8 s inside a wait, raise.

    The child's wall clock steps back 4 s (within its 6 s tolerance): it counts
    the step and starts waiting it out. Once it has reported the count, the
    clock steps back 8 s more. The child must report ClockMovedBackwards with
    both steps counted before the 8 s would have passed, having minted nothing
    in between (the step met the wait, not a later call).
    """
    argv = [sys.executable, str(CHILD), mode, str(CHILD_TOLERANCE_MS)]
    with ReportingChild(argv, core_env(core, wallclock.env())) as child:
        minting = child.expect("minting", within_s=CHILD_STARTUP_S, why="the child never minted")
        assert minting["core"] == core
        wallclock.set_s(-FIRST_STEP_S)
        counted = child.expect(
            "counted", within_s=PROMPT_S, why="a 4 s step back was not seen at a tick boundary"
        )
        assert counted["steps_back"] == 1
        wallclock.set_s(-FIRST_STEP_S - SECOND_STEP_S)
        raised = child.expect(
            "raised",
            within_s=PROMPT_S,
            why=f"the generator is still waiting {PROMPT_S:g} s after an "
            f"{SECOND_STEP_S:g} s step: its wait sleeps through steps back",
        )
    assert raised["error"] == "ClockMovedBackwards"
    assert raised["steps_back"] == 2
    assert raised["behind_ms"] > SECOND_STEP_S * 1000
    assert raised["issued"] == counted["issued"]


def test_an_8s_step_under_default_settings_is_refused_promptly(
    wallclock: WallClockOffset, core: str
) -> None:
    """The issue's reproduction: batch(64) in a loop, default 10 ms tolerance, an 8 s step.

    The loop spends nearly all its time waiting for the next millisecond, so
    the step nearly always lands in a wait; wherever it lands, the child must
    refuse and count it before the 8 s would have passed.
    """
    argv = [sys.executable, str(CHILD), "sync", "10"]
    with ReportingChild(argv, core_env(core, wallclock.env())) as child:
        minting = child.expect("minting", within_s=CHILD_STARTUP_S, why="the child never minted")
        assert minting["core"] == core
        wallclock.set_s(-SECOND_STEP_S)
        raised = child.expect(
            "raised",
            within_s=PROMPT_S,
            why=f"batch(64) is still blocked {PROMPT_S:g} s after an {SECOND_STEP_S:g} s step",
        )
    assert raised["error"] == "ClockMovedBackwards"
    assert raised["steps_back"] == 1
    assert raised["behind_ms"] > SECOND_STEP_S * 1000 - 100


def _put_under_the_shim(
    wallclock: WallClockOffset, monkeypatch: pytest.MonkeyPatch, core: str
) -> None:
    """Children this test starts from now on (and only they) run under the shim, on ``core``."""
    for name, value in core_env(core, wallclock.env()).items():
        if name in {"LD_PRELOAD", "IDMINT_WALLCLOCK_OFFSET_FILE", "IDMINT_PURE"}:
            monkeypatch.setenv(name, value)
    if core != "python":
        monkeypatch.delenv("IDMINT_PURE", raising=False)


def _total(metrics_text: str, name: str) -> float:
    """A counter summed over its labels (one sample per generator)."""
    samples = parse_metrics(metrics_text)
    return sum(value for (sample, _labels), value in samples.items() if sample == name)


def test_the_server_answers_503_promptly_when_the_clock_steps_back_mid_request(
    wallclock: WallClockOffset, monkeypatch: pytest.MonkeyPatch, core: str
) -> None:
    """``idmint serve`` under an 8 s step: a request waiting for the clock gets 503 at once.

    Requests for 64,000 uid64 IDs (a second of waiting for ticks each) run one
    after another; once the server's metrics show it waiting, the clock steps
    back 8 s. The request in flight (or the next) must end with 503 "clock
    moved backwards" well before 8 s, and the step must show in
    ``idmint_clock_steps_back_total``.
    """
    _put_under_the_shim(wallclock, monkeypatch, core)
    with IdmintServer("--max-count", "64000") as server:
        server.start(timeout=CHILD_STARTUP_S)
        outcomes: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()
        stop = threading.Event()

        def request_until_refused() -> None:
            with server.client(timeout=60) as http:
                while not stop.is_set():
                    response = http.get("/v1/ids", params={"count": 64_000})
                    if response.status_code != 200:
                        outcomes.put((response.status_code, response.json()))
                        return

        worker = threading.Thread(target=request_until_refused, daemon=True)
        with server.client() as http:
            worker.start()
            # Past its first batch: a claim on a young lock directory first waits
            # out the directory's floor, where a step within wait_timeout is
            # waited out by design (docs/coordination.md), not refused.
            wait_until(
                lambda: _total(http.get("/metrics").text, "idmint_ids_served_total") > 0,
                timeout=CHILD_STARTUP_S,
                description="the server's first batch",
                interval=0.005,
            )
            waits_before = _total(http.get("/metrics").text, "idmint_clock_waits_total")
            wait_until(
                lambda: (
                    _total(http.get("/metrics").text, "idmint_clock_waits_total") > waits_before
                ),
                timeout=CHILD_STARTUP_S,
                description="the server waiting for the clock",
                interval=0.005,
            )
            wallclock.set_s(-SECOND_STEP_S)
            try:
                status, body = outcomes.get(timeout=PROMPT_S)
            except queue.Empty:
                pytest.fail(
                    f"no refusal {PROMPT_S:g} s after an {SECOND_STEP_S:g} s step back: "
                    "the request in flight sleeps through the step"
                )
            finally:
                stop.set()
            steps = _total(http.get("/metrics").text, "idmint_clock_steps_back_total")
        worker.join(timeout=PROMPT_S)
    assert status == 503
    assert body["error"] == "clock moved backwards"
    assert steps >= 1


def test_generate_cli_stops_promptly_under_a_ten_minute_step(
    wallclock: WallClockOffset, monkeypatch: pytest.MonkeyPatch, core: str
) -> None:
    """``idmint generate --count 0`` refuses a 10-minute step at once: status 1, one line.

    It used to sleep through the step and, since its SIGTERM handler only asks
    the loop to stop, ignore SIGTERM as well. If it has not stopped by itself
    soon after the step, the test sends SIGTERM to tell the two failures apart.
    The IDs printed before the step are all distinct.
    """
    _put_under_the_shim(wallclock, monkeypatch, core)
    with CliProcess("generate", "--count", "0", stamp=False) as cli:
        cli.wait_for_lines(640, timeout=CHILD_STARTUP_S, what="IDs before the step")
        wallclock.set_s(-600)
        try:
            status = cli.wait(timeout=PROMPT_S)
        except subprocess.TimeoutExpired:
            cli.send(signal.SIGTERM)
            try:
                status = cli.wait(timeout=PROMPT_S)
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"idmint generate still runs {PROMPT_S:g} s after a 10-minute step back "
                    f"and {PROMPT_S:g} s after SIGTERM: it sleeps through the step"
                )
            pytest.fail(
                f"idmint generate did not stop by itself within {PROMPT_S:g} s of a "
                f"10-minute step back; SIGTERM stopped it with status {status}"
            )
        assert status == EXIT_RUNTIME, cli.stderr
        line = assert_one_error_line(cli.stderr)
        assert "moved backwards" in line
        assert len(set(cli.lines)) == len(cli.lines)


def test_uuid7_cli_stays_strictly_increasing_across_steps_back(
    wallclock: WallClockOffset, monkeypatch: pytest.MonkeyPatch, core: str
) -> None:
    """``idmint generate --scheme uuid7`` while the real clock steps back: a step within
    the tolerance (5 ms of the default 10) is waited out, and a 10-minute one refused,
    and every UUID printed, before and after the small step, is above the one before."""
    _put_under_the_shim(wallclock, monkeypatch, core)
    with CliProcess("generate", "--scheme", "uuid7", "--count", "0", stamp=False) as cli:
        cli.wait_for_lines(20_000, timeout=CHILD_STARTUP_S, what="UUIDs before the step")
        stepped_at = len(cli.lines)
        wallclock.set_s(-0.005)
        cli.wait_for_lines(stepped_at + 50_000, timeout=PROMPT_S, what="UUIDs after the step")
        wallclock.set_s(-600)
        status = cli.wait(timeout=PROMPT_S)
    assert status == EXIT_RUNTIME, cli.stderr
    assert "moved backwards" in assert_one_error_line(cli.stderr)
    ids = [Uuid7(line) for line in cli.lines]
    assert all(earlier < later for earlier, later in itertools.pairwise(ids))
