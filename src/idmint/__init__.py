"""idmint: compact, decodable IDs minted across a fleet of processes, never issued twice.

The names most programs need are here; the subpackages hold the rest:
:mod:`idmint.schemes` (value types and codecs, pure), :mod:`idmint.generate`
(clocks and generators) and :mod:`idmint.errors`.

The generators and the factory are imported when first named: a program that
only reads IDs (or ``idmint decode``) never loads the coordination machinery.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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
from idmint.schemes import (
    SCHEMES,
    Elastic64,
    IdValue,
    Mode,
    Muid,
    Short60,
    Snowflake,
    Uid64,
    Uid64V1,
    Uuid7,
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
    "Snowflake",
    "SnowflakeGenerator",
    "TransactionFull",
    "Uid64",
    "Uid64Generator",
    "Uid64V1",
    "Uid64V1Generator",
    "Uuid7",
    "Uuid7Generator",
    "guess_scheme",
    "new_generator",
    "parse_id",
]

# Imported when first asked for (PEP 562): name -> the module that defines it.
_LATER = {
    "new_generator": "idmint.factory",
    "Elastic64Generator": "idmint.generate",
    "ManualClock": "idmint.generate",
    "MuidGenerator": "idmint.generate",
    "MuidTransaction": "idmint.generate",
    "Short60Generator": "idmint.generate",
    "SnowflakeGenerator": "idmint.generate",
    "Uid64Generator": "idmint.generate",
    "Uid64V1Generator": "idmint.generate",
    "Uuid7Generator": "idmint.generate",
    "IdBatch": "idmint.generate.core",
}

if TYPE_CHECKING:
    from idmint.factory import new_generator
    from idmint.generate import (
        Elastic64Generator,
        ManualClock,
        MuidGenerator,
        MuidTransaction,
        Short60Generator,
        SnowflakeGenerator,
        Uid64Generator,
        Uid64V1Generator,
        Uuid7Generator,
    )
    from idmint.generate.core import IdBatch


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module 'idmint' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
