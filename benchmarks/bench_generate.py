"""CPU cost per ID and sustained rate: idmint's generators against peer ID libraries.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/bench_generate.py            # full run (~1 min)
    .venv/bin/python benchmarks/bench_generate.py --quick    # smaller samples
    .venv/bin/python benchmarks/bench_generate.py --past-cap-only   # CPU past the cap (~1 min)
    .venv/bin/python benchmarks/bench_generate.py --cost-only --rounds 5   # the cost table
    IDMINT_PURE=1 .venv/bin/python benchmarks/bench_generate.py ...   # on the pure-Python core

The first line says which generator core ran (``idmint.generate.CORE``).

Everything runs in one process, interleaved: each row runs a block of 50 bursts
in turn, round-robin, so every row saw the same machine; the first 5 bursts of
a block are not counted (they measure how cold the caches were after the other
rows ran).

*Cost per ID under the format cap*: idmint's generators may issue only so many
IDs per millisecond (uid64: 64, short60: 512, elastic64 at 8 bits: 256). A
caller asking for more waits for the next millisecond, and that wait is not
CPU cost. So each sample is a burst of calls that fits under the cap, started
just after a millisecond boundary, timed with perf_counter_ns. The same burst
is timed for the peers (which have no cap). Reported: the median over many
bursts of the time per ID, and the ratios to snowflake-id's ``next()`` (the
closest peer: a 64-bit time-ordered ID with a node field and no lock) and to
uuid-utils' ``uuid7()`` (Rust: what Python users install most for time-ordered
IDs), each at the same burst size; with ``--rounds``, the median ratio of the
rounds and their range. Two floors are timed the same way: ``time.time_ns()``
(one call into C that reads the wall clock and returns a new int, which any
``generate()`` must do and more) and a list of 60 ints made in C (what
``ints()`` of a batch must make).

*Text forms*: fresh batches at each scheme's cap, each rendered once with
``IdBatch.texts()`` (what the CLI and the server write), ``str()`` of each value,
and for short60 the way ``str()`` made its display string before the bulk paths
(repeated division), as the reference.

*Sustained rate*: 1,000,000 IDs as fast as the generator allows, as IDs/s and
as a fraction of the scheme's cap (how little time is lost waiting for the
next millisecond).

*CPU past the cap*: 200,000 IDs asked for as fast as possible, so the
generator waits for every tick; CPU time (``time.process_time``) per ID,
against snowflake-id's ``next()`` (which Python never drives past its cap),
and the share of the cap reached. Rows alternate for 3 rounds; the median
and the range are shown. A bare ``time.sleep`` to each next millisecond is
timed too, and the same loop in C (``clock_nanosleep``, compiled here with the
machine's C compiler): what one wake-up costs this machine, the floor of any
wait. The thread's timer slack (``prctl(PR_GET_TIMERSLACK)``) is printed.

*Async past the cap*: the same on an event loop (asyncio's and uvloop's):
``abatch(64)`` and ``agenerate()`` of uid64 for 2 s; the loop's CPU per ID
and its share of a core. Then again with a ticker task beside, which sleeps
1 ms at a time and records how late it wakes, against the same ticker on an
idle loop: how much the waits hold other tasks up.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from idmint import (
    Elastic64Generator,
    MuidGenerator,
    Short60Generator,
    SnowflakeGenerator,
    Uid64Generator,
    Uuid7Generator,
)
from idmint.errors import TransactionFull
from idmint.generate import core
from idmint.schemes.short60 import ALPHABET as SHORT60_ALPHABET


def _peers() -> dict[str, Callable[[], object]]:
    import ulid
    import uuid6
    import uuid_utils
    from snowflake import SnowflakeGenerator

    snowflake = SnowflakeGenerator(1)
    return {
        "snowflake-id next()": snowflake.__next__,
        "uuid-utils uuid7()": uuid_utils.uuid7,
        "python-ulid ULID()": ulid.ULID,
        "uuid6 uuid7()": uuid6.uuid7,
        "stdlib uuid4()": uuid.uuid4,
        # Python 3.14's own (counter per process, random rest), where it runs.
        **({"stdlib uuid7()": uuid.uuid7} if hasattr(uuid, "uuid7") else {}),
    }


PEER_BURSTS = (60, 250, 500)
"""The burst sizes of idmint's rows: under the caps of uid64, elastic64/8, short60."""


