"""The clocks, where generators have always found them (they live in :mod:`idmint.clock`)."""

from __future__ import annotations

from idmint.clock import SYSTEM_CLOCK, Clock, ManualClock, OffsetClock, SystemClock

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "OffsetClock", "SystemClock"]
