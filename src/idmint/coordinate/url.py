"""Coordinator URLs: ``scheme://[user:password@]host:port[,host:port...]/path?option=value``."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from idmint.errors import ConfigurationError

__all__ = ["CoordinatorUrl", "parse_url", "redacted_url", "yes_or_no"]

ValueT = TypeVar("ValueT")

# The words a URL option and a server setting take for yes and no, in any case.
_YES_NO: Mapping[str, bool] = {
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("0", "false", "no", "off"), False),
}


def yes_or_no(text: str) -> bool:
    """``text`` read as a yes/no word (1/0, true/false, yes/no, on/off); else ValueError."""
    try:
        return _YES_NO[text.lower()]
    except KeyError:
        raise ValueError(f"{text!r} is not a yes/no word") from None


@dataclass(frozen=True)
class CoordinatorUrl:
    """A coordinator URL split into its parts, each checked: parsed once, where it enters.

    Everything from there on (the factory, the registry, the driver) takes this
    value, not the text: nothing parses a URL twice, and a malformed one stops
    at :meth:`parse` with a sentence naming the part that is wrong.
    """

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    path: str
    username: str | None
    password: str | None
    options: dict[str, str]
    text: str

    @classmethod
    def parse(cls, text: str | CoordinatorUrl) -> CoordinatorUrl:
        """``text`` split and checked (see :func:`parse_url`); a parsed URL as it is."""
        return text if isinstance(text, CoordinatorUrl) else parse_url(text)

    def replace(
        self,
        *,
        hosts: Iterable[tuple[str, int]] | None = None,
        path: str | None = None,
        options: Mapping[str, object] | None = None,
    ) -> CoordinatorUrl:
        """This URL with other hosts, path or options (``options`` replace the query)."""
        hosts = tuple(self.hosts if hosts is None else hosts)
        userinfo = ""
        if self.username is not None:
            userinfo = quote(self.username, safe="")
            if self.password is not None:
                userinfo += ":" + quote(self.password, safe="")
            userinfo += "@"
        location = ",".join(
            (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
            for host, port in hosts
        )
        query = dict(self.options if options is None else options)
        text = f"{self.scheme}://{userinfo}{location}{self.path if path is None else path}"
        if query:
            text += "?" + urlencode({name: str(value) for name, value in query.items()}, safe="/:")
        return parse_url(text)

    def redacted(self) -> str:
        """The URL with the passwords hidden (userinfo's, query's), for messages and logs."""
        text = self.text
        if self.password is not None:
            text = text.replace(f":{self.password}@", ":***@", 1)
        return _redact_query(text)

    def hosts_text(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.hosts)

    # -- typed options -----------------------------------------------------------
    def check_known(self, known: Iterable[str]) -> None:
        allowed = set(known)
        unknown = sorted(set(self.options) - allowed)
        if unknown:
            raise ConfigurationError(
                f"{self.scheme}:// does not take option(s) {', '.join(unknown)}; "
                f"it takes {', '.join(sorted(allowed))}"
            )

    def _converted(self, name: str, convert: Callable[[str], ValueT], kind: str) -> ValueT | None:
        """Option ``name`` converted (None if absent); ConfigurationError if it is not ``kind``."""
        raw = self.options.get(name)
        if raw is None:
            return None
        try:
            return convert(raw)
        except ValueError:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} must be {kind}, got {raw!r}"
            ) from None

    def number(self, name: str, default: float, *, minimum: float = 0.0) -> float:
        value = self._converted(name, float, "a number")
        if value is None:
            return default
        if value < minimum:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} must be at least {minimum:g}, "
                f"got {self.options[name]}"
            )
        return value

    def integer(
        self, name: str, default: int | None, *, low: int, high: int | None = None
    ) -> int | None:
        """Option ``name`` as an int in ``low..high`` (no upper bound when ``high`` is None)."""
        value = self._converted(name, int, "an integer")
        if value is None:
            return default
        if value < low or (high is not None and value > high):
            expected = f"{low}..{high}" if high is not None else f"at least {low}"
            raise ConfigurationError(
                f"{self.scheme}:// option {name} {value} is out of range; expected {expected}"
            )
        return value

    def flag(self, name: str, default: bool) -> bool:
        value = self._converted(name, yes_or_no, "true or false")
        return default if value is None else value

    def pool(self, name: str, size: int) -> range:
        """``LO-HI`` (inclusive) within ``0..size-1``; the whole range if absent."""
        raw = self.options.get(name)
        if raw is None:
            return range(size)
        low_text, dash, high_text = raw.partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if dash else low
        except ValueError:
            raise ConfigurationError(
                f"{self.scheme}:// option {name} must look like LO-HI (e.g. 0-63), got {raw!r}"
            ) from None
        if not 0 <= low <= high < size:
            raise ConfigurationError(
                f"{self.scheme}:// option {name}={raw} must satisfy 0 <= LO <= HI <= {size - 1}"
            )
        return range(low, high + 1)


def parse_url(text: str) -> CoordinatorUrl:
    """Split a coordinator URL; every malformed part is a ``ConfigurationError`` naming it.

    ``urllib.parse`` splits the URL; the host list (``host:port[,host:port...]``,
    which no standard parser takes) is split here, each host checked as an IP
    address (``ipaddress``) or a DNS name and each port as 0..65535. A host
    without a port gets 0: the driver's default port.
    """
    if not isinstance(text, str) or "://" not in text:
        raise ConfigurationError(
            f"coordinator {text!r} is not a URL; expected e.g. zk://127.0.0.1:2181/idmint, "
            "etcd://127.0.0.1:2379/idmint, local:// or static://?generator=5"
        )
    shown = _redact(text)
    try:
        parts = urlsplit(text)
    except ValueError:
        # urlsplit complains only about brackets: unpaired, or around no IPv6 address.
        location = text.partition("://")[2].partition("/")[0].partition("?")[0]
        for item in location.rpartition("@")[2].split(","):
            if item.startswith("[") and "]" in item:
                _host(item, shown)  # names the address that is not one
        raise ConfigurationError(
            f"coordinator URL {shown!r}: the hosts {_redact_location(location)!r} have a '[' "
            "or ']' without its partner; write IPv6 addresses as [::1]:2181"
        ) from None
    if not parts.scheme:
        raise ConfigurationError(f"coordinator URL {shown!r} has no scheme (zk://, etcd://, ...)")
    if parts.fragment:
        raise ConfigurationError(
            f"coordinator URL {shown!r}: unexpected fragment #{parts.fragment}; options go "
            "in the query string (?name=value)"
        )
    userinfo, at, location = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user)
        password = unquote(secret) if colon else ""
    hosts = tuple(_host(item, shown) for item in location.split(",") if item)
    if location and len(hosts) != len(location.split(",")):
        raise ConfigurationError(f"coordinator URL {shown!r}: an empty host in {location!r}")
    options: dict[str, str] = {}
    try:
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ConfigurationError(
            f"coordinator URL {shown!r}: the query {parts.query!r} is not name=value&..."
        ) from None
    for key, value in pairs:
        if key in options:
            raise ConfigurationError(f"coordinator URL {shown!r} gives option {key} twice")
        options[key] = value
    path = parts.path
    return CoordinatorUrl(
        scheme=parts.scheme.lower(),
        hosts=hosts,
        path="/" + path.strip("/") if path.startswith("/") else path,
        username=username,
        password=password,
        options=options,
        text=text,
    )


_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def _host(item: str, shown: str) -> tuple[str, int]:
    """``(host, port)`` from ``host[:port]`` or ``[ipv6][:port]``; port 0 when absent."""
    if item.startswith("["):
        address, bracket, rest = item[1:].partition("]")
        if not bracket:
            raise ConfigurationError(f"coordinator URL {shown!r}: {item!r} lacks its closing ']'")
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            raise ConfigurationError(
                f"coordinator URL {shown!r}: [{address}] is not an IPv6 address"
            ) from None
        host, port_text = address, rest.removeprefix(":") if rest.startswith(":") else None
        if rest and not rest.startswith(":"):
            raise ConfigurationError(f"coordinator URL {shown!r}: {item!r} is not [host]:port")
    else:
        host, colon, port_part = item.partition(":")
        port_text = port_part if colon else None
        if ":" in port_part:
            raise ConfigurationError(
                f"coordinator URL {shown!r}: {item!r} has several ':'; write an IPv6 "
                "address in brackets, [::1]:2181"
            )
        if not _HOST_NAME.fullmatch(host):
            raise ConfigurationError(
                f"coordinator URL {shown!r}: {host!r} is not a host name or IP address"
            )
        if host.replace(".", "").isdigit():
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise ConfigurationError(
                    f"coordinator URL {shown!r}: {host} is not an IPv4 address"
                ) from None
    if port_text is None:
        return host, 0
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) <= 65535:
        raise ConfigurationError(
            f"coordinator URL {shown!r}: port {port_text!r} of {host} is not 1..65535"
        )
    return host, int(port_text)


def _redact_location(location: str) -> str:
    userinfo, at, hosts = location.rpartition("@")
    return f"{userinfo.split(':', 1)[0]}:***@{hosts}" if at and ":" in userinfo else location


def redacted_url(text: str) -> str:
    """A coordinator URL as given, with its passwords hidden (even a malformed one)."""
    return _redact(text)


def _redact(text: str) -> str:
    """``text`` with a password in it replaced by ``***``, for messages."""
    scheme, sep, rest = text.partition("://")
    userinfo, at, tail = rest.partition("@")
    if not at or "/" in userinfo or ":" not in userinfo:
        return _redact_query(text)
    user = userinfo.split(":", 1)[0]
    return _redact_query(f"{scheme}{sep}{user}:***@{tail}")


_SECRET_OPTION = re.compile(r"([?&](?:password|sslpassword)=)[^&#]*", re.IGNORECASE)
"""Query options that carry a secret (libpq takes ``password=`` there, too)."""


def _redact_query(text: str) -> str:
    return _SECRET_OPTION.sub(r"\1***", text)