BLOCK = 50
"""Bursts a case runs in a row before the next case has its turn."""
BLOCK_WARM_UP = 5
"""Bursts at the start of each block that are not counted."""


def _wait_for_next_ms(tick_ns: int = 1_000_000) -> None:
    start = time.time_ns() // tick_ns
    while time.time_ns() // tick_ns == start:
        pass


class LockedUid64Generator(Uid64Generator):
    """uid64 on the locked path, as on free-threaded CPython or with IDMINT_LOCKED=1."""

    __slots__ = ()
    locked_path = True


def burst_sampler(
    call: Callable[[], object], per_burst: int, tick_ns: int = 1_000_000
) -> Callable[[], float]:
    """One sample: ns per call over ``per_burst`` calls, starting a fresh ms (tick)."""

    def sample() -> float:
        _wait_for_next_ms(tick_ns)
        start = time.perf_counter_ns()
        for _ in range(per_burst):
            call()
        return (time.perf_counter_ns() - start) / per_burst

    return sample


def batch_sampler(batch: Callable[[int], object], per_burst: int) -> Callable[[], float]:
    """One sample: ns per ID of one ``batch(per_burst)``, starting a fresh ms."""

    def sample() -> float:
        _wait_for_next_ms()
        start = time.perf_counter_ns()
        batch(per_burst)
        return (time.perf_counter_ns() - start) / per_burst

    return sample


class _Transactions:
    """muid objects in transactions, a new transaction whenever one is full.

    A transaction holds 2**20 - 1 objects; the bursts of a full run need more.
    Starting the next one costs a few us once per million objects, which the
    median over bursts does not see.
    """

    def __init__(self, generator: MuidGenerator) -> None:
        self._generator = generator
        self._transaction = generator.transaction()

    def new(self) -> object:
        try:
            return self._transaction.new()
        except TransactionFull:
            self._transaction = self._generator.transaction()
            return self._transaction.new()

    def batch(self, count: int) -> object:
        try:
            return self._transaction.batch(count)
        except TransactionFull:
            self._transaction = self._generator.transaction()
            return self._transaction.batch(count)


@dataclass
class Row:
    name: str
    per_burst: int
    ns_per_id: float


def _ints_floor() -> Callable[[int], object] | None:
    """A list of ``n`` uid64-sized ints made in C (the compiled core's ``ints_of``)."""
    compiled = getattr(core, "_speedups", None)  # (not there before the compiled core)
    if compiled is None:
        return None
    ints_of = compiled.ints_of

    def floor(n: int) -> object:
        return ints_of(range(1 << 63, (1 << 63) + n * 65_536, 65_536), None)

    return floor


