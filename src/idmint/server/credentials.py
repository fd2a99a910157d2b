"""The server's credentials: its bearer tokens and its TLS certificate, re-read on demand.

:class:`Credentials` reads them when the server starts, where a file that
cannot be used is one :class:`~idmint.errors.ConfigurationError` naming its
flag or variable, and again on :meth:`Credentials.reload` (``idmint serve``
calls it on SIGHUP). A reload re-reads every file; what fails to load keeps
what was loaded before and says why in the log. Connections already open keep
the certificate they were made with; new handshakes get the new one.

**Tokens.** A token file holds one or more tokens, one a line (blank lines and
lines starting with ``#`` are skipped), so that a token is rotated without a
moment where clients are refused: add the new token and reload, move the
clients to it, remove the old one and reload. Every token is compared in full
each time, so the time taken says nothing about which one matched.

**TLS.** The listening sockets are given one :class:`RotatingContext`, an
``ssl.SSLContext`` that makes each new connection with whichever context was
loaded last: swapping a whole context (certificate, key, client CA and
verification) rather than loading into the live one means a reload is all or
nothing, and a CA removed from the client CA file is really gone (OpenSSL can
add CAs to a context, never remove them). TLS 1.2 is the oldest version
offered. With a client CA every connection must present a certificate it
signed, or the handshake fails (mutual TLS).

A certificate that has expired is refused at start and on reload; one that
expires within :data:`EXPIRY_WARNING_S` is a WARNING when loaded and once more
when that time comes while it is served (``idmint_tls_certificate_expiry_timestamp_seconds``
says when, for alerts). A private key or token file that every user of the host
may read is a WARNING: anyone on the host could take the server's identity.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import hmac
import logging
import os
import ssl
import stat
import threading
import time
from dataclasses import dataclass

from idmint.errors import ConfigurationError, reason_of
from idmint.server.config import ServerConfig
from idmint.server.metrics import Family, Samples

__all__ = [
    "EXPIRY_WARNING_S",
    "Certificate",
    "Credentials",
    "RotatingContext",
    "read_certificate",
    "read_tokens",
]

log = logging.getLogger("idmint.server")

EXPIRY_WARNING_S = 14 * 86400
"""A certificate that expires sooner than this (14 days) is warned about."""

MAX_TOKEN_FILE_CHARS = 64 * 1024
"""A token file longer than this is refused: it is not a list of tokens (and each
request would compare its token with all of them)."""


def _warn_if_everyone_reads(path: str, source: str, what: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # reading it says why
    if mode & stat.S_IROTH:
        log.warning(
            "%s: %s %s is readable by every user of this host (mode %s): "
            "make it readable by the server's user alone (chmod 600)",
            source,
            what,
            path,
            oct(stat.S_IMODE(mode)),
        )


# -- tokens ------------------------------------------------------------------------------------


def read_tokens(path: str, source: str) -> tuple[bytes, ...]:
    """The tokens in ``path``, one a line; ``source`` names the file in errors.

    Raises :class:`~idmint.errors.ConfigurationError` for a file that cannot
    be read, holds no token, or a line that is not one token.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_TOKEN_FILE_CHARS + 1)
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"{source}: cannot read {path}: {reason_of(error)}") from None
    if len(text) > MAX_TOKEN_FILE_CHARS:
        raise ConfigurationError(
            f"{source}: {path} is longer than {MAX_TOKEN_FILE_CHARS:,} characters: a token "
            "file holds a few tokens, one a line (is it the right file?)"
        )
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        token = line.strip()
        if not token or token.startswith("#"):
            continue
        if len(token.split()) != 1:
            raise ConfigurationError(
                f"{source}: line {number} of {path} is not one token (a token has no spaces)"
            )
        tokens.append(token.encode())
    if not tokens:
        raise ConfigurationError(f"{source}: {path} is empty (it holds no token)")
    _warn_if_everyone_reads(path, source, "token file")
    return tuple(tokens)


# -- certificates --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificate:
    """The certificate a server presents: when it is valid, and its fingerprint."""

    not_before: float
    not_after: float
    sha256: str

    def describe(self) -> str:
        return f"certificate sha256:{self.sha256[:16]} (expires {_iso(self.not_after)})"


