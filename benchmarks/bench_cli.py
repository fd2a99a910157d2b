"""``idmint generate`` at full speed: does the CLI keep up with each scheme's cap, and what
does it cost?

    .venv/bin/python benchmarks/bench_cli.py            # text and JSON, every scheme
    .venv/bin/python benchmarks/bench_cli.py --seconds 1
    .venv/bin/python benchmarks/bench_cli.py --cpu-only --rounds 3   # CPU per ID past the cap

Each row runs ``idmint generate --scheme S --count N`` (N = the scheme's cap for
``--seconds``) in a child process writing to a pipe this process drains, then
reads the rate off the IDs themselves: N over the milliseconds from the first
ID's timestamp to the last one's. Interpreter start and the first claim are
outside that span, so the figure is the sustained rate, which the format caps
(IDs per ms per generator ID): uid64 64, elastic64 at 8 bits 256, short60 512.
Peers are the format's own cap, so the ratio is the CLI's share of it.

*CPU past the cap* (``--cpu-only``): ``idmint generate --scheme S --count 0``
writes text to a pipe this process drains for ``--seconds`` after a second of
warming up; the child's CPU time (user + system, ``/proc/<pid>/stat``) over
that span, per ID read in it, against snowflake-id's ``next()`` timed in this
process just before (CPU per call: Python never drives it past its cap).
Interpreter start and the claim fall outside the span. Rounds alternate the
schemes; each ratio is the median of the rounds (their range in brackets), with
the share of the cap the child reached. The floor is measured the same way: a C
program (compiled here with the machine's C compiler) that does only what
``idmint generate`` must past uid64's cap, sleeping to each next millisecond
(``clock_nanosleep``) and writing 64 IDs in hex to the pipe in blocks of 8 KiB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from idmint.schemes import parse_id

CASES = (
    ("uid64", 64, ()),
    ("elastic64", 256, ()),  # a node ID claimed on the host: 8 bits
    ("short60", 512, ()),
)
"""(scheme, cap in IDs per ms, extra flags)."""


@dataclass
class Row:
    scheme: str
    output: str
    count: int
    span_ms: int
    cap: int

    @property
    def per_ms(self) -> float:
        return self.count / self.span_ms

    @property
    def share(self) -> float:
        return self.per_ms / self.cap


def run(scheme: str, cap: int, extra: tuple[str, ...], output: str, seconds: float) -> Row:
    count = int(cap * 1000 * seconds)
    argv = [sys.executable, "-m", "idmint", "generate", "--scheme", scheme]
    argv += ["--count", str(count), "--format", output, *extra]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert len(lines) == count, (len(lines), done.stderr)
    if output == "json":
        first, last = json.loads(lines[0]), json.loads(lines[-1])
        start, end = first["timestamp_ms"], last["timestamp_ms"]
    else:
        node_bits = 8 if scheme == "elastic64" else None
        start = parse_id(lines[0], scheme, node_bits=node_bits).timestamp_ms  # type: ignore[attr-defined]
        end = parse_id(lines[-1], scheme, node_bits=node_bits).timestamp_ms  # type: ignore[attr-defined]
    return Row(scheme, output, count, end - start + 1, cap)


def _cpu_ns(pid: int) -> int:
    """User + system CPU of process ``pid`` so far, in ns."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


_FLOOR_PROGRAM = r"""
#include <stdint.h>
#include <time.h>
#include <unistd.h>
/* What `idmint generate` must do past uid64's cap, and no more: sleep to each next
 * millisecond, write its 64 IDs as 16 hex digits and a newline, 8 KiB at a time. */
int main(void) {
    static char block[8192 + 64 * 17];
    static const char hex[] = "0123456789abcdef";
    size_t used = 0;
    for (uint64_t id = 0;;) {
        struct timespec wall, mono;
        clock_gettime(CLOCK_REALTIME, &wall);
        clock_gettime(CLOCK_MONOTONIC, &mono);
        long long rest = 1000000 - wall.tv_nsec % 1000000;
        long long due = mono.tv_sec * 1000000000LL + mono.tv_nsec + rest;
        struct timespec at = {due / 1000000000LL, due % 1000000000LL};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
        for (int k = 0; k < 64; k++, id++) {
            for (int d = 0; d < 16; d++) block[used + d] = hex[(id >> (60 - 4 * d)) & 15];
            block[used + 16] = '\n';
            used += 17;
        }
        if (used >= 8192) {
            if (write(1, block, used) < 0) return 1;
            used = 0;
        }
    }
}
"""