def cost_table(bursts: int) -> list[Row]:
    """Median ns per ID of every case, sampled in blocks taken round-robin.

    Each case runs a block of ``BLOCK`` bursts in turn, so a change in the
    machine's load (other tenants, CPU frequency) touches every row alike and
    the ratios hold. The first ``BLOCK_WARM_UP`` bursts of a block are not
    counted: they measure how cold the caches were after the other rows'
    code ran, which ``cold_table`` reports on its own.
    """
    uid64 = Uid64Generator(1)
    uid64_locked = LockedUid64Generator(4)
    short60 = Short60Generator(1)
    elastic64 = Elastic64Generator(9, 8, max_ahead_ms=0)
    muid = MuidGenerator()
    transactions = _Transactions(muid)
    uuid7 = Uuid7Generator(1)
    cases: list[tuple[str, int, Callable[[], float]]] = []
    # Peers are timed at every burst size so each idmint row has a same-size peer.
    for per_burst in PEER_BURSTS:
        for name, call in _peers().items():
            cases.append((name, per_burst, burst_sampler(call, per_burst)))
    cases += [
        ("uid64 generate()", 60, burst_sampler(uid64.generate, 60)),
        ("uid64 generate(), locked path", 60, burst_sampler(uid64_locked.generate, 60)),
        ("uid64 batch(60)", 60, batch_sampler(uid64.batch, 60)),
        # batch() reserves the IDs; reading them as ints is the caller's cost.
        ("uid64 batch(60).ints()", 60, batch_sampler(lambda n: uid64.batch(n).ints(), 60)),
        ("short60 generate()", 500, burst_sampler(short60.generate, 500)),
        ("short60 batch(500)", 500, batch_sampler(short60.batch, 500)),
        ("elastic64/8 generate()", 250, burst_sampler(elastic64.generate, 250)),
        ("elastic64/8 batch(250)", 250, batch_sampler(elastic64.batch, 250)),
        ("muid generate()", 60, burst_sampler(muid.generate, 60)),
        ("muid transaction.new()", 500, burst_sampler(transactions.new, 500)),
        ("muid transaction.batch(500)", 500, batch_sampler(transactions.batch, 500)),
        ("uuid7 generate()", 500, burst_sampler(uuid7.generate, 500)),
        ("uuid7 batch(500)", 500, batch_sampler(uuid7.batch, 500)),
        ("floor: time.time_ns()", 60, burst_sampler(time.time_ns, 60)),
    ]
    # snowflake, Twitter's layout beside snowflake-id's (the same 41/10/12 bits), and
    # Sonyflake's: 256 IDs per 10 ms tick, so its bursts start a fresh tick, after a
    # longer spin than the others'; Twitter's again after the same spin, for scale.
    snowflake = SnowflakeGenerator(1)
    sonyflake = SnowflakeGenerator(1, layout="sonyflake")
    cases += [
        ("snowflake generate()", 60, burst_sampler(snowflake.generate, 60)),
        ("snowflake batch(60).ints()", 60, batch_sampler(lambda n: snowflake.batch(n).ints(), 60)),
        (
            "snowflake generate(), bursts a 10 ms tick apart",
            60,
            burst_sampler(snowflake.generate, 60, sonyflake.tick_ns),
        ),
        (
            "snowflake sonyflake generate(), bursts a 10 ms tick apart",
            60,
            burst_sampler(sonyflake.generate, 60, sonyflake.tick_ns),
        ),
    ]
    ints_floor = _ints_floor()
    if ints_floor is not None:
        cases.append(("floor: 60 ints made in C", 60, batch_sampler(ints_floor, 60)))
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(max(1, bursts // (BLOCK - BLOCK_WARM_UP))):
        for index, (_, _, sample) in enumerate(cases):
            block = [sample() for _ in range(BLOCK)]
            samples[index] += block[BLOCK_WARM_UP:]
    return [
        Row(name, per_burst, statistics.median(values))
        for (name, per_burst, _), values in zip(cases, samples, strict=True)
    ]


def sustained(total: int) -> list[tuple[str, float, float | None]]:
    """(name, IDs per second, fraction of the cap) for ``total`` IDs."""
    results: list[tuple[str, float, float | None]] = []
    cases: list[tuple[str, Callable[[int], object], float | None]] = [
        ("uid64 batch(64)", Uid64Generator(2).batch, 64_000.0),
        ("short60 batch(512)", Short60Generator(2).batch, 512_000.0),
        ("elastic64/8 batch(256)", Elastic64Generator(5, 8, max_ahead_ms=0).batch, 256_000.0),
    ]
    for name, batch, cap in cases:
        chunk = int((cap or 1000) / 1000)
        start = time.perf_counter()
        made = 0
        while made < total:
            made += len(batch(chunk))  # type: ignore[arg-type]
        rate = made / (time.perf_counter() - start)
        results.append((name, rate, rate / cap if cap else None))
    muid = MuidGenerator()
    start = time.perf_counter()
    made = 0
    while made < total:
        transaction = muid.transaction()
        made += 1 + len(transaction.batch(999))
    results.append(("muid transactions of 1,000", made / (time.perf_counter() - start), None))
    snowflake_rate = _peer_rate(total)
    results.append(("snowflake-id next() (for scale)", snowflake_rate, None))
    return results


PAST_CAP_ROUNDS = 3


def _cpu_per_id(make: Callable[[], Callable[[], object]], count: int) -> tuple[float, float]:
    """(CPU ns per call, calls per ms) of ``count`` calls of a fresh ``make()``."""
    call = make()
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    for _ in range(count):
        call()
    return (time.process_time_ns() - cpu) / count, count / ((time.perf_counter_ns() - wall) / 1e6)


def _snowflake_cpu_per_id(count: int) -> tuple[float, float]:
    from snowflake import SnowflakeGenerator

    take = SnowflakeGenerator(4).__next__
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    made = 0
    while made < count:
        if take() is not None:  # None: its ms is used up (it never is, in Python)
            made += 1
    return (time.process_time_ns() - cpu) / count, count / ((time.perf_counter_ns() - wall) / 1e6)


def _sleep_to_each_ms(ticks: int) -> tuple[float, float]:
    """CPU ns per wake-up of a bare ``time.sleep`` to each next millisecond."""
    cpu = time.process_time_ns()
    for _ in range(ticks):
        now = time.time_ns()
        time.sleep((-now % 1_000_000 or 1_000_000) / 1e9)
    return (time.process_time_ns() - cpu) / ticks, 0.0


_WAKE_UP_LOOP = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
/* Sleep to each next millisecond, as the compiled core waits at the cap; print the
 * CPU ns per wake-up and the timer slack it slept with. argv: ticks [slack ns]. */
static long long ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
int main(int argc, char **argv) {
    long ticks = atol(argv[1]);
    if (argc > 2) prctl(PR_SET_TIMERSLACK, atol(argv[2]), 0, 0, 0);
    long long cpu = ns(CLOCK_PROCESS_CPUTIME_ID);
    for (long i = 0; i < ticks; i++) {
        long long rest = 1000000 - ns(CLOCK_REALTIME) % 1000000;
        long long due = ns(CLOCK_MONOTONIC) + rest;
        struct timespec at = {due / 1000000000LL, due % 1000000000LL};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
    }
    printf("%lld %d\n", (ns(CLOCK_PROCESS_CPUTIME_ID) - cpu) / ticks,
           prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0));
    return 0;
}
"""


def compiled_program(source: str, name: str) -> str | None:
    """The C program ``source``, compiled with the machine's C compiler into a temporary
    directory (None: there is no compiler); ``name`` names the program."""
    import shutil
    import subprocess
    import tempfile

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    directory = tempfile.mkdtemp(prefix=f"idmint-bench-{name}-")
    source_path, program = os.path.join(directory, f"{name}.c"), os.path.join(directory, name)
    with open(source_path, "w") as file:
        file.write(source)
    subprocess.run([compiler, "-O2", "-o", program, source_path], check=True)
    return program


def _compiled_wake_up_loop() -> str | None:
    """The C loop above, compiled (None: the machine has no C compiler)."""
    return compiled_program(_WAKE_UP_LOOP, "wake")


def _c_wake_ups(program: str, ticks: int, slack_ns: int | None) -> tuple[float, float]:
    """CPU ns per wake-up of the C loop (and 0: it issues no IDs)."""
    import subprocess

    argv = [program, str(ticks)] + ([] if slack_ns is None else [str(slack_ns)])
    cpu_ns, _ = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
    return float(cpu_ns), 0.0


def timer_slack_ns() -> int:
    """This thread's timer slack (Linux's prctl; -1 elsewhere)."""
    import ctypes

    try:
        return int(ctypes.CDLL(None).prctl(30, 0, 0, 0, 0))  # PR_GET_TIMERSLACK
    except (OSError, AttributeError):
        return -1


@dataclass
class PastCapRow:
    name: str
    cap_per_ms: int | None
    cpu_ns: list[float]
    per_ms: list[float]


def past_cap_table(total: int, rounds: int = PAST_CAP_ROUNDS) -> list[PastCapRow]:
    """CPU per ID of ``total`` IDs asked for faster than each scheme's cap allows."""
    node = iter(range(20, 20 + 16 * rounds))  # a fresh identity per run
    cases: list[tuple[str, int | None, Callable[[], tuple[float, float]]]] = [
        ("snowflake-id next()", None, lambda: _snowflake_cpu_per_id(total)),
        (
            "uid64 generate()",
            64,
            lambda: _cpu_per_id(lambda: Uid64Generator(next(node)).generate, total),
        ),
        ("uid64 batch(64)", 64, lambda: _batched(Uid64Generator(next(node)).batch, 64, total)),
        (
            "short60 generate()",
            512,
            lambda: _cpu_per_id(lambda: Short60Generator(next(node)).generate, total),
        ),
        (
            "short60 batch(512)",
            512,
            lambda: _batched(Short60Generator(next(node)).batch, 512, total),
        ),
        (
            "elastic64/8 generate()",
            256,
            lambda: _cpu_per_id(
                lambda: Elastic64Generator(next(node), 8, max_ahead_ms=0).generate, total
            ),
        ),
        (
            "elastic64/8 batch(256)",
            256,
            lambda: _batched(Elastic64Generator(next(node), 8, max_ahead_ms=0).batch, 256, total),
        ),
        ("time.sleep to each next ms (per wake-up)", None, lambda: _sleep_to_each_ms(total // 64)),
    ]
    program = _compiled_wake_up_loop()
    if program is not None:
        for slack in (None, 1_000):
            what = "default slack" if slack is None else f"slack {slack:,} ns"
            cases.append(
                (
                    f"a C loop sleeping to each next ms, {what} (per wake-up)",
                    None,
                    functools.partial(_c_wake_ups, program, total // 64, slack),
                )
            )
    rows = [PastCapRow(name, cap, [], []) for name, cap, _ in cases]
    for _ in range(rounds):
        for row, (_, _, run) in zip(rows, cases, strict=True):
            cpu_ns, per_ms = run()
            row.cpu_ns.append(cpu_ns)
            row.per_ms.append(per_ms)
    return rows


def _batched(batch: Callable[[int], object], size: int, total: int) -> tuple[float, float]:
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    made = 0
    while made < total:
        made += len(batch(size))  # type: ignore[arg-type]
    return (time.process_time_ns() - cpu) / made, made / ((time.perf_counter_ns() - wall) / 1e6)


TICKER_MS = 1.0
"""The ticker task of the async rows sleeps this long at a time."""


async def _async_past_cap(
    kind: str, seconds: float, node: int, *, tick: bool
) -> tuple[float, float, float, list[float]]:
    """(loop CPU ns per ID, IDs per ms, loop CPU share of a core, ticker lateness in us).

    ``tick``: with the ticker task running beside (for its lateness; its own
    CPU is then in the figures too, so the CPU is measured in a run without it).
    """
    import asyncio

    lateness: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            start = time.perf_counter_ns()
            await asyncio.sleep(TICKER_MS / 1e3)
            lateness.append((time.perf_counter_ns() - start) / 1e3 - TICKER_MS * 1e3)

    task = asyncio.create_task(ticker()) if tick else None
    await asyncio.sleep(0)
    made = 0
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    end = wall + seconds * 1e9
    if kind == "idle":
        await asyncio.sleep(seconds)
    elif kind == "abatch(64)":
        generator = Uid64Generator(node)
        while time.perf_counter_ns() < end:
            made += len(await generator.abatch(64))
    else:
        generator = Uid64Generator(node)
        while time.perf_counter_ns() < end:
            for _ in range(64):
                await generator.agenerate()
            made += 64
    cpu_ns = time.process_time_ns() - cpu
    wall_ns = time.perf_counter_ns() - wall
    done = True
    if task is not None:
        await task
    per_id = cpu_ns / made if made else 0.0
    return per_id, made / (wall_ns / 1e6), cpu_ns / wall_ns, lateness


def async_table(seconds: float) -> list[tuple[str, str, float, float, float, list[float]]]:
    """Rows (loop, what, CPU ns per ID, IDs per ms, CPU share, ticker lateness us)."""
    import asyncio

    loops: dict[str, Callable[[], Any]] = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop

        loops["uvloop"] = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - the server extra brings it
        pass
    rows = []
    node = 60
    for loop_name, new_loop in loops.items():
        for kind in ("idle", "abatch(64)", "agenerate()"):
            measured = []
            for tick in (False, True):
                loop = new_loop()
                try:
                    node += 1
                    measured.append(
                        loop.run_until_complete(_async_past_cap(kind, seconds, node, tick=tick))
                    )
                finally:
                    loop.close()
            (per_id, per_ms, share, _), (_, _, _, lateness) = measured
            rows.append((loop_name, kind, per_id, per_ms, share, lateness))
    return rows


def _peer_rate(total: int) -> float:
    from snowflake import SnowflakeGenerator

    generator = SnowflakeGenerator(3)
    start = time.perf_counter()
    made = 0
    while made < total:
        if next(generator) is not None:  # it returns None when its ms is used up
            made += 1
    return made / (time.perf_counter() - start)


def _short60_by_division(value: int) -> str:
    """short60's display string the way ``str()`` made it before the bulk paths: the
    base-64 digits by repeated division, the last two moved to the front."""
    digits = []
    while True:
        value, digit = divmod(value, 64)
        digits.append(SHORT60_ALPHABET[digit])
        if not value:
            break
    text = "".join(reversed(digits))
    return text[-2:] + text[:-2]


def text_table(batches: int) -> list[tuple[str, int, float]]:
    """(what, IDs per batch, median ns per ID) of the text forms of fresh batches.

    Each batch is made before its timer starts (making it waits for the cap) and
    rendered once, so the figure is the rendering alone, ints included.
    """
    sizes = {"uid64": 64, "elastic64/8": 256, "short60": 512}
    makers: dict[str, Callable[[int], Any]] = {
        "uid64": Uid64Generator(6).batch,
        "elastic64/8": Elastic64Generator(7, 8, max_ahead_ms=0).batch,
        "short60": Short60Generator(8).batch,
    }
    cases: list[tuple[str, str, Callable[[Any], object]]] = [
        ("short60 batch.texts()", "short60", lambda batch: batch.texts()),
        ("short60 str() of each value", "short60", lambda batch: [str(v) for v in batch]),
        (
            "short60 by division (str() before the bulk paths)",
            "short60",
            lambda batch: [_short60_by_division(i) for i in batch.ints()],
        ),
        ("uid64 batch.texts()", "uid64", lambda batch: batch.texts()),
        ("uid64 str() of each value", "uid64", lambda batch: [str(v) for v in batch]),
        ("elastic64/8 batch.texts()", "elastic64/8", lambda batch: batch.texts()),
    ]
    samples: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(batches):
        for name, scheme, render in cases:
            batch = makers[scheme](sizes[scheme])
            start = time.perf_counter_ns()
            render(batch)
            samples[name].append((time.perf_counter_ns() - start) / sizes[scheme])
    return [(name, sizes[scheme], statistics.median(samples[name])) for name, scheme, _ in cases]


def past_cap_report(quick: bool) -> None:
    """Print the CPU past the cap, in process and on event loops."""
    past_total = 50_000 if quick else 200_000
    print(
        f"\nCPU past the cap: {past_total:,} IDs as fast as allowed, {PAST_CAP_ROUNDS} rounds "
        "(median, range)\n"
    )
    past = past_cap_table(past_total)
    print(f"This thread's timer slack: {timer_slack_ns():,} ns\n")
    print("| what | CPU ns per ID | vs snowflake-id | IDs per ms | of the cap |")
    print("|---|---:|---:|---:|---:|")
    peer = past[0].cpu_ns
    for line in past:
        ratios = [cpu / ref for cpu, ref in zip(line.cpu_ns, peer, strict=True)]
        median_ns = statistics.median(line.cpu_ns)
        if "per wake-up" in line.name:
            print(
                f"| {line.name} | {median_ns:.0f} per wake-up ({min(line.cpu_ns):.0f} to "
                f"{max(line.cpu_ns):.0f}) | {median_ns / (64 * statistics.median(peer)):.2f} of "
                "64 snowflake IDs | - | - |"
            )
            continue
        shares = [per_ms / line.cap_per_ms for per_ms in line.per_ms] if line.cap_per_ms else None
        cap_share = (
            f"{statistics.median(shares):.1%} ({min(shares):.1%} to {max(shares):.1%})"
            if shares
            else "-"
        )
        print(
            f"| {line.name} | {median_ns:.0f} ({min(line.cpu_ns):.0f} to {max(line.cpu_ns):.0f}) | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f} to {max(ratios):.2f}) | "
            f"{statistics.median(line.per_ms):,.1f} | {cap_share} |"
        )

    async_seconds = 0.5 if quick else 2.0
    print(
        f"\nAsync past the cap: uid64 for {async_seconds:g} s on one loop, with a ticker "
        f"task sleeping {TICKER_MS:g} ms at a time\n"
    )
    print(
        "| loop | what | loop CPU ns per ID | IDs per ms | loop CPU, share of a core | "
        "ticker late p50 | p99 |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for loop_name, kind, per_id, per_ms, core_share, lateness in async_table(async_seconds):
        late = sorted(lateness)
        p50, p99 = late[len(late) // 2], late[min(len(late) - 1, int(len(late) * 0.99))]
        shown = f"{per_id:,.0f}" if per_id else "-"
        print(
            f"| {loop_name} | {kind} | {shown} | {per_ms:.1f} | {core_share:.1%} | "
            f"{p50:,.0f} us | {p99:,.0f} us |"
        )


def _ratio_text(ratios: list[float]) -> str:
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}"
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f} to {max(ratios):.2f})"


def cost_report(bursts: int, rounds: int) -> None:
    """The cost table, ``rounds`` times over; each ratio is taken within its round."""
    runs = [cost_table(bursts) for _ in range(rounds)]
    print("| what | IDs per burst | ns per ID | vs snowflake-id | vs uuid-utils uuid7() |")
    print("|---|---:|---:|---:|---:|")
    for index, row in enumerate(runs[0]):
        per_round = [run[index] for run in runs]
        to_snowflake, to_uuid7 = [], []
        for run, this in zip(runs, per_round, strict=True):
            peers = {r.name: r.ns_per_id for r in run if r.per_burst == this.per_burst}
            to_snowflake.append(this.ns_per_id / peers["snowflake-id next()"])
            to_uuid7.append(this.ns_per_id / peers["uuid-utils uuid7()"])
        ns = statistics.median(r.ns_per_id for r in per_round)
        print(
            f"| {row.name} | {row.per_burst} | {ns:.0f} | {_ratio_text(to_snowflake)} | "
            f"{_ratio_text(to_uuid7)} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, 100k sustained")
    parser.add_argument(
        "--past-cap-only", action="store_true", help="only the CPU past the cap, sync and async"
    )
    parser.add_argument("--cost-only", action="store_true", help="only the cost table")
    parser.add_argument(
        "--rounds", type=int, default=1, help="cost tables to take (each ratio: median, range)"
    )
    args = parser.parse_args(argv)
    if args.past_cap_only:
        print(
            f"Python {sys.version.split()[0]}, {getattr(core, 'CORE', 'python')} core, "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        past_cap_report(args.quick)
        return 0
    bursts = 150 if args.quick else 1500
    total = 100_000 if args.quick else 1_000_000

    print(
        f"Python {sys.version.split()[0]}, {getattr(core, 'CORE', 'python')} core, load average "
        f"{os.getloadavg()[0]:.2f}, {bursts} bursts per row (round-robin over the rows, "
        f"after a warm-up), median, {args.rounds} round(s)\n"
    )
    cost_report(bursts, args.rounds)
    if args.cost_only:
        return 0

    texts = text_table(60 if args.quick else 400)
    before = next(ns for name, _, ns in texts if name.startswith("short60 by division"))
    print("\nText forms of a batch, rendered once each (round-robin), median\n")
    print("| what | IDs per batch | ns per ID | IDs per ms | vs short60 by division |")
    print("|---|---:|---:|---:|---:|")
    for name, size, ns in texts:
        print(f"| {name} | {size} | {ns:.0f} | {1e6 / ns:,.0f} | {ns / before:.2f} |")

    past_cap_report(args.quick)

    print(f"\nSustained, {total:,} IDs\n")
    print("| what | IDs/s | of the format cap |")
    print("|---|---:|---:|")
    for name, rate, fraction in sustained(total):
        share = f"{fraction:.1%}" if fraction is not None else "-"
        print(f"| {name} | {rate:,.0f} | {share} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
