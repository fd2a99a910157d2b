"""Both generator cores, for the tests that must hold on each.

``core`` is a fixture over the compiled core (``"c"``) and the pure-Python one
(``"python"``): the generators a test makes while it runs are on that core,
whatever their clock. The compiled core takes a test's own clock (ManualClock,
OffsetClock) through the clock's methods, so the tests that drive time by hand
reach its tick handling too; outside tests it takes only the system clock.
``core_env`` gives a child process the core: the pure one through
``IDMINT_PURE=1``, the compiled one by default. ``MS`` is the millisecond of their
clocks.

A test run where the compiled core is not in use (``IDMINT_PURE`` set, or no
compiler when idmint was installed) skips the ``c`` half, and
tests/generate/test_cores.py fails it where the core should have been built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from idmint.generate import core as generator_core

CORES = ["c", "python"]

MS = 1_000_000
"""Nanoseconds in a millisecond: the tests drive their clocks in nanoseconds."""


def core_env(core: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment), for a child on ``core``."""
    chosen = {k: v for k, v in (os.environ if env is None else env).items() if k != "IDMINT_PURE"}
    if core == "python":
        chosen["IDMINT_PURE"] = "1"
    return chosen


def require_compiled_core() -> None:
    if generator_core.CORE != "c":
        pytest.skip(
            "the compiled core is not in use in this run (IDMINT_PURE, or not built): "
            "tests/generate/test_cores.py says whether it should be"
        )


@pytest.fixture(params=CORES)
def core(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The core the test's generators run on."""
    name: str = request.param
    if name == "c":
        require_compiled_core()
        monkeypatch.setattr(generator_core, "_compiled_clocks", "any")
    else:
        monkeypatch.setattr(generator_core, "_compiled_clocks", "none")
    return name
