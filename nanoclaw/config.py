"""One Settings object, built from the environment and `.env`.

The environment wins over `.env`. Every invalid value stops start-up with a
single line naming the variable and what it accepts (SettingsError).
"""
from __future__ import annotations

import ipaddress
import os
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dotenv import dotenv_values

from . import platforms

PROJECT_ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = ("auto", "docker", "bwrap", "kubernetes")
TRANSPORTS = ("auto", "files", "network")


class SettingsError(ValueError):
    """A setting has a value we cannot start with. str() is the one line to print."""


def is_valid_timezone(name: str | None) -> bool:
    if not name or name.startswith(("/", ":")) or ".." in name:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, IsADirectoryError):
        return False
    return True


def system_timezone() -> str | None:
    """The host's IANA zone from /etc/timezone or the /etc/localtime link, if any."""
    try:
        name = Path("/etc/timezone").read_text().strip()
        if is_valid_timezone(name):
            return name
    except OSError:
        pass
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        return None
    name = target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else None
    return name if is_valid_timezone(name) else None


def resolve_timezone(env_tz: str | None, dotenv_tz: str | None) -> str:
    """TZ from the environment, then from .env, then the system's, then UTC.

    A value that is given but is not an IANA name is an error, not a silent
    fallback: the user asked for it and would otherwise see wrong times.
    """
    for source, value in (("TZ", env_tz), ("TZ (in .env)", dotenv_tz)):
        if value:
            if not is_valid_timezone(value):
                raise SettingsError(f"{source}={value!r} is not an IANA timezone; use a name like "
                                    "'Europe/Berlin', 'America/New_York' or 'UTC'")
            return value
    return system_timezone() or "UTC"


def _choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    if raw not in choices:
        raise SettingsError(f"{name}={raw!r} is unknown; it accepts {' or '.join(choices)}")
    return raw


