"""Load benchmark of the ID server: ``/v1/id`` against a bare "hello" ASGI app, with wrk.

    .venv/bin/pip install -e '.[server]'       # and Debian's wrk: apt-get install wrk
    .venv/bin/python benchmarks/bench_server.py              # full run (~2.5 min)
    .venv/bin/python benchmarks/bench_server.py --quick      # 3 s per run (~40 s)
    .venv/bin/python benchmarks/bench_server.py --duration 20 --rounds 5
    .venv/bin/python benchmarks/bench_server.py --limits-only  # the limits' CPU cost (~3 s)
    .venv/bin/python benchmarks/bench_server.py --workers-only --duration 5 --rounds 3  # ~2 min
    .venv/bin/python benchmarks/bench_server.py --cpu-only --duration 5 --rounds 3  # ~2 min
    .venv/bin/python benchmarks/bench_server.py --tls-only --duration 5 --rounds 3  # ~1.5 min

Four servers run side by side for the whole benchmark, each in its own process:

* ``hello``: an ASGI app answering every request with ``hello``, served by
  :func:`idmint.server.run.serve` itself (its ``create_app`` swapped for the hello app),
  so the uvicorn stack and options are exactly those of ``idmint serve``: loop
  ``auto`` (uvloop when installed), uvicorn's protocol for its ``auto`` parser
  (httptools when installed) with idmint's request limits, access log off, lifespan on;
* ``idmint serve`` (uid64, static coordinator, one generator ID);
* ``idmint serve --generators 4`` (four static generator IDs);
* ``hello-stock``: the hello app with uvicorn's own HTTP protocol class instead of
  the one with idmint's request size limit and timeout (:mod:`idmint.server.limits`),
  all else the same: hello against it is what the limits cost.

Every target gets a 1 s warm-up, a throughput run (``wrk -t1 -c32 -d<duration>``) and a
latency run (the same with ``--latency``, whose percentiles are reported). The hello
app, ``/v1/id`` and hello-stock alternate for ``--rounds`` throughput runs each (3; 1
with ``--quick``): each ratio is the median of the pairs', as other load on the machine
moves both. ``/v1/ids?count=1000`` is reported as IDs/s too. Any
non-2xx answer or socket error is counted and shown.

wrk and the servers share the machine's cores: on a 2-core machine wrk's one thread
takes much of one core, so the numbers are lower bounds of what the server does alone.
Run it on a quiet machine (the load average is printed before and after).

Workers (also alone with ``--workers-only``): ``idmint serve`` (one process) against
``idmint serve --workers 2``, and against uvicorn's own ``--workers 2`` running
``create_app`` (one listening socket shared by its workers, where ``idmint serve``
gives each worker a socket of its own with ``SO_REUSEPORT``). For each,
``/v1/ids?count=1000`` (IDs/s: one generator ID is capped at 64 per ms, so two workers
should give twice as many) and ``/v1/id`` (requests/s: CPU-bound, and wrk's thread needs
a core of its own). The three alternate for ``--rounds`` rounds and each ratio is the
median of the rounds'. How the connections spread is read from the per-generator
``idmint_ids_issued_total`` of ``/metrics`` before and after each run (uvicorn's workers
each answer ``/metrics`` for themselves: it is scraped on 16 new connections and each
generator's largest count kept); the idlest worker's share is shown.

short60 against uid64 (also alone with ``--schemes-only``): ``/v1/ids?count=1000`` from
a short60 server and from a uid64 server with ``--generators 8``, the same cap of 512 IDs
per ms, alternating for ``--rounds`` runs: what the text forms cost in an answer.

The server's CPU at the cap (also alone with ``--cpu-only``): ``/v1/ids?count=1000``
from ``idmint serve`` and ``idmint serve --generators 4``, whose generators wait for
every tick, against the floor: the same servers (``--serve-unwaited``, benchmark-only)
with generators that never wait: no claim, and a clock that reads one millisecond
later at every reading, so each take opens a fresh tick. Both open the same 16 ticks
per 1,000 IDs and render the same text; only the waiting differs. The servers' CPU
time comes from ``/proc/<pid>/stat`` before and after each wrk run; reported per ID
served, and the ratio to the floor with as many generators. The floor runs flat out,
caches warm; so it runs a second time at the cap's pace (wrk's ``delay()`` holds each
connection between an answer and its next request), idle between requests as a capped
server is: the ratio to that one is what waiting costs, apart from idling.

http against https (also alone with ``--tls-only``; certificates made by trustme, of
the test extra): ``idmint serve`` and ``idmint serve --tls-cert ... --tls-key ...``
side by side, ``/v1/id`` and ``/v1/ids?count=1000`` over keep-alive connections, and
``/v1/id`` with ``Connection: close`` (wrk connects again for every request: a TLS
handshake each), alternating for ``--rounds`` rounds; as the peer, the hello app on
uvicorn's own TLS (``uvicorn --ssl-certfile``) against plain uvicorn, keep-alive and a
new connection per request: what TLS costs the stack itself. The servers' CPU per
request comes from ``/proc/<pid>/stat``; the new-connection rows' difference is what a
handshake costs the server.

Last, the request limits' cost is measured without wrk, in CPU time, which other load
on the machine moves far less than requests/s: one process serves keep-alive requests
to itself over a socket pair (client and server on one event loop), alternately with
uvicorn's own protocol class and with idmint's, and the CPU time per request of each is
compared (``--limits-only`` runs just this, in a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import platform
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

CONNECTIONS = 32
BATCH = 1000
START_TIMEOUT_S = 60.0
TARGET_SHARE = 0.80
"""/v1/id should reach at least this share of the hello app's requests/s."""
UID64_CAP_PER_S = 64_000
"""One uid64 generator ID issues at most 64 IDs per ms."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


# -- the hello app ----------------------------------------------------------------------


class _NoCredentials:
    context = None  # plain HTTP


class HelloApp:
    """The smallest useful ASGI app: ``hello`` as text/plain, with lifespan support.

    ``start_now``, ``credentials``, ``request_reload`` and ``released`` are what
    :func:`idmint.server.run.serve` uses of the ID server besides ASGI (it claims
    its generator IDs in ``start_now``, listens with ``credentials.context``);
    the hello app has nothing to do, no TLS and nothing to release.
    """

    credentials = _NoCredentials()
    released: list[str] = []  # noqa: RUF012 - never changed

    def start_now(self) -> None:
        pass

    def request_reload(self) -> None:
        pass

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")],
                }
            )
            await send({"type": "http.response.body", "body": b"hello"})
        elif scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return


def serve_hello(*, stock: bool = False) -> int:
    """Run the hello app through ``idmint.server.run.serve`` (same uvicorn config).

    ``stock``: with uvicorn's own protocol class (``http="auto"``), without idmint's
    request limits.
    """
    from idmint.server import run

    def announce(port: int) -> None:
        print(f"hello server: open http://127.0.0.1:{port}/", flush=True)

    run.create_app = lambda *_, **__: HelloApp()  # type: ignore[attr-defined,assignment]
    if stock:
        run.limited_http_protocol = lambda limits: "auto"  # type: ignore[attr-defined,assignment,return-value]
    return run.serve(host="127.0.0.1", port=0, announce=announce)


class _EveryReadingANewMillisecond:
    """The system clock, one millisecond further on at every reading: a generator
    reading it opens a fresh tick at every take and never waits (for the floor)."""

    def __init__(self) -> None:
        self.ahead_ns = 0

    def time_ns(self) -> int:
        self.ahead_ns += 1_000_000
        return time.time_ns() + self.ahead_ns

    monotonic_ns = staticmethod(time.monotonic_ns)

    def sleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        raise AssertionError("a generator on this clock never waits")

    async def asleep_until_ns(self, wall_ns: int, since_ns: int | None = None) -> None:
        raise AssertionError("a generator on this clock never waits")


def serve_unwaited(generators: int) -> int:
    """``idmint serve --generators N`` whose generators never wait (the CPU floor)."""
    from idmint.generate import Uid64Generator
    from idmint.server import issuer, run

    def unclaimed(scheme: str, count: int, *_: Any, **__: Any) -> list[Uid64Generator]:
        assert scheme == "uid64"
        return [
            Uid64Generator(2000 + n, clock=_EveryReadingANewMillisecond()) for n in range(count)
        ]

    def announce(port: int) -> None:
        print(f"unwaited server: open http://127.0.0.1:{port}/", flush=True)

    issuer.new_generators = unclaimed  # type: ignore[attr-defined,assignment]
    return run.serve(host="127.0.0.1", port=0, generators=generators, announce=announce)


# -- the request limits' CPU cost, in process ------------------------------------------

LIMITS_REQUESTS = 5_000
LIMITS_ROUNDS = 11


async def _cpu_per_request_us(protocol_class: Any, requests: int) -> float:
    """CPU microseconds per keep-alive request, client and server on this event loop."""
    import uvicorn
    from uvicorn.server import ServerState

    loop = asyncio.get_running_loop()
    config = uvicorn.Config(
        HelloApp(),
        http=protocol_class,
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
    )
    config.load()
    state = ServerState()
    server_end, client_end = socket.socketpair()
    transport, _ = await loop.connect_accepted_socket(
        lambda: config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=state, app_state={}
        ),
        server_end,
    )
    reader, writer = await asyncio.open_connection(sock=client_end)
    request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
    try:
        started = time.process_time()
        for _ in range(requests):
            writer.write(request)
            await reader.readuntil(b"0\r\n\r\n")  # the end of hello's chunked body
        return (time.process_time() - started) / requests * 1e6
    finally:
        writer.close()
        transport.close()


def limits_cost(rounds: int = LIMITS_ROUNDS, requests: int = LIMITS_REQUESTS) -> None:
    """Print the CPU time per request with and without idmint's request limits."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    try:
        from idmint.server.limits import RequestLimits, limited_http_protocol
    except ImportError:  # an idmint from before the limits (comparing versions)
        print("\nRequest limits: this idmint has none.")
        return

    new_loop: Callable[[], asyncio.AbstractEventLoop]
    try:
        import uvloop

        new_loop = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - as uvicorn's "auto" loop
        new_loop = asyncio.new_event_loop
    peers = {"uvicorn": AutoHTTPProtocol, "idmint": limited_http_protocol(RequestLimits())}
    times: dict[str, list[float]] = {name: [] for name in peers}
    loop = new_loop()
    try:
        for protocol_class in peers.values():  # warm-up
            loop.run_until_complete(_cpu_per_request_us(protocol_class, requests // 5))
        for _ in range(rounds):
            for name, protocol_class in peers.items():
                times[name].append(
                    loop.run_until_complete(_cpu_per_request_us(protocol_class, requests))
                )
    finally:
        loop.close()
    stock, limited = (statistics.median(times[name]) for name in peers)
    pairs = [mine / theirs for theirs, mine in zip(times["uvicorn"], times["idmint"], strict=True)]
    print(
        f"\nRequest limits, CPU time per keep-alive request ({AutoHTTPProtocol.__name__}, "
        f"{requests:,} requests x {rounds} alternating rounds, client and server in one "
        f"process): uvicorn's protocol {stock:.1f} us, with idmint's limits {limited:.1f} us: "
        f"{statistics.median(pairs):.1%} (median of the pairs: "
        f"{', '.join(f'{r:.1%}' for r in pairs)})."
    )


# -- servers ----------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    process: subprocess.Popen[str]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_server(
    name: str,
    argv: Sequence[str],
    *,
    announce: str = r"open (http://\S+?)/?(?:\s|$)",
    merged: bool = False,
) -> Server:
    """Start ``argv`` and wait for the line it prints once it listens (``open http://...``).

    ``merged``: the line is on stderr (uvicorn's own), read with stdout.
    """
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert process.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(timeout=0.5):
                    if process.poll() is not None:
                        break
                    continue
                line = process.stdout.readline()
                if not line:
                    break
                match = re.search(announce, line.strip())
                if match:
                    if merged:  # keep reading its log, or uvicorn blocks on a full pipe
                        threading.Thread(target=_drain, args=(process.stdout,), daemon=True).start()
                    return Server(name, process, match.group(1))
        process.kill()
        process.wait()
        stderr.seek(0)
        raise RuntimeError(f"{name} did not start: {' '.join(argv)}\n{stderr.read()}")


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


# -- wrk --------------------------------------------------------------------------------

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass
class WrkResult:
    requests_per_s: float
    requests: int
    non_2xx: int
    socket_errors: int
    percentiles_ms: dict[int, float]


def parse_wrk(output: str) -> WrkResult:
    """Requests/s, error counts and (with ``--latency``) the latency percentiles."""
    rate = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.MULTILINE)
    total = re.search(r"^\s*(\d+) requests in", output, re.MULTILINE)
    if rate is None or total is None:
        raise ValueError(f"cannot read wrk's output:\n{output}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    percentiles = {
        int(p): _ms(value)
        for p, value in re.findall(r"^\s+(\d+)%\s+([\d.]+(?:us|ms|s|m))\s*$", output, re.MULTILINE)
    }
    return WrkResult(
        requests_per_s=float(rate.group(1)),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(n) for n in errors.groups()) if errors else 0,
        percentiles_ms=percentiles,
    )


