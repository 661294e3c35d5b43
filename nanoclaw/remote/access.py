"""What a sandbox on another machine is given at start to reach its session: the door's address,
the CA to trust, and a pass for this start of this session (never a host secret: the pass is a MAC
the door checks, good for one session's channel and its agent's proxy, and dead once the sandbox
is stopped or replaced)."""
from __future__ import annotations

import time
from pathlib import Path

from ..config import install_secret
from . import passes, starts
from .tls import door_tls

FOLDER_LABEL = "nanoclaw.folder"
SESSION_LABEL = "nanoclaw.session"


class DoorAccess:
    def __init__(self, settings):
        if not settings.door_listen or not settings.door_url:
            raise ValueError("sandboxes on another machine need the door: set NANOCLAW_DOOR_LISTEN (host:port it "
                             "listens on) and NANOCLAW_DOOR_URL (how they reach it, https://ADDRESS:PORT)")
        self.settings = settings
        self.url = settings.door_url
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.key = passes.door_key(install_secret(settings))
        self.ca_pem = door_tls(settings).ca_pem

    def session_of(self, labels) -> Path:
        return Path(self.settings.sessions_dir) / labels[FOLDER_LABEL] / labels[SESSION_LABEL]

    def env_for(self, spec) -> dict[str, str]:
        """The sandbox's door variables; a new start nonce, so older passes of the session die."""
        nonce = starts.begin(self.session_of(spec.labels))
        token = passes.mint(self.key, passes.Claims(self.settings.install_id, spec.labels[FOLDER_LABEL],
                                                    spec.labels[SESSION_LABEL], nonce,
                                                    int(time.time() + passes.PASS_TTL_S)))
        return {"NANOCLAW_DOOR_URL": self.url, "NANOCLAW_DOOR_PASS": token, "NANOCLAW_DOOR_CA": self.ca_pem}

    def ended(self, labels) -> None:
        if labels and FOLDER_LABEL in labels and SESSION_LABEL in labels:
            starts.end(self.session_of(labels))
