"""A few Prometheus metrics, kept by hand so the hot path pays for no library.

Counters are plain ints (the server runs on one event loop thread); the
latency histogram finds its bucket with ``bisect``. ``render()`` writes the
text exposition format Prometheus scrapes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable

__all__ = ["LATENCY_BUCKETS_S", "Metrics"]

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
    """Request counts and latencies by route; gauges read from the generators on scrape."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.latency: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.ids_served = 0
        self.gauges: list[Callable[[], Iterable[str]]] = []

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests[route, status] += 1
        self.latency[route].observe(seconds)

    def render(self) -> str:
        lines = [
            "# HELP idmint_ids_served_total IDs returned to clients.",
            "# TYPE idmint_ids_served_total counter",
            f"idmint_ids_served_total {self.ids_served}",
            "# HELP idmint_http_requests_total HTTP requests by route and status.",
            "# TYPE idmint_http_requests_total counter",
        ]
        for (route, status), count in sorted(self.requests.items()):
            lines.append(f'idmint_http_requests_total{{route="{route}",status="{status}"}} {count}')
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
        for gauge in self.gauges:
            lines.extend(gauge())
        return "\n".join(lines) + "\n"
