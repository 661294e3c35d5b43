"""What `doctor` checks for Matrix: the homeserver answers, the token is the bot's, and /sync works.
Nothing printed holds a secret."""
from __future__ import annotations

import json

from .. import Finding, probe
from . import configured


def check(platform: dict, token: str | None = None) -> Finding | None:
    if not configured(platform):
        return None
    base = platform["MATRIX_HOMESERVER"].rstrip("/")
    status, versions = probe(f"{base}/_matrix/client/versions")
    if status != 200 or not versions.get("versions"):
        return Finding(False, "Matrix", f"{base} does not answer as a Matrix homeserver ({status or versions.get('_error')}); "
                                        "check MATRIX_HOMESERVER")
    token = token or platform.get("MATRIX_ACCESS_TOKEN")
    if not token:
        return Finding(None, "Matrix", f"{base} answers; MATRIX_PASSWORD is set: the token comes from "
                                       "`flask --app app nanoclaw matrix login`")
    auth = {"Authorization": f"Bearer {token}"}
    status, me = probe(f"{base}/_matrix/client/v3/account/whoami", headers=auth)
    if status != 200:
        return Finding(False, "Matrix", f"the access token was refused ({status or me.get('_error')}); put a valid "
                                        "MATRIX_ACCESS_TOKEN in .env, or use MATRIX_PASSWORD and `matrix login`")
    if me.get("user_id") != platform["MATRIX_USER_ID"]:
        return Finding(False, "Matrix", f"the token belongs to {me.get('user_id')}, not MATRIX_USER_ID "
                                        f"{platform['MATRIX_USER_ID']}")
    limit = json.dumps({"room": {"timeline": {"limit": 1}}, "presence": {"not_types": ["*"]}})
    status, sync = probe(f"{base}/_matrix/client/v3/sync", headers=auth, params={"timeout": "0", "filter": limit})
    if status != 200 or "next_batch" not in sync:
        return Finding(False, "Matrix", f"{me['user_id']}: /sync failed ({status or sync.get('_error')})")
    rooms = len((sync.get("rooms") or {}).get("join") or {})
    return Finding(True, "Matrix", f"{me['user_id']} on {base}, syncing ({rooms} room(s) joined)")
