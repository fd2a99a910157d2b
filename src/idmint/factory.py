"""The composition root: a generator from a scheme name, options and a coordinator URL.

:func:`new_generator`, the CLI and the server build generators here and
nowhere else; this is the one module that knows both the generators
(:mod:`idmint.generate`) and where identities come from
(:mod:`idmint.coordinate`, :mod:`idmint.discovery`).

Where the identity comes from, in order:

1. ``coordinator="zk://..."``, ``"etcd://..."``, ``"local://..."``: claimed, a
   free one from the pool; the generator's ``close()`` gives it back.
2. An identity in the options (``generator=5``) or ``coordinator="static://..."``:
   configured, and held on this host (a second process given the same one
   refuses with :class:`~idmint.errors.IdentityInUse`).
3. Nothing: claimed from this host's pool (``local://``), so any number of
   processes on one host never share an identity.

muid needs none (its medallion is random per generator), nor short60 with
``random=True`` (9 random bits instead of a node ID).

A generator that holds its claim and is dropped without ``close()`` is
released when Python collects it, as an unclosed file is closed: a
``ResourceWarning`` names it, and a thread of this module releases the claim
(see :class:`_Fence`; docs/generators.md says why then rather than at exit).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar, overload

from idmint.coordinate import DEFAULT_COORDINATOR, CoordinatorUrl, connect
from idmint.coordinate.base import Claim, Coordinator, Holder
from idmint.coordinate.spaces import Space
from idmint.errors import ConfigurationError
from idmint.generate.core import COMMON_OPTIONS, TickGenerator
from idmint.generate.generators import GENERATORS
from idmint.generate.group import GeneratorGroup
from idmint.schemes import SCHEMES, IdValue, a_scheme

__all__ = [
    "IDENTITY_OPTIONS",
    "MAX_GENERATORS",
    "SCHEME_OPTIONS",
    "coordinator_for",
    "generator_on",
    "new_generator",
    "new_generators",
    "who_minted",
]

log = logging.getLogger(__name__)

GeneratorClass = type[TickGenerator[Any]]
FactT = TypeVar("FactT")
UrlLike = str | CoordinatorUrl


class _PerScheme(Mapping[str, FactT]):
    """One fact of every scheme's generator class, read from the class when asked."""

    def __init__(self, fact: Callable[[GeneratorClass], FactT]) -> None:
        self._fact = fact

    def __getitem__(self, scheme: str) -> FactT:
        return self._fact(GENERATORS[scheme])

    def __iter__(self) -> Iterator[str]:
        return iter(GENERATORS)

    def __len__(self) -> int:
        return len(GENERATORS)


IDENTITY_OPTIONS: Mapping[str, tuple[str, ...]] = _PerScheme(lambda cls: cls.identity_fields)
"""The options that name a generator's identity, per scheme."""

SCHEME_OPTIONS: Mapping[str, frozenset[str]] = _PerScheme(
    lambda cls: frozenset(cls.scheme_options())
)
"""The options each scheme's generator takes (besides clock options)."""


