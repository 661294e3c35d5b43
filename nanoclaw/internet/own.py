"""The ports of this install's own services, which no agent may reach on a non-public address: the web
program's and each chat platform's daemon (platforms/<name>: private_services). Asked by the proxy's
egress and by the host's reads of the web."""
from __future__ import annotations

from urllib.parse import urlsplit


def own_ports(settings) -> set[int]:
    from .. import platforms
    ports = {settings.port}
    for platform in platforms.all_platforms():
        for url in platform.private_services(settings.platform):
            port = urlsplit(url).port
            if port:
                ports.add(port)
    return ports
