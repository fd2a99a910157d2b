"""One generator per scheme, all on the shared core in :mod:`idmint.generate.core`."""

from __future__ import annotations

import functools
import secrets
import threading
from collections.abc import Callable, Mapping
from operator import length_hint
from types import TracebackType
from typing import Any, ClassVar, cast

from idmint.clock import SYSTEM_CLOCK, Clock
from idmint.errors import ConfigurationError, GeneratorForked, TransactionFull
from idmint.generate.core import (
    DEFAULT_MAX_CLOCK_WAIT_MS,
    Claim,
    RunPlacement,
    TickGenerator,
    TickLayout,
    check_identity_field,
    check_tick_range,
    compiled_take,
    compiled_values,
    fork_generation,
)
from idmint.schemes import IdValue, iso_ms
from idmint.schemes import elastic64 as e64
from idmint.schemes import muid as mu
from idmint.schemes import short60 as s60
from idmint.schemes import snowflake as sf
from idmint.schemes import uid64 as u64
from idmint.schemes import uuid7 as uu
from idmint.schemes.elastic64 import Elastic64
from idmint.schemes.muid import Muid
from idmint.schemes.short60 import Short60
from idmint.schemes.snowflake import Snowflake
from idmint.schemes.uid64 import Mode, Uid64, Uid64V1
from idmint.schemes.uuid7 import Uuid7

# uid64's 42-bit timestamp in 14-bit parts, the size of the bit-reversal table:
# the low part changes every ms, the rest once per 2**14 ms (16 s).
_BLOCK_BITS = 14
_BLOCK_MASK = (1 << _BLOCK_BITS) - 1
_BLOCK_SHIFT = _BLOCK_BITS + u64.TIMESTAMP_SHIFT  # time-sequential: the block above the low part
_SPREAD_LOW_SHIFT = 2 * _BLOCK_BITS + u64.TIMESTAMP_SHIFT  # spread: reversed low part on top
_REVERSE_14_BITS = u64.REVERSE_14_BITS

__all__ = [
    "DEFAULT_ELASTIC64_MAX_AHEAD_MS",
    "GENERATORS",
    "Elastic64Generator",
    "MuidGenerator",
    "MuidTransaction",
    "Short60Generator",
    "SnowflakeGenerator",
    "Uid64Generator",
    "Uid64V1Generator",
    "Uuid7Generator",
]

_new = object.__new__


