"""Signal (signal-cli's JSON-RPC daemon over HTTP): its events stream in, JSON-RPC calls out. The declaration."""
from __future__ import annotations

import shutil
from urllib.parse import urlsplit

from .. import Listener, Platform, Setting, register

DEFAULT_URL = "http://127.0.0.1:8686"  # not 8080: the web program's port


def configured(values: dict) -> bool:
    return bool(values.get("SIGNAL_ACCOUNT"))


def host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of an http(s) URL, or None when it is not one."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def runs_daemon(values: dict) -> bool:
    """signal-cli runs here, as the listener's child: Signal is set up, signal-cli is installed and
    SIGNAL_CLI_URL is on this machine (where the listener answers the web program's calls); otherwise
    the user runs signal-cli's daemon where it lives and the listener reads its events stream."""
    where = host_port(values.get("SIGNAL_CLI_URL") or DEFAULT_URL)
    return configured(values) and shutil.which("signal-cli") is not None and where is not None \
        and where[0] in LOOPBACK


def _check(values: dict) -> str | None:
    url = values.get("SIGNAL_CLI_URL") or DEFAULT_URL
    where = host_port(url)
    if where is None:
        return f"SIGNAL_CLI_URL={url!r} is not an http:// URL (the daemon's --http address, e.g. {DEFAULT_URL})"
    raw_port = str(values.get("NANOCLAW_PORT") or "8080")
    web_port = int(raw_port) if raw_port.isdigit() else None  # a bad port is the settings' own message
    if web_port is not None and where[0] in LOOPBACK + ("0.0.0.0",) and where[1] == web_port:
        return (f"SIGNAL_CLI_URL={url!r} is the web program's own address (NANOCLAW_PORT={web_port}); run the "
                f"daemon on another port, e.g. {DEFAULT_URL}")
    account = values.get("SIGNAL_ACCOUNT")
    if account and not (account.startswith("+") and account[1:].isdigit() and 7 <= len(account) <= 16):
        return f"SIGNAL_ACCOUNT={account!r} is not a phone number in international form (+4915…)"
    return None


PLATFORM = register(Platform(
    name="signal", label="Signal",
    settings=(Setting("SIGNAL_CLI_URL", DEFAULT_URL), Setting("SIGNAL_ACCOUNT", example="+4915100000001")),
    secret_prefixes=("SIGNAL_",),
    adapter="adapter:SignalAdapter",
    configured=configured,
    # a person's id is their ACI uuid, and their DM's id is their own; a group's is "group.<base64 id>"
    guess_kind=lambda chat_id: "group" if chat_id.startswith("group.") else "dm",
    dm_is_user=True,
    # one program: where signal-cli is installed the listener owns it (signal-cli locks its account to one
    # process, so the web program's calls go through the listener too: owner.py)
    listeners=(Listener("signal-events", ("signal", "listen"), configured, startsecs=2, stopwaitsecs=20),),
    commands="commands:signal_cli",
    doctor="doctor:check",
    check=_check,
    resolve_id="rpc:resolve_number",
    private_services=lambda values: [values.get("SIGNAL_CLI_URL") or DEFAULT_URL] if configured(values) else [],
), __name__)
