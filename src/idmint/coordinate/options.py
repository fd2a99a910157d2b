"""The query options of coordinator URLs, each declared once.

A driver declares the options its URLs take as the fields of a frozen dataclass,
a subclass of :class:`UrlOptions`, each made by :func:`option`: its name in the
query string, its default, what it is for, and its :class:`Kind` (how its text
becomes a value, and what values are allowed). Everything else is made from
that declaration, as ``idmint serve``'s settings are made from ``ServerConfig``:

* reading a URL (:meth:`UrlOptions.from_url`): an option the class does not
  declare is refused with those it takes (PostgreSQL gives the others to libpq:
  :attr:`UrlOptions.passes_through`), each value is read by its kind, whose
  error names the option, and :meth:`UrlOptions.check` checks what concerns
  several options together;
* the defaults, the fields' own;
* the driver module's table of options (:func:`with_options_table`), and
  docs/coordination.md's tables, which tests/coordinate/test_options.py holds to
  the declarations;
* a URL's query from values (:meth:`UrlOptions.query`), as the contract kit
  writes the URLs of its pools.

Every driver that claims from a pool takes :class:`ClaimOptions`, the claim's
own options; :class:`TlsOptions` are a store reached over TLS.
"""

from __future__ import annotations

import dataclasses
import re
import ssl
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from idmint.coordinate.spaces import SPACES
from idmint.coordinate.url import CoordinatorUrl
from idmint.errors import ConfigurationError

__all__ = [
    "TABLE_MARK",
    "TLS_ADVICE",
    "ClaimOptions",
    "Kind",
    "Option",
    "TlsOptions",
    "UrlOptions",
    "flag",
    "id_range",
    "identifier",
    "markdown_rows",
    "milliseconds",
    "one_of",
    "option",
    "options_table",
    "seconds",
    "text",
    "ttl",
    "whole",
    "whole_seconds",
    "with_options_table",
]

ValueT = TypeVar("ValueT")
OptionsT = TypeVar("OptionsT", bound="UrlOptions")


# -- kinds: how an option's text becomes a value ---------------------------------------------


@dataclass(frozen=True)
class Kind(Generic[ValueT]):
    """How an option's text becomes a value (a :class:`ConfigurationError` naming the
    option when it cannot), and how a value is written in a URL."""

    read: Callable[[CoordinatorUrl, str], ValueT]
    """``read(url, name)``: option ``name`` of ``url`` (which gives it) as a value."""
    write: Callable[[Any], str] = str
    """A value as the query string writes it."""


def _number(value: float) -> str:
    return f"{value:g}"


def seconds(minimum: float = 0.0) -> Kind[float]:
    """A number of seconds, at least ``minimum``."""
    return Kind(lambda url, name: url.number(name, 0.0, minimum=minimum), _number)


def whole_seconds(minimum: float) -> Kind[float]:
    """A whole number of seconds, at least ``minimum`` (etcd's leases)."""

    def read(url: CoordinatorUrl, name: str) -> float:
        value = url.number(name, 0.0, minimum=minimum)
        if value != int(value):
            raise ConfigurationError(
                f"{url.scheme}:// option {name} must be whole seconds, got {value}"
            )
        return value

    return Kind(read, _number)


def milliseconds() -> Kind[int]:
    """Given in seconds, kept in whole milliseconds."""
    return Kind(
        lambda url, name: round(url.number(name, 0.0) * 1000), lambda value: _number(value / 1000)
    )


def whole(low: int, high: int | None = None) -> Kind[int]:
    """A whole number in ``low..high`` (no upper bound when ``high`` is None)."""

    def read(url: CoordinatorUrl, name: str) -> int:
        value = url.integer(name, None, low=low, high=high)
        assert value is not None  # the URL gives it
        return value

    return Kind(read)


def flag() -> Kind[bool]:
    """True or false (``1``, ``yes``, ``on``; ``0``, ``no``, ``off``)."""
    return Kind(lambda url, name: url.flag(name, False), lambda value: str(value).lower())


def id_range(size: int) -> Kind[range]:
    """``LO-HI`` (inclusive) within ``0..size-1``."""
    return Kind(
        lambda url, name: url.pool(name, size), lambda value: f"{value.start}-{value.stop - 1}"
    )


def text(valid: Callable[[str], bool] | None = None, expected: str = "") -> Kind[str]:
    """Text, as given (a file name); with ``valid``, only text it accepts, refused as
    not what is ``expected``."""

    def read(url: CoordinatorUrl, name: str) -> str:
        value = url.options[name]
        if valid is not None and not valid(value):
            raise ConfigurationError(
                f"{url.redacted()}: option {name} must be {expected}, got {value!r}"
            )
        return value

    return Kind(read)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def identifier() -> Kind[str]:
    """A plain SQL identifier, which needs no quoting rules."""

    def read(url: CoordinatorUrl, name: str) -> str:
        value = url.options[name]
        if not _IDENTIFIER.fullmatch(value):
            raise ConfigurationError(
                f"{url.scheme}:// option {name} must be a plain identifier (letters, digits, "
                f"_; at most 63), got {value!r}"
            )
        return value

    return Kind(read)


