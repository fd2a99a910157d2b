"""Running the contract's checks against a coordinator URL: trials, outcomes, a report.

Each check runs in a :class:`Trial`: a pool of its own under the URL (the
driver's :meth:`~idmint.coordinate.Coordinator.pool_within`), the driver's test
adapter (:mod:`idmint.testing.hooks`), and everything the check opens, closed
when it ends, pass or fail: generators (their claims released), coordinators,
and then the pools themselves where the adapter can remove them.
"""

from __future__ import annotations

import contextlib
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from idmint.coordinate import Coordinator, CoordinatorUrl, connect, driver
from idmint.coordinate.base import ClaimInfo
from idmint.factory import new_generator
from idmint.generate.core import TickGenerator
from idmint.testing.hooks import Hooks, hooks_for

__all__ = [
    "Check",
    "Outcome",
    "Report",
    "Skipped",
    "Trial",
    "check",
    "run_check",
    "run_checks",
    "why_not",
]

Kind = Literal["claimed", "configured", "any"]


class Skipped(Exception):
    """A check that cannot run here; its message says why."""


@dataclass(frozen=True)
class Check:
    """One rule of the contract, checked by ``function`` in a :class:`Trial`."""

    name: str
    function: Callable[[Trial], None]
    kind: Kind = "claimed"
    """Which coordinators it applies to: those that claim free identities, those
    whose URL configures one (``static://``), or both."""
    needs: tuple[str, ...] = ()
    """The adapter hooks it needs (:data:`idmint.testing.hooks.HOOK_NAMES`)."""
    needs_servers: bool = False
    """Whether it needs a URL that names servers (one to be unreachable)."""

    @property
    def doc(self) -> str:
        """What it checks, in one line."""
        return (self.function.__doc__ or self.name).strip().splitlines()[0]

    def __str__(self) -> str:
        return self.name


def check(
    kind: Kind = "claimed", *, needs: Sequence[str] = (), needs_servers: bool = False
) -> Callable[[Callable[[Trial], None]], Check]:
    """Make a function of a :class:`Trial` a :class:`Check` named after it."""

    def make(function: Callable[[Trial], None]) -> Check:
        return Check(function.__name__, function, kind, tuple(needs), needs_servers)

    return make


class Trial:
    """What a check works with: pools of its own, the adapter, and a stack that
    closes everything the check opened."""

    def __init__(
        self, url: CoordinatorUrl, hooks: Hooks, configured: bool, *, first_id: int = 0
    ) -> None:
        self.base = url
        self.hooks = hooks
        self.configured = configured
        """Whether the URL configures its identity (``static://``) rather than claiming."""
        self.isolated = driver(url.scheme).pool_within(url, "kit") is not None
        """Whether the trial's pools are its own (else they are the URL's, shared)."""
        self._next_id = first_id
        self.stack = contextlib.ExitStack()
        self.pools: list[CoordinatorUrl] = []
        """The pools of its own the trial made (the adapter removes them at the end)."""
        self.left: list[str] = []
        """Why pools were left behind, for the report."""

    # -- pools and what runs on them ----------------------------------------------------
    def pool(self, **options: object) -> CoordinatorUrl:
        """A new pool of its own within the URL's, with ``options`` added to its query.

        A driver whose URL names one pool only (``local://``, ``static://``) gives
        the URL's own, which the checks then assume nobody else claims from.
        """
        name = f"kit_{uuid.uuid4().hex[:12]}"
        within = driver(self.base.scheme).pool_within(self.base, name)
        url = within if within is not None else self.base
        url = url.replace(options={**url.options, **{k: str(v) for k, v in options.items()}})
        if within is not None and within not in self.pools:
            self.pools.append(within)
            self.hooks.settle(url)
        return url

    def ids(self, count: int, *, first: int = 0) -> range:
        """``count`` consecutive generator IDs for a check to narrow its pool to.

        In a pool of its own, from ``first``; in the URL's own pool, IDs no
        earlier check of the run used, so that none is held off by another's
        release.
        """
        if self.isolated:
            return range(first, first + count)
        start, self._next_id = self._next_id, self._next_id + count
        return range(start, start + count)

    def generator(self, url: CoordinatorUrl, scheme: str = "uid64", **options: Any) -> Any:
        """A generator on ``url``, closed when the trial ends."""
        made: TickGenerator[Any] = new_generator(scheme, coordinator=url, **options)
        return self.stack.enter_context(made)

    def coordinator(self, url: CoordinatorUrl) -> Coordinator:
        """A coordinator for ``url``, closed when the trial ends."""
        return self.stack.enter_context(connect(url))

    def claims(self, url: CoordinatorUrl) -> dict[int, ClaimInfo]:
        """``claims list`` of ``url``'s pool as a dict: generator ID -> its row."""
        with connect(url) as coordinator:
            return {row.generator: row for row in coordinator.list_claims()}

    def needs(self, hook: str) -> None:
        """Skip unless the adapter can do ``hook``."""
        if not self.hooks.can(hook):
            raise Skipped(f"needs the {hook} hook, which no test adapter of this driver has")

    # -- the end ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close what the check opened, then remove its pools where the adapter can."""
        self.stack.close()
        for url in self.pools:
            if not self.hooks.can("remove_pool"):
                self.left.append(f"{url.redacted()}: no adapter hook removes a pool")
                continue
            try:
                self.hooks.remove_pool(url)
            except Exception as error:
                self.left.append(f"{url.redacted()}: {type(error).__name__}: {error}")