def run_wrk(
    wrk: str, url: str, duration_s: float, *, latency: bool, script: Path | None = None
) -> WrkResult:
    argv = [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{duration_s:g}s"]
    if latency:
        argv.append("--latency")
    if script is not None:
        argv += ["-s", str(script)]
    completed = subprocess.run(
        [*argv, url], capture_output=True, text=True, check=True, timeout=duration_s + 60
    )
    return parse_wrk(completed.stdout)


# -- the benchmark ----------------------------------------------------------------------


@dataclass
class Target:
    label: str
    server: str
    path: str
    ids_per_request: int


TARGETS = [
    Target("hello (bare ASGI app)", "hello", "/", 0),
    Target("/v1/id", "idmint", "/v1/id", 1),
    Target("hello, uvicorn's protocol without the request limits", "hello-stock", "/", 0),
    Target(f"/v1/ids?count={BATCH}", "idmint", f"/v1/ids?count={BATCH}", BATCH),
    Target("/v1/id, --generators 4", "idmint4", "/v1/id", 1),
    Target(f"/v1/ids?count={BATCH}, --generators 4", "idmint4", f"/v1/ids?count={BATCH}", BATCH),
]


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def machine_note() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    wrk = shutil.which("wrk") or "wrk"
    wrk_version = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
    first = (wrk_version.stdout or wrk_version.stderr).splitlines()[:1]
    return (
        f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}, uvicorn {_package_version('uvicorn')}, "
        f"uvloop {_package_version('uvloop')}, httptools {_package_version('httptools')}; "
        f"{first[0].split(' Copyright')[0] if first else 'wrk'}, -t1 -c{CONNECTIONS}. "
        "wrk and the servers share the cores."
    )


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def _fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} us" if value < 1 else f"{value:.2f} ms"


