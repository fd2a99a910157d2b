"""Mint uid64 batches under the wall-clock shim until the generator refuses; report it.

Run by test_clock_step_wait.py, not by pytest::

    python clock_step_child.py sync|async MAX_CLOCK_WAIT_MS

One thread (or the event loop, for ``async``) mints ``batch(64)`` / ``abatch(64)``
with the real system clock, each batch a whole tick, so it waits for the clock
between batches. It prints one JSON object per line on stdout:

* ``{"event": "minting", "core": ...}`` once 20 batches are out: the loop is then in step
  with the clock, each batch starting as a millisecond begins and waiting out
  the rest of it, so a step the test makes next lands in a wait;
* ``{"event": "counted", "steps_back": n, "issued": i}`` whenever the
  generator's ``clock_steps_back`` grows. A watcher thread reports it, so the
  report comes while the minting side is still inside the wait that follows;
* ``{"event": "raised", "error": name, "behind_ms": x, "steps_back": n, "issued": i}``
  when minting raises; then the process exits with status 0.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

from idmint.errors import ClockMovedBackwards, GeneratorError
from idmint.generate import Uid64Generator

_print_lock = threading.Lock()


def report(**fields: Any) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


def watch_steps(generator: Uid64Generator) -> None:
    """Report every growth of ``clock_steps_back`` within about a millisecond."""
    seen = 0
    while True:
        steps = generator.clock_steps_back
        if steps != seen:
            seen = steps
            report(event="counted", steps_back=steps, issued=generator.issued)
        time.sleep(0.001)


WARM_UP_BATCHES = 20


def mint_sync(generator: Uid64Generator) -> None:
    for _ in range(WARM_UP_BATCHES):
        generator.batch(64)
    report(event="minting", core=generator.core)
    while True:
        generator.batch(64)


async def mint_async(generator: Uid64Generator) -> None:
    for _ in range(WARM_UP_BATCHES):
        await generator.abatch(64)
    report(event="minting", core=generator.core)
    while True:
        await generator.abatch(64)


def main() -> int:
    mode, max_clock_wait_ms = sys.argv[1], float(sys.argv[2])
    generator = Uid64Generator(7, mode="time-sequential", max_clock_wait_ms=max_clock_wait_ms)
    threading.Thread(target=watch_steps, args=(generator,), daemon=True).start()
    try:
        if mode == "async":
            asyncio.run(mint_async(generator))
        else:
            mint_sync(generator)
    except GeneratorError as error:
        report(
            event="raised",
            error=type(error).__name__,
            behind_ms=error.behind_ms if isinstance(error, ClockMovedBackwards) else None,
            steps_back=generator.clock_steps_back,
            issued=generator.issued,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