def _floor_program() -> list[str] | None:
    """The C floor above, compiled (None: the machine has no C compiler)."""
    from bench_generate import compiled_program  # beside this file

    program = compiled_program(_FLOOR_PROGRAM, "cli-floor")
    return None if program is None else [program]


def cli_cpu_per_id(scheme: str, warm_up_s: float, seconds: float) -> tuple[float, float]:
    """(CPU ns per ID, IDs per ms) of ``idmint generate --count 0`` in its steady state."""
    argv = [sys.executable, "-m", "idmint", "generate", "--scheme", scheme, "--count", "0"]
    return cpu_per_line(argv, warm_up_s, seconds)


def cpu_per_line(argv: list[str], warm_up_s: float, seconds: float) -> tuple[float, float]:
    """(CPU ns per line, lines per ms) of the program ``argv`` writing lines to a pipe."""
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert child.stdout is not None
    read = [0]

    def drain() -> None:
        assert child.stdout is not None
        while chunk := child.stdout.read1(1 << 16):  # type: ignore[attr-defined]
            read[0] += chunk.count(b"\n")

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        time.sleep(warm_up_s)  # the benchmark's warm-up, not synchronisation
        cpu, lines, wall = _cpu_ns(child.pid), read[0], time.perf_counter_ns()
        time.sleep(seconds)
        cpu, lines = _cpu_ns(child.pid) - cpu, read[0] - lines
        wall = time.perf_counter_ns() - wall
    finally:
        child.terminate()
        child.wait(10)
        reader.join(10)
    return cpu / lines, lines / (wall / 1e6)


def _snowflake_cpu_ns(count: int = 200_000) -> float:
    from snowflake import SnowflakeGenerator

    take = SnowflakeGenerator(5).__next__
    cpu = time.process_time_ns()
    for _ in range(count):
        take()
    return (time.process_time_ns() - cpu) / count


def cpu_report(seconds: float, rounds: int) -> None:
    print("| scheme | CPU ns per ID | vs snowflake-id next() | IDs per ms | of the cap |")
    print("|---|---:|---:|---:|---:|")
    results: dict[str, list[tuple[float, float, float]]] = {s: [] for s, _, _ in CASES}
    floor = _floor_program()
    floors: list[tuple[float, float, float]] = []
    for _ in range(rounds):
        for scheme, _, _ in CASES:
            peer = _snowflake_cpu_ns()
            cpu, per_ms = cli_cpu_per_id(scheme, 1.0, seconds)
            results[scheme].append((cpu, cpu / peer, per_ms))
        if floor is not None:
            peer = _snowflake_cpu_ns()
            cpu, per_ms = cpu_per_line(floor, 1.0, seconds)
            floors.append((cpu, cpu / peer, per_ms))
    if floors:
        results["floor: C, 64 IDs per ms"] = floors
    for scheme, cap, _ in (*CASES, ("floor: C, 64 IDs per ms", 64, ())):
        if scheme not in results:
            continue
        cpus, ratios, rates = zip(*results[scheme], strict=True)
        print(
            f"| {scheme}{'/8' if scheme == 'elastic64' else ''} | {statistics.median(cpus):,.0f} | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f} to {max(ratios):.2f}) | "
            f"{statistics.median(rates):.1f} | {statistics.median(rates) / cap:.1%} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each run at cap")
    parser.add_argument("--cpu-only", action="store_true", help="only the CPU per ID past the cap")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --cpu-only")
    args = parser.parse_args(argv)
    # A lock directory of its own, made well before the runs: a young one
    # would hold the first claim back for a TTL (docs/coordination.md).
    os.environ["IDMINT_LOCAL_DIR"] = tempfile.mkdtemp(prefix="idmint-bench-cli-")
    subprocess.run([sys.executable, "-m", "idmint", "generate"], capture_output=True, check=True)
    time.sleep(1.1)  # a benchmark's setup, not synchronisation: let the directory age
    load = os.getloadavg()
    from idmint.generate import core

    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load[0]:.2f}, "
        f"{getattr(core, 'CORE', 'python')} core\n"
    )
    if args.cpu_only:
        cpu_report(args.seconds, args.rounds)
        return 0
    print("| scheme | output | IDs | span ms | IDs per ms | cap | share of cap |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for output in ("text", "json"):
        for scheme, cap, extra in CASES:
            row = run(scheme, cap, extra, output, args.seconds)
            print(
                f"| {row.scheme}{'/8' if scheme == 'elastic64' else ''} | {output} | "
                f"{row.count:,} | {row.span_ms:,} | {row.per_ms:.1f} | {row.cap} | "
                f"{row.share:.1%} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
