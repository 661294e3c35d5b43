"""Matrix (client-server /sync in, client-server API out): the bot is a Matrix account. The declaration."""
from __future__ import annotations

from .. import Listener, Platform, Setting, register


def configured(values: dict) -> bool:
    return bool(values.get("MATRIX_HOMESERVER") and values.get("MATRIX_USER_ID")
                and (values.get("MATRIX_ACCESS_TOKEN") or values.get("MATRIX_PASSWORD")))


PLATFORM = register(Platform(
    name="matrix", label="Matrix",
    settings=(Setting("MATRIX_HOMESERVER"), Setting("MATRIX_USER_ID"), Setting("MATRIX_ACCESS_TOKEN", secret=True),
              Setting("MATRIX_PASSWORD", secret=True)),
    secret_prefixes=("MATRIX_",),
    adapter="adapter:MatrixAdapter",
    configured=configured,
    # a room id (!abc:example.org) says nothing of its kind: a room of two is a DM, others thread
    listeners=(Listener("matrix-sync", ("matrix", "sync"), configured, startsecs=3, stopwaitsecs=10),),
    commands="commands:matrix_cli",
    doctor="doctor:check",
), __name__)