Throughput = dict[str, list[WrkResult]]
Latency = dict[str, WrkResult]


def measure(wrk: str, duration: float, rounds: int) -> tuple[Throughput, Latency]:
    """Start the servers, run every wrk run, stop the servers."""
    python = sys.executable
    servers: dict[str, Server] = {}
    throughput: Throughput = {target.label: [] for target in TARGETS}
    latency: Latency = {}
    try:
        servers["hello"] = start_server(
            "hello", [python, str(Path(__file__).resolve()), "--serve-hello"]
        )
        servers["hello-stock"] = start_server(
            "hello-stock", [python, str(Path(__file__).resolve()), "--serve-hello-stock"]
        )
        servers["idmint"] = start_server(
            "idmint serve", [python, "-m", "idmint", "serve", "--port", "0"]
        )
        servers["idmint4"] = start_server(
            "idmint serve --generators 4",
            [python, "-m", "idmint", "serve", "--port", "0", "--generators", "4"],
        )
        for target in TARGETS:
            run_wrk(wrk, servers[target.server].url + target.path, 1, latency=False)  # warm-up
        # hello, /v1/id and hello-stock alternate, `rounds` times, so that they see the
        # same machine.
        for target in [*TARGETS[:3] * rounds, *TARGETS[3:]]:
            url = servers[target.server].url + target.path
            throughput[target.label].append(run_wrk(wrk, url, duration, latency=False))
        for target in TARGETS:
            url = servers[target.server].url + target.path
            latency[target.label] = run_wrk(wrk, url, duration, latency=True)
    finally:
        for server in servers.values():
            server.stop()
    return throughput, latency


