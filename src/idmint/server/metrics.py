"""Prometheus metrics, kept by hand so the hot path pays for no library.

Counters are plain ints (the server runs on one event loop thread); the
latency histogram finds its bucket with ``bisect``. Everything else (the
generators' and claims' counts, the process's CPU time and memory) is read
when ``/metrics`` is scraped, not kept up to date per request. ``render()``
writes the text exposition format (version 0.0.4) Prometheus scrapes, with the
standard ``process_*`` families, so no client library is needed to serve it.
"""

from __future__ import annotations

import os
import platform
import resource
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

__all__ = ["LATENCY_BUCKETS_S", "Family", "Metrics", "labels_text"]

LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)

Samples = Iterable[tuple[Mapping[str, str], float]]


class Family:
    """One metric family read on scrape: name, type, help, and a function giving its samples."""

    __slots__ = ("help", "kind", "name", "samples")

    def __init__(self, name: str, kind: str, help: str, samples: Callable[[], Samples]) -> None:
        self.name = name
        self.kind = kind
        self.help = help
        self.samples = samples

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        lines += [
            f"{self.name}{labels_text(labels)} {_number(value)}" for labels, value in self.samples()
        ]
        return lines


def labels_text(labels: Mapping[str, str]) -> str:
    """``{a="1",b="x"}`` with values escaped as the text format requires (or nothing)."""
    if not labels:
        return ""
    inner = ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class _Histogram:
    __slots__ = ("count", "counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.count += 1
        self.total += seconds


class Metrics:
    """Request counts and latencies by route; other families read on scrape.

    ``families`` holds what the server adds (its generators and claims); build
    information and the process's own metrics come first.
    """

    def __init__(self, *, version: str) -> None:
        self.requests: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.latency: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.ids_served = 0
        self.version = version
        self.families: list[Family] = []

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests[route, status] += 1
        self.latency[route].observe(seconds)

    def render(self) -> str:
        lines = [
            "# HELP idmint_build_info The running idmint version (always 1).",
            "# TYPE idmint_build_info gauge",
            "idmint_build_info"
            + labels_text({"version": self.version, "python_version": platform.python_version()})
            + " 1",
            *_process_lines(),
            "# HELP idmint_ids_served_total IDs returned to clients.",
            "# TYPE idmint_ids_served_total counter",
            f"idmint_ids_served_total {self.ids_served}",
            "# HELP idmint_http_requests_total HTTP requests by route and status code.",
            "# TYPE idmint_http_requests_total counter",
        ]
        for (route, status), count in sorted(self.requests.items()):
            lines.append(f'idmint_http_requests_total{{route="{route}",code="{status}"}} {count}')
        lines += [
            "# HELP idmint_http_request_duration_seconds Request latency by route.",
            "# TYPE idmint_http_request_duration_seconds histogram",
        ]
        for route, histogram in sorted(self.latency.items()):
            cumulative = 0
            for bound, count in zip(LATENCY_BUCKETS_S, histogram.counts, strict=False):
                cumulative += count
                lines.append(
                    f'idmint_http_request_duration_seconds_bucket{{route="{route}",le="{bound}"}}'
                    f" {cumulative}"
                )
            lines.append(
                f'idmint_http_request_duration_seconds_bucket{{route="{route}",le="+Inf"}}'
                f" {histogram.count}"
            )
            lines.append(
                f'idmint_http_request_duration_seconds_sum{{route="{route}"}} {histogram.total:.6f}'
            )
            lines.append(
                f'idmint_http_request_duration_seconds_count{{route="{route}"}} {histogram.count}'
            )
        for family in self.families:
            lines.extend(family.render())
        return "\n".join(lines) + "\n"


# -- the process, as Prometheus client libraries report it ----------------------------------

_PROC = Path("/proc/self")


def _process_lines() -> list[str]:
    """The standard ``process_*`` families, from ``/proc`` where it exists (Linux).

    CPU time and the file-descriptor limit come from ``resource`` everywhere;
    memory, open descriptors and the start time need ``/proc`` and are left out
    without it rather than reported wrong.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    lines = [
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        f"process_cpu_seconds_total {usage.ru_utime + usage.ru_stime:.6f}",
    ]
    stat = _proc_stat()
    if stat is not None:
        virtual_bytes, resident_pages, start_ticks = stat
        lines += [
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.",
            "# TYPE process_virtual_memory_bytes gauge",
            f"process_virtual_memory_bytes {virtual_bytes}",
            "# HELP process_resident_memory_bytes Resident memory size in bytes.",
            "# TYPE process_resident_memory_bytes gauge",
            f"process_resident_memory_bytes {resident_pages * _PAGE_SIZE}",
        ]
        boot = _boot_time_s()
        if boot is not None:
            started = boot + start_ticks / _TICKS_PER_S
            lines += [
                "# HELP process_start_time_seconds Start time of the process since unix epoch "
                "in seconds.",
                "# TYPE process_start_time_seconds gauge",
                f"process_start_time_seconds {started:.2f}",
            ]
    try:
        open_fds = len(os.listdir(_PROC / "fd"))
    except OSError:
        open_fds = None
    if open_fds is not None:
        lines += [
            "# HELP process_open_fds Number of open file descriptors.",
            "# TYPE process_open_fds gauge",
            f"process_open_fds {open_fds}",
        ]
    soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit != resource.RLIM_INFINITY:
        lines += [
            "# HELP process_max_fds Maximum number of open file descriptors.",
            "# TYPE process_max_fds gauge",
            f"process_max_fds {soft_limit}",
        ]
    return lines


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat() -> tuple[int, int, int] | None:
    """(virtual bytes, resident pages, start time in clock ticks after boot), or None."""
    try:
        text = (_PROC / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = text[text.rfind(")") + 2 :].split()
    # Fields from the state (3rd of proc(5)) on: starttime is the 22nd, vsize 23rd, rss 24th.
    return int(fields[20]), int(fields[21]), int(fields[19])


_boot_time: float | None = None


def _boot_time_s() -> float | None:
    global _boot_time
    if _boot_time is None:
        try:
            for line in Path("/proc/stat").read_text().splitlines():
                if line.startswith("btime "):
                    _boot_time = float(line.split()[1])
                    break
        except OSError:
            return None
    return _boot_time
