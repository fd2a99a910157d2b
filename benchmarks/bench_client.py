"""Benchmark of idmint.client against its peer, one plain HTTP request per ID.

    .venv/bin/python benchmarks/bench_client.py             # ~40 s
    .venv/bin/python benchmarks/bench_client.py --quick     # ~15 s

Two ``idmint serve --generators 4`` processes (uid64, claimed on this host) run
for the whole benchmark. Measured, in one run:

1. **A warm get().** The cost of ``IdClient.get()`` while its buffer holds IDs,
   timed call by call (``perf_counter_ns`` around each), against one keep-alive
   ``GET /v1/id`` per ID with ``http.client`` (what services write without a
   client), timed the same way. Medians and p99 over the rounds; the ratio is
   of the medians (goal: at most 0.1x).
2. **IDs/s one client draws** from one server and from two, in one thread
   calling ``get()`` for ``--duration`` seconds, and the ratio two:one. Each
   server issues at most 4 x 64 uid64 IDs per ms (four generators), and client,
   servers and the rest share the machine's cores.
3. **The longest stall** a steady caller (chunks of 100 ``get()`` calls 5 ms
   apart, about 20,000 IDs/s) sees when one of two servers is SIGKILLed: the
   largest gap between two successive ``get()`` returns in the second after the
   kill, against the largest in the second before it (the 5 ms pause and
   scheduling), and whether any call raised (it should not).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import os
import platform
import re
import selectors
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from idmint.client import IdClient

_ANNOUNCE = re.compile(r"open http://([^/:]+):(\d+)/")


@contextmanager
def server(*args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    command = [sys.executable, "-m", "idmint", "serve", "--port", "0", "--generators", "4"]
    process = subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=30):
                raise RuntimeError("idmint serve did not start")
            match = _ANNOUNCE.search(process.stdout.readline())
            if match is None:
                raise RuntimeError("idmint serve printed no address")
        yield f"http://{match.group(1)}:{match.group(2)}", process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(30)


def percentile(values: list[int], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def warm_get(url: str, rounds: int) -> tuple[list[int], list[int]]:
    """Nanoseconds per get() with a full buffer, and per plain request, interleaved."""
    host, port = url.removeprefix("http://").split(":")
    plain = http.client.HTTPConnection(host, int(port))
    got: list[int] = []
    asked: list[int] = []
    clock = time.perf_counter_ns
    with IdClient([url], min_batch=2000, max_batch=2000) as ids:
        ids.get()
        for _ in range(rounds):
            ids.get_many(1)  # let the refill in flight land before timing
            time.sleep(0.05)
            for _ in range(1000):  # at most half the buffer: no call waits
                started = clock()
                ids.get()
                got.append(clock() - started)
            for _ in range(200):
                started = clock()
                plain.request("GET", "/v1/id")
                plain.getresponse().read()
                asked.append(clock() - started)
    plain.close()
    return got, asked


def draw_rate(urls: list[str], seconds: float) -> float:
    with IdClient(urls) as ids:
        ids.get_many(1000)
        count = 0
        deadline = time.monotonic() + seconds
        started = time.monotonic()
        while time.monotonic() < deadline:
            for _ in range(1000):
                ids.get()
            count += 1000
        return count / (time.monotonic() - started)


def stall_on_kill(survivor: str) -> tuple[float, float, int, int]:
    """(longest gap before, longest gap after the kill in s, calls that raised, IDs)."""
    with server() as (doomed_url, doomed):
        returns: list[float] = []
        errors = 0
        stop = threading.Event()
        ids = IdClient([doomed_url, survivor])

        def draw() -> None:
            # A steady caller (about 20,000 IDs/s), not one racing the servers:
            # a gap beyond the pause between chunks is the client's stall.
            nonlocal errors
            while not stop.is_set():
                for _ in range(100):
                    try:
                        ids.get()
                    except Exception:
                        errors += 1
                    returns.append(time.monotonic())
                time.sleep(0.005)

        thread = threading.Thread(target=draw)
        thread.start()
        time.sleep(1.5)
        killed_at = time.monotonic()
        doomed.send_signal(signal.SIGKILL)
        time.sleep(1.0)
        stop.set()
        thread.join()
        ids.close()
    before = [t for t in returns if killed_at - 1.0 <= t < killed_at]
    after = [t for t in returns if killed_at <= t <= killed_at + 1.0]

    def longest(times: list[float]) -> float:
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    return longest(before), longest(after), errors, len(returns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter runs")
    parser.add_argument("--duration", type=float, default=None, help="s per IDs/s run")
    args = parser.parse_args()
    rounds = 5 if args.quick else 20
    seconds = args.duration or (2.0 if args.quick else 5.0)
    print(
        f"# {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    )
    with server() as (first, _), server() as (second, _):
        got, asked = warm_get(first, rounds)
        get_median, ask_median = statistics.median(got), statistics.median(asked)
        print("\n## warm get() against one HTTP request per ID")
        print(f"{'':28} {'median':>10} {'p99':>10}")
        print(
            f"{'IdClient.get()':28} {get_median / 1000:>8.2f}us "
            f"{percentile(got, 0.99) / 1000:>8.2f}us"
        )
        print(
            f"{'GET /v1/id (http.client)':28} {ask_median / 1000:>8.2f}us "
            f"{percentile(asked, 0.99) / 1000:>8.2f}us"
        )
        print(f"ratio get/request: {get_median / ask_median:.4f}x  (goal <= 0.1x)")

        print(f"\n## IDs/s one client draws in one thread ({seconds:g} s each)")
        one = draw_rate([first], seconds)
        two = draw_rate([first, second], seconds)
        print(f"1 server:  {one:>10,.0f} IDs/s")
        print(f"2 servers: {two:>10,.0f} IDs/s   ratio 2:1 = {two / one:.2f}x")

        print("\n## a server SIGKILLed while a caller draws (one of two)")
        before, after, errors, total = stall_on_kill(second)
        print(
            f"longest gap between get() returns: {before * 1000:.1f} ms in the second "
            f"before, {after * 1000:.1f} ms in the second after; {errors} calls raised "
            f"(of {total:,})"
        )
    print(f"\n# load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
