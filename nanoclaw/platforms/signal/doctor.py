"""What `doctor` checks for Signal: the daemon answers, its version is one that hands files over its
API, and the account is registered. Nothing printed holds a secret."""
from __future__ import annotations

from .. import Finding, probe
from . import DEFAULT_URL, configured


def check(platform: dict) -> Finding | None:
    if not configured(platform):
        return None
    from .rpc import OLDEST, VOICE_NOTES, version_of
    base = (platform.get("SIGNAL_CLI_URL") or DEFAULT_URL).rstrip("/")
    account = platform["SIGNAL_ACCOUNT"]

    def rpc(method: str, params: dict | None = None):
        status, body = probe(f"{base}/api/v1/rpc", method="POST",
                             json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}})
        return status, body.get("result"), body.get("error") or body.get("_error")
    status, _body = probe(f"{base}/api/v1/check")
    if status != 200:
        return Finding(False, "Signal", f"signal-cli's daemon does not answer at {base} ({status or _body.get('_error')}); "
                                        "start it (`flask --app app nanoclaw signal daemon`, or "
                                        f"signal-cli -a {account} daemon --http HOST:PORT --receive-mode on-connection)")
    _status, result, error = rpc("version")
    version = version_of(result.get("version") if isinstance(result, dict) else None)
    if version is None or version < OLDEST:
        shown = ".".join(map(str, version)) if version else "unknown"
        return Finding(False, "Signal", f"signal-cli {shown} is too old: NanoClaw needs {'.'.join(map(str, OLDEST))} or "
                                        "later (files over the daemon's API, the events stream); upgrade it")
    _status, result, error = rpc("getUserStatus", {"recipient": [account]})
    mine = next((r for r in result if isinstance(r, dict) and r.get("recipient") == account), None) \
        if isinstance(result, list) else None
    if error or mine is None or not mine.get("isRegistered"):
        return Finding(False, "Signal", f"{account} is not registered with this daemon ({error or 'not on Signal'}); "
                                        "`flask --app app nanoclaw signal link` shows how to register or link it")
    shown = ".".join(map(str, version))
    note = "" if version >= VOICE_NOTES else " (voice answers go as audio files before 0.14.2)"
    return Finding(True, "Signal", f"{account} on signal-cli {shown} at {base}{note}")
