"""The network side of the door, as the `proxy` program runs it when NANOCLAW_DOOR_LISTEN is set:
the TLS gate, and the session channel it hands the sandboxes' session connections to (both on the
gate's one event loop)."""
from __future__ import annotations

import os

from ..config import install_secret
from . import passes
from .channel import SessionChannel
from .gate import Gate, raise_descriptor_limit
from .tls import door_tls


class RemoteDoor:
    def __init__(self, settings, proxy_socket):
        folder = settings.data_dir / "door"
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        tls = door_tls(settings)
        key = passes.door_key(install_secret(settings))
        self.refusals = 0
        self.channel = SessionChannel(folder, settings, key)
        self.gate = Gate(settings, context=tls.server_context(), key=key, channel=self.channel,
                         proxy_socket=proxy_socket, refused=self._refused)

    def _refused(self, _why: str) -> None:
        self.refusals += 1

    @property
    def address(self) -> tuple[str, int]:
        return self.gate.address

    def start(self) -> "RemoteDoor":
        raise_descriptor_limit()
        try:
            self.gate.start()
        except BaseException:
            self.channel.stop()
            raise
        return self

    def stop(self) -> None:
        self.gate.stop()
        self.channel.stop()
