"""idmint: compact, decodable IDs minted across a fleet of processes, never issued twice.

The names most programs need are here; the subpackages hold the rest:
:mod:`idmint.schemes` (value types and codecs, pure), :mod:`idmint.generate`
(clocks and generators) and :mod:`idmint.errors`.
"""

from __future__ import annotations

from idmint.errors import (
    ClaimLost,
    ClockMovedBackwards,
    ConfigurationError,
    CoordinationError,
    CoordinatorRefused,
    CoordinatorUnavailable,
    GeneratorError,
    GeneratorForked,
    IdentityInUse,
    IdmintError,
    InvalidId,
    MissingExtra,
    PoolExhausted,
    TransactionFull,
)
from idmint.factory import new_generator
from idmint.generate import (
    Elastic64Generator,
    ManualClock,
    MuidGenerator,
    MuidTransaction,
    Short60Generator,
    Uid64Generator,
    Uid64V1Generator,
)
from idmint.generate.core import IdBatch
from idmint.schemes import (
    SCHEMES,
    Elastic64,
    IdValue,
    Mode,
    Muid,
    Short60,
    Uid64,
    Uid64V1,
    guess_scheme,
    parse_id,
)

__all__ = [
    "SCHEMES",
    "ClaimLost",
    "ClockMovedBackwards",
    "ConfigurationError",
    "CoordinationError",
    "CoordinatorRefused",
    "CoordinatorUnavailable",
    "Elastic64",
    "Elastic64Generator",
    "GeneratorError",
    "GeneratorForked",
    "IdBatch",
    "IdValue",
    "IdentityInUse",
    "IdmintError",
    "InvalidId",
    "ManualClock",
    "MissingExtra",
    "Mode",
    "Muid",
    "MuidGenerator",
    "MuidTransaction",
    "PoolExhausted",
    "Short60",
    "Short60Generator",
    "TransactionFull",
    "Uid64",
    "Uid64Generator",
    "Uid64V1",
    "Uid64V1Generator",
    "guess_scheme",
    "new_generator",
    "parse_id",
]
