"""Fixed identities, configured rather than claimed, and held on this host.

URL grammar::

    static://?generator=G[&cluster=C]      (uid64, uid64-v1)
    static://?node=N[&node_bits=W]         (elastic64; short60)
    static://?ordinal=pod[&block=K][&first=F][&cluster=C][&node_bits=W]

The options (:class:`StaticOptions`; this table is made from its declaration):

{options}

The numbers are checked against the scheme's ranges (``idmint encode --help``
and the value types' ``fields``) when a generator is made on them.

Nothing is coordinated across hosts: every host given the same static
identity mints the same IDs. Give each host its own (for instance from its
ordinal in a StatefulSet), or claim identities through ``zk://`` or
``etcd://``. On one host the identity is held with the same lock files as
``local://`` (its default directory), so a second process given an identity
that is in use refuses with :class:`~idmint.errors.IdentityInUse`, and a
restarted process starts after what its predecessor minted.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from idmint.coordinate.base import ClaimInfo, ClaimSource, Coordinator, DriverClaim
from idmint.coordinate.options import UrlOptions, one_of, option, whole, with_options_table
from idmint.coordinate.spaces import CLUSTER, GENERATOR, SPACES, Space
from idmint.coordinate.url import CoordinatorUrl, parse_url
from idmint.errors import ConfigurationError

__all__ = ["POD_INDEX_VARIABLE", "StaticCoordinator", "StaticOptions", "pod_index"]

POD_INDEX_VARIABLE = "IDMINT_POD_INDEX"
DEFAULT_HOST_POOL = "local://"
"""Where a configured identity is held: where ``local://`` claims (its directory if
``$IDMINT_LOCAL_DIR`` names one)."""
_ORDINAL_NAME = re.compile(r".+-(0|[1-9][0-9]*)")


@dataclass(frozen=True)
class StaticOptions(UrlOptions):
    """The options of a ``static://`` URL: an identity's fields, or a pod's block.

    Whole numbers only: which ones a scheme can use is the generator's to say
    (:mod:`idmint.factory` checks them against it).
    """

    generator: int = option("generator", 0, "the uid64 generator ID", whole(0))
    cluster: int = option(CLUSTER, 0, "the cluster ID", whole(0))
    node: int | None = option("node", None, "the elastic64 or short60 node ID", whole(0))
    node_bits: int | None = option(
        "node_bits", None, "the elastic64 node-ID width", whole(0), shown="`8`"
    )
    worker: int | None = option("worker", None, "the snowflake worker ID", whole(0))
    ordinal: str | None = option(
        "ordinal",
        None,
        "`pod`: the identity (generator or node ID) is `first + index * block`, where "
        "`index` is this StatefulSet pod's index: `$IDMINT_POD_INDEX` (set it from the "
        "`apps.kubernetes.io/pod-index` label through the Downward API), else the number "
        "that ends the host name (`ids-3`: 3)",
        one_of("pod"),
    )
    block: int = option(
        "block",
        1,
        "with `ordinal`: the IDs each pod owns, at least its workers times its generators",
        whole(1),
    )
    first: int = option("first", 0, "with `ordinal`: pod 0's first ID", whole(0))

    def check(self, url: CoordinatorUrl) -> None:
        if self.ordinal is None:
            for name in ("block", "first"):
                if name in url.options:
                    raise ConfigurationError(f"static:// option {name} goes with ordinal=pod")
            return
        for name in dict.fromkeys(space.counted for space in SPACES):
            if name in url.options:
                raise ConfigurationError(
                    f"static://?ordinal=pod takes the {name} from the pod's index; give no {name}"
                )

    def fields(self) -> dict[str, int]:
        """The identity's fields the URL gives (a pod's ID in each space's counted field)."""
        given = {
            name: getattr(self, name)
            for name in dict.fromkeys(name for space in SPACES for name in space.fields)
        }
        if self.ordinal is not None:
            number = self.first + pod_index() * self.block
            given.update(dict.fromkeys((space.counted for space in SPACES), number))
        return {name: value for name, value in given.items() if value is not None}


__doc__ = with_options_table(__doc__, StaticOptions)


def pod_index(environ: Mapping[str, str] | None = None, hostname: str | None = None) -> int:
    """This StatefulSet pod's index: ``$IDMINT_POD_INDEX``, else its host name's ending."""
    environ = os.environ if environ is None else environ
    raw = environ.get(POD_INDEX_VARIABLE, "").strip()
    if raw:
        if not (raw.isascii() and raw.isdigit()):
            raise ConfigurationError(
                f"{POD_INDEX_VARIABLE}={raw!r} is not a pod index (a whole number); set it from "
                "the apps.kubernetes.io/pod-index label through the Downward API"
            )
        return int(raw)
    name = hostname if hostname is not None else socket.gethostname()
    ending = _ORDINAL_NAME.fullmatch(name)
    if ending is None:
        raise ConfigurationError(
            f"static://?ordinal=pod needs this pod's index: set {POD_INDEX_VARIABLE} from the "
            "apps.kubernetes.io/pod-index label through the Downward API, or run in a "
            f"StatefulSet, whose pods are named NAME-INDEX (this host is {name!r})"
        )
    return int(ending.group(1))


class StaticCoordinator(Coordinator):
    """A configured identity; its claim is a lock on this host, nothing more."""

    options_type = StaticOptions

    def __init__(self, url: CoordinatorUrl) -> None:
        options = self._take_url(url, StaticOptions)
        if url.hosts:
            raise ConfigurationError(
                f"static:// takes no hosts (got {url.hosts_text()}); write static://?generator=5"
            )
        if options.ordinal is not None:
            self.identity_block = options.block
        self.configured = options.fields()
        """The identity's fields, as the URL gives them."""

    def configured_identity(self) -> dict[str, int]:
        return dict(self.configured)

    def identity_in(self, space: Space) -> dict[str, int]:
        """The configured identity as a claim of ``space`` names it."""
        if space.counted not in self.configured:
            width = f"&{space.width}=W" if space.width is not None else ""
            raise ConfigurationError(
                f"{self.url} gives no {space.counted} ID; write static://?{space.counted}=N{width}"
            )
        return {name: self.configured[name] for name in space.fields if name in self.configured}

    holds_configured_identities = True

    def _claimed_by(self, space: Space) -> tuple[ClaimSource, type[DriverClaim[Any]]]:
        # Held on this host as local:// holds one, so that another process given
        # the same identity refuses.
        from idmint.coordinate.local import LocalClaim, LocalCoordinator

        return LocalCoordinator(parse_url(DEFAULT_HOST_POOL)), LocalClaim

    def list_claims(self) -> list[ClaimInfo]:
        cluster, generator = GENERATOR.numbered(self.configured)
        return [
            ClaimInfo(
                cluster=cluster,
                generator=generator,
                holder="static (configured, not claimed)",
                since_ms=None,
                high_water_mark_ms=None,
                state="static",
            )
        ]

    def close(self) -> None:
        pass
