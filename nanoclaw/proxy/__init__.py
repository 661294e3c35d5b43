"""The sandbox's door: one unix socket per agent group (docs/decisions/2026-11-22-proxy.md).

    ProxyServer(settings, list_folders).start()   in-process (tests, `chat`)
    serve_forever(settings, list_folders)          the supervisord `proxy` program
"""
from __future__ import annotations

__all__ = ["ProxyServer", "serve_forever", "socket_path", "SOCKET_NAME"]

_HOME = {"ProxyServer": "server", "serve_forever": "server", "socket_path": "sockets", "SOCKET_NAME": "sockets"}


def __getattr__(name: str):
    # Loaded on first use: `python -m nanoclaw.proxy` runs this file before its own main(), which
    # must choose the database drivers before the server's imports load peewee (config.skip_postgres_drivers).
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module
    return getattr(import_module(f".{_HOME[name]}", __name__), name)
