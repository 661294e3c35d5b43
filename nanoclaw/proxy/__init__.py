"""The sandbox's door: one unix socket per agent group (docs/decisions/2026-11-22-proxy.md).

    ProxyServer(settings, list_folders).start()   in-process (tests, `chat`)
    serve_forever(settings, list_folders)          the supervisord `proxy` program
"""
from .server import ProxyServer, serve_forever
from .sockets import SOCKET_NAME, socket_path

__all__ = ["ProxyServer", "serve_forever", "socket_path", "SOCKET_NAME"]