class Uid64Generator(TickGenerator[Uid64]):
    """Mints uid64 IDs for one (generator ID, cluster ID) pair: 64 per ms.

    The pair must be held by this generator alone: give each process its own
    generator ID, or claim one through a coordinator.
    """

    __slots__ = ("_block", "_block_bits", "_cluster", "_generator", "_identity", "_mode", "_spread")
    id_type: ClassVar[type[IdValue]] = Uid64
    identity_fields = ("generator", "cluster")
    space = "generator"

    def __init__(
        self,
        generator: int | None = None,
        cluster: int = 0,
        mode: Mode | str = Mode.SPREAD,
        *,
        claim: Claim | None = None,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> None:
        """``generator``: the generator ID, which no other process may use at the
        same time; nothing here checks that (:func:`idmint.new_generator` claims a
        free one). ``claim``: take generator and cluster IDs from a claim (see
        :mod:`idmint.coordinate`) instead, and stop issuing whenever the claim is
        in doubt."""
        if generator is None and claim is None:
            raise ConfigurationError(
                f"a {self.id_type.scheme} generator needs its generator ID, one per process: "
                f"pass generator=N, or use idmint.new_generator({self.id_type.scheme!r}), "
                "which claims a free one on this host"
            )
        try:
            self._mode = Mode.parse(mode, self.id_type.scheme)
        except ValueError as error:
            raise ConfigurationError(str(error)) from None
        self._check_mode()
        self._spread = self._mode is Mode.SPREAD
        super().__init__(
            limit=u64.MAX_SEQUENCE + 1,
            seq_shift=u64.SEQUENCE_SHIFT,
            clock=clock,
            max_clock_wait_ms=max_clock_wait_ms,
            claim=claim,
        )
        if claim is None:
            self._set_identity({"generator": cast(int, generator), "cluster": cluster})
        else:
            grant = claim.wait()
            with self._lock:
                self._adopt(grant)

    def _set_identity(self, identity: Mapping[str, int]) -> None:
        checked = self.checked_identity(identity)
        self._generator, self._cluster = checked["generator"], checked["cluster"]
        self._identity = u64.identity_bits(self._generator, self._cluster, self._mode)
        self._block = -1  # _base_for_tick's cache holds the identity bits

    def _check_mode(self) -> None:
        pass

    @property
    def generator(self) -> int:
        return self._generator

    @property
    def cluster(self) -> int:
        return self._cluster

    @property
    def mode(self) -> Mode:
        return self._mode

    def _describe_identity(self) -> str:
        return f"generator {self._generator}, cluster {self._cluster}"

    def _base_for_tick(self, tick: int) -> int:
        # What changes only every 2**14 ms (the range check; the identity and
        # the other 28 timestamp bits, reversed in spread mode) is worked out
        # once per block: this runs once per tick, usually with cold caches.
        block = tick >> _BLOCK_BITS
        if block != self._block:
            if tick > u64.MAX_TIMESTAMP_MS:
                check_tick_range(self.id_type.scheme, tick, 0, u64.MAX_TIMESTAMP_MS)
            if self._spread:
                rev = u64.REVERSE_14_BITS  # reverse42() in two parts
                high = rev[block & _BLOCK_MASK] << _BLOCK_BITS | rev[block >> _BLOCK_BITS]
                self._block_bits = high << u64.TIMESTAMP_SHIFT | self._identity
            else:
                self._block_bits = block << _BLOCK_SHIFT | self._identity
            self._block = block
        if self._spread:
            return _REVERSE_14_BITS[tick & _BLOCK_MASK] << _SPREAD_LOW_SHIFT | self._block_bits
        return (tick & _BLOCK_MASK) << u64.TIMESTAMP_SHIFT | self._block_bits

    def _tick_layout(self) -> TickLayout:
        return TickLayout(
            self._identity, u64.TIMESTAMP_SHIFT, 0, u64.MAX_TIMESTAMP_MS, reversed=self._spread
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(generator={self._generator}, cluster={self._cluster}, "
            f"mode={self._mode.value!r})"
        )


class Uid64V1Generator(Uid64Generator):
    """Mints IDs in java-uniqueid's original layout: generators 0..63, always spread."""

    __slots__ = ()
    id_type = Uid64V1

    def _check_mode(self) -> None:
        if self._mode is not Mode.SPREAD:
            raise ConfigurationError("uid64-v1 IDs are always in spread mode")


DEFAULT_ELASTIC64_MAX_AHEAD_MS = 10
"""How many ms an elastic64 generator may run ahead of the clock in a burst.

Borrowing lets a burst go past 2**(16-w) IDs per ms without stalling; the
bound keeps the IDs' time honest and keeps a restarted process (which takes
longer than this to start) clear of the ticks its predecessor borrowed."""


_ELASTIC64_MASK = (1 << 64) - 1


def _make_elastic64(tagged: int) -> Elastic64:
    """An Elastic64 from a run value: the ID's 64 bits with its width above them.

    Carrying the width in the value itself means an ID and its width can never
    come apart when the width changes while other threads are minting.
    """
    obj = _new(Elastic64)
    obj._int = tagged & _ELASTIC64_MASK
    obj._node_bits = tagged >> 64
    return obj


class Elastic64Generator(TickGenerator[Elastic64]):
    """Mints elastic64 IDs for one node ID; the node-ID width may change while running."""

    __slots__ = ("_node", "_node_bits")
    id_type = Elastic64
    identity_fields = ("node", "node_bits")
    space = "node"
    options_about: ClassVar[Mapping[str, str]] = {
        "max_ahead_ms": "ms a burst may borrow ahead of the clock",
    }
    _int_mask = _ELASTIC64_MASK
    _make_from_run = staticmethod(_make_elastic64)
    _tag_slot = "_node_bits"

    @classmethod
    def identity_pool(cls) -> range:
        # Node IDs that fit the narrowest width: a plain pool has no groups to widen.
        return range(1 << e64.MIN_NODE_BITS)

    @classmethod
    def checked_identity(
        cls, identity: Mapping[str, int], named: Callable[[str], str] = str
    ) -> dict[str, int]:
        width = check_identity_field(
            named("node_bits"),
            identity.get("node_bits", e64.MIN_NODE_BITS),
            e64.MIN_NODE_BITS,
            e64.MAX_NODE_BITS,
        )
        node = check_identity_field(named("node"), identity["node"], 0, (1 << width) - 1)
        return {"node": node, "node_bits": width}

    def __init__(
        self,
        node: int | None = None,
        node_bits: int = e64.MIN_NODE_BITS,
        *,
        max_ahead_ms: int = DEFAULT_ELASTIC64_MAX_AHEAD_MS,
        claim: Claim | None = None,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> None:
        """``node``: the node ID, which no other process may use at the same time.
        ``claim``: take the node ID and width from a claim (see
        :mod:`idmint.discovery`), following its width as the fleet grows."""
        if node is None and claim is None:
            raise ConfigurationError(
                "an elastic64 generator needs its node ID, one per process: pass node=N "
                "(and node_bits=W), or use idmint.new_generator('elastic64'), which claims "
                "a free one"
            )
        width = check_identity_field("node_bits", node_bits, e64.MIN_NODE_BITS, e64.MAX_NODE_BITS)
        super().__init__(
            limit=1 << (e64.LOW_BITS - width),
            seq_shift=width,
            clock=clock,
            max_clock_wait_ms=max_clock_wait_ms,
            max_ahead_ticks=check_identity_field("max_ahead_ms", max_ahead_ms, 0, 60_000),
            claim=claim,
        )
        self._node = 0
        self._node_bits = width
        self._make = _make_elastic64
        if claim is None:
            self._set_layout(cast(int, node), width)
        else:
            grant = claim.wait()
            with self._lock:
                self._adopt(grant)

    def _set_identity(self, identity: Mapping[str, int]) -> None:
        # A claim from a plain pool of node IDs (not discovery's elastic
        # groups) gives the narrowest width.
        self._set_layout(identity["node"], identity.get("node_bits", e64.MIN_NODE_BITS))

    @property
    def node(self) -> int:
        return self._node

    @property
    def node_bits(self) -> int:
        return self._node_bits

    def set_node(self, node: int, node_bits: int) -> None:
        """Switch to another node ID or width; later IDs use a later ms than all before.

        Moving to a new tick is what keeps this generator's own IDs unique
        across the change: the same (ms, burst, node) read with two widths can
        give the same 64 bits.
        """
        with self._lock:
            self._set_layout(node, node_bits)

    def _set_layout(self, node: int, node_bits: int) -> None:
        width = self.checked_identity({"node": node, "node_bits": node_bits})["node_bits"]
        self._retire_tick()
        self._node, self._node_bits = node, width
        self._limit = 1 << (e64.LOW_BITS - width)
        self._seq_shift = width

    def _describe_identity(self) -> str:
        return f"node {self._node}"

    def _base_for_tick(self, tick: int) -> int:
        check_tick_range("elastic64", tick, 0, e64.MAX_TIMESTAMP_MS)
        return self._node_bits << 64 | tick << e64.TIMESTAMP_SHIFT | self._node

    def _tick_layout(self) -> TickLayout:
        identity = self._node_bits << 64 | self._node
        return TickLayout(identity, e64.TIMESTAMP_SHIFT, 0, e64.MAX_TIMESTAMP_MS)

    def __repr__(self) -> str:
        return f"Elastic64Generator(node={self._node}, node_bits={self._node_bits})"


class Short60Generator(TickGenerator[Short60]):
    """Mints short60 IDs for one 9-bit node ID: 512 per ms.

    short60's layout has 9 low bits that uexky fills at random; here they hold
    a node ID (0..511) that no other process uses at the same time, so up to
    512 processes never collide. ``node``: a configured node ID (nothing here
    checks that it is yours alone; :func:`idmint.new_generator` claims a free
    one). ``claim``: take it from a claim. ``random=True``: fill the bits at
    random per ID, uexky's way, where two processes minting ``a`` and ``b``
    IDs in the same ms collide about ``a*b / 2**18`` times (docs/schemes.md).
    """

    __slots__ = ("_node",)
    id_type = Short60
    identity_fields = ("node",)
    space = "short60"
    options_about: ClassVar[Mapping[str, str]] = {
        "random": "9 random bits per ID instead of a node ID, so collisions are possible",
    }

    @classmethod
    def identity_free_because(cls, options: Mapping[str, Any]) -> str | None:
        if options.get("random"):
            return (
                "a short60 generator with random bits takes no node and no coordinator: "
                "the bits that would hold the node are random"
            )
        return None

    def __new__(
        cls,
        node: int | None = None,
        *,
        random: bool = False,
        claim: Claim | None = None,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> Short60Generator:
        # Random bits change the hot path, which is made per class.
        chosen = _RandomShort60Generator if random and cls is Short60Generator else cls
        instance: Short60Generator = object.__new__(chosen)
        return instance

    def __init__(
        self,
        node: int | None = None,
        *,
        random: bool = False,
        claim: Claim | None = None,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> None:
        if random and (node is not None or claim is not None):
            raise ConfigurationError(
                "a short60 generator has either random bits or a node ID, not both"
            )
        if not random and node is None and claim is None:
            raise ConfigurationError(
                "a short60 generator needs its node ID (0..511), one per process: pass "
                "node=N, or use idmint.new_generator('short60'), which claims a free one on "
                "this host; random=True fills the bits at random instead (see the "
                "collision table in docs/schemes.md)"
            )
        super().__init__(
            limit=s60.MAX_SEQUENCE + 1,
            seq_shift=s60.SEQUENCE_SHIFT,
            clock=clock,
            max_clock_wait_ms=max_clock_wait_ms,
            claim=claim,
        )
        self._node = 0
        if claim is not None:
            grant = claim.wait()
            with self._lock:
                self._adopt(grant)
        elif not random:
            self._set_identity({"node": cast(int, node)})

    def _set_identity(self, identity: Mapping[str, int]) -> None:
        self._node = self.checked_identity(identity)["node"]

    @property
    def node(self) -> int | None:
        """The node ID in the low 9 bits (None when they are random)."""
        return None if self._random_bits else self._node

    def _describe_identity(self) -> str:
        return f"node {self._node}"

    def _base_for_tick(self, tick: int) -> int:
        check_tick_range("short60", tick, s60.EPOCH_MS, s60.EPOCH_MS + s60.MAX_ELAPSED_MS)
        return (tick - s60.EPOCH_MS) << s60.TIMESTAMP_SHIFT | self._node

    def _tick_layout(self) -> TickLayout:
        last = s60.EPOCH_MS + s60.MAX_ELAPSED_MS
        return TickLayout(self._node, s60.TIMESTAMP_SHIFT, s60.EPOCH_MS, last)

    def __repr__(self) -> str:
        return f"Short60Generator(node={self._node})"


class _RandomShort60Generator(Short60Generator):
    """short60 with 9 random bits per ID and no node: ``Short60Generator(random=True)``."""

    __slots__ = ()
    id_type = Short60
    random_bits = s60.RANDOM_BITS

    def _after_fork_in_child(self) -> None:
        # No identity to lose; random bits are reseeded by the random module.
        # Start a new millisecond with a new random origin.
        self._lock = threading.Lock()
        self._retire_tick()

    def _describe_identity(self) -> str:
        return "random bits"

    def __repr__(self) -> str:
        return "Short60Generator(random=True)"


DEFAULT_MUID_MAX_AHEAD_US = 10_000
"""muid time must strictly increase per medallion: one transaction per us.
A burst of more may run this far ahead of the clock instead of waiting."""


def random_medallion() -> int:
    """A medallion picked at random from the spec's v1 range [2**48, 2**49)."""
    return mu.RANDOM_MEDALLION_LOW + secrets.randbelow(1 << 48)


class MuidGenerator(TickGenerator[Muid]):
    """Mints muids for one medallion, with strictly increasing microsecond time.

    ``generate()`` gives a standalone muid (offset 0). ``transaction()`` gives a
    transaction: its own muid has offset 0 and the objects made in it get
    offsets 1, 2, ... up to 2**20 - 1.
    """

    __slots__ = ("_medallion",)
    id_type = Muid
    identity_fields = ("medallion",)
    tick_ns = 1_000
    options_about: ClassVar[Mapping[str, str]] = {
        "medallion": "the generator's medallion, random when not given",
        "max_ahead_us": "us a burst of transactions may borrow ahead of the clock",
    }

    @classmethod
    def identity_free_because(cls, options: Mapping[str, Any]) -> str | None:
        return "muid generators take no coordinator: a muid's medallion is random per generator"

    def __init__(
        self,
        medallion: int | None = None,
        *,
        max_ahead_us: int = DEFAULT_MUID_MAX_AHEAD_US,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> None:
        super().__init__(
            limit=1,
            seq_shift=0,
            clock=clock,
            max_clock_wait_ms=max_clock_wait_ms,
            max_ahead_ticks=check_identity_field("max_ahead_us", max_ahead_us, 0, 60_000_000),
        )
        if medallion is None:
            medallion = random_medallion()
        self._medallion = check_identity_field("medallion", medallion, 0, mu.MAX_MEDALLION)

    @property
    def medallion(self) -> int:
        return self._medallion

    def transaction(self) -> MuidTransaction:
        """Start a transaction: a fresh muid (offset 0) whose offsets name its objects."""
        return MuidTransaction(self.generate())

    async def atransaction(self) -> MuidTransaction:
        return MuidTransaction(await self.agenerate())

    def _describe_identity(self) -> str:
        return f"medallion {self._medallion}"

    def _base_for_tick(self, tick: int) -> int:
        check_tick_range("muid", tick, 0, mu.MAX_TIMESTAMP_US, unit="us")
        return tick << mu.TIMESTAMP_SHIFT | self._medallion << mu.MEDALLION_SHIFT

    def _tick_layout(self) -> TickLayout:
        identity = self._medallion << mu.MEDALLION_SHIFT
        return TickLayout(identity, mu.TIMESTAMP_SHIFT, 0, mu.MAX_TIMESTAMP_US)

    def _after_fork_in_child(self) -> None:
        # The parent keeps the medallion; the child becomes a new node.
        self._lock = threading.Lock()
        self._medallion = random_medallion()
        self._retire_tick()
        self._tick = -1  # a new medallion has spent no ticks

    def __repr__(self) -> str:
        return f"MuidGenerator(medallion={self._medallion})"


class MuidTransaction:
    """The muids of one transaction: ``id`` (offset 0) and its objects (offsets 1...).

    Thread-safe. Usable as a context manager for readability; nothing needs
    closing. A transaction opened before ``os.fork()`` refuses to mint in the
    child, whose parent may still be adding objects to it. On the compiled core
    its offsets are a run of muids ``new()`` takes from in C.
    """

    __slots__ = ("_base", "_fork_generation", "_lock", "_next_offset", "_offsets", "id")

    def __init__(self, transaction_id: Muid) -> None:
        self.id = transaction_id
        self._base = transaction_id.int
        self._next_offset = 1  # the pure core's count; the compiled core's is _offsets
        self._offsets = compiled_values(range(self._base + 1, self._base + mu.MAX_OFFSET + 1))
        self._lock = threading.Lock()
        self._fork_generation = fork_generation()

    def new(self) -> Muid:
        """The muid for the next object in this transaction."""
        self._check_not_forked()
        with self._lock:
            offset = self._take(1)
        obj: Muid = _new(Muid)
        obj._int = self._base | offset
        return obj

    def batch(self, count: int) -> list[Muid]:
        """Muids for the next ``count`` objects, in order."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(f"count must be a non-negative integer, got {count!r}")
        if count == 0:
            return []
        self._check_not_forked()
        with self._lock:
            first = self._take(count)
        made: list[Muid] = _muids_of(self._base, first, count)
        return made

    def _check_not_forked(self) -> None:
        # Checked before taking the lock: a fork can leave it held forever.
        if self._fork_generation != fork_generation():
            raise GeneratorForked(
                f"transaction {self.id} was opened before os.fork(); the parent process "
                "may still add objects to it. Open a new transaction in the child"
            )

    def _take(self, count: int) -> int:
        """The first of the next ``count`` offsets (caller holds the lock), or TransactionFull."""
        offsets = self._offsets
        if offsets is not None:
            taken: range | None = offsets.take_exactly(count)
            if taken is not None:
                return taken.start - self._base
        else:
            first = self._next_offset
            if first + count - 1 <= mu.MAX_OFFSET:
                self._next_offset = first + count
                return first
        raise TransactionFull(
            f"transaction {self.id} has no room for {count} more object(s): offsets "
            f"run to {mu.MAX_OFFSET} and {self.used} are used. Start a new transaction"
        )

    @property
    def used(self) -> int:
        """Offsets handed out so far (the transaction's own offset 0 not counted)."""
        offsets = self._offsets
        if offsets is not None:
            return int(offsets.size) - length_hint(offsets)
        return self._next_offset - 1

    def __enter__(self) -> MuidTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def __repr__(self) -> str:
        return f"MuidTransaction(id={self.id!s})"


MuidTransaction.new = compiled_take(MuidTransaction, MuidTransaction.new, Muid)  # type: ignore[method-assign]


def _muids_of(base: int, first: int, count: int) -> list[Muid]:
    """The Muids of ``count`` offsets of a transaction from ``first`` on, made as
    ``new()`` makes each (in C where the compiled core is)."""
    out = []
    for offset in range(first, first + count):
        obj: Muid = _new(Muid)
        obj._int = base | offset
        out.append(obj)
    return out


_make_all = getattr(MuidTransaction.new, "make_all", None)
if _make_all is not None:  # the compiled core's
    _compiled_make_all = _make_all

    def _muids_of(base: int, first: int, count: int) -> list[Muid]:
        made: list[Muid] = _compiled_make_all(range(base + first, base + first + count))
        return made


# -- uuid7 ---------------------------------------------------------------------------
# A tick's run holds each UUID's (ms, counter, node) packed tight, the version nibble
# in its place: the counter is one arithmetic step per UUID there, where in the UUID
# it is split around the variant bits. The maker places a run value's bits in the UUID
# and adds the random bits:
#
#   run value:  ms (48) | version 0111 (4) | counter high (12) | counter low (6) | node (16)
#   UUID:       ms | version | counter high | variant 10 | counter low | node | random (40)
_UUID7_SPLIT = uu.COUNTER_LOW_BITS + uu.NODE_BITS  # the run value's bits below rand_a
_UUID7_TIME_SHIFT = _UUID7_SPLIT + uu.COUNTER_HIGH_BITS + 4  # 4: the version nibble
_UUID7_VERSION = uu.VERSION << (_UUID7_TIME_SHIFT - 4)
_UUID7_RUN_MASK = (1 << (_UUID7_TIME_SHIFT + uu.TIMESTAMP_BITS)) - 1
_UUID7_PLACEMENT = RunPlacement(
    split=_UUID7_SPLIT,
    high_shift=uu.COUNTER_HIGH_SHIFT,
    low_shift=uu.NODE_SHIFT,
    fixed=uu.VARIANT << uu.VARIANT_SHIFT,
    noise_bits=uu.RANDOM_BITS,
)
_make_uuid7 = _UUID7_PLACEMENT.maker(Uuid7)


class Uuid7Generator(TickGenerator[Uuid7]):
    """Mints RFC 9562 version-7 UUIDs for one claimed 16-bit node: 262,144 per ms.

    ``node``: a configured node ID (0..65535), which no other process may use at the
    same time; :func:`idmint.new_generator` claims a free one. ``claim``: take it
    from a claim. The UUIDs strictly increase (a counter per ms, RFC 9562 section 6.2
    Method 1; see :mod:`idmint.schemes.uuid7`), across a clock step back too; two
    generators with different nodes never mint the same UUID, whatever the random
    bits.
    """

    __slots__ = ("_node",)
    id_type = Uuid7
    identity_fields = ("node",)
    space = "uuid7"
    # Run values are not the UUIDs (see above): everything that makes a value goes
    # through the maker, which a mask (the bits of a run value) asks for.
    _int_mask = _UUID7_RUN_MASK
    _make_from_run = staticmethod(_make_uuid7)
    _placement = _UUID7_PLACEMENT

    def __init__(
        self,
        node: int | None = None,
        *,
        claim: Claim | None = None,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> None:
        if node is None and claim is None:
            raise ConfigurationError(
                "a uuid7 generator needs its node ID (0..65535), one per process: pass "
                "node=N, or use idmint.new_generator('uuid7'), which claims a free one on "
                "this host"
            )
        super().__init__(
            limit=uu.MAX_COUNTER + 1,
            seq_shift=uu.NODE_BITS,
            clock=clock,
            max_clock_wait_ms=max_clock_wait_ms,
            claim=claim,
        )
        self._make = self._make_from_run
        self._node = 0
        if claim is not None:
            grant = claim.wait()
            with self._lock:
                self._adopt(grant)
        else:
            self._set_identity({"node": cast(int, node)})

    def _set_identity(self, identity: Mapping[str, int]) -> None:
        self._node = self.checked_identity(identity)["node"]

    @property
    def node(self) -> int:
        return self._node

    def _describe_identity(self) -> str:
        return f"node {self._node}"

    def _base_for_tick(self, tick: int) -> int:
        check_tick_range("uuid7", tick, 0, uu.MAX_TIMESTAMP_MS)
        return tick << _UUID7_TIME_SHIFT | _UUID7_VERSION | self._node

    def _tick_layout(self) -> TickLayout:
        return TickLayout(_UUID7_VERSION | self._node, _UUID7_TIME_SHIFT, 0, uu.MAX_TIMESTAMP_MS)

    def __repr__(self) -> str:
        return f"Uuid7Generator(node={self._node})"


# -- snowflake ---------------------------------------------------------------------------


class SnowflakeGenerator(TickGenerator[Snowflake]):
    """Mints snowflake IDs for one worker ID, in one layout (Twitter's by default).

    ``layout`` names a preset (``twitter``, ``discord``, ``sonyflake``); the
    other layout options change a part of it (see
    :class:`idmint.schemes.snowflake.Layout`). Each layout's generators are a
    class of their own (its value type, tick and pool), which the constructor
    and :meth:`specialised` pick.
    """

    __slots__ = ("_identity", "_worker")
    id_type: ClassVar[type[IdValue]] = Snowflake
    identity_fields = ("worker",)
    space = sf.TWITTER.space
    layout: ClassVar[sf.Layout] = sf.TWITTER
    options_about = Snowflake.variant_options
    options_choices = Snowflake.variant_choices

    @classmethod
    def specialised(cls, options: Mapping[str, Any]) -> type[SnowflakeGenerator]:
        return _snowflake_class(_layout_of(options))

    def __new__(cls, *args: Any, **options: Any) -> SnowflakeGenerator:
        chosen = _snowflake_class(_layout_of(options))
        instance: SnowflakeGenerator = object.__new__(chosen)
        return instance

    def __init__(
        self,
        worker: int | None = None,
        *,
        layout: str = sf.TWITTER_NAME,
        epoch_ms: int | None = None,
        tick_ms: int | None = None,
        time_bits: int | None = None,
        worker_bits: int | None = None,
        sequence_bits: int | None = None,
        order: str | None = None,
        until_year: int | None = None,
        claim: Claim | None = None,
        clock: Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> None:
        """``worker``: the worker ID, which no other process may use at the same time
        (:func:`idmint.new_generator` claims a free one). ``claim``: take it from a
        claim instead, and stop issuing whenever the claim is in doubt."""
        if worker is None and claim is None:
            raise ConfigurationError(
                "a snowflake generator needs its worker ID, one per process: pass worker=N, "
                "or use idmint.new_generator('snowflake'), which claims a free one on this host"
            )
        shape = self.layout
        now_ms = (clock if clock is not None else SYSTEM_CLOCK).time_ns() // 1_000_000
        if now_ms > shape.end_ms:
            raise ConfigurationError(
                f"snowflake layout {shape.describe()} ran out at {iso_ms(shape.end_ms + 1)}"
            )
        super().__init__(
            limit=1 << shape.sequence_bits,
            seq_shift=shape.sequence_shift,
            clock=clock,
            max_clock_wait_ms=max_clock_wait_ms,
            claim=claim,
        )
        self._worker = self._identity = 0
        if claim is None:
            self._set_identity({"worker": cast(int, worker)})
        else:
            grant = claim.wait()
            with self._lock:
                self._adopt(grant)

    def _set_identity(self, identity: Mapping[str, int]) -> None:
        self._worker = self.checked_identity(identity)["worker"]
        self._identity = self._worker << self.layout.worker_shift

    @property
    def worker(self) -> int:
        return self._worker

    def _describe_identity(self) -> str:
        return f"worker {self._worker}"

    def _base_for_tick(self, tick: int) -> int:
        shape = self.layout
        low = shape.epoch_ms // shape.tick_ms
        check_tick_range("snowflake", tick, low, low + shape.max_time, unit=f"{shape.tick_ms} ms")
        return (tick - low) << shape.time_shift | self._identity

    def _tick_layout(self) -> TickLayout:
        shape = self.layout
        low = shape.epoch_ms // shape.tick_ms
        return TickLayout(self._identity, shape.time_shift, low, low + shape.max_time)

    def __repr__(self) -> str:
        return f"SnowflakeGenerator(worker={self._worker}, layout={self.layout.describe()!r})"


def _layout_of(options: Mapping[str, Any]) -> sf.Layout:
    """The layout the generator options name (``ConfigurationError`` if unusable)."""
    named = {name: options[name] for name in Snowflake.variant_options if name in options}
    return Snowflake.variant(**named).layout


@functools.cache
def _snowflake_class(layout: sf.Layout) -> type[SnowflakeGenerator]:
    """The generator class of ``layout``: its value type, tick and pool."""
    if layout == sf.TWITTER:
        return SnowflakeGenerator
    made: type[SnowflakeGenerator] = type(
        f"SnowflakeGenerator_{layout.name}",
        (SnowflakeGenerator,),
        {
            "__slots__": (),
            "__module__": __name__,
            "id_type": Snowflake.of(layout),
            "layout": layout,
            "space": layout.space,
            "tick_ns": layout.tick_ms * 1_000_000,
        },
    )
    return made


GENERATORS: dict[str, type[TickGenerator[Any]]] = {
    generator.id_type.scheme: generator
    for generator in (
        Uid64Generator,
        Uid64V1Generator,
        Elastic64Generator,
        MuidGenerator,
        Short60Generator,
        Uuid7Generator,
        SnowflakeGenerator,
    )
}
"""Each scheme's generator class, by the scheme's name (as ``idmint.schemes.SCHEMES``)."""
