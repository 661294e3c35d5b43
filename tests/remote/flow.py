"""What this folder's end-to-end tests share: an owner's Telegram DM with Andy, and a model call
held until the test has killed the sandbox it came from."""
from __future__ import annotations

import threading

from tests.outbound.test_nudges import _script


def owner_dm(svc) -> None:
    svc.cli("agent", "create", "Andy")
    svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    svc.cli("wire", "telegram", "111", "andy", "--kind", "dm")


class HeldTurn:
    """The model script: the call for `words` waits (at most 60 s) until `release()`, once; every
    call is answered "answer to <the message>"."""

    def __init__(self, words: str = "slow one"):
        self.words = words
        self.held, self.released = threading.Event(), threading.Event()

    def __call__(self, req):
        if self.words in req.current_prompt() and not self.released.is_set():
            self.held.set()
            self.released.wait(60)
        return _script(req)

    def release(self) -> None:
        self.released.set()
