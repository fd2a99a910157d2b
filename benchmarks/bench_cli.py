"""``idmint generate`` at full speed: does the CLI keep up with each scheme's cap?

    .venv/bin/python benchmarks/bench_cli.py            # text and JSON, every scheme
    .venv/bin/python benchmarks/bench_cli.py --seconds 1

Each row runs ``idmint generate --scheme S --count N`` (N = the scheme's cap for
``--seconds``) in a child process writing to a pipe this process drains, then
reads the rate off the IDs themselves: N over the milliseconds from the first
ID's timestamp to the last one's. Interpreter start and the first claim are
outside that span, so the figure is the sustained rate, which the format caps
(IDs per ms per generator ID): uid64 64, elastic64 at 8 bits 256, short60 512.
Peers are the format's own cap, so the ratio is the CLI's share of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each run at cap")
    args = parser.parse_args(argv)
    # A lock directory of its own, made well before the runs: a young one
    # would hold the first claim back for a TTL (docs/coordination.md).
    os.environ["IDMINT_LOCAL_DIR"] = tempfile.mkdtemp(prefix="idmint-bench-cli-")
    subprocess.run([sys.executable, "-m", "idmint", "generate"], capture_output=True, check=True)
    time.sleep(1.1)  # a benchmark's setup, not synchronisation: let the directory age
    load = os.getloadavg()
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load[0]:.2f}\n")
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