def _generator_class(scheme: str) -> GeneratorClass:
    if scheme not in SCHEMES:
        raise ConfigurationError(f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    try:
        return GENERATORS[scheme]
    except KeyError:
        raise ConfigurationError(f"no generator mints {scheme} IDs") from None


@overload
def new_generator(
    scheme: str, coordinator: UrlLike | None = None, *, generators: Literal[1] = 1, **options: Any
) -> TickGenerator[Any]: ...


@overload
def new_generator(
    scheme: str, coordinator: UrlLike | None = None, *, generators: int, **options: Any
) -> TickGenerator[Any] | GeneratorGroup[Any]: ...


def new_generator(
    scheme: str, coordinator: UrlLike | None = None, *, generators: int = 1, **options: Any
) -> TickGenerator[Any] | GeneratorGroup[Any]:
    """A generator for ``scheme``; options that are ``None`` are left at their defaults.

    ``coordinator`` is a URL (see :mod:`idmint.coordinate`), as text or parsed;
    with none, an identity given in the options is held on this host, and with
    neither a free identity is claimed on this host (``local://``). Close the
    generator (or use it in a ``with`` block) to give a claimed identity back;
    interpreter exit does it too. Options that do not apply to the scheme raise
    ``ConfigurationError`` rather than being ignored: ``--generator 5`` on muid
    is a mistake to point out.

    ``generators=K`` (more than 1): K generators, each with an identity of its
    own (see :func:`new_generators`), minting as one
    (:class:`~idmint.generate.group.GeneratorGroup`): K times the rate of one.
    """
    made = new_generators(scheme, generators, coordinator, **options)
    return made[0] if generators == 1 else GeneratorGroup(made)


def coordinator_for(scheme: str, coordinator: UrlLike | None = None, **options: Any) -> str | None:
    """The coordinator ``new_generator(scheme, coordinator, **options)`` claims from.

    The URL given, else ``static://`` for an identity in the options, else
    ``local://``; its password hidden. ``None`` where no identity is claimed
    (muid, short60 with random bits).
    """
    given = _given(options)
    generator_class = _generator_class(scheme).specialised(given)
    if generator_class.identity_free_because(given) is not None:
        return None
    return _url(generator_class, coordinator, given).redacted()


MAX_GENERATORS = 64
"""The most generators one :func:`new_generators` call (one server process) holds."""


def new_generators(
    scheme: str, count: int, coordinator: UrlLike | None = None, *, offset: int = 0, **options: Any
) -> list[TickGenerator[Any]]:
    """``count`` generators for ``scheme``, each with an identity of its own.

    Claimed ones each make their own claim. A configured identity
    (``static://`` or identity options) is the first of ``count`` consecutive
    ones: generators G, G+1, ... (node IDs for elastic64 and short60), each
    held on this host. ``offset`` skips that many of them first (G+offset,
    ...), so that processes sharing one configuration (the workers of
    ``idmint serve --workers``) take distinct blocks; claimed identities ignore
    it. If one cannot be made, those made are closed.

    The URL is parsed once and connected once: the generators share the
    coordinator, which the last of them to close closes.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_GENERATORS:
        raise ConfigurationError(
            f"the number of generators must be 1..{MAX_GENERATORS}, got {count!r}"
        )
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigurationError(f"the identity offset must be a whole number, got {offset!r}")
    generator_class = _generator_class(scheme)
    given = _given(options)
    _check_options(generator_class, given)
    generator_class = generator_class.specialised(given)
    refusal = generator_class.identity_free_because(given)
    if refusal is not None:
        if coordinator is not None:
            raise ConfigurationError(refusal)
        return _unclaimed(generator_class, count, offset, given)
    identity = {name: given.pop(name) for name in generator_class.identity_fields if name in given}
    url = _url(generator_class, coordinator, identity)
    source = connect(url)
    made: list[TickGenerator[Any]] = []
    try:
        configured = _configured_identity(generator_class, source, url, identity)
        if configured is not None:
            _check_block(source, offset + count)
        close_source = _last_one_closes(source, count)
        for index in range(count):
            if configured is None:
                claim = _claim(generator_class, source, given.get("clock"))
            else:
                counted = generator_class.identity_fields[0]
                shift = offset + index
                nth = {**configured, counted: configured[counted] + shift}
                # A shifted ID is no longer the URL's: an error names it as itself.
                named = _named(url, identity, derived=(counted,) if shift else ())
                claim = source.claim(
                    clock=given.get("clock"),
                    space=_space(generator_class),
                    identity=generator_class.checked_identity(nth, named),
                )
            made.append(
                _on_claim(generator_class, claim, given, claim.close, close_source, owned=True)
            )
    except BaseException:
        for generator in made:
            generator.close()
        if not made:
            source.close()
        raise
    return made


def _unclaimed(
    generator_class: GeneratorClass, count: int, offset: int, given: dict[str, Any]
) -> list[TickGenerator[Any]]:
    """``count`` generators that claim nothing (muid; short60 with random bits)."""
    identity = [name for name in generator_class.identity_fields if name in given]
    if identity and (count > 1 or offset > 0):
        # Nothing holds it (no claim, no lock on this host): every generator made
        # with it, in this process or a sibling worker, would mint the same IDs.
        raise ConfigurationError(
            f"a {' and '.join(identity)} given is one {generator_class.id_type.scheme} "
            "generator's alone, and nothing holds it: give it to one generator in one "
            "process, or leave it out and let each generator pick its own"
        )
    return [generator_class(**given) for _ in range(count)]


def generator_on(claim: Claim, scheme: str, **options: Any) -> TickGenerator[Any]:
    """A ``scheme`` generator on a claim held elsewhere (a discovery registration's).

    Closing the generator leaves the claim to its holder.
    """
    generator_class = _generator_class(scheme)
    given = _given(options)
    _check_options(generator_class, given)
    generator_class = generator_class.specialised(given)
    if given.keys() & set(generator_class.identity_fields):
        raise ConfigurationError(f"the identity comes from {claim.description}, not from options")
    return _on_claim(generator_class, claim, given)


_UNIX_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def who_minted(value: IdValue, coordinator: UrlLike | None = None) -> Holder | None:
    """Who held the identity ``value`` carries when it was minted: the holder whose
    claim covers its time, as ``coordinator`` (default: this host's pool) recorded it
    beside the identity's mark; None if it recorded none that does (the history
    keeps :data:`~idmint.coordinate.base.HISTORY_KEPT` holders for
    :data:`~idmint.coordinate.base.HISTORY_KEPT_MS`). ``ConfigurationError`` for
    a scheme whose IDs carry no claimed identity (muid) or a coordinator that keeps
    no marks (``static://``)."""
    generator_class = _generator_class(value.scheme)
    if generator_class.space is None:
        raise ConfigurationError(
            f"{value.scheme} IDs carry no claimed identity: no coordinator records who made them"
        )
    space = _space(generator_class)
    identity = {name: int(getattr(value, name)) for name in space.fields}
    with connect(CoordinatorUrl.parse(coordinator or DEFAULT_COORDINATOR)) as connected:
        mark = connected.read_mark(space, identity)
    if mark is None:
        return None
    minted_ms = (value.time - _UNIX_EPOCH) // _dt.timedelta(milliseconds=1)
    return mark.holder_at(minted_ms)


def _given(options: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in options.items() if value is not None}


def _space(generator_class: GeneratorClass) -> Space:
    """The identity space the generator class names, which its claims are made in."""
    space = generator_class.space
    assert space is not None  # identity_free_because() answered for the others
    return Space.of(space)


def _url(
    generator_class: GeneratorClass, coordinator: UrlLike | None, identity: Mapping[str, Any]
) -> CoordinatorUrl:
    """The coordinator URL, parsed: the one given; where none is, ``static://`` for an
    identity in the options, else ``local://`` (a free identity on this host)."""
    if coordinator is None:
        given = identity.keys() & set(generator_class.identity_fields)
        coordinator = "static://" if given else DEFAULT_COORDINATOR
    return CoordinatorUrl.parse(coordinator)


def _check_block(coordinator: Coordinator, needed: int) -> None:
    """Refuse more configured identities than the URL's block gives this process."""
    block = coordinator.identity_block
    if block is not None and needed > block:
        raise ConfigurationError(
            f"this pod's block of IDs (block={block}) is too small for {needed} generators "
            "(workers x generators): the next pod's IDs start there. Raise the coordinator "
            "URL's block"
        )


def _check_options(generator_class: GeneratorClass, given: dict[str, Any]) -> None:
    stray = sorted(set(given) - set(generator_class.scheme_options()) - COMMON_OPTIONS)
    if stray:
        takers = sorted(name for name, names in SCHEME_OPTIONS.items() if set(stray) <= names)
        hint = f"; it applies to {', '.join(takers)}" if takers else ""
        raise ConfigurationError(
            f"{generator_class.id_type.scheme} generators take no "
            f"{', '.join(stray).replace('_', '-')} option{hint}"
        )


def _claim(generator_class: GeneratorClass, coordinator: Coordinator, clock: Any) -> Claim:
    """A free identity claimed from ``coordinator`` in the generator class's space."""
    return coordinator.claim(
        clock=clock, pool=generator_class.identity_pool(), space=_space(generator_class)
    )


def _configured_identity(
    generator_class: GeneratorClass,
    coordinator: Coordinator,
    url: CoordinatorUrl,
    identity: dict[str, Any],
) -> dict[str, int] | None:
    """The configured identity the URL and the options give together, which must agree
    (None where the coordinator claims a free one, which options cannot name)."""
    from_url = coordinator.configured_identity()
    if from_url is None:
        for name in identity:
            raise ConfigurationError(
                f"{name} is claimed from {coordinator.url}, not given; use the URL's "
                "generators=LO-HI and cluster=C options to narrow the choice"
            )
        return None
    counted = generator_class.identity_fields[0]
    if coordinator.identity_block is not None and counted in identity:
        raise ConfigurationError(
            f"{coordinator.url} takes the identity from the pod's index; give no {counted}"
        )
    for name, value in identity.items():
        if name in url.options and from_url.get(name) != value:
            raise ConfigurationError(
                f"{name} {value} contradicts the coordinator URL's {name}="
                f"{from_url.get(name)}; give it in one place"
            )
    configured = {
        name: value
        for name in generator_class.identity_fields
        if (value := identity.get(name, from_url.get(name))) is not None
    }
    if counted not in configured:
        raise ConfigurationError(
            f"{a_scheme(generator_class.id_type.scheme)} generator with a configured identity "
            f"needs its {counted} ID ({counted}=N); leave the identity out to claim a free one "
            "on this host"
        )
    # Checked here, with the names the user wrote; each generator's is checked again.
    return generator_class.checked_identity(configured, _named(url, identity))


def _named(
    url: CoordinatorUrl, identity: Mapping[str, Any], *, derived: Collection[str] = ()
) -> Callable[[str], str]:
    """How an error names an identity field: as an option, or as the URL's (unless
    it is ``derived`` from the URL's, as a worker's generator ID is)."""

    def named(name: str) -> str:
        if name in identity or name in derived or name not in url.options:
            return name
        return f"{url.scheme}:// option {name}"

    return named


def _last_one_closes(coordinator: Coordinator, users: int) -> Callable[[], None]:
    """A closer for each of ``users`` generators: the last one called closes ``coordinator``."""
    left = [users]
    lock = threading.Lock()

    def close() -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            coordinator.close()

    return close


def _on_claim(
    generator_class: GeneratorClass,
    claim: Claim,
    given: dict[str, Any],
    *closers: Callable[[], None],
    owned: bool = False,
) -> TickGenerator[Any]:
    """``generator_class`` on ``claim``; closing the generator calls ``closers``.
    ``owned``: the claim is the generator's alone, released if it is dropped."""
    try:
        generator: TickGenerator[Any] = generator_class(claim=claim, **given)
    except BaseException:
        for close in closers:
            close()
        raise
    if owned:
        # First: a close() that fails half-way must not leave the rest to the finalizer.
        generator.close_with(_release_when_dropped(generator, claim, closers))
    generator.close_with(*closers)
    return generator


# -- generators dropped without close() ---------------------------------------------------


class _Fence:
    """What a claim fences in place of the generator that owns it, which it must not
    keep alive: the generator while it lives; once it was collected, nothing to
    fence, and the claim's ceiling as its newest tick (it issued nothing above the
    ceiling it was granted), so the final mark never goes below an ID it issued."""

    __slots__ = ("_claim", "_generator")

    def __init__(self, generator: TickGenerator[Any], claim: Claim) -> None:
        self._generator = weakref.ref(generator)
        self._claim = claim

    def _fence(self) -> None:
        generator = self._generator()
        if generator is not None:
            generator._fence()

    def _highest_tick(self) -> int:
        generator = self._generator()
        if generator is not None:
            return generator._highest_tick()
        grant = self._claim.last_grant
        return grant.ceiling_ms if grant is not None else -1


def _release_when_dropped(
    generator: TickGenerator[Any], claim: Claim, closers: Sequence[Callable[[], None]]
) -> Callable[[], None]:
    """Release ``claim`` (``closers``) if ``generator`` is collected without ``close()``;
    what ``close()`` calls to say it was not.

    The claim holds what it fences strongly; here it holds a :class:`_Fence`
    instead, so that a dropped generator can be collected at all.
    """
    claim.detach(generator)
    claim.attach(_Fence(generator, claim))
    dropped = weakref.finalize(
        generator, _dropped, f"{generator!r} ({claim.description})", os.getpid(), tuple(closers)
    )
    dropped.atexit = False  # at exit the claims are released anyway, nothing was dropped
    _Releaser.start()

    def closed() -> None:
        dropped.detach()

    return closed


def _dropped(name: str, owner: int, closers: tuple[Callable[[], None], ...]) -> None:
    """A finalizer: runs wherever the collector does, so it only hands the release on
    (``SimpleQueue.put`` may be called from one), then warns."""
    if os.getpid() != owner:
        return  # a fork child: the claim was the parent's, and was dropped at the fork
    _Releaser.releases.put(closers)
    warnings.warn(
        f"unclosed generator {name}: it was dropped without close(), so its claim is "
        "released now; close() it, or use it in a with block",
        ResourceWarning,
        stacklevel=2,
    )


class _Releaser:
    """The thread that releases the claims of dropped generators, one per process."""

    releases: queue.SimpleQueue[tuple[Callable[[], None], ...]] = queue.SimpleQueue()
    _pid = 0
    _lock = threading.Lock()

    @classmethod
    def start(cls) -> None:
        # Started with the first claimed generator, not by a finalizer: starting a
        # thread takes locks the collector may have interrupted.
        with cls._lock:
            if cls._pid == os.getpid():
                return
            threading.Thread(target=cls._run, name="idmint-release-dropped", daemon=True).start()
            cls._pid = os.getpid()

    @classmethod
    def _run(cls) -> None:
        while True:
            for close in cls.releases.get():
                try:
                    close()
                except Exception as error:  # the others are released all the same
                    log.warning("releasing a dropped generator's claim failed: %s", error)

    @classmethod
    def _after_fork_in_child(cls) -> None:
        # The parent's thread did not survive the fork, and its queue is the parent's.
        cls.releases = queue.SimpleQueue()
        cls._pid = 0
        cls._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_Releaser._after_fork_in_child)
