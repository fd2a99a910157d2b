"""Prometheus metrics, kept by hand so the hot path pays for no library.

Counters are plain ints (the server runs on one event loop thread); the
latency histogram finds its bucket with ``bisect``. Everything else (the
generators' and claims' counts, the process's CPU time and memory) is read
when ``/metrics`` is scraped, not kept up to date per request. ``collect()``
gives every family as plain data (:class:`FamilyData`), which the workers of
``idmint serve --workers N`` exchange (:mod:`idmint.server.siblings`);
:func:`render` writes families in the text exposition format (version 0.0.4)
Prometheus scrapes, with the standard ``process_*`` families, so no client
library is needed to serve it.
"""

from __future__ import annotations

import os
import platform
import resource
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

__all__ = ["LATENCY_BUCKETS_S", "Family", "FamilyData", "Metrics", "labels_text", "render"]

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

Sample = tuple[str, dict[str, str], float]
"""One line of a family: the sample's name (the family's, or with ``_bucket``,
``_sum``, ``_count`` for a histogram), its labels, its value."""


class FamilyData(NamedTuple):
    """A metric family as it stands when collected: what :func:`render` writes."""

    name: str
    kind: str
    help: str
    samples: list[Sample]


def render(families: Iterable[FamilyData]) -> str:
    """The text exposition format: each family's HELP and TYPE, then its samples."""
    lines = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        lines += [
            f"{name}{labels_text(labels)} {_number(value)}"
            for name, labels, value in family.samples
        ]
    return "\n".join(lines) + "\n"


class Family:
    """One metric family read on scrape: name, type, help, and a function giving its samples."""

    __slots__ = ("help", "kind", "name", "samples")

    def __init__(self, name: str, kind: str, help: str, samples: Callable[[], Samples]) -> None:
        self.name = name
        self.kind = kind
        self.help = help
        self.samples = samples

    def collect(self) -> FamilyData:
        samples: list[Sample] = [
            (self.name, dict(labels), value) for labels, value in self.samples()
        ]
        return FamilyData(self.name, self.kind, self.help, samples)


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

    def samples(self, name: str, route: str) -> list[Sample]:
        cumulative = 0
        samples: list[Sample] = []
        for bound, count in zip(LATENCY_BUCKETS_S, self.counts, strict=False):
            cumulative += count
            samples.append((f"{name}_bucket", {"route": route, "le": str(bound)}, cumulative))
        samples.append((f"{name}_bucket", {"route": route, "le": "+Inf"}, self.count))
        samples.append((f"{name}_sum", {"route": route}, self.total))
        samples.append((f"{name}_count", {"route": route}, self.count))
        return samples


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
        return render(self.collect())

    def collect(self) -> list[FamilyData]:
        """Every family, build information and the process's own first."""
        build = {"version": self.version, "python_version": platform.python_version()}
        families = [
            FamilyData(
                "idmint_build_info",
                "gauge",
                "The running idmint version (always 1).",
                [("idmint_build_info", build, 1)],
            ),
            *_process_families(),
            FamilyData(
                "idmint_ids_served_total",
                "counter",
                "IDs returned to clients.",
                [("idmint_ids_served_total", {}, self.ids_served)],
            ),
            FamilyData(
                "idmint_http_requests_total",
                "counter",
                "HTTP requests by route and status code.",
                [
                    ("idmint_http_requests_total", {"route": route, "code": str(status)}, count)
                    for (route, status), count in sorted(self.requests.items())
                ],
            ),
            FamilyData(
                "idmint_http_request_duration_seconds",
                "histogram",
                "Request latency by route.",
                [
                    sample
                    for route, histogram in sorted(self.latency.items())
                    for sample in histogram.samples("idmint_http_request_duration_seconds", route)
                ],
            ),
        ]
        families += [family.collect() for family in self.families]
        return families


# -- the process, as Prometheus client libraries report it ----------------------------------

_PROC = Path("/proc/self")


def _process_families() -> list[FamilyData]:
    """The standard ``process_*`` families, from ``/proc`` where it exists (Linux).

    CPU time and the file-descriptor limit come from ``resource`` everywhere;
    memory, open descriptors and the start time need ``/proc`` and are left out
    without it rather than reported wrong.
    """

    def one(name: str, kind: str, help: str, value: float) -> FamilyData:
        return FamilyData(name, kind, help, [(name, {}, value)])

    usage = resource.getrusage(resource.RUSAGE_SELF)
    families = [
        one(
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            round(usage.ru_utime + usage.ru_stime, 6),
        )
    ]
    stat = _proc_stat()
    if stat is not None:
        virtual_bytes, resident_pages, start_ticks = stat
        families += [
            one(
                "process_virtual_memory_bytes",
                "gauge",
                "Virtual memory size in bytes.",
                virtual_bytes,
            ),
            one(
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
                resident_pages * _PAGE_SIZE,
            ),
        ]
        boot = _boot_time_s()
        if boot is not None:
            families.append(
                one(
                    "process_start_time_seconds",
                    "gauge",
                    "Start time of the process since unix epoch in seconds.",
                    round(boot + start_ticks / _TICKS_PER_S, 2),
                )
            )
    try:
        open_fds = len(os.listdir(_PROC / "fd"))
    except OSError:
        open_fds = None
    if open_fds is not None:
        families.append(
            one("process_open_fds", "gauge", "Number of open file descriptors.", open_fds)
        )
    soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft_limit != resource.RLIM_INFINITY:
        families.append(
            one("process_max_fds", "gauge", "Maximum number of open file descriptors.", soft_limit)
        )
    return families


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