def _iso(timestamp: float) -> str:
    moment = _dt.datetime.fromtimestamp(timestamp, tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def read_certificate(path: str) -> Certificate:
    """The first certificate of a PEM file (a server's own, before its chain).

    Raises ``ValueError`` for a file without a certificate or one that cannot
    be read as X.509; ``OSError`` for a file that cannot be read.
    """
    with open(path, "rb") as handle:
        pem = handle.read()
    begin, end = b"-----BEGIN CERTIFICATE-----", b"-----END CERTIFICATE-----"
    start = pem.find(begin)
    stop = pem.find(end, start)
    if start < 0 or stop < 0:
        raise ValueError("no PEM certificate in it")
    try:
        der = base64.b64decode(b"".join(pem[start + len(begin) : stop].split()), validate=True)
        not_before, not_after = _validity(der)
    except (ValueError, IndexError):
        raise ValueError("its certificate is not valid X.509") from None
    return Certificate(not_before, not_after, hashlib.sha256(der).hexdigest())


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at ``at``: (tag, where its content starts, where it ends)."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        size = length & 0x7F
        if not 0 < size <= 4:
            raise ValueError("a DER length of unsupported size")
        length = int.from_bytes(der[at : at + size], "big")
        at += size
    if at + length > len(der):
        raise ValueError("a DER element runs past the end")
    return tag, at, at + length


_SEQUENCE, _VERSION, _UTC_TIME, _GENERALIZED_TIME = 0x30, 0xA0, 0x17, 0x18


def _validity(der: bytes) -> tuple[float, float]:
    """X.509's validity (RFC 5280, 4.1): the two times after the version, serial,
    signature algorithm and issuer at the start of the to-be-signed part."""
    tag, start, _ = _element(der, 0)
    if tag != _SEQUENCE:
        raise ValueError("not a certificate")
    tag, at, _ = _element(der, start)  # tbsCertificate
    if tag != _SEQUENCE:
        raise ValueError("not a certificate")
    tag, _, end = _element(der, at)
    if tag == _VERSION:
        tag, _, end = _element(der, end)
    for _field in ("signature", "issuer"):  # after the serial number
        tag, _, end = _element(der, end)
    tag, at, _ = _element(der, end)
    if tag != _SEQUENCE:
        raise ValueError("no validity")
    times = []
    for _bound in ("notBefore", "notAfter"):
        tag, start, at = _element(der, at)
        text = der[start:at].decode("ascii")
        if tag == _UTC_TIME:  # YYMMDDHHMMSSZ; years 50..99 are 19xx
            year = int(text[:2])
            text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
        elif tag != _GENERALIZED_TIME:
            raise ValueError("a validity time of unknown type")
        moment = _dt.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=_dt.timezone.utc)
        times.append(moment.timestamp())
    return times[0], times[1]


# -- TLS contexts -------------------------------------------------------------------------------


class RotatingContext(ssl.SSLContext):
    """An ``SSLContext`` that makes each connection with :attr:`current`.

    asyncio and uvloop both make a server connection's TLS object with the
    listening context's ``wrap_bio``: here it is the current context's, so a
    new context serves every handshake from then on, and connections made
    before keep theirs.
    """

    current: ssl.SSLContext

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self.current.wrap_bio(
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
        )


def _server_context(config: ServerConfig) -> tuple[ssl.SSLContext, Certificate]:
    """A new context from the config's files, and the certificate it serves."""
    assert config.tls_cert is not None
    cert_source = config.source("tls_cert")
    key_source = config.source("tls_key") if config.tls_key is not None else cert_source
    key_file = config.tls_key if config.tls_key is not None else config.tls_cert
    try:
        certificate = read_certificate(config.tls_cert)
    except OSError as error:
        raise ConfigurationError(
            f"{cert_source}: cannot read {config.tls_cert}: {reason_of(error)}"
        ) from None
    except ValueError as error:
        raise ConfigurationError(f"{cert_source}: {config.tls_cert}: {error}") from None
    if certificate.not_after <= time.time():
        raise ConfigurationError(
            f"{cert_source}: the certificate in {config.tls_cert} expired on "
            f"{_iso(certificate.not_after)}"
        )
    try:
        with open(key_file, "rb"):
            pass
    except OSError as error:
        raise ConfigurationError(
            f"{key_source}: cannot read {key_file}: {reason_of(error)}"
        ) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # A TLS 1.2 client could otherwise make the server redo handshakes at will.
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(["http/1.1"])  # the only protocol served
    try:
        context.load_cert_chain(config.tls_cert, key_file, password=_no_password)
    except _EncryptedKey:
        raise ConfigurationError(
            f"{key_source}: the key in {key_file} is encrypted; give the server a key "
            "without a passphrase (readable by its user alone)"
        ) from None
    except (ssl.SSLError, OSError) as error:
        if getattr(error, "reason", None) == "KEY_VALUES_MISMATCH":
            problem = f"the key in {key_file} does not match the certificate in {config.tls_cert}"
        else:  # OpenSSL says no more than "PEM lib" for a file without a usable key
            problem = f"no private key for the certificate can be read from {key_file}"
        raise ConfigurationError(f"{key_source}: {problem}") from None
    _warn_if_everyone_reads(key_file, key_source, "private key file")
    if config.tls_client_ca is not None:
        ca_source = config.source("tls_client_ca")
        try:
            context.load_verify_locations(cafile=config.tls_client_ca)
        except (ssl.SSLError, OSError) as error:
            raise ConfigurationError(
                f"{ca_source}: cannot read CA certificates from {config.tls_client_ca}: "
                f"{reason_of(error)}"
            ) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context, certificate


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    raise _EncryptedKey


