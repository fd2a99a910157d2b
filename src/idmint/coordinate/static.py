"""Fixed identities, configured rather than claimed, and held on this host.

URL grammar::

    static://?generator=G[&cluster=C]      (uid64, uid64-v1)
    static://?node=N[&node_bits=W]         (elastic64; short60)
    static://?ordinal=pod[&block=K][&first=F][&cluster=C][&node_bits=W]

=============  =======  ============================================
option         default  meaning
=============  =======  ============================================
``generator``  ``0``    the uid64 generator ID
``cluster``    ``0``    the cluster ID
``node``       none     the elastic64 or short60 node ID
``node_bits``  ``8``    the elastic64 node-ID width
``ordinal``    none     ``pod``: the identity (generator or node ID) is
                        ``first + index * block``, where ``index`` is this
                        StatefulSet pod's index: ``$IDMINT_POD_INDEX`` (set it
                        from the ``apps.kubernetes.io/pod-index`` label through
                        the Downward API), else the number that ends the host
                        name (``ids-3``: 3)
``block``      ``1``    with ``ordinal``: the IDs each pod owns, at least its
                        workers times its generators
``first``      ``0``    with ``ordinal``: pod 0's first ID
=============  =======  ============================================

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
from typing import Any

from idmint.coordinate.base import ClaimInfo, ClaimOptions, ClaimSource, Coordinator, DriverClaim
from idmint.coordinate.url import CoordinatorUrl, parse_url
from idmint.errors import ConfigurationError

__all__ = ["POD_INDEX_VARIABLE", "StaticCoordinator", "pod_index"]

POD_INDEX_VARIABLE = "IDMINT_POD_INDEX"
DEFAULT_HOST_POOL = "local://"
"""Where a configured identity is held: where ``local://`` claims (its directory if
``$IDMINT_LOCAL_DIR`` names one)."""
_ORDINAL_NAME = re.compile(r".+-(0|[1-9][0-9]*)")


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

    def __init__(self, url: CoordinatorUrl) -> None:
        url.check_known(("generator", "cluster", "node", "node_bits", "ordinal", "block", "first"))
        if url.hosts:
            raise ConfigurationError(
                f"static:// takes no hosts (got {url.hosts_text()}); write static://?generator=5"
            )
        self.url = url.text
        # Whole numbers only: which ones a scheme can use is the generator's to
        # say (idmint.factory checks them against it).
        self.generator = url.integer("generator", 0, low=0) or 0
        self.cluster = url.integer("cluster", 0, low=0) or 0
        self.node = url.integer("node", None, low=0)
        self.node_bits = url.integer("node_bits", None, low=0)
        ordinal = url.options.get("ordinal")
        if ordinal is None:
            for name in ("block", "first"):
                if name in url.options:
                    raise ConfigurationError(f"static:// option {name} goes with ordinal=pod")
        else:
            if ordinal != "pod":
                raise ConfigurationError(f"static:// option ordinal must be pod, got {ordinal!r}")
            for name in ("generator", "node"):
                if name in url.options:
                    raise ConfigurationError(
                        f"static://?ordinal=pod takes the {name} from the pod's index; "
                        f"give no {name}"
                    )
            self.identity_block = url.integer("block", 1, low=1) or 1
            first = url.integer("first", 0, low=0) or 0
            self.generator = self.node = first + pod_index() * self.identity_block
        # Nothing to narrow: the claim is the one configured identity.
        self._options_template = ClaimOptions()

    def configured_identity(self) -> dict[str, int]:
        fields = {"generator": self.generator, "cluster": self.cluster}
        if self.node is not None:
            fields["node"] = self.node
        if self.node_bits is not None:
            fields["node_bits"] = self.node_bits
        return fields

    def identity_in(self, space: str) -> dict[str, int]:
        """The configured identity as a claim of ``space`` names it."""
        if space == "generator":
            return {"generator": self.generator, "cluster": self.cluster}
        if self.node is None:
            raise ConfigurationError(
                f"{self.url} gives no node ID; write static://?node=N"
                + ("&node_bits=W" if space == "node" else "")
            )
        if space == "node" and self.node_bits is not None:
            return {"node": self.node, "node_bits": self.node_bits}
        return {"node": self.node}

    holds_configured_identities = True

    def _claimed_by(self, space: str) -> tuple[ClaimSource, type[DriverClaim[Any]]]:
        # Held on this host as local:// holds one, so that another process given
        # the same identity refuses.
        from idmint.coordinate.local import LocalClaim, LocalCoordinator

        return LocalCoordinator(parse_url(DEFAULT_HOST_POOL)), LocalClaim

    def list_claims(self) -> list[ClaimInfo]:
        return [
            ClaimInfo(
                cluster=self.cluster,
                generator=self.generator,
                holder="static (configured, not claimed)",
                since_ms=None,
                high_water_mark_ms=None,
                state="static",
            )
        ]

    def close(self) -> None:
        pass
