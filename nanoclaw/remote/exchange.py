"""A request on the session channel and its answer, and the two ways a request is turned down."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from . import passes


class Busy(Exception):
    """Not now (no room for a request body, the session's start unreadable): 503, the runner tries again."""

    def __init__(self, why: str = "the door holds as many request bodies as it may; try again"):
        super().__init__(why)


class Refused(Exception):
    """A request answered with an error and the connection closed (its body may be unread)."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status = status


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    claims: passes.Claims
    session: Path
    length: int = 0
    room: int = 0  # of the channel's room for bodies, held until answered (bodies.py)


@dataclass
class Answer:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)
    file: object = None  # written, not yet rewound: streamed from its start instead of body


def json_answer(status: int, payload) -> Answer:
    return Answer(status, json.dumps(payload).encode())
