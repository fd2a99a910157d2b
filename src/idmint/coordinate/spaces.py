"""Identity spaces: the kinds of identity a coordinator claims, each a pool of its own.

A generator class names the space its identity is claimed in (its ``space``);
schemes whose IDs could meet share one (uid64 and uid64-v1: generator IDs). Each
space is declared here, once, as a :class:`Space`, and everything a store or a
claim does with it follows from the declaration:

* what a claim of it grants: the identity ``{counted: N}``, with its ``cluster``
  where the space has clusters (uid64's ``{"generator", "cluster"}``), and, for
  a space whose identities carry a width that may grow (elastic64's
  ``node_bits``), that width where a driver keeps groups whose width follows the
  fleet (ZooKeeper's; any other claims within ``size``);
* how many IDs a pool of it holds (``size``), and the clusters;
* where it lives in a store, which each driver derives from these: the space
  java-uniqueid shares is laid out as java-uniqueid lays it out, at the URL's
  root (ZooKeeper's ``<root>/pool``, ``<root>/hwm``, with ``queue`` and
  ``cluster-id``; etcd's ``<prefix>/pool/<cluster>:<n>``), every other under
  its name (``<root>/<name>/``); Redis keeps a hash ``<prefix>:<name>``,
  PostgreSQL rows whose ``space`` is the name, this host's pool a directory
  ``<name>`` whose lock keys are ``<cluster>-<n>`` where the space has clusters
  and ``n mod size`` where it has none (a configured elastic64 node ID wider
  than the pool is held by its low bits, so that holders of any two widths
  differ there).

The names and layouts are stored (java-uniqueid reads the generator space, pools
on disk and in stores hold the others): a space keeps its name for ever. A new
space is one :class:`Space` in :data:`SPACES`; the generator class that claims
in it names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from idmint.errors import ConfigurationError
from idmint.schemes import elastic64 as e64
from idmint.schemes import short60 as s60
from idmint.schemes import snowflake as sf
from idmint.schemes import uid64 as u64
from idmint.schemes import uuid7 as uu

__all__ = ["CLUSTER", "GENERATOR", "NODE", "SHORT60", "SPACES", "UUID7", "Identity", "Space"]

CLUSTER = "cluster"
"""The identity field that names a cluster, in the spaces that have clusters."""

Identity = Mapping[str, int]
"""An identity as a claim grants it: its fields by name (``{"generator": 5, "cluster": 0}``)."""


@dataclass(frozen=True)
class Space:
    """One kind of identity, a pool of its own in every coordinator (see the module)."""

    name: str
    """Its name in stores, lock files and ``claims list`` (stored: never renamed)."""
    counted: str
    """The identity field a claim counts out of the pool (``generator``, ``node``)."""
    size: int
    """The IDs a pool of it holds: ``0..size-1``."""
    about: str
    """What its IDs are, for people: ``uid64 generator IDs``."""
    clusters: int = 1
    """How many clusters its IDs belong to; 1: it has none (the identity has no
    ``cluster`` field, and its pools are cluster 0)."""
    width: str | None = None
    """The identity field that carries a width which may grow past ``size`` while
    the identity is held (elastic64's ``node_bits``), or None."""
    java_uniqueid: bool = False
    """Whether java-uniqueid claims in it too: it is laid out as java-uniqueid lays
    out its generator IDs, at the root of the URL's tree."""

    def __str__(self) -> str:
        return self.name

    @property
    def clustered(self) -> bool:
        """Whether its identities name a cluster."""
        return self.clusters > 1

    @property
    def fields(self) -> tuple[str, ...]:
        """The identity's fields as a claim may grant them, the counted one first."""
        return (
            self.counted,
            *((CLUSTER,) if self.clustered else ()),
            *((self.width,) if self.width is not None else ()),
        )

    def identity(self, number: int, cluster: int = 0) -> dict[str, int]:
        """ID ``number`` of the pool (in ``cluster``) as a claim grants it."""
        if self.clustered:
            return {self.counted: number, CLUSTER: cluster}
        return {self.counted: number}

    def numbered(self, identity: Identity) -> tuple[int, int]:
        """``(cluster, number)`` of an identity of this space (cluster 0 where it has none)."""
        return (identity.get(CLUSTER, 0) if self.clustered else 0), identity[self.counted]

    def within(self, root: str) -> str:
        """Where its pool lives in a tree whose root is ``root``: the root itself for the
        space java-uniqueid shares, ``<root>/<name>`` for any other."""
        return root if self.java_uniqueid else f"{root}/{self.name}"

    @staticmethod
    def of(space: Space | str) -> Space:
        """The space ``space`` names (a space as it is)."""
        if isinstance(space, Space):
            return space
        for known in SPACES:
            if known.name == space:
                return known
        raise ConfigurationError(
            f"no identity space is called {space!r}; the spaces are "
            + ", ".join(known.name for known in SPACES)
        )


GENERATOR = Space(
    "generator",
    "generator",
    u64.MAX_GENERATOR + 1,
    "uid64 generator IDs",
    clusters=u64.MAX_CLUSTER + 1,
    java_uniqueid=True,
)
NODE = Space("node", "node", 1 << e64.MIN_NODE_BITS, "elastic64 node IDs", width="node_bits")
SHORT60 = Space("short60", "node", s60.MAX_NODE + 1, "short60 node IDs")
UUID7 = Space("uuid7", "node", uu.MAX_NODE + 1, "uuid7 node IDs")

SPACES: tuple[Space, ...] = (GENERATOR, NODE, SHORT60, UUID7)
"""Every identity space, in the order ``claims list`` shows them."""

# -- snowflake: one pool per worker width ------------------------------------------------
# Every snowflake layout of a W-bit worker claims in ``snowflake-wW``
# (``Layout.space``), whatever its epoch, tick and order. Layouts of one width
# with other epochs or ticks (Twitter's and Discord's) make ints of one range,
# which a column may hold side by side: in one pool they never hold the same
# worker at once, so IDs minted at the same time differ in the worker bits. A
# pool per layout would let both hold worker 5 together. Layouts of two widths
# put the worker in other bits, so no pool could keep their ints apart: they
# claim apart, and each width's pool is as large as the width. (What no pool
# prevents: a worker passing to a layout whose time runs behind, a later epoch,
# repeats the first layout's past IDs, because a high-water mark is wall-clock
# time and knows no epoch; docs/schemes.md says to keep one layout per column.)
SNOWFLAKE: tuple[Space, ...] = tuple(
    Space(sf.space_name(width), "worker", 1 << width, f"snowflake {width}-bit worker IDs")
    for width in range(1, sf.MAX_WORKER_BITS + 1)
)
SPACES += SNOWFLAKE