def report(throughput: Throughput, latency: Latency) -> None:
    """The markdown table and the /v1/id-to-hello verdict."""
    hello_target, one_id_target, stock_target = TARGETS[:3]
    rates = {label: [run.requests_per_s for run in runs] for label, runs in throughput.items()}
    hello = statistics.median(rates[hello_target.label])
    ratios = [
        one / base
        for base, one in zip(rates[hello_target.label], rates[one_id_target.label], strict=True)
    ]
    print(
        "| target | requests/s | vs hello | IDs/s | of the uid64 cap | p50 | p99 "
        "| non-2xx / socket errors |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for target in TARGETS:
        rate = statistics.median(rates[target.label])
        timing = latency[target.label]
        runs = [*throughput[target.label], timing]
        ids_per_s = rate * target.ids_per_request
        cap = UID64_CAP_PER_S * (4 if target.server == "idmint4" else 1)
        batch = target.ids_per_request > 1
        share = statistics.median(ratios) if target is one_id_target else rate / hello
        cells = [
            target.label,
            f"{rate:,.0f}",
            "-" if batch else f"{share:.1%}",
            f"{ids_per_s:,.0f}" if target.ids_per_request else "-",
            f"{ids_per_s / cap:.0%}" if batch else "-",
            _fmt_ms(timing.percentiles_ms.get(50)),
            _fmt_ms(timing.percentiles_ms.get(99)),
            f"{sum(r.non_2xx for r in runs)} / {sum(r.socket_errors for r in runs)}",
        ]
        print("| " + " | ".join(cells) + " |")
    limits_ratios = [
        hello / stock
        for hello, stock in zip(rates[hello_target.label], rates[stock_target.label], strict=True)
    ]
    one_id = statistics.median(ratios)
    verdict = "meets" if one_id >= TARGET_SHARE else "misses"
    print(
        f"\n/v1/id serves {one_id:.1%} of the hello app's requests/s (median of "
        f"{len(ratios)} alternating pairs: {', '.join(f'{r:.1%}' for r in ratios)}; "
        f"{verdict} the {TARGET_SHARE:.0%} target)."
    )
    print(
        f"hello with idmint's request limits serves {statistics.median(limits_ratios):.1%} "
        f"of hello on uvicorn's own protocol class (pairs: "
        f"{', '.join(f'{r:.1%}' for r in limits_ratios)})."
    )
    print(
        f"Requests/s: median of the throughput runs; p50/p99 from the --latency runs "
        f"({CONNECTIONS} connections, 1 wrk thread). A batch of {BATCH:,} takes at least "
        f"{BATCH / 64:.1f} ms of one generator's time (64 IDs/ms), so with {CONNECTIONS} "
        "batches in flight their latency is mostly the wait for the rate cap."
    )


# -- workers: one process against two ------------------------------------------------------

WORKER_PATHS = [(f"/v1/ids?count={BATCH}", BATCH), ("/v1/id", 1)]
WORKER_SCRAPES = 16
IDS_TARGET = 1.8
REQUESTS_TARGET = 1.2


def issued_by_generator(url: str, scrapes: int) -> dict[str, float]:
    """``idmint_ids_issued_total`` per generator ID, from ``scrapes`` new connections.

    ``idmint serve --workers N`` answers for all its workers on any connection;
    uvicorn's workers each for themselves, so several connections are needed to
    see every worker (the largest count of each generator is kept).
    """
    seen: dict[str, float] = {}
    for _ in range(scrapes):
        host, _, port = url.removeprefix("http://").rpartition(":")
        connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=30)
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
        finally:
            connection.close()
        for generator, value in re.findall(
            r'^idmint_ids_issued_total\{[^}]*generator="(\d+)"[^}]*\} (\S+)$', text, re.MULTILINE
        ):
            seen[generator] = max(seen.get(generator, 0.0), float(value))
    return seen


@dataclass
class WorkerRun:
    result: WrkResult
    idlest_share: float | None
    """The smallest share of the run's IDs issued by one generator ID (one worker)."""