def one_of(*choices: str) -> Kind[str]:
    """One of ``choices``."""

    def read(url: CoordinatorUrl, name: str) -> str:
        value = url.options[name]
        if value not in choices:
            raise ConfigurationError(
                f"{url.scheme}:// option {name} must be {' or '.join(choices)}, got {value!r}"
            )
        return value

    return Kind(read)


# -- declarations ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option of a URL's query string, as a field of a :class:`UrlOptions` declares it."""

    name: str
    """Its name in the query string."""
    about: str
    """What it is for (``s`` first for seconds); `backticks` mark code."""
    kind: Kind[Any]
    shown: str | None = None
    """The default as the tables show it, where the value itself does not say it."""
    attribute: str = ""
    """The field that holds its value."""
    default: Any = None

    def default_text(self) -> str:
        """The default as the tables show it."""
        if self.shown is not None:
            return self.shown
        return "none" if self.default is None else f"`{self.kind.write(self.default)}`"


_OPTION = "idmint.option"


def option(
    name: str, default: Any, about: str, kind: Kind[Any], *, shown: str | None = None
) -> Any:
    """A field of a :class:`UrlOptions` that option ``name`` of a URL sets."""
    return field(default=default, metadata={_OPTION: Option(name, about, kind, shown)})


def ttl(default: float, kind: Kind[float]) -> Any:
    """The ``ttl`` option of a driver whose claims are leases it renews (its own kind
    and default): what their deadline is reckoned from."""
    return option(
        "ttl",
        default,
        "s; a claim's lease: how long past a renewal its holder may mint, and a crashed "
        "holder's successor waits at most (the deadline's basis)",
        kind,
    )


@dataclass(frozen=True)
class UrlOptions:
    """The options a driver's URLs take, declared as fields made by :func:`option`."""

    passes_through: ClassVar[str | None] = None
    """What the options it does not declare are, where it takes them (PostgreSQL:
    ``libpq parameters``); None: they are refused."""

    @classmethod
    def declared(cls) -> tuple[Option, ...]:
        """Its options, in the order the tables show them: its own, then those it
        shares with every driver of its kind (:class:`ClaimOptions`)."""
        fields = {item.name: item for item in dataclasses.fields(cls) if _OPTION in item.metadata}
        # Each class's own, the most derived first (a class declares its own in order).
        order = dict.fromkeys(
            name for klass in cls.__mro__ for name in vars(klass).get("__annotations__", {})
        )
        shared = (
            {item.name for item in dataclasses.fields(ClaimOptions)}
            if issubclass(cls, ClaimOptions)
            else set()
        )
        return tuple(
            dataclasses.replace(
                fields[name].metadata[_OPTION], attribute=name, default=fields[name].default
            )
            for name in sorted((name for name in order if name in fields), key=shared.__contains__)
        )

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(declared.name for declared in cls.declared())

    @classmethod
    def from_url(cls: type[OptionsT], url: CoordinatorUrl) -> OptionsT:
        """The options ``url`` gives, read and checked; the defaults for the rest."""
        declared = cls.declared()
        if cls.passes_through is None:
            url.check_known(item.name for item in declared)
        made = cls(
            **{
                item.attribute: item.kind.read(url, item.name)
                for item in declared
                if item.name in url.options
            }
        )
        made.check(url)
        return made

    def check(self, url: CoordinatorUrl) -> None:
        """Refuse values that do not go together (a :class:`ConfigurationError`)."""

    @classmethod
    def others(cls, url: CoordinatorUrl) -> dict[str, str]:
        """The options of ``url`` it does not declare (what :attr:`passes_through`)."""
        ours = set(cls.names())
        return {name: value for name, value in url.options.items() if name not in ours}

    @classmethod
    def query(cls, **values: Any) -> dict[str, str]:
        """The query options that give these values (by attribute), as a URL writes them:
        ``ClaimOptions.query(claim_timeout_s=5)`` is ``{"claim_timeout": "5"}``."""
        by_attribute = {item.attribute: item for item in cls.declared()}
        return {
            by_attribute[attribute].name: by_attribute[attribute].kind.write(value)
            for attribute, value in values.items()
        }

    @classmethod
    def rows(cls, *, own: bool = False) -> list[tuple[str, str, str]]:
        """``(option, default, meaning)`` of each option, for the tables; ``own``: only
        those it adds to :class:`ClaimOptions`'."""
        shared = set(ClaimOptions.names()) if own and issubclass(cls, ClaimOptions) else set()
        return [
            (item.name, item.default_text(), item.about)
            for item in cls.declared()
            if item.name not in shared
        ]


# -- tables -----------------------------------------------------------------------------------


def _rst(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"``\1``", text)


