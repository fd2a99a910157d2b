"""Generators: the clock, the shared core and one generator per scheme."""

from __future__ import annotations

from idmint.clock import SYSTEM_CLOCK, Clock, ManualClock, OffsetClock, SystemClock
from idmint.generate.core import CORE, DEFAULT_MAX_CLOCK_WAIT_MS, TickGenerator
from idmint.generate.generators import (
    DEFAULT_ELASTIC64_MAX_AHEAD_MS,
    GENERATORS,
    Elastic64Generator,
    MuidGenerator,
    MuidTransaction,
    Short60Generator,
    SnowflakeGenerator,
    Uid64Generator,
    Uid64V1Generator,
    Uuid7Generator,
)

__all__ = [
    "CORE",
    "DEFAULT_ELASTIC64_MAX_AHEAD_MS",
    "DEFAULT_MAX_CLOCK_WAIT_MS",
    "GENERATORS",
    "SYSTEM_CLOCK",
    "Clock",
    "Elastic64Generator",
    "ManualClock",
    "MuidGenerator",
    "MuidTransaction",
    "OffsetClock",
    "Short60Generator",
    "SnowflakeGenerator",
    "SystemClock",
    "TickGenerator",
    "Uid64Generator",
    "Uid64V1Generator",
    "Uuid7Generator",
]
