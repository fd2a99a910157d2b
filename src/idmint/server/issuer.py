"""The server's generators: made (or claimed) when it starts, asked in turn, closed when it stops.

:class:`Issuer` is all the server knows of generators: whether an ID can be
issued now and why not, the ``/v1/claims`` rows, and the generators' and
claims' metric families. What cannot issue is a :class:`~idmint.server.routes.HttpError`
503, with the reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from itertools import cycle
from typing import Any

from idmint.coordinate.base import Claim, ClaimState, PoolView
from idmint.errors import ClockMovedBackwards, GeneratorError
from idmint.factory import coordinator_for, new_generators
from idmint.generate.core import TickGenerator
from idmint.schemes import SCHEMES
from idmint.server.config import ServerConfig
from idmint.server.metrics import Family, Samples
from idmint.server.routes import HttpError

__all__ = ["Issuer", "unavailable"]

Generator = TickGenerator[Any]

_IDENTITY_FIELDS = ("generator", "cluster", "node", "worker", "medallion")
"""The generators' identity, as /v1/claims and the metric labels show it."""


class Issuer:
    """The generators of one server process (``config.generators`` of them).

    ``offset``: the configured identities to skip, so that the workers of one
    server take distinct blocks (see :func:`idmint.factory.new_generators`).
    """

    def __init__(self, config: ServerConfig, *, offset: int = 0) -> None:
        self.config = config
        self.offset = offset
        self.generators: list[Generator] = []
        self._turns: Any = None

    def start(self) -> None:
        """Make (or claim) the generators."""
        config = self.config
        self.generators = new_generators(
            config.scheme,
            config.generators,
            coordinator=config.coordinator,
            offset=self.offset,
            **config.options,
        )
        self._turns = cycle(self.generators)

    def close(self) -> list[str]:
        """Close every generator (releasing its claim); what each held, for people."""
        generators, self.generators = self.generators, []
        held = [_held(generator) for generator in generators]
        for generator in generators:
            generator.close()
        return held

    @property
    def coordinator(self) -> str | None:
        """Where the claims come from, named even when it is the default, without a password."""
        config = self.config
        return coordinator_for(config.scheme, config.coordinator, **config.options)

    # -- issuing -----------------------------------------------------------------------------
    def next_ready(self) -> str | None:
        """An ID from the next generator in turn if it has one at hand, without waiting."""
        value = next(self._turns).generate_nowait()
        return None if value is None else str(value)

    async def one(self) -> str:
        """An ID from the next generator in turn, or the first after it that can issue:
        a generator whose claim is in doubt is passed over, not waited for."""
        try:
            for _ in range(len(self.generators)):
                generator = next(self._turns)
                value = generator.generate_nowait()
                if value is not None:
                    return str(value)
                if _usable(generator):
                    return str(await generator.agenerate())
        except GeneratorError as error:
            raise unavailable(error) from error
        raise HttpError(503, "unavailable", self.why_unavailable())

    async def many(self, count: int) -> list[str]:
        """``count`` IDs, shared out among the generators that can issue."""
        usable = [g for g in self.generators if _usable(g)]
        if not usable:
            raise HttpError(503, "unavailable", self.why_unavailable())
        share, extra = divmod(count, len(usable))
        counts = [share + (1 if index < extra else 0) for index in range(len(usable))]
        try:
            batches = await asyncio.gather(
                *(g.abatch(n) for g, n in zip(usable, counts, strict=True) if n)
            )
        except GeneratorError as error:
            raise unavailable(error) from error
        return [text for batch in batches for text in batch.texts()]

    def check(self) -> None:
        """An ``HttpError`` 503 unless an ID could be issued now (HEAD issues none)."""
        if not self.can_issue():
            raise HttpError(503, "unavailable", self.why_unavailable())

    def can_issue(self) -> bool:
        """Whether an ID could be issued now (some generator's claim lets it)."""
        return any(_usable(g) for g in self.generators)

    def why_unavailable(self) -> str:
        """Why no ID can be issued: each reason once, with the identities it stops."""
        if not self.generators:
            return "the server holds no generator (it is starting or stopping)"
        stopped: dict[tuple[str, str, str], list[str]] = {}
        for generator in self.generators:
            claim = _claim_of(generator)
            if claim is not None and claim.grant() is None:
                state, problem = _claim_state(claim)
                stopped.setdefault((claim.description, state, problem), []).append(
                    _identity(generator)
                )
        if not stopped:
            return "no generator can issue"
        return "no usable claim: " + "; ".join(
            f"{where} ({', '.join(identities)}) {state}: {problem}"
            for (where, state, problem), identities in stopped.items()
        )

    # -- what it holds, for /v1/claims and /metrics ------------------------------------------------
    def claim_rows(self) -> list[dict[str, Any]]:
        """``/v1/claims`` rows of this process's generators."""
        rows = []
        for generator in self.generators:
            claim = _claim_of(generator)
            row: dict[str, Any] = {"identity": _identity(generator)}
            node_bits = getattr(generator, "node_bits", None)
            if node_bits is not None:
                row["node_bits"] = node_bits  # needed to decode elastic64 IDs
            if claim is None:
                row.update(state="static", usable=True)
            else:
                grant = claim.last_grant
                usable = claim.grant() is not None
                state, problem = _claim_state(claim)
                row.update(
                    state=state,
                    usable=usable,
                    high_water_mark_ms=grant.ceiling_ms if grant else None,
                    coordinator=claim.description,
                    problem=None if usable else problem,
                )
                if claim.pool_seen is not None:
                    row["pool"] = claim.pool_seen.to_json()
            rows.append(row)
        return rows

    def families(self) -> list[Family]:
        """The generators' and claims' counts, read from them on each scrape."""

        def per_generator(read: Callable[[Generator], float]) -> Callable[[], Samples]:
            return lambda: [
                ({"slot": str(slot), **_identity_fields(g)}, read(g))
                for slot, g in enumerate(self.generators)
            ]

        def per_claim(read: Callable[[Claim], float]) -> Callable[[], Samples]:
            # Only the slot: a re-claim may change the identity, and a loss counted
            # under the old identity's series would vanish with it.
            return lambda: [
                ({"slot": str(slot)}, read(claim))
                for slot, g in enumerate(self.generators)
                if (claim := _claim_of(g)) is not None
            ]

        generators: list[tuple[str, str, str, Callable[[Generator], float]]] = [
            (
                "idmint_ids_issued_total",
                "counter",
                "IDs issued by the server's generators.",
                lambda g: g.issued,
            ),
            (
                "idmint_clock_waits_total",
                "counter",
                "Waits for the clock (tick used up or clock behind).",
                lambda g: g.clock_waits,
            ),
            (
                "idmint_clock_steps_back_total",
                "counter",
                "Times the clock was seen behind the newest tick.",
                lambda g: g.clock_steps_back,
            ),
            (
                "idmint_exhausted_ticks_total",
                "counter",
                "Ticks whose sequence numbers ran out, so callers waited at the scheme's cap.",
                lambda g: g.exhausted_ticks,
            ),
            (
                "idmint_claim_usable",
                "gauge",
                "1 while the generator's claim lets it issue IDs.",
                lambda g: int(_usable(g)),
            ),
        ]
        claims: list[tuple[str, str, Callable[[Claim], float]]] = [
            (
                "idmint_claim_renewals_total",
                "Successful claim renewals (each records a new high-water mark).",
                lambda claim: claim.renewals,
            ),
            (
                "idmint_claim_renewal_failures_total",
                "Claim renewals that failed (coordinator unreachable or slow).",
                lambda claim: claim.renewal_failures,
            ),
            (
                "idmint_claim_losses_total",
                "Claims found gone while held (session expired, lease revoked).",
                lambda claim: claim.losses,
            ),
        ]

        def per_pool(read: Callable[[PoolView], float]) -> Callable[[], Samples]:
            return lambda: [
                ({"slot": str(slot), "space": seen.space, "cluster": str(seen.cluster)}, read(seen))
                for slot, g in enumerate(self.generators)
                if (claim := _claim_of(g)) is not None and (seen := claim.pool_seen) is not None
            ]

        return [
            *(
                Family(name, kind, text, per_generator(read))
                for name, kind, text, read in generators
            ),
            *(Family(name, "counter", text, per_claim(read)) for name, text, read in claims),
            Family(
                "idmint_pool_size",
                "gauge",
                "Identities in the pool the generator's claim is in, at its last look.",
                per_pool(lambda seen: seen.size),
            ),
            Family(
                "idmint_pool_free_identities",
                "gauge",
                "Identities of that pool no claim held, at its last look.",
                per_pool(lambda seen: seen.free),
            ),
            Family(
                "idmint_time_bits_remaining_seconds",
                "gauge",
                "Seconds until the scheme's time field runs out (its IDs can hold no later time).",
                time_bits_remaining,
            ),
        ]


