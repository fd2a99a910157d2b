"""The web page's files (``/`` and ``/static/...``), read once, each with its ETag."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from idmint.errors import quoted
from idmint.server.routes import HttpError, Response, Scope

__all__ = ["PageFiles"]

# The page's files change only with the installed version, but their URLs do not:
# browsers keep them and ask each time whether they changed (ETag, 304).
_CACHE = b"no-cache"
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")
_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
}


class PageFiles:
    """The files of ``idmint/server/static``, kept once read."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[bytes, bytes]] = {}

    def answer(self, scope: Scope, name: str) -> Response:
        """The file ``name``, with its ETag; 304 when the browser's copy is current."""
        suffix = name[name.rfind(".") :] if "." in name else ""
        if not _NAME.fullmatch(name) or suffix not in _TYPES:
            raise HttpError(404, "not found", f"no static file {quoted(name)}")
        kept = self._files.get(name)
        if kept is None:
            try:
                data = (
                    resources.files("idmint.server").joinpath("static").joinpath(name).read_bytes()
                )
            except (FileNotFoundError, IsADirectoryError):
                raise HttpError(404, "not found", f"no static file {quoted(name)}") from None
            etag = b'"' + hashlib.sha256(data).hexdigest()[:32].encode() + b'"'
            kept = self._files[name] = (data, etag)
        data, etag = kept
        headers = [(b"etag", etag), (b"cache-control", _CACHE)]
        if _etag_matches(scope, etag):
            return 304, headers, b""
        return 200, [(b"content-type", _TYPES[suffix]), *headers], data


def _etag_matches(scope: Scope, etag: bytes) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (weak or strong) or is ``*``."""
    for name, value in scope.get("headers", ()):
        if name == b"if-none-match":
            for listed in value.split(b","):
                candidate = listed.strip()
                if candidate in (b"*", etag) or candidate.removeprefix(b"W/") == etag:
                    return True
    return False
