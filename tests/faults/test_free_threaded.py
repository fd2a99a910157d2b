"""Threads on one generator without the GIL: every ID through the lock.

The lock-free hot path relies on ``next()`` on a shared range iterator being
atomic, which the GIL makes it and free-threaded CPython does not. There (or
with ``IDMINT_LOCKED_PATH=1``) every generator class issues through the lock.
Both paths are run here by many threads on one generator of every scheme; the
locked one also in a child process where the switch itself is made.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import pytest

from idmint import (
    Elastic64Generator,
    MuidGenerator,
    Short60Generator,
    Uid64Generator,
    Uid64V1Generator,
)
from idmint.generate.core import LOCKED_PATH, TickGenerator

THREADS = 16
PER_THREAD = 5_000

MAKERS: dict[str, Callable[[], TickGenerator[Any]]] = {
    "uid64": lambda: Uid64Generator(21),
    "uid64-v1": lambda: Uid64V1Generator(21),
    "elastic64": lambda: Elastic64Generator(21, 8),
    "muid": MuidGenerator,
    "short60": lambda: Short60Generator(21),
    "short60-random": lambda: Short60Generator(random=True),
}


def mint_in_threads(issue: Callable[[], Any]) -> list[int]:
    start = threading.Barrier(THREADS)
    minted: list[list[int]] = []

    def work() -> None:
        start.wait()
        minted.append([int(issue()) for _ in range(PER_THREAD)])

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [value for values in minted for value in values]


@pytest.mark.parametrize("path", ["lock-free", "locked"])
@pytest.mark.parametrize("scheme", list(MAKERS))
def test_many_threads_on_one_generator_never_share_an_id(scheme: str, path: str) -> None:
    generator = MAKERS[scheme]()
    issue = generator.generate if path == "lock-free" else generator.generate_locked
    values = mint_in_threads(issue)
    assert len(values) == THREADS * PER_THREAD
    if scheme == "short60-random":
        # Random bits: the (ms, sequence) pairs are what the generator keeps unique.
        values = [value >> 9 for value in values]
    assert len(set(values)) == len(values)


def test_this_interpreter_has_the_gil_and_takes_the_lock_free_path() -> None:
    """Where the GIL is on (every CPython the suite runs on today) the hot path is lock-free."""
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    assert LOCKED_PATH is (not gil or os.environ.get("IDMINT_LOCKED_PATH", "") not in ("", "0"))


CHILD = """
    import json, threading
    from idmint import Elastic64Generator, MuidGenerator, Short60Generator, Uid64Generator
    from idmint.generate.core import LOCKED_PATH, TickGenerator

    report = {"locked": LOCKED_PATH, "schemes": {}}
    for name, generator in {
        "uid64": Uid64Generator(5), "elastic64": Elastic64Generator(5, 8),
        "muid": MuidGenerator(), "short60": Short60Generator(5),
    }.items():
        minted = []
        def work():
            minted.append([int(generator.generate()) for _ in range(3000)])
        threads = [threading.Thread(target=work) for _ in range(16)]
        for thread in threads: thread.start()
        for thread in threads: thread.join()
        values = [v for vs in minted for v in vs]
        report["schemes"][name] = {
            "locked": type(generator).generate is TickGenerator.generate_locked,
            "unique": len(set(values)) == len(values) == 48000,
        }
    print(json.dumps(report))
"""


def test_idmint_locked_path_switches_every_generator_to_the_lock() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "IDMINT_LOCKED_PATH": "1"},
    )
    report = json.loads(done.stdout)
    assert report["locked"] is True
    for name, outcome in report["schemes"].items():
        assert outcome == {"locked": True, "unique": True}, name
