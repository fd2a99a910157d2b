"""Saying, once, what a slow wait for a coordinator is waiting for.

Reaching a coordinator that is down takes the whole ``connect_timeout``
(10 s by default) before the error says why; a claim may wait for a free
ID, for a hold-off to end, or for a store that forgot to settle. A person at
a terminal deserves to know sooner: a wait still under way after
:data:`NOTICE_AFTER_S` logs one WARNING on :data:`waiting_log`, naming what it
waits for and for how long at most. The library installs no handler; the CLI
shows these lines on stderr (``idmint: waiting ...``) and the server logs them
with its other lines.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["NOTICE_AFTER_S", "Waited", "noticed_if_slow", "waiting_log"]

NOTICE_AFTER_S = 1.0
"""A wait longer than this is worth a line; shorter ones are ordinary round trips."""

# Named for what it speaks of, the coordinators, where it has always been
# (log configurations filter on it); the module is at the bottom of the
# package so the CLI can show these lines without importing any coordinator.
waiting_log = logging.getLogger("idmint.coordinate.waiting")

Reason = Callable[[], "tuple[str, float] | None"]
"""What a wait is for and its longest length in s, asked when the notice is due
(None: nothing worth saying any more)."""


class Waited:
    """How long the wait has lasted so far (for the error that ends it)."""

    def __init__(self) -> None:
        self._started = time.monotonic()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self._started


@contextlib.contextmanager
def noticed_if_slow(what: str | Reason, timeout_s: float | None = None) -> Iterator[Waited]:
    """Log ``waiting up to {timeout_s} s for {what}`` once if the block lasts a while.

    ``what`` may be a function giving both, asked only when the notice is due:
    a wait whose cause changes as it goes (a pool that stops answering) says
    what it waits for by then (``timeout_s`` is then the longest the whole
    wait may last, if known). The line comes from a timer thread, so a wait
    that blocks inside a client library (kazoo's ``start``) is noticed too. A
    wait that cannot last twice the notice's delay ends about when its notice
    would be read: it gets none.
    """
    if isinstance(what, str):
        assert timeout_s is not None
        fixed = (what, timeout_s)
        reason: Reason = lambda: fixed  # noqa: E731
    else:
        reason = what
    waited = Waited()
    if timeout_s is not None and timeout_s <= 2 * NOTICE_AFTER_S:
        yield waited
        return
    timer = threading.Timer(NOTICE_AFTER_S, _notice, args=(reason,))
    timer.daemon = True
    timer.name = "idmint-waiting-notice"
    timer.start()
    try:
        yield waited
    finally:
        timer.cancel()


def _notice(reason: Reason) -> None:
    said = reason()
    if said is None:
        return
    what, timeout_s = said
    if timeout_s <= NOTICE_AFTER_S:
        return  # about to end
    waiting_log.warning("waiting up to %g s for %s", timeout_s, what)