# -- both ----------------------------------------------------------------------------------------


class Credentials:
    """What a server checks its callers with and shows them; see the module.

    Raises :class:`~idmint.errors.ConfigurationError` if a file cannot be used.
    """

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._fixed = config.token.strip().encode() if config.token is not None else None
        self.tokens: tuple[bytes, ...] | None = (
            (self._fixed,) if self._fixed is not None else self._read_tokens()
        )
        self.context: RotatingContext | None = None
        self.certificate: Certificate | None = None
        self._expiry_warned = False
        self._lock = threading.Lock()  # one reload at a time, whatever asks for it
        self.reloads: dict[tuple[str, str], int] = {}
        if config.tls_cert is not None:
            current, self.certificate = _server_context(config)
            self.context = RotatingContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.current = current
            self._warn_if_expiring()

    @property
    def tls(self) -> bool:
        return self.context is not None

    def _read_tokens(self) -> tuple[bytes, ...] | None:
        if self.config.token_file is None:
            return None
        return read_tokens(self.config.token_file, self.config.source("token_file"))

    def authorized(self, credential: bytes) -> bool:
        """Whether ``credential`` is one of the tokens (every one compared in full)."""
        tokens = self.tokens
        if tokens is None:
            return True
        matched = False
        for token in tokens:
            matched |= hmac.compare_digest(credential, token)
        return matched

    def reload(self) -> None:
        """Re-read every file; what fails keeps what was loaded before (logged)."""
        with self._lock:
            loaded = []
            if self.config.token_file is not None:
                try:
                    self.tokens = self._read_tokens()
                except ConfigurationError as error:
                    self._failed("tokens", error, "the tokens read before")
                else:
                    self._count("tokens", "loaded")
                    assert self.tokens is not None
                    loaded.append(f"{len(self.tokens)} bearer token(s)")
            if self.context is not None:
                try:
                    current, certificate = _server_context(self.config)
                except ConfigurationError as error:
                    self._failed("tls", error, "the certificate loaded before")
                else:
                    self.context.current = current
                    if certificate != self.certificate:
                        self._expiry_warned = False
                    self.certificate = certificate
                    self._count("tls", "loaded")
                    loaded.append(f"TLS {certificate.describe()}")
                    self._warn_if_expiring()
            if loaded:
                log.info("credentials re-read: %s", "; ".join(loaded))
            elif self.config.token_file is None and self.context is None:
                # Said all the same: a SIGHUP that seems to do nothing looks unheard.
                log.info("credentials: none to re-read (no token file, no TLS certificate)")

    def _failed(self, what: str, error: ConfigurationError, kept: str) -> None:
        self._count(what, "failed")
        log.error("credentials not re-read: %s; keeping %s", error, kept)

    def _count(self, what: str, result: str) -> None:
        # A new dict, swapped in whole: a scrape on the event loop reads it meanwhile.
        key = (what, result)
        self.reloads = {**self.reloads, key: self.reloads.get(key, 0) + 1}

    def check_expiry(self) -> None:
        """Warn once when the certificate served comes within the warning time."""
        if not self._expiry_warned:
            self._warn_if_expiring()

    def _warn_if_expiring(self) -> None:
        certificate = self.certificate
        if certificate is None:
            return
        left = certificate.not_after - time.time()
        if left < EXPIRY_WARNING_S:
            self._expiry_warned = True
            source = self.config.source("tls_cert")
            if left <= 0:
                log.error("%s: the %s served has expired", source, certificate.describe())
            else:
                log.warning(
                    "%s: the %s served expires in %.1f days; replace it and send SIGHUP",
                    source,
                    certificate.describe(),
                    left / 86400,
                )

    def families(self) -> list[Family]:
        """Metric families: the certificate's expiry, the reloads."""

        def expiry() -> Samples:
            certificate = self.certificate
            return [] if certificate is None else [({}, certificate.not_after)]

        def reloads() -> Samples:
            return [
                ({"credentials": what, "result": result}, count)
                for (what, result), count in sorted(self.reloads.items())
            ]

        return [
            Family(
                "idmint_tls_certificate_expiry_timestamp_seconds",
                "gauge",
                "When the TLS certificate served expires (unix time).",
                expiry,
            ),
            Family(
                "idmint_credential_reloads_total",
                "counter",
                "Re-reads of the token file and TLS files (SIGHUP), by result.",
                reloads,
            ),
        ]
