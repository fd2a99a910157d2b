"""The tests here run on both generator cores (see tests/cores.py): each module
but test_cores.py asks for the ``core`` fixture."""

from __future__ import annotations

from tests.cores import core

__all__ = ["core"]
