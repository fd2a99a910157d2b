"""What the claimant processes of bench_claims.py load before they are forked.

Importing the drivers is not enough for a process to be ready to claim: the first
``connect()`` also finds them, reading every installed package's metadata
(``importlib.metadata``, 10 to 14 ms of CPU on the 2-core machine of
docs/benchmarks.md). A service pays that once, when it starts, as it pays its
imports; so the claimants do it here, with their imports.
"""

from __future__ import annotations

from idmint.coordinate import DRIVERS

DRIVERS.schemes()