def options_table(options: type[UrlOptions], *, width: int = 88) -> str:
    """The options as a reStructuredText table (a driver module's docstring holds it)."""
    rows = [(f"``{name}``", _rst(default), _rst(about)) for name, default, about in options.rows()]
    first = max(len("option"), *(len(row[0]) for row in rows))
    second = max(len("default"), *(len(row[1]) for row in rows))
    third = width - first - second - 2
    rule = f"{'=' * first} {'=' * second} {'=' * third}"
    lines = [rule, f"{'option':{first}} {'default':{second}} meaning", rule]
    for name, default, about in rows:
        wrapped = textwrap.wrap(about, third, break_on_hyphens=False) or [""]
        lines.append(f"{name:{first}} {default:{second}} {wrapped[0]}")
        lines += [f"{'':{first}} {'':{second}} {more}" for more in wrapped[1:]]
    lines.append(rule)
    if options.passes_through is not None:
        lines.append(f"\nEvery other option is one of the {options.passes_through}.")
    return "\n".join(lines)


TABLE_MARK = "{options}"
"""The line of a driver module's docstring that :func:`with_options_table` replaces."""


def with_options_table(doc: str, options: type[UrlOptions]) -> str:
    """A driver module's docstring with its :data:`TABLE_MARK` line replaced by the
    table of ``options``."""
    if not doc:  # python -OO drops docstrings
        return doc
    if TABLE_MARK not in doc.splitlines():
        raise ValueError(f"the docstring has no {TABLE_MARK} line for the options' table")
    return doc.replace(TABLE_MARK, options_table(options), 1)


def markdown_rows(options: type[UrlOptions], *, own: bool = False) -> Iterator[str]:
    """The options as the lines of a Markdown table's body (docs/coordination.md's)."""
    for name, default, about in options.rows(own=own):
        yield f"| `{name}` | {default} | {about} |"


# -- what every claiming driver takes -------------------------------------------------------

_LARGEST = max(space.size for space in SPACES)
_CLUSTERS = max(space.clusters for space in SPACES)


@dataclass(frozen=True)
class ClaimOptions(UrlOptions):
    """The options every driver that claims from a pool takes from its URL."""

    pool: range = option(
        "generators",
        range(_LARGEST),
        "`LO-HI`: the IDs this client may claim (`0-0` forces one); each scheme claims "
        "those of them it can hold",
        id_range(_LARGEST),
    )
    cluster: int | None = option(
        "cluster",
        None,
        "the cluster ID to claim uid64 generator IDs in; ZooKeeper's and etcd's pools "
        "list theirs in `cluster-id` (written when missing), which it must be one of",
        whole(0, _CLUSTERS - 1),
        shown="the pool's, or `0`",
    )
    claim_timeout_s: float = option(
        "claim_timeout", 30.0, "s to wait for a free ID before `PoolExhausted`", seconds()
    )
    connect_timeout_s: float = option(
        "connect_timeout",
        10.0,
        "s to wait for the coordinator at start before `CoordinatorUnavailable`",
        seconds(minimum=0.1),
    )
    wait_timeout_s: float = option(
        "wait_timeout",
        10.0,
        "s a generator waits for a suspended or lost claim before raising",
        seconds(),
    )
    margin_s: float | None = option(
        "margin",
        None,
        "s taken off the deadline, a safety margin",
        seconds(),
        shown="TTL/10 (at least 0.2)",
    )
    skew_ms: int = option(
        "skew", 1000, "s of clock-skew allowance added to the hold-off", milliseconds()
    )


@dataclass(frozen=True)
class TlsOptions(UrlOptions):
    """A store reached over TLS (the URL's scheme with an ``s``, or ``tls=true``)."""

    tls: bool | None = option(
        "tls",
        None,
        "use TLS (the scheme with an `s` sets it, as does `ca`)",
        flag(),
        shown="`false`",
    )
    ca: str | None = option(
        "ca", None, "CA bundle to verify the servers with", text(), shown="system"
    )
    cert: str | None = option("cert", None, "client certificate (mutual TLS)", text())
    key: str | None = option("key", None, "the client certificate's key", text())

    def uses_tls(self, url: CoordinatorUrl, tls_scheme: str) -> bool:
        """Whether the store is reached over TLS: ``tls``, else the URL's scheme is
        ``tls_scheme``; and always with a ``ca``."""
        wanted = self.tls if self.tls is not None else url.scheme == tls_scheme
        return wanted or bool(self.ca)

    def context(self, url: CoordinatorUrl, tls_scheme: str) -> ssl.SSLContext | None:
        """The client's TLS context, or None if the store is not reached over TLS
        (:meth:`uses_tls`). The URL says what is trusted: its ``ca``, else the
        system's CAs (never a bundle named by the environment); with its
        ``cert`` and ``key`` as the client certificate."""
        if not self.uses_tls(url, tls_scheme):
            return None
        context = ssl.create_default_context(cafile=self.ca)
        if self.cert:
            try:
                context.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as error:
                raise ConfigurationError(
                    f"{url.scheme}:// cannot load the client certificate cert={self.cert} "
                    f"key={self.key}: {error}"
                ) from None
        return context


TLS_ADVICE = (
    "check ca= (the CA that signed the server's certificate), and cert=/key= if the "
    "server wants a client certificate"
)
"""What to check when a store's TLS handshake fails."""
