"""One instance of each of idmint's error classes, made from its constructor's signature.

Shared by tests/server/test_worker_errors.py and the workers it starts (through the
``sitecustomize`` that test writes), so both sides make the same error. A class added
to :mod:`idmint.errors` gets a sample without anyone listing it here.
"""

from __future__ import annotations

import inspect
import typing

from idmint import errors

__all__ = ["error_classes", "sample"]


def error_classes() -> list[type[errors.IdmintError]]:
    """Every exception class of :mod:`idmint.errors`, found by walking the hierarchy."""
    found: list[type[errors.IdmintError]] = []
    pending: list[type[errors.IdmintError]] = [errors.IdmintError]
    while pending:
        kind = pending.pop()
        if kind.__module__ == errors.__name__ and kind not in found:
            found.append(kind)
        pending += kind.__subclasses__()
    return sorted(found, key=lambda kind: kind.__name__)


def sample(kind: type[errors.IdmintError]) -> errors.IdmintError:
    """``kind`` made through its own constructor: numbers for numeric arguments, text else."""
    init = kind.__init__
    if not inspect.isfunction(init):  # the built-in exceptions': a message
        return kind(f"a sample {kind.__name__}")
    hints = typing.get_type_hints(init)
    arguments: list[object] = []
    keywords: dict[str, object] = {}
    for parameter in list(inspect.signature(init).parameters.values())[1:]:
        if parameter.default is not parameter.empty:
            continue
        numeric = hints.get(parameter.name) in (float, int)
        value = 12.5 if numeric else f"sample {parameter.name}"
        if parameter.kind is parameter.POSITIONAL_OR_KEYWORD:
            arguments.append(value)
        elif parameter.kind is parameter.KEYWORD_ONLY:
            keywords[parameter.name] = value
    return kind(*arguments, **keywords)