def _int(name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{name}={raw!r} is not a number; it accepts a whole number from {lo} to {hi}") from None
    if not lo <= value <= hi:
        raise SettingsError(f"{name}={raw!r} is out of range; it accepts a whole number from {lo} to {hi}")
    return value


def _list(name: str, raw: str | None, read) -> tuple:
    """A list separated by commas or spaces, each item read by `read` (ValueError: not one)."""
    items = []
    for item in (raw or "").replace(",", " ").split():
        try:
            items.append(read(item))
        except ValueError:
            raise SettingsError(f"{name}: {item!r} is not accepted; it takes {read.__doc__}") from None
    return tuple(items)


def _network(item: str) -> str:
    """networks as CIDRs (192.168.1.0/24, fd00::/8)"""
    return str(ipaddress.ip_network(item, strict=False))


def _port(item: str) -> int:
    """port numbers from 1 to 65535"""
    if item.isdigit() and 0 < int(item) < 65536:
        return int(item)
    raise ValueError(item)


def _price(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = -1.0
    if not 0 <= value <= 1000:  # also NaN
        raise SettingsError(f"{name}={raw!r} is not a price; it accepts US dollars from 0 to 1000, such as 0.015")
    return value


def _database_url(raw: str) -> str:
    parsed = urlparse(raw)
    if parsed.scheme == "sqlite" and raw.startswith("sqlite:///") and len(raw) > len("sqlite:///"):
        return raw
    if parsed.scheme in ("postgresql", "postgres") and parsed.hostname and parsed.path.strip("/"):
        return raw
    raise SettingsError(f"DATABASE_URL={raw!r} is not understood; it accepts sqlite:///PATH or "
                        "postgresql://USER:PASSWORD@HOST:PORT/DBNAME")


def _dns_label(name: str, raw: str) -> str:
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", raw):
        raise SettingsError(f"{name}={raw!r} is not a Kubernetes name (lower-case letters, digits and '-', "
                            "at most 63)")
    return raw


def host_port(name: str, raw: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"{name}={raw!r} is not host:port (e.g. 0.0.0.0:8443)")
    return host.strip("[]"), int(port)


def _url(name: str, raw: str) -> str:
    parsed = urlparse(raw)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise SettingsError(f"{name}={raw!r} is not a URL; it accepts http(s)://HOST[:PORT][/PATH]")
    return raw.rstrip("/")


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    groups_dir: Path
    database_url: str
    port: int
    timezone: str
    assistant_name: str
    runtime: str
    anthropic_api_key: str | None
    claude_code_oauth_token: str | None
    anthropic_upstream_url: str
    max_concurrent_containers: int
    max_messages_per_prompt: int
    agent_image: str
    install_id: str
    mount_allowlist: Path
    platform: dict[str, str] = field(default_factory=dict)
    secret_key: str | None = None
    attachment_max_bytes: int = 20 * 1024 * 1024   # a bigger file a user sends is not downloaded
    isolated_retention_hours: int = 24  # an isolated task run's finished session is removed after this
    approval_expiry_hours: int = 72     # an approval, proposal or help request nobody decided expires after this
    keep_events_days: int = 14      # routed webhook events and dropped-message records
    keep_decided_days: int = 90     # decided proposals, answered help requests, past questions
    keep_audit_days: int = 365      # the audit log
    prices_file: Path | None = None  # the owner's prices (USD per million tokens), over the repo's table
    keep_messages_days: int = 30    # a session's finished messages and delivered replies
    keep_history_days: int = 365    # the history index agents search (memory/history.py)
    silent_session_days: int = 180  # a chat's session folder (and transcript) goes after this much silence
    silent_sessions: str = "archive"  # archive | remove
    freeze_idle_s: int = 10  # a warm sandbox's CLI is stopped after this many quiet seconds (0: never)
    progress_after_s: float = 10.0  # a turn running this long shows a status message in its chat
    progress_edit_s: float = 3.0    # the status message is edited at most this often per chat
    public_url: str | None = None  # where the page is reached from outside; https → Secure cookies
    trusted_proxies: int = 0  # reverse proxies in front (Caddy, nginx): their X-Forwarded-For/-Proto is believed
    metrics_token: str | None = None  # GET /metrics from outside loopback with this bearer token
    max_turn_minutes: int | None = None  # a cap on one agent turn; None: long work is allowed
    log_format: str = "text"  # text | json (one object per line)
    transcribe_url: str | None = None  # an OpenAI-compatible speech-to-text base (…/v1): voice notes become words
    transcribe_api_key: str | None = None  # its key, when it needs one (local whisper servers do not)
    transcribe_model: str = "whisper-1"
    transcribe_max_s: int = 900  # a longer recording is not sent (what it would cost and how long it would take)
    tts_url: str | None = None  # an OpenAI-compatible text-to-speech base (…/v1): answers can be voice notes
    tts_api_key: str | None = None  # its key, when it needs one (Kokoro-FastAPI, openedai-speech need none)
    tts_model: str = "tts-1"
    tts_voice: str = "alloy"
    tts_price_per_1k_chars: float = 0.015  # USD, into the agent's spend and budget (OpenAI's tts-1)
    session_transport: str = "auto"  # auto | files | network: how a sandbox reaches its session (docs/scale.md)
    door_listen: str | None = None   # host:port where the door takes remote sandboxes over TLS; None: off
    door_url: str | None = None      # how those sandboxes reach it (https://10.0.0.5:8443)
    door_tls_cert: str | None = None  # the operator's certificate (chain to its root) and key, else the door's own CA
    door_tls_key: str | None = None
    k8s_namespace: str = "nanoclaw"   # where NANOCLAW_RUNTIME=kubernetes makes its pods
    k8s_runtime_class: str | None = None  # a RuntimeClass for the pods (gVisor, Kata), when the cluster has one
    sandbox_network: str | None = None  # a remote engine's network its sandboxes join instead of none + the relay
    door_relay_network: str = "bridge"  # the remote engine's network the door relay beside each sandbox uses
    web_allow_networks: tuple[str, ...] = ()  # private networks an agent's reads may reach (a home server)
    web_allow_ports: tuple[int, ...] = ()     # ports besides 80 and 443 its reads may use
    skill_ca_file: str | None = None  # certificates git trusts for skill sources (a private git server)
    web_idle_s: int = 300  # the reading worker stops after this many idle seconds (and a session's browser)
    browsers: int = 2      # browsers running at once host-wide (NANOCLAW_BROWSERS; others wait)
    web_summary_model: str | None = None  # a long page is read first by this model (no tools), the agent gets its summary
    web_summary_chars: int = 20_000       # ... when the page's text is longer than this
    search: str = "none"   # none | searxng | brave | tavily: the agents' web_search, done by the host
    search_url: str | None = None  # the provider's base URL (a SearXNG instance; Brave's and Tavily's own by default)
    search_price: float = 0.0      # USD a query, into the agent's spend and budget

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    @property
    def proxy_dir(self) -> Path:
        return self.data_dir / "proxy"

    @classmethod
    def load(cls, environ: dict[str, str] | None = None, dotenv_path: Path | None = None) -> "Settings":
        environ = dict(os.environ if environ is None else environ)
        if dotenv_path is None:
            dotenv_path = Path(environ.get("NANOCLAW_ENV_FILE", PROJECT_ROOT / ".env"))
        dotenv = {k: v for k, v in dotenv_values(dotenv_path).items() if v is not None} if dotenv_path.is_file() else {}

        def get(name: str, default: str | None = None) -> str | None:
            value = environ.get(name)
            if value is None or value == "":
                value = dotenv.get(name)
            return default if value is None or value == "" else value

        data_dir = Path(get("NANOCLAW_DATA_DIR", str(PROJECT_ROOT / "data"))).expanduser()
        if not data_dir.is_absolute():
            data_dir = (PROJECT_ROOT / data_dir).resolve()
        groups_dir = Path(get("NANOCLAW_GROUPS_DIR", str(PROJECT_ROOT / "groups"))).expanduser()
        if not groups_dir.is_absolute():
            groups_dir = (PROJECT_ROOT / groups_dir).resolve()

        runtime = get("NANOCLAW_RUNTIME", "auto")
        if runtime not in RUNTIMES:
            raise SettingsError(f"NANOCLAW_RUNTIME={runtime!r} is unknown; it accepts one of: {', '.join(RUNTIMES)}")

        assistant = get("NANOCLAW_ASSISTANT_NAME", "Andy").strip()
        if not assistant:
            raise SettingsError("NANOCLAW_ASSISTANT_NAME is empty; it accepts any non-empty name")

        # each platform's own settings, as its folder declares them (nanoclaw/platforms/<name>/__init__.py);
        # they stay in one dict, so adding a platform adds no field here
        platform = {s.name: (_url(s.name, value) if s.name.endswith("_API_BASE") else value)
                    for p in platforms.all_platforms() for s in p.settings
                    if (value := get(s.name, s.default)) is not None}
        for p in platforms.all_platforms():
            if problem := p.check({**platform, "NANOCLAW_PORT": get("NANOCLAW_PORT", "8080")}):
                raise SettingsError(problem)

        if (log_format := get("NANOCLAW_LOG_FORMAT", "text")) not in ("text", "json"):
            raise SettingsError(f"NANOCLAW_LOG_FORMAT={log_format!r} is unknown; it accepts text or json")

        install_id = get("NANOCLAW_INSTALL_ID", "nanoclaw")
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,40}", install_id):
            raise SettingsError(
                f"NANOCLAW_INSTALL_ID={install_id!r} is not valid; it accepts lower-case letters, digits, '_', '.', '-'"
            )

        transport = _choice("NANOCLAW_SESSION_TRANSPORT", get("NANOCLAW_SESSION_TRANSPORT", "auto"), TRANSPORTS)
        door_listen, door_url = get("NANOCLAW_DOOR_LISTEN"), get("NANOCLAW_DOOR_URL")
        if door_listen is not None:
            host_port("NANOCLAW_DOOR_LISTEN", door_listen)
            door_url = _url("NANOCLAW_DOOR_URL", door_url or f"https://{door_listen}")
            if not door_url.startswith("https://"):
                raise SettingsError(f"NANOCLAW_DOOR_URL={door_url!r} must be https:// (sandboxes check the door's "
                                    "certificate)")
        if bool(get("NANOCLAW_DOOR_TLS_CERT")) != bool(get("NANOCLAW_DOOR_TLS_KEY")):
            raise SettingsError("NANOCLAW_DOOR_TLS_CERT and NANOCLAW_DOOR_TLS_KEY go together; set both or neither "
                                "(the door then makes its own CA)")

        return cls(
            data_dir=data_dir,
            groups_dir=groups_dir,
            database_url=_database_url(get("DATABASE_URL", f"sqlite:///{data_dir / 'nanoclaw.db'}")),
            port=_int("NANOCLAW_PORT", get("NANOCLAW_PORT", "8080"), 1, 65535),
            timezone=resolve_timezone(environ.get("TZ") or None, dotenv.get("TZ") or None),
            assistant_name=assistant,
            runtime=runtime,
            anthropic_api_key=get("ANTHROPIC_API_KEY"),
            claude_code_oauth_token=get("CLAUDE_CODE_OAUTH_TOKEN"),
            anthropic_upstream_url=_url("ANTHROPIC_UPSTREAM_URL", get("ANTHROPIC_UPSTREAM_URL", "https://api.anthropic.com")),
            max_concurrent_containers=_int("MAX_CONCURRENT_CONTAINERS", get("MAX_CONCURRENT_CONTAINERS", "5"), 1, 1000),
            max_messages_per_prompt=_int("MAX_MESSAGES_PER_PROMPT", get("MAX_MESSAGES_PER_PROMPT", "10"), 1, 1000),
            agent_image=get("NANOCLAW_AGENT_IMAGE", "nanoclaw-agent:latest"),
            install_id=install_id,
            mount_allowlist=Path(get("NANOCLAW_MOUNT_ALLOWLIST", "~/.config/nanoclaw/mount-allowlist.json")).expanduser(),
            platform=platform,
            secret_key=_checked_key(raw, "NANOCLAW_SECRET_KEY") if (raw := get("NANOCLAW_SECRET_KEY")) else None,
            attachment_max_bytes=_int("NANOCLAW_ATTACHMENT_MAX_BYTES",
                                      get("NANOCLAW_ATTACHMENT_MAX_BYTES", str(20 * 1024 * 1024)), 1024, 2**31),
            isolated_retention_hours=_int("NANOCLAW_ISOLATED_RETENTION_HOURS",
                                          get("NANOCLAW_ISOLATED_RETENTION_HOURS", "24"), 0, 24 * 365),
            approval_expiry_hours=_int("NANOCLAW_APPROVAL_EXPIRY_HOURS", get("NANOCLAW_APPROVAL_EXPIRY_HOURS", "72"),
                                       1, 24 * 365),
            keep_events_days=_int("NANOCLAW_KEEP_EVENTS_DAYS", get("NANOCLAW_KEEP_EVENTS_DAYS", "14"), 1, 36500),
            keep_decided_days=_int("NANOCLAW_KEEP_DECIDED_DAYS", get("NANOCLAW_KEEP_DECIDED_DAYS", "90"), 1, 36500),
            keep_history_days=_int("NANOCLAW_KEEP_HISTORY_DAYS", get("NANOCLAW_KEEP_HISTORY_DAYS", "365"), 1, 36500),
            keep_messages_days=_int("NANOCLAW_KEEP_MESSAGES_DAYS", get("NANOCLAW_KEEP_MESSAGES_DAYS", "30"), 1, 36500),
            silent_session_days=_int("NANOCLAW_SILENT_SESSION_DAYS", get("NANOCLAW_SILENT_SESSION_DAYS", "180"), 1,
                                     36500),
            silent_sessions=_choice("NANOCLAW_SILENT_SESSIONS", get("NANOCLAW_SILENT_SESSIONS", "archive"),
                                    ("archive", "remove")),
            freeze_idle_s=_int("NANOCLAW_FREEZE_IDLE_S", get("NANOCLAW_FREEZE_IDLE_S", "2"), 0, 86400),
            progress_after_s=_int("NANOCLAW_PROGRESS_AFTER_S", get("NANOCLAW_PROGRESS_AFTER_S", "10"), 0, 3600),
            progress_edit_s=_int("NANOCLAW_PROGRESS_EDIT_S", get("NANOCLAW_PROGRESS_EDIT_S", "3"), 1, 600),
            keep_audit_days=_int("NANOCLAW_KEEP_AUDIT_DAYS", get("NANOCLAW_KEEP_AUDIT_DAYS", "365"), 1, 36500),
            prices_file=Path(get("NANOCLAW_PRICES_FILE", str(data_dir / "prices.json"))).expanduser(),
            public_url=_url("NANOCLAW_PUBLIC_URL", raw) if (raw := get("NANOCLAW_PUBLIC_URL")) else None,
            metrics_token=get("NANOCLAW_METRICS_TOKEN"),
            trusted_proxies=_int("NANOCLAW_TRUSTED_PROXIES", get("NANOCLAW_TRUSTED_PROXIES", "0"), 0, 5),
            max_turn_minutes=_int("NANOCLAW_MAX_TURN_MINUTES", raw, 1, 7 * 24 * 60)
            if (raw := get("NANOCLAW_MAX_TURN_MINUTES")) else None,
            log_format=log_format,
            web_allow_networks=_list("NANOCLAW_WEB_ALLOW_NETWORKS", get("NANOCLAW_WEB_ALLOW_NETWORKS"), _network),
            web_allow_ports=_list("NANOCLAW_WEB_ALLOW_PORTS", get("NANOCLAW_WEB_ALLOW_PORTS"), _port),
            skill_ca_file=get("NANOCLAW_SKILL_CA_FILE") or None,
            web_idle_s=_int("NANOCLAW_WEB_IDLE_S", get("NANOCLAW_WEB_IDLE_S", "300"), 5, 86400),
            browsers=_int("NANOCLAW_BROWSERS", get("NANOCLAW_BROWSERS", "2"), 0, 64),
            web_summary_model=get("NANOCLAW_WEB_SUMMARY_MODEL") or None,
            web_summary_chars=_int("NANOCLAW_WEB_SUMMARY_CHARS", get("NANOCLAW_WEB_SUMMARY_CHARS", "20000"), 1000, 10**7),
            search=_choice("NANOCLAW_SEARCH", get("NANOCLAW_SEARCH", "none"), ("none", "searxng", "brave", "tavily")),
            search_url=_url("NANOCLAW_SEARCH_URL", raw) if (raw := get("NANOCLAW_SEARCH_URL")) else None,
            search_price=_price("NANOCLAW_SEARCH_PRICE", get("NANOCLAW_SEARCH_PRICE", "0")),
            transcribe_url=_url("NANOCLAW_TRANSCRIBE_URL", raw) if (raw := get("NANOCLAW_TRANSCRIBE_URL")) else None,
            transcribe_api_key=get("NANOCLAW_TRANSCRIBE_API_KEY"),
            transcribe_model=get("NANOCLAW_TRANSCRIBE_MODEL", "whisper-1"),
            transcribe_max_s=_int("NANOCLAW_TRANSCRIBE_MAX_S", get("NANOCLAW_TRANSCRIBE_MAX_S", "900"), 1, 86400),
            tts_url=_url("NANOCLAW_TTS_URL", raw) if (raw := get("NANOCLAW_TTS_URL")) else None,
            tts_api_key=get("NANOCLAW_TTS_API_KEY"),
            tts_model=get("NANOCLAW_TTS_MODEL", "tts-1"),
            tts_voice=get("NANOCLAW_TTS_VOICE", "alloy"),
            tts_price_per_1k_chars=_price("NANOCLAW_TTS_PRICE_PER_1K_CHARS",
                                          get("NANOCLAW_TTS_PRICE_PER_1K_CHARS", "0.015")),
            session_transport=transport,
            door_listen=door_listen,
            door_url=door_url,
            door_tls_cert=get("NANOCLAW_DOOR_TLS_CERT"),
            door_tls_key=get("NANOCLAW_DOOR_TLS_KEY"),
            sandbox_network=get("NANOCLAW_SANDBOX_NETWORK"),
            door_relay_network=get("NANOCLAW_DOOR_RELAY_NETWORK", "bridge"),
            k8s_namespace=_dns_label("NANOCLAW_K8S_NAMESPACE", get("NANOCLAW_K8S_NAMESPACE", "nanoclaw")),
            k8s_runtime_class=_dns_label("NANOCLAW_K8S_RUNTIME_CLASS", raw)
            if (raw := get("NANOCLAW_K8S_RUNTIME_CLASS")) else None,
        )


MIN_SECRET_BYTES = 32


def _checked_key(key: str, where: str) -> str:
    if len(key.encode()) < MIN_SECRET_BYTES:
        raise SettingsError(f"{where} holds {len(key.encode())} bytes, fewer than {MIN_SECRET_BYTES}: anything "
                            f"signed with it could be forged. Delete it and start again (a new key is made), "
                            f"or set NANOCLAW_SECRET_KEY to {MIN_SECRET_BYTES} or more random characters")
    return key


def local_secret_key(data_dir: Path) -> str:
    """A random key kept in data/secret_key (0600), made on first use: never a known default.

    It is written whole or not at all: into a temporary file, flushed to disk, then linked into
    place, which fails if another program got there first (then theirs is used), so two programs
    starting at once agree on one key and a crash never leaves an empty or half-written key behind.
    A key file shorter than MIN_SECRET_BYTES (an older version's crash) stops start-up."""
    data_dir = Path(data_dir)
    path = data_dir / "secret_key"
    try:
        return _checked_key(path.read_text().strip(), str(path))
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(48)
    tmp = data_dir / f".secret_key.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces a key another program made a moment ago
        except FileExistsError:
            return _checked_key(path.read_text().strip(), str(path))
        folder = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    finally:
        tmp.unlink(missing_ok=True)
    return key


def install_secret(settings) -> str:
    """The install's secret: signs the page's cookies and CSRF tokens, and keys the Discord
    Gateway's hand-off (every program of one install shares data/, so they agree on it)."""
    return settings.secret_key or local_secret_key(settings.data_dir)


__all__ = ["Settings", "SettingsError", "resolve_timezone", "is_valid_timezone", "PROJECT_ROOT", "install_secret",
           "local_secret_key"]


# peewee imports a PostgreSQL driver whenever one is installed (psycopg2: 4.6 MiB resident in each program).
# A long-running program on SQLite marks the drivers absent before peewee loads (that process only;
# lighten_program: gunicorn.conf.py, proxy/__main__.py; tests/test_lean.py).
_POSTGRES_DRIVERS = ("psycopg2", "psycopg2cffi", "psycopg")


def skip_postgres_drivers(database_url: str) -> bool:
    """True when the drivers were marked absent (SQLite, and peewee not loaded yet)."""
    if not database_url.startswith("sqlite") or "peewee" in sys.modules:
        return False
    for name in _POSTGRES_DRIVERS:
        sys.modules.setdefault(name, None)  # `import psycopg2` now raises ImportError
    return True


# requests imports charset_normalizer (3 MiB resident) only to guess the encoding of an answer that names
# none, and falls back to UTF-8 without it. The APIs the programs call answer JSON or name their charset,
# so the long-running programs mark the detectors absent before requests loads (tests/test_lean.py).
def skip_charset_detection() -> bool:
    """True when the detectors were marked absent (requests not loaded yet)."""
    import warnings
    if "requests" in sys.modules:
        return False
    for name in ("charset_normalizer", "chardet"):
        sys.modules.setdefault(name, None)
    warnings.filterwarnings("ignore", message="Unable to find acceptable character detection", module="requests")
    return True


def lighten_program(database_url: str | None) -> None:
    """A long-running program (web worker, proxy), before importing the rest: both of the above (drivers once read)."""
    skip_charset_detection()
    if database_url is not None:
        skip_postgres_drivers(database_url)
