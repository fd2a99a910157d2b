"""The ID server: an ASGI app (:func:`create_app`), its web page and metrics, run by uvicorn."""

from __future__ import annotations

from idmint.server.app import IdServer, create_app

__all__ = ["IdServer", "create_app"]