WorkerRuns = dict[tuple[str, str], list[WorkerRun]]


def measure_workers(wrk: str, duration: float, rounds: int) -> tuple[list[str], WorkerRuns]:
    python = sys.executable
    argvs = {
        "idmint serve (1 process)": [python, "-m", "idmint", "serve", "--port", "0"],
        "idmint serve --workers 2": [
            *(python, "-m", "idmint", "serve", "--port", "0", "--workers", "2"),
        ],
        "uvicorn --workers 2 (create_app)": [
            *(python, "-m", "uvicorn", "--factory", "idmint.server.app:create_app"),
            *("--workers", "2", "--port", "0", "--no-access-log"),
        ],
    }
    workers = {"idmint serve (1 process)": 1}
    servers: dict[str, Server] = {}
    runs: WorkerRuns = {(name, path): [] for name in argvs for path, _ in WORKER_PATHS}
    try:
        for name, argv in argvs.items():
            if name.startswith("uvicorn"):
                servers[name] = start_server(
                    name, argv, announce=r"Uvicorn running on (http://\S+?) ", merged=True
                )
            else:
                servers[name] = start_server(name, argv)
        for name, server in servers.items():  # warm-up; uvicorn's workers claim as they start
            for path, _ in WORKER_PATHS:
                run_wrk(wrk, server.url + path, 1, latency=False)
            scrapes = 1 if name.startswith("idmint") else WORKER_SCRAPES
            deadline = time.monotonic() + START_TIMEOUT_S
            while len(issued_by_generator(server.url, scrapes)) < workers.get(name, 2):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: not every worker has issued an ID")
        for _ in range(rounds):
            for path, _ids in WORKER_PATHS:
                for name, server in servers.items():
                    scrapes = 1 if name.startswith("idmint") else WORKER_SCRAPES
                    before = issued_by_generator(server.url, scrapes)
                    result = run_wrk(wrk, server.url + path, duration, latency=False)
                    after = issued_by_generator(server.url, scrapes)
                    deltas = [after[g] - before.get(g, 0.0) for g in after]
                    total = sum(deltas)
                    share = min(deltas) / total if total and len(deltas) > 1 else None
                    runs[name, path].append(WorkerRun(result, share))
    finally:
        for server in servers.values():
            server.stop()
    return list(argvs), runs