def time_bits_remaining() -> Samples:
    """``idmint_time_bits_remaining_seconds`` of every scheme, read from its layout."""
    now_s = time.time()
    return [
        ({"scheme": name}, round(id_type.time_left_s(now_s))) for name, id_type in SCHEMES.items()
    ]


def unavailable(error: GeneratorError) -> HttpError:
    """The 503 for a generator that cannot issue now."""
    if isinstance(error, ClockMovedBackwards):
        return HttpError(503, "clock moved backwards", str(error))
    return HttpError(503, "unavailable", str(error))


def _usable(generator: Generator) -> bool:
    claim = generator.claim
    return claim is None or claim.grant() is not None


def _claim_of(generator: Generator) -> Claim | None:
    claim = generator.claim
    return claim if isinstance(claim, Claim) else None


def _held(generator: Generator) -> str:
    """``generator 3 cluster 0 (generator ID claim at local://...)``: what a generator holds."""
    claim = _claim_of(generator)
    identity = _identity(generator)
    return identity if claim is None else f"{identity} ({claim.description})"


def _identity(generator: Generator) -> str:
    """``generator 0 cluster 0``, ``node 9``, ``medallion 123``: for people (claims JSON)."""
    fields = _identity_fields(generator)
    if not fields:
        return type(generator).__name__
    return " ".join(f"{name} {value}" for name, value in fields.items())


def _identity_fields(generator: Generator) -> dict[str, str]:
    fields = {}
    for name in _IDENTITY_FIELDS:
        value = getattr(generator, name, None)
        if value is not None:
            fields[name] = str(value)
    return fields


def _claim_state(claim: Claim) -> tuple[str, str]:
    """The state to show and why IDs cannot be issued, agreeing with ``claim.grant()``.

    A claim whose deadline passed with no renewal is still ``active`` in the
    library: nothing has told it otherwise yet. It may still be ours (the
    coordinator may only be slow), and nothing is issued until a round trip
    says so, which is what ``suspended`` means: so it is shown as suspended.
    """
    state = claim.state
    if state is ClaimState.ACTIVE and claim.grant() is None:
        last = claim.problem or "the coordinator has not answered"
        return "suspended", f"no renewal before the claim's deadline; last try: {last}"
    return state.value, claim.problem