@dataclass(frozen=True)
class Outcome:
    """What came of one check."""

    check: Check
    status: Literal["passed", "failed", "skipped"]
    detail: str = ""
    """Why it failed or was skipped (one line), or what it left behind."""
    seconds: float = 0.0
    trace: str = ""
    """The failure's traceback, for a reader who wants more than the line."""

    def line(self) -> str:
        """The outcome as one line of the report."""
        text = f"{self.status.upper() if self.status == 'failed' else self.status:7} {self.check}"
        if self.status == "passed":
            text += f" ({self.seconds:.1f} s)"
        if self.detail:
            text += f": {self.detail}"
        return text


@dataclass
class Report:
    """The outcomes of a run, in the order the checks ran."""

    url: str
    outcomes: list[Outcome] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(outcome.status == status for outcome in self.outcomes)

    @property
    def ok(self) -> bool:
        """No check failed (skipped ones said why they did not run)."""
        return self.count("failed") == 0

    def summary(self) -> str:
        """The closing line: ``N passed`` and, where any, how many failed or were skipped,
        naming the checks that could not run here."""
        parts = [f"{self.count('passed')} passed"]
        parts += [f"{self.count(s)} {s}" for s in ("failed", "skipped") if self.count(s)]
        text = ", ".join(parts)
        skipped = [outcome.check.name for outcome in self.outcomes if outcome.status == "skipped"]
        return f"{text} (not run here: {', '.join(skipped)})" if skipped else text


def why_not(found: Check, *, configured: bool, hooks: Hooks, url: CoordinatorUrl) -> str | None:
    """Why ``found`` does not apply to ``url``'s coordinator (None: it does).

    ``configured``: whether the URL configures its identity rather than claiming one.
    """
    if found.kind == "claimed" and configured:
        return "the URL configures its identity; this rule is about claimed ones"
    if found.kind == "configured" and not configured:
        return "the coordinator claims free identities; this rule is about configured ones"
    if found.needs_servers and not (url.hosts and hooks.hosts_are_servers):
        return "the URL names no server to make unreachable"
    for hook in found.needs:
        if not hooks.can(hook):
            return f"needs the {hook} hook, which no test adapter of this driver has"
    return None


IDS_PER_CHECK = 16
"""Generator IDs each check of a run may use in a URL's own pool (see :meth:`Trial.ids`)."""


def run_check(
    found: Check, url: str | CoordinatorUrl, hooks: Hooks | None = None, *, first_id: int = 0
) -> Outcome:
    """Run one check against ``url`` and say what came of it (never raises for a failure).

    ``first_id``: where the check's IDs start in a pool it shares with other checks
    (the URL's own, where the driver makes none inside it).
    """
    parsed = CoordinatorUrl.parse(url)
    adapter = hooks if hooks is not None else hooks_for(parsed)
    try:
        with connect(parsed) as probe:
            configured = probe.configured_identity() is not None
    except Exception as error:
        return Outcome(found, "failed", f"could not connect: {type(error).__name__}: {error}")
    reason = why_not(found, configured=configured, hooks=adapter, url=parsed)
    if reason is not None:
        return Outcome(found, "skipped", reason)
    trial = Trial(parsed, adapter, configured, first_id=first_id)
    started = time.monotonic()
    try:
        found.function(trial)
    except Skipped as skipped:
        outcome = Outcome(found, "skipped", str(skipped))
    except Exception as error:
        detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        outcome = Outcome(
            found,
            "failed",
            " ".join(detail.split()),
            time.monotonic() - started,
            traceback.format_exc(),
        )
    else:
        outcome = Outcome(found, "passed", seconds=time.monotonic() - started)
    finally:
        trial.close()
    if trial.left and outcome.status == "passed":
        return Outcome(found, "passed", "left " + "; ".join(trial.left), outcome.seconds)
    return outcome


def run_checks(
    checks: Iterable[Check],
    url: str | CoordinatorUrl,
    hooks: Hooks | None = None,
    *,
    progress: Callable[[Outcome], None] | None = None,
) -> Report:
    """Run ``checks`` against ``url``, one after another (``progress``: told each outcome)."""
    parsed = CoordinatorUrl.parse(url)
    report = Report(parsed.redacted())
    for index, found in enumerate(checks):
        outcome = run_check(found, parsed, hooks, first_id=index * IDS_PER_CHECK)
        report.outcomes.append(outcome)
        if progress is not None:
            progress(outcome)
    return report
