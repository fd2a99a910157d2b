"""Several generators of one scheme minting as one: K times the rate of one.

A generator's rate is capped by its tick (64 uid64 IDs a millisecond); K
generators, each with an identity of its own, mint K times as many. A
:class:`GeneratorGroup` asks them in turn, in one thread: ``batch(n)`` takes a
tick's worth (``ids_per_tick`` of one generator) from each in turn, round after
round, so the one wait a round costs (for the first generator's next tick) is
shared by all of them. ``new_generator(scheme, generators=K)`` makes one.

The IDs are unique (each generator's identity keeps its own apart) but not in
order across generators: a batch is the first generator's share of a round,
then the second's, and so on; each generator's IDs keep their order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic

from idmint.errors import ConfigurationError
from idmint.generate.core import IdBatch, IdT, TickGenerator

__all__ = ["GeneratorGroup"]


class GeneratorGroup(Generic[IdT]):
    """Generators of one scheme asked in turn. Thread-safe as each of them is."""

    def __init__(self, generators: Sequence[TickGenerator[IdT]]) -> None:
        if not generators:
            raise ConfigurationError("a generator group needs at least one generator")
        if len({type(generator) for generator in generators}) != 1:
            raise ConfigurationError("a generator group's generators are of one scheme")
        self.generators = tuple(generators)
        self._next = 0

    def _turns(self) -> list[TickGenerator[IdT]]:
        """Every generator, starting with the one whose turn it is."""
        start, count = self._next, len(self.generators)
        self._next = (start + 1) % count
        return [self.generators[(start + step) % count] for step in range(count)]

    def generate(self) -> IdT:
        """One ID: from the first generator, in turn, that has one without waiting,
        else from the one whose turn it was, once it has."""
        turns = self._turns()
        for generator in turns:
            value = generator.generate_nowait()
            if value is not None:
                return value
        return turns[0].generate()

    def batch(self, count: int) -> IdBatch[IdT]:
        """``count`` IDs, in rounds: a tick's worth from each generator in turn."""
        shares = self._shares(count) or [(self.generators[0], 0)]
        return _joined([generator.batch(share) for generator, share in shares])

    async def agenerate(self) -> IdT:
        """One ID without blocking the event loop."""
        return (await self.abatch(1))[0]

    async def abatch(self, count: int) -> IdBatch[IdT]:
        """``count`` IDs as :meth:`batch` takes them; waits on the event loop."""
        shares = self._shares(count) or [(self.generators[0], 0)]
        return _joined([await generator.abatch(share) for generator, share in shares])

    def _shares(self, count: int) -> list[tuple[TickGenerator[IdT], int]]:
        """Who gives how many, in order: rounds of a tick's worth each."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"count must be a non-negative integer, got {count!r}")
        tick = self.generators[0].ids_per_tick
        shares = []
        turn = self._next
        while count > 0:
            share = min(tick, count)
            shares.append((self.generators[turn], share))
            count -= share
            turn = (turn + 1) % len(self.generators)
        self._next = turn  # the next batch goes on where this one stopped
        return shares

    def __iter__(self) -> Iterator[IdT]:
        while True:
            yield self.generate()

    @property
    def ids_per_tick(self) -> int:
        """How many IDs one tick of every generator holds together."""
        return sum(generator.ids_per_tick for generator in self.generators)

    @property
    def issued(self) -> int:
        """How many IDs the generators have issued."""
        return sum(generator.issued for generator in self.generators)

    def close(self) -> None:
        """Close every generator (each releases what it holds), the others too if one fails."""
        errors = []
        for generator in self.generators:
            try:
                generator.close()
            except Exception as error:
                errors.append(error)
        if errors:
            raise errors[0]

    def __enter__(self) -> GeneratorGroup[IdT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GeneratorGroup({list(self.generators)!r})"


def _joined(parts: Sequence[IdBatch[Any]]) -> IdBatch[Any]:
    """One batch of the parts' IDs, in order (a scheme's generators read ints alike)."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    ints = [value for part in parts for value in part._ints]
    return IdBatch(ints, first._make, first._mask, first._texts)