def report_workers(names: list[str], runs: WorkerRuns) -> None:
    single = names[0]
    print(
        "\n| server | target | requests/s | IDs/s | vs 1 process (median of rounds) "
        "| idlest worker's share of IDs | non-2xx / socket errors |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    verdicts = []
    for path, per_request in WORKER_PATHS:
        for name in names:
            mine = runs[name, path]
            rate = statistics.median(run.result.requests_per_s for run in mine)
            ratios = [
                run.result.requests_per_s / base.result.requests_per_s
                for run, base in zip(mine, runs[single, path], strict=True)
            ]
            ratio = statistics.median(ratios)
            shares = [run.idlest_share for run in mine if run.idlest_share is not None]
            cells = [
                name,
                f"`{path}`",
                f"{rate:,.0f}",
                f"{rate * per_request:,.0f}",
                "1.00"
                if name == single
                else f"{ratio:.2f} ({', '.join(f'{r:.2f}' for r in ratios)})",
                ", ".join(f"{share:.0%}" for share in shares) if shares else "-",
                f"{sum(r.result.non_2xx for r in mine)} / "
                f"{sum(r.result.socket_errors for r in mine)}",
            ]
            print("| " + " | ".join(cells) + " |")
            if name == names[1]:
                target = IDS_TARGET if per_request > 1 else REQUESTS_TARGET
                verdict = "meets" if ratio >= target else "misses"
                verdicts.append(f"{path}: {ratio:.2f}x ({verdict} the {target}x target)")
    print("\n--workers 2 against one process: " + "; ".join(verdicts) + ".")


# -- short60 against uid64: the text forms of a batch ----------------------------------------

SCHEME_SERVERS = {
    "uid64, --generators 8": ["--generators", "8"],
    "short60": ["--scheme", "short60"],
}
"""Servers with the same cap (512 IDs per ms: eight uid64 generator IDs, one short60 one),
so requests/s compare the cost of answering, the text forms above all."""
SCHEMES_TARGET = 0.95


def measure_schemes(wrk: str, duration: float, rounds: int) -> dict[str, list[WrkResult]]:
    """``/v1/ids?count=1000`` of a short60 server and a uid64 one, alternating."""
    python = sys.executable
    servers: dict[str, Server] = {}
    runs: dict[str, list[WrkResult]] = {name: [] for name in SCHEME_SERVERS}
    try:
        for name, flags in SCHEME_SERVERS.items():
            argv = [python, "-m", "idmint", "serve", "--port", "0", *flags]
            servers[name] = start_server(name, argv)
        path = f"/v1/ids?count={BATCH}"
        for server in servers.values():
            run_wrk(wrk, server.url + path, 1, latency=False)  # warm-up
        for _ in range(rounds):
            for name, server in servers.items():
                runs[name].append(run_wrk(wrk, server.url + path, duration, latency=False))
    finally:
        for server in servers.values():
            server.stop()
    return runs


def report_schemes(runs: dict[str, list[WrkResult]]) -> None:
    uid64, short60 = SCHEME_SERVERS
    print(f"\n| server | `/v1/ids?count={BATCH}` requests/s | IDs/s | non-2xx / socket errors |")
    print("|---|---:|---:|---:|")
    for name, results in runs.items():
        rate = statistics.median(run.requests_per_s for run in results)
        errors = f"{sum(r.non_2xx for r in results)} / {sum(r.socket_errors for r in results)}"
        print(f"| {name} | {rate:,.0f} | {rate * BATCH:,.0f} | {errors} |")
    ratios = [
        mine.requests_per_s / theirs.requests_per_s
        for mine, theirs in zip(runs[short60], runs[uid64], strict=True)
    ]
    ratio = statistics.median(ratios)
    verdict = "meets" if ratio >= SCHEMES_TARGET else "misses"
    print(
        f"\nshort60 serves {ratio:.1%} of uid64's requests/s at the same cap (median of "
        f"{len(ratios)} alternating pairs: {', '.join(f'{r:.1%}' for r in ratios)}; "
        f"{verdict} the {SCHEMES_TARGET:.0%} target)."
    )


CPU_SERVERS: dict[str, tuple[str, int]] = {
    "idmint serve": ("cap", 1),
    "idmint serve, unwaited (floor)": ("floor", 1),
    "idmint serve, unwaited, at the cap's pace": ("paced", 1),
    "idmint serve --generators 4": ("cap", 4),
    "idmint serve --generators 4, unwaited (floor)": ("floor", 4),
    "idmint serve --generators 4, unwaited, at the cap's pace": ("paced", 4),
}
"""The floor serves as fast as wrk asks, with its caches warm; the paced floor gets no
more requests than the cap allows (wrk's ``delay()``: each connection waits between
answer and request), so it idles between them as a server at its cap does, and the
difference between the two is what idling costs rather than waiting."""
CPU_TARGET = 1.5
"""CPU per ID at the cap: at most this many times the floor's."""


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuRun:
    cpu_s: float
    ids: int
    seconds: float


def measure_cpu(wrk: str, duration: float, rounds: int) -> dict[str, list[CpuRun]]:
    """``/v1/ids?count=1000`` of each of CPU_SERVERS under wrk, with the server's CPU time."""
    python = sys.executable
    servers: dict[str, Server] = {}
    runs: dict[str, list[CpuRun]] = {name: [] for name in CPU_SERVERS}
    path = f"/v1/ids?count={BATCH}"
    scripts = Path(tempfile.mkdtemp(prefix="idmint-bench-pace-"))
    try:
        pacing: dict[str, Path] = {}
        for name, (kind, generators) in CPU_SERVERS.items():
            if kind == "paced":
                # One request of BATCH IDs per connection every CONNECTIONS / rate seconds.
                delay_ms = CONNECTIONS * 1000 * BATCH / (UID64_CAP_PER_S * generators)
                pacing[name] = scripts / f"pace-{generators}.lua"
                pacing[name].write_text(f"function delay()\n  return {delay_ms:.0f}\nend\n")
            if kind == "cap":
                argv = [python, "-m", "idmint", "serve", "--port", "0"]
                argv += ["--generators", str(generators)]
            else:
                argv = [python, str(Path(__file__).resolve()), "--serve-unwaited", str(generators)]
            servers[name] = start_server(name, argv)
        for server in servers.values():
            run_wrk(wrk, server.url + path, 1, latency=False)  # warm-up
        for _ in range(rounds):
            for name, server in servers.items():
                before = process_cpu_s(server.process.pid)
                result = run_wrk(
                    wrk, server.url + path, duration, latency=False, script=pacing.get(name)
                )
                cpu_s = process_cpu_s(server.process.pid) - before
                served = (result.requests - result.non_2xx) * BATCH
                runs[name].append(CpuRun(cpu_s, served, duration))
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(scripts, ignore_errors=True)
    return runs


def report_cpu(runs: dict[str, list[CpuRun]]) -> None:
    print(
        f"\nThe server's CPU serving `/v1/ids?count={BATCH}` (wrk -c{CONNECTIONS}), from "
        "/proc/<pid>/stat; median of the rounds\n"
    )
    print(
        "| server | IDs/s | of the cap | CPU, share of a core | CPU ns per ID | vs the floor "
        "| vs the floor at the cap's pace |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    per_id = {
        name: [run.cpu_s * 1e9 / run.ids for run in results if run.ids]
        for name, results in runs.items()
    }
    for name, results in runs.items():
        kind, generators = CPU_SERVERS[name]
        rate = statistics.median(run.ids / run.seconds for run in results)
        share = statistics.median(run.cpu_s / run.seconds for run in results)
        cap = f"{rate / (UID64_CAP_PER_S * generators):.1%}" if kind == "cap" else "-"
        ns = statistics.median(per_id[name])
        ratios = {}
        for floor_kind in ("floor", "paced"):
            floor = next(
                n for n, (k, g) in CPU_SERVERS.items() if k == floor_kind and g == generators
            )
            ratios[floor_kind] = [
                mine / theirs for mine, theirs in zip(per_id[name], per_id[floor], strict=False)
            ]
        shown = {
            floor_kind: f"{statistics.median(values):.2f} ({', '.join(f'{r:.2f}' for r in values)})"
            for floor_kind, values in ratios.items()
        }
        if kind == "cap":
            shown["floor"] = f"**{shown['floor'].replace(' (', '** (', 1)}"
        print(
            f"| {name} | {rate:,.0f} | {cap} | {share:.1%} | {ns:,.0f} | {shown['floor']} "
            f"| {shown['paced']} |"
        )
    print(f"\n(Target: at most {CPU_TARGET:g} times the floor's CPU per ID.)")
    wake_ns = loop_wake_up_ns()
    print(
        f"\nThe waits' own floor: one wake-up of the server's event loop per tick, sleeping "
        f"to each next ms as a waiting generator does (`Clock.asleep_until_ns`), costs "
        f"{wake_ns / 1000:.1f} us of CPU here, alone."
    )
    for generators in sorted({g for k, g in CPU_SERVERS.values() if k == "floor"}):
        floor = next(n for n, (k, g) in CPU_SERVERS.items() if k == "floor" and g == generators)
        unwaited = statistics.median(per_id[floor])
        per_tick = wake_ns / (UID64_CAP_PER_S // 1000 * generators)
        print(
            f"- {generators} generator(s), sharing one wake-up per tick: {per_tick:,.0f} ns per "
            f"ID, so at least {(unwaited + per_tick) / unwaited:.2f} times the floor"
        )


def loop_wake_up_ns(seconds: float = 2.0) -> float:
    """CPU ns per wake-up of the event loop ``idmint serve`` runs (uvloop where installed)
    sleeping to each next millisecond through the system clock's ``asleep_until_ns``."""
    import asyncio

    from idmint.clock import SYSTEM_CLOCK

    async def sleeper() -> float:
        cpu, wakes = time.process_time_ns(), 0
        end = time.monotonic_ns() + int(seconds * 1e9)
        while time.monotonic_ns() < end:
            now = time.time_ns()
            await SYSTEM_CLOCK.asleep_until_ns(now - now % 1_000_000 + 1_000_000, now)
            wakes += 1
        return (time.process_time_ns() - cpu) / wakes

    try:
        import uvloop
    except ImportError:
        return asyncio.run(sleeper())
    loop = uvloop.new_event_loop()
    try:
        woken: float = loop.run_until_complete(sleeper())
    finally:
        loop.close()
    return woken


# -- TLS ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsTarget:
    label: str
    server: str
    """``idmint`` (``idmint serve``) or ``hello`` (the peer: uvicorn's own TLS)."""
    path: str
    ids_per_request: int
    new_connection: bool = False


TLS_TARGETS = [
    TlsTarget("`/v1/id`, keep-alive", "idmint", "/v1/id", 1),
    TlsTarget(f"`/v1/ids?count={BATCH}`, keep-alive", "idmint", f"/v1/ids?count={BATCH}", BATCH),
    TlsTarget("`/v1/id`, a new connection per request", "idmint", "/v1/id", 1, True),
    TlsTarget("hello on uvicorn's own TLS, keep-alive", "hello", "/", 0),
    TlsTarget("hello on uvicorn's own TLS, a new connection per request", "hello", "/", 0, True),
]


@dataclass
class TlsRun:
    result: WrkResult
    cpu_s: float


def _certificates(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by trustme (the test extra)."""
    import trustme

    leaf = trustme.CA().issue_cert("127.0.0.1")
    cert, key = directory / "server.pem", directory / "server.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    return cert, key


def run_wrk_tls(
    wrk: str, server: Server, target: TlsTarget, duration: float
) -> tuple[WrkResult, float]:
    """One wrk run against ``server`` and the server's CPU seconds meanwhile."""
    argv = [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{duration:g}s"]
    if target.new_connection:
        argv += ["-H", "Connection: close"]  # wrk connects again after each answer
    before = process_cpu_s(server.process.pid)
    completed = subprocess.run(
        [*argv, server.url + target.path],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 60,
    )
    return parse_wrk(completed.stdout), process_cpu_s(server.process.pid) - before


def _tls_servers(directory: Path) -> dict[tuple[str, str], Server]:
    """``idmint serve`` and the hello app on uvicorn, each over http and over https."""
    python = sys.executable
    cert, key = _certificates(directory)
    idmint = [python, "-m", "idmint", "serve", "--port", "0"]
    hello = [python, "-m", "uvicorn", "--factory", "bench_server:HelloApp", "--port", "0"]
    hello += ["--app-dir", str(Path(__file__).resolve().parent), "--no-access-log"]
    uvicorn_says = r"Uvicorn running on (https?://\S+?) "
    servers: dict[tuple[str, str], Server] = {}
    try:
        servers["idmint", "http"] = start_server("idmint serve", idmint)
        servers["idmint", "https"] = start_server(
            "idmint serve --tls-cert",
            [*idmint, "--tls-cert", str(cert), "--tls-key", str(key)],
            announce=r"open (https://\S+?)/?(?:\s|$)",
        )
        servers["hello", "http"] = start_server(
            "uvicorn hello", hello, announce=uvicorn_says, merged=True
        )
        servers["hello", "https"] = start_server(
            "uvicorn hello --ssl-certfile",
            [*hello, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
            announce=uvicorn_says,
            merged=True,
        )
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers


def measure_tls(wrk: str, duration: float, rounds: int) -> dict[tuple[str, str], list[TlsRun]]:
    """Each TLS target over http and over https, alternating, with the server's CPU."""
    runs: dict[tuple[str, str], list[TlsRun]] = {}
    with tempfile.TemporaryDirectory(prefix="idmint-bench-tls-") as directory:
        servers = _tls_servers(Path(directory))
        try:
            for target in TLS_TARGETS:
                for over in ("http", "https"):
                    run_wrk_tls(wrk, servers[target.server, over], target, 1)  # warm-up
            for _ in range(rounds):
                for target in TLS_TARGETS:
                    for over in ("http", "https"):
                        result, cpu_s = run_wrk_tls(
                            wrk, servers[target.server, over], target, duration
                        )
                        runs.setdefault((target.label, over), []).append(TlsRun(result, cpu_s))
        finally:
            for server in servers.values():
                server.stop()
    return runs


def report_tls(runs: dict[tuple[str, str], list[TlsRun]]) -> None:
    print(
        f"\nhttp against https (TLS 1.3), wrk -t1 -c{CONNECTIONS}; the server's CPU from "
        "/proc/<pid>/stat; medians of the rounds\n"
    )
    print(
        "| target | over | requests/s | IDs/s | server CPU per request | "
        "https vs http, requests/s (rounds) | non-2xx / socket errors |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    cpu_per_request: dict[tuple[str, str], float] = {}
    for target in TLS_TARGETS:
        plain = [run.result.requests_per_s for run in runs[target.label, "http"]]
        for over in ("http", "https"):
            results = runs[target.label, over]
            rate = statistics.median(run.result.requests_per_s for run in results)
            per_request = statistics.median(
                run.cpu_s / max(1, run.result.requests) for run in results
            )
            cpu_per_request[target.label, over] = per_request
            errors = sum(run.result.non_2xx for run in results)
            socket_errors = sum(run.result.socket_errors for run in results)
            versus = "1.00"
            if over == "https":
                ratios = [
                    run.result.requests_per_s / base
                    for run, base in zip(results, plain, strict=True)
                ]
                versus = (
                    f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)})"
                )
            ids = f"{rate * target.ids_per_request:,.0f}" if target.ids_per_request else "-"
            print(
                f"| {target.label} | {over} | {rate:,.0f} | {ids} | {per_request * 1e6:,.0f} us "
                f"| {versus} | {errors} / {socket_errors} |"
            )
    for server in ("idmint", "hello"):
        new = next(t for t in TLS_TARGETS if t.new_connection and t.server == server)
        handshake = cpu_per_request[new.label, "https"] - cpu_per_request[new.label, "http"]
        print(
            f"\nA new TLS connection costs the {server} server about {handshake * 1e6:,.0f} us "
            "of CPU more than a plain one (the difference of its new-connection rows)."
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--quick", action="store_true", help="3 s per wrk run, 1 round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating hello / /v1/id throughput runs"
    )
    parser.add_argument("--serve-hello", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-hello-stock", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-unwaited", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--cpu-only", action="store_true", help="only the servers' CPU at the cap and the floor"
    )
    parser.add_argument(
        "--limits-only", action="store_true", help="only the request limits' CPU cost (~10 s)"
    )
    parser.add_argument(
        "--workers-only", action="store_true", help="only one process against --workers 2"
    )
    parser.add_argument(
        "--schemes-only", action="store_true", help="only short60 against uid64 batches"
    )
    parser.add_argument(
        "--tls-only", action="store_true", help="only http against https, and the handshake"
    )
    args = parser.parse_args(argv)
    if args.serve_hello or args.serve_hello_stock:
        return serve_hello(stock=args.serve_hello_stock)
    if args.serve_unwaited:
        return serve_unwaited(args.serve_unwaited)
    if args.limits_only:
        limits_cost()
        return 0
    duration = 3.0 if args.quick else args.duration
    rounds = 1 if args.quick else max(1, args.rounds)
    wrk = shutil.which("wrk")
    if wrk is None:
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2
    print(f"Machine: {machine_note()}")
    print(f"Load average before: {load_average()}; {duration:g} s per wrk run\n")
    if args.schemes_only:
        report_schemes(measure_schemes(wrk, duration, rounds))
        print(f"Load average after: {load_average()}")
        return 0
    if args.cpu_only:
        report_cpu(measure_cpu(wrk, duration, rounds))
        print(f"Load average after: {load_average()}")
        return 0
    if args.tls_only:
        report_tls(measure_tls(wrk, duration, rounds))
        print(f"Load average after: {load_average()}")
        return 0
    if not args.workers_only:
        throughput, latency = measure(wrk, duration, rounds)
        report(throughput, latency)
    report_workers(*measure_workers(wrk, duration, rounds))
    if not args.workers_only:
        report_schemes(measure_schemes(wrk, duration, rounds))
        report_cpu(measure_cpu(wrk, duration, rounds))
        report_tls(measure_tls(wrk, duration, rounds))
        limits_cost()
    print(f"Load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
